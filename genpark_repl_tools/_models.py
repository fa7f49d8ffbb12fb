"""Telemetry: what one execution did, as pydantic models that dump to plain JSON."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ._text import finding_text

Status = Literal["ok", "error", "blocked", "timeout", "cancelled", "crashed"]

__all__ = [
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
    """What one run used, for observability. A figure a boundary cannot measure is None."""

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
    tool_calls: int = Field(0, ge=0, description="Host tool calls the run's code made (counted by the host).")
    tool_ms: float = Field(
        0.0, ge=0, description="Wall time the host spent in those tool calls (part of the run's duration)."
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
    files: list[FileInfo] = Field(
        default_factory=list, description="Workspace files stored with the session (store saves only)."
    )
    files_not_saved: str | None = Field(
        None, description="Why the workspace files were left out, if they were."
    )


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
    files: list[str] = Field(
        default_factory=list, description="Workspace files the session has back from the snapshot."
    )


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

    status: Status = Field(
        description=(
            "'blocked': the policy refused the code, before it ran (the audit) or while it ran (a "
            "runtime guard: error.refused_by is set, what ran before the refusal is kept)."
        )
    )
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
    findings: list[AuditFinding] = Field(
        default_factory=list,
        description="Why the policy refused the code (status 'blocked'): the audit's findings, or the "
        "one refusal of a runtime guard (rule 'runtime-guard' or 'audit-hook').",
    )
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
