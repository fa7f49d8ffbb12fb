"""Telemetry: what one execution did, as pydantic models that dump to plain JSON."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ._text import finding_text

Status = Literal["ok", "error", "blocked", "timeout", "cancelled", "crashed"]

__all__ = [
    "UNSET",
    "Attachment",
    "AuditFinding",
    "AuditReport",
    "ErrorInfo",
    "ExecutionResult",
    "FileChange",
    "FileInfo",
    "SessionRestore",
    "SkippedVariable",
    "SnapshotManifest",
    "SnapshotVariable",
    "Status",
    "Usage",
    "VariableChanges",
    "VariableInfo",
    "assemble",
    "builder",
    "set_field",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VariableInfo(_Model):
    """One name in a session, described without ever rendering a huge object in full."""

    name: str
    type: str = Field(
        description="Type name, module-qualified unless builtin (e.g. 'int', 'pandas.DataFrame')."
    )
    kind: Literal["value", "function", "class", "module"] = "value"
    repr: str = Field(description="Bounded repr; ends with a truncation marker when cut.")
    repr_truncated: bool = False
    len: int | None = None
    shape: list[int] | None = None
    dtype: str | None = None
    size: int | None = Field(None, description="Element count where the object reports one (arrays, frames).")
    summary: str | None = Field(None, description="A compact structural summary for tables and arrays.")

    def to_observation(self) -> str:
        """This variable in detail, as text for a model."""
        from ._observation import render_variable

        return render_variable(self)


class VariableChanges(_Model):
    created: list[VariableInfo] = Field(default_factory=list)
    rebound: list[VariableInfo] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.created or self.rebound or self.deleted)


class AuditFinding(_Model):
    """One reason the static audit refuses code."""

    rule: str = Field(description="Stable rule id, e.g. 'import', 'private-name', 'builtin'.")
    message: str = Field(description="What was refused and what is allowed instead.")
    line: int | None = None
    column: int | None = None
    source_line: str | None = None


class AuditReport(_Model):
    """The static audit's verdict on a piece of code under one policy."""

    policy: str
    allowed: bool
    findings: list[AuditFinding] = Field(default_factory=list)

    def describe(self) -> str:
        if self.allowed:
            return f"allowed under policy '{self.policy}'"
        return "\n".join(finding_text(f) for f in self.findings)


class ErrorInfo(_Model):
    """An exception raised by the agent's code (or a syntax error, refusal or timeout)."""

    type: str = Field(description="Exception class name, e.g. 'NameError'.")
    message: str
    line: int | None = Field(None, description="Line in the submitted code where it happened.")
    column: int | None = Field(None, description="0-based column of the failing expression, when known.")
    end_column: int | None = Field(None, description="0-based end column (exclusive), when known.")
    source_line: str | None = None
    traceback: str = Field("", description="Traceback of the user's own frames only, with source lines.")
    hint: str | None = Field(None, description="What to do about it, for the model.")
    refused_by: Literal["guard", "audit_hook", "os"] | None = Field(
        None,
        description=(
            "Set when a protection refused what the code did (the exception or its cause): 'guard' (a "
            "runtime guard of the policy), 'audit_hook' (the policy's audit hook), 'os' (the operating "
            "system: a permission error or an unreachable network; in the subprocess boundary, usually "
            "its sandbox)."
        ),
    )


class Usage(_Model):
    """What one run used (observability, issue 19). A figure a boundary cannot measure is None."""

    wall_ms: float = Field(
        0.0, description="Wall time of the call as the engine saw it: waiting, worker start, transport."
    )
    cpu_ms: float | None = Field(
        None,
        description=(
            "CPU time of the run: the executing thread's in-process (threads the code starts are not "
            "counted); the worker process's in the subprocess boundary (its threads and reaped child "
            "processes included). None when the worker was killed before it could report."
        ),
    )
    peak_memory_mb: float | None = Field(
        None,
        description=(
            "Subprocess boundary: peak resident memory of the session's worker process so far. A "
            "high-water mark of the process, so it covers this run and every earlier one of the worker."
        ),
    )


class Attachment(_Model):
    """A rich output of the run, such as a figure."""

    kind: Literal["image"] = "image"
    mime_type: str = "image/png"
    data_base64: str
    description: str = ""
    width: int | None = None
    height: int | None = None


# ---- durable sessions (snapshots) -----------------------------------------------------------------


class SnapshotVariable(_Model):
    """One variable a snapshot holds."""

    name: str
    type: str
    bytes: int = Field(description="Size of its pickled form, out-of-band buffers included.")


class SkippedVariable(_Model):
    """One variable a snapshot could not hold, and why."""

    name: str
    type: str
    reason: str


class SnapshotManifest(_Model):
    """What a session snapshot holds, what it left out and why, and where it was made."""

    session: str
    created_at: datetime
    execution_count: int
    policy: str
    python: str = Field(description="Python version the snapshot was made with, e.g. '3.11.7'.")
    libraries: dict[str, str] = Field(
        default_factory=dict, description="Versions of the libraries its variables and imports use."
    )
    saved: list[SnapshotVariable] = Field(default_factory=list)
    not_saved: list[SkippedVariable] = Field(default_factory=list)
    imports: dict[str, str] = Field(
        default_factory=dict, description="Module variables, re-imported by name under the policy."
    )
    size_bytes: int = 0


class SessionRestore(_Model):
    """How a session came back from a snapshot."""

    snapshot_created_at: datetime
    execution_count: int
    restored: list[str] = Field(default_factory=list, description="Variables and imports that came back.")
    not_saved: list[SkippedVariable] = Field(
        default_factory=list, description="Variables the snapshot could not hold when it was made."
    )
    failed: dict[str, str] = Field(
        default_factory=dict, description="Variables that were saved but could not be rebuilt here, and why."
    )
    warnings: list[str] = Field(default_factory=list, description="Python or library version mismatches.")


class FileInfo(_Model):
    """One file in a session's workspace."""

    name: str = Field(description="Path relative to the workspace, with '/' between directories.")
    size: int = Field(description="Bytes.")
    modified: datetime = Field(description="Last modification time (UTC).")
    type: str = Field(description="Media type guessed from the name ('text/csv', 'image/png', ...).")


class FileChange(_Model):
    """A file a run created, changed or deleted in the session's workspace."""

    name: str
    change: Literal["created", "modified", "deleted"]
    size: int = Field(0, description="Bytes after the run (0 when deleted).")


class ExecutionResult(_Model):
    """What happened when a piece of code ran in a session."""

    status: Status
    session: str
    execution_count: int = Field(0, description="Executions this session has run, this one included.")
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    value: str | None = Field(None, description="Bounded repr of a trailing expression's value (REPL style).")
    value_type: str | None = None
    value_truncated: bool = False
    error: ErrorInfo | None = None
    findings: list[AuditFinding] = Field(default_factory=list, description="Why the audit refused the code.")
    changes: VariableChanges = Field(default_factory=VariableChanges)
    attachments: list[Attachment] = Field(default_factory=list)
    duration_ms: float = 0.0
    session_restarted: bool = Field(
        False, description="The session's earlier state was lost before this run."
    )
    session_restored: SessionRestore | None = Field(
        None, description="Set when this run first brought the session back from the session store."
    )
    rolled_back: bool = Field(
        False,
        description="The cell's worker was lost and the session went back to its state before this cell.",
    )
    policy: str = ""
    boundary: str = ""
    notes: list[str] = Field(
        default_factory=list, description="Caveats about this run, for people and models."
    )
    usage: Usage = Field(default_factory=Usage, description="Time and memory the run used.")
    files: list[FileChange] = Field(
        default_factory=list,
        description="Files in the session's workspace created, changed or deleted since the last result.",
    )

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_observation(self, max_chars: int | None = None) -> str:
        """Render this result as the short, exact text a model reads."""
        from ._observation import render_observation

        return render_observation(self, max_chars=max_chars)


# ---- results the engine builds itself -------------------------------------------------------------

M = TypeVar("M", bound=BaseModel)
_new = object.__new__
_set_dict = object.__setattr__
# BaseModel's own slots, set through their descriptors (what `model_construct` sets, by the fastest path).
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""An optional argument of a `builder` function that was not given (the field keeps its default)."""


class _Plan:
    """How `assemble` fills in what the values leave out, computed once per model class.

    `build(values)` is generated for the class (run per result, so every step counts): a fresh
    `[]`/`{}` literal for list and dict defaults (calling `list` costs a lookup and a call), nested
    models made empty by their own generated `empty()` (no values to check or merge), the required
    names checked by `in`, the pydantic slots set directly. `fixed()` generates a builder that
    takes its fields as arguments (see `builder`).
    """

    __slots__ = ("build", "cls", "empty", "fields", "made", "name", "required", "scope")

    def __init__(self, cls: type[BaseModel]) -> None:
        if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":
            raise TypeError(f"{cls.__name__} has private or extra attributes: validate it instead")
        self.cls = cls
        self.name = cls.__name__
        # Every field in declaration order with its default (immutable: None, "", 0, False).
        template: dict[str, Any] = {}
        self.scope: dict[str, Any] = {
            "_template": template,
            "_cls": cls,
            "_new": _new,
            "_set_dict": _set_dict,
            "_set_fields_set": _set_fields_set,
            "_set_extra": _set_extra,
            "_set_private": _set_private,
            "_missing": self._missing,
            "_unset": UNSET,
        }
        scope = self.scope
        self.fields = tuple(cls.model_fields)
        # field -> the expression that makes its default in generated code, for the fields whose
        # default is made per instance
        self.made: dict[str, str] = {}
        fills: list[tuple[str, str]] = []
        for i, (name, field) in enumerate(cls.model_fields.items()):
            factory = field.default_factory
            template[name] = None if factory is not None else field.default
            if factory is None:
                continue
            if factory is list or factory is dict:
                made = "[]" if factory is list else "{}"
            elif isinstance(factory, type) and issubclass(factory, BaseModel):
                # Assembled too: calling the class would validate.
                nested = _plan(factory)
                if nested.empty is not None:
                    scope[f"_empty{i}"] = nested.empty
                    made = f"_empty{i}()"
                else:  # a model with required fields: its build says which are missing
                    scope[f"_build{i}"] = nested.build
                    made = f"_build{i}({{}})"
            else:
                scope[f"_factory{i}"] = factory
                made = f"_factory{i}()"  # a new one per instance
            fills.append((name, made))
            self.made[name] = made
        self.required = frozenset(name for name, field in cls.model_fields.items() if field.is_required())
        check = " and ".join(f"{name!r} in values" for name in sorted(self.required)) or "True"
        missing = "".join(f"    if {n!r} not in values:\n        data[{n!r}] = {made}\n" for n, made in fills)
        source = (
            "def build(values):\n"
            f"    if not ({check}):\n"
            "        _missing(values)\n"
            "    data = _template.copy()\n"
            f"{missing}"
            "    fields_set = set(values)\n"
            "    data.update(values)\n"
            f"{_FINISH}"
        )
        if not self.required:  # a model that can be empty: nested defaults are made this way
            defaults = "".join(f"    data[{name!r}] = {made}\n" for name, made in fills)
            source += (
                f"def empty():\n    data = _template.copy()\n{defaults}    fields_set = set()\n{_FINISH}"
            )
        exec(compile(source, f"<assemble {cls.__name__}>", "exec"), scope)
        self.build: Any = scope["build"]
        self.empty: Any = scope.get("empty")

    def fixed(self, given: tuple[str, ...], optional: tuple[str, ...]) -> Any:
        """Generate the builder `builder(cls, *given, optional=...)` describes.

        It copies the template and stores the fields into it: a dict display of every field would
        cost twice as much (for ExecutionResult's 25, 12.5k instructions against 6.4k).
        """
        unknown = [n for n in (*given, *optional) if n not in self.fields]
        if unknown or len({*given, *optional}) != len(given) + len(optional):
            raise TypeError(f"{self.name} has no fields {unknown} (or a field is named twice)")
        if not self.required <= set(given):
            raise TypeError(f"{self.name} needs {sorted(self.required - set(given))} among the given fields")
        params = ", ".join((*given, *(["*"] if optional else []), *(f"{n}=_unset" for n in optional)))
        given_set = f"{{{', '.join(repr(n) for n in given)}}}" if given else "set()"
        lines = [f"def build({params}):", "    data = _template.copy()", f"    fields_set = {given_set}"]
        lines += [f"    data[{n!r}] = {n}" for n in given]
        for n in optional:
            lines += [
                f"    if {n} is not _unset:",
                f"        data[{n!r}] = {n}",
                f"        fields_set.add({n!r})",
            ]
            if n in self.made:
                lines += ["    else:", f"        data[{n!r}] = {self.made[n]}"]
        named = {*given, *optional}
        lines += [f"    data[{n!r}] = {made}" for n, made in self.made.items() if n not in named]
        source = "\n".join(lines) + "\n" + _FINISH
        scope = dict(self.scope)
        exec(compile(source, f"<builder {self.name}>", "exec"), scope)
        return scope["build"]

    def _missing(self, values: dict[str, Any]) -> None:
        raise TypeError(f"{self.name} needs {sorted(self.required - values.keys())}")


# The end of every generated builder: the instance from `data` and `fields_set`.
_FINISH = (
    "    obj = _new(_cls)\n"
    "    _set_dict(obj, '__dict__', data)\n"
    "    _set_fields_set(obj, fields_set)\n"
    "    _set_extra(obj, None)\n"
    "    _set_private(obj, None)\n"
    "    return obj\n"
)

_plans: dict[type[BaseModel], _Plan] = {}
# cls -> its plan's `build`: what `assemble` calls (one lookup, no attribute of the plan).
_builders: dict[type[BaseModel], Any] = {}


def _plan(cls: type[BaseModel]) -> _Plan:
    plan = _plans.get(cls)
    if plan is None:
        plan = _plans[cls] = _Plan(cls)
        _builders[cls] = plan.build
    return plan


def assemble(cls: type[M], values: dict[str, Any]) -> M:
    """An instance of `cls` from values the engine made itself, without validating them again.

    What `model_construct` does, about as fast as it can be done in Python (pydantic's own
    `model_construct` looks up each missing field's default on every call and is slower than
    validating; validating is twice the cost of this). Only for values whose types are already the
    model's: exact `str`s that went through `_text.clean`, exact `int`/`float`/`bool`, models, lists
    of these. Text from user code must be cleaned where it is made (the runner does);
    tests/core/test_assemble.py checks that re-validating what the runner builds changes nothing.
    `values` becomes the instance's `__dict__`'s source and must not be used afterwards.
    """
    build = _builders.get(cls)
    if build is None:
        build = _plan(cls).build
    result: M = build(values)
    return result


def builder(cls: type[M], *given: str, optional: tuple[str, ...] = ()) -> Callable[..., M]:
    """`assemble` for a hot path that sets the same fields every time: a generated function that
    takes the `given` fields positionally (in that order) and any of `optional` by keyword (`UNSET`,
    the default, leaves one out), without a dict of values to check, copy and merge.

    The same rules as `assemble` for the values; the result is what `assemble` makes from a dict of
    the fields given. Make builders at import: generating one compiles code, which the sandbox of a
    subprocess worker refuses.
    """
    build: Callable[..., M] = _plan(cls).fixed(given, optional)
    return build


def set_field(obj: BaseModel, name: str, value: Any) -> None:
    """`obj.name = value` for a value of the field's exact type that the engine made itself.

    What pydantic's `__setattr__` does for these models (no assignment validation), without its
    checks: the instance's dict and its set of fields set. `name` must be a field of `obj`.
    """
    obj.__dict__[name] = value
    obj.__pydantic_fields_set__.add(name)


# Planned now, at import: a plan compiles its builder, and the first result may be assembled inside
# a sandbox (the subprocess worker's guarded region), where the audit hook refuses compiling.
for _cls in (ExecutionResult, VariableChanges, VariableInfo, Usage):
    _plan(_cls)
del _cls
