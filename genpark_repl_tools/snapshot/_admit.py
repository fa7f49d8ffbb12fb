"""Which globals a snapshot may name under a restricted policy: the same answer when saving and loading.

A pickle rebuilds objects by calling the globals it names. Under `strict` and `standard` a
snapshot may name only:
- builtin data types and exceptions, and the session's own (guarded) `getattr` and `type`;
- `copyreg.__newobj__` / `__newobj_ex__` (`cls.__new__(cls, ...)` for an admitted class);
- public names of modules the policy lets the session import, looked up the way the session
  would: through its import function and module views (so hidden names stay hidden);
- a short reviewed list of the reconstructors numpy and pandas name in their own pickles
  (`_REVIEWED`), only while the policy admits that library.
Anything else (`os.system`, `subprocess.Popen`, `builtins.eval`, `builtins.open`, private helpers)
is refused before it is looked up.
"""

from __future__ import annotations

import builtins
import copyreg
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..policy import Policy
from ..policy._errors import PolicyViolation
from ._format import SnapshotRefused

if TYPE_CHECKING:
    from .._session import Session
    from ..policy._runtime import PolicyRuntime

__all__ = ["Admission", "SessionScope", "import_by_name"]

_SAFE_BUILTINS = frozenset(
    {
        "int",
        "float",
        "complex",
        "bool",
        "str",
        "bytes",
        "bytearray",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "slice",
        "range",
        "object",
        "Ellipsis",
        "NotImplemented",
        # the session's own guarded versions (pickle names them for bound methods and type(None))
        "getattr",
        "type",
    }
)
_GUARDED_BUILTINS = frozenset({"getattr", "type"})

# Reconstructors numpy and pandas name in their pickles, reviewed one by one: each builds a
# value from data (shape, dtype, bytes, block placement) and calls nothing it is given.
_REVIEWED: dict[str, tuple[str, frozenset[str]]] = {
    "numpy._core.multiarray": ("numpy", frozenset({"_reconstruct", "scalar"})),
    "numpy.core.multiarray": ("numpy", frozenset({"_reconstruct", "scalar"})),
    "numpy._core.numeric": ("numpy", frozenset({"_frombuffer"})),
    "numpy.core.numeric": ("numpy", frozenset({"_frombuffer"})),
    "pandas._libs.internals": ("pandas", frozenset({"_unpickle_block"})),
    "pandas._libs.arrays": ("pandas", frozenset({"__pyx_unpickle_NDArrayBacked"})),
    "pandas._libs.tslibs.timestamps": ("pandas", frozenset({"_unpickle_timestamp"})),
    "pandas._libs.tslibs.timedeltas": ("pandas", frozenset({"_timedelta_unpickle"})),
    "pandas._libs.tslibs.nattype": ("pandas", frozenset({"__nat_unpickle"})),
    "pandas.core.indexes.base": ("pandas", frozenset({"_new_Index"})),
    "pandas.core.internals.managers": ("pandas", frozenset({"BlockManager", "SingleBlockManager"})),
}
# Modules whose public classes are re-exported by a public module the policy names.
_ALIASES = {
    "pandas._libs.tslibs.offsets": "pandas.tseries.offsets",
    "_operator": "operator",
    "pathlib._local": "pathlib",  # Python 3.13's paths
}


def import_by_name(table: dict[str, Any], name: str) -> Any:
    """`import name` as the session would do it (its own import function), returning the leaf module."""
    module = table["__import__"](name, None, None, (), 0)
    for part in name.split(".")[1:]:
        module = getattr(module, part)
    return module


class Admission:
    """The globals a snapshot may name in one restricted session (builtins table `table`)."""

    def __init__(self, policy: Policy, table: dict[str, Any]) -> None:
        self.policy = policy
        self.table = table
        self.modules: set[str] = set()  # top-level packages named, for the manifest's versions
        self._verdicts: dict[tuple[str, str], str | None] = {}

    def refusal(self, module: str, name: str, why: str = "") -> SnapshotRefused:
        tail = f" ({why})" if why else ""
        reason = f"{module}.{name}, which policy '{self.policy.name}' does not let a restore rebuild{tail}"
        return SnapshotRefused(f"the snapshot names {reason}; nothing was loaded", reason=reason)

    def resolve(self, module: str, name: str) -> Any:
        if not isinstance(module, str) or not isinstance(name, str):
            raise SnapshotRefused("the snapshot names a global that is not a string; nothing was loaded")
        if module == "builtins":
            if name in _GUARDED_BUILTINS:
                return self.table[name]
            value = getattr(builtins, name, None)
            if name in _SAFE_BUILTINS or (
                isinstance(value, type) and issubclass(value, BaseException) and not name.startswith("_")
            ):
                return value
            raise self.refusal(module, name)
        if module == "copyreg" and name in ("__newobj__", "__newobj_ex__"):
            return getattr(copyreg, name)
        top = module.partition(".")[0]
        reviewed = _REVIEWED.get(module)
        if reviewed is not None and name in reviewed[1]:
            if not self.policy.allows_module(reviewed[0]):
                raise self.refusal(module, name, f"the policy does not admit {reviewed[0]}")
            import_by_name(self.table, reviewed[0])  # loads the library the way the session would
            real = sys.modules.get(module)
            if real is None:
                raise self.refusal(module, name, "that module is not part of the installed library")
            self.modules.add(top)
            return getattr(real, name)
        module = _ALIASES.get(module, module)
        parts = name.split(".")
        if any(not p or p.startswith("_") for p in parts) or any(
            p.startswith("_") for p in module.split(".")
        ):
            raise self.refusal(module, name, "a private name")
        if not self.policy.allows_module(module):
            raise self.refusal(module, name, "the policy does not admit that module")
        try:
            value = import_by_name(self.table, module)
            getattr_ = self.table["getattr"]
            for part in parts:
                value = getattr_(value, part)
        except (PolicyViolation, ImportError, AttributeError) as exc:
            raise self.refusal(module, name, str(exc)[:200]) from None
        if isinstance(value, ModuleType):
            raise self.refusal(module, name, "a module")
        self.modules.add(top)
        return value

    def admits(self, module: str, name: str) -> str | None:
        """None if `module.name` may be named, else why not (for the saver's manifest)."""
        key = (module, name)
        if key not in self._verdicts:
            try:
                self.resolve(module, name)
                self._verdicts[key] = None
            except SnapshotRefused as exc:
                self._verdicts[key] = exc.reason
        return self._verdicts[key]


class SessionScope:
    """One session as a save or a restore sees it: its namespace, its builtins table, and the
    globals its policy lets a snapshot name (`admission`, consulted when `restricted`)."""

    def __init__(self, session: Session, runtime: PolicyRuntime) -> None:
        self.session = session
        self.runtime = runtime
        self.namespace = session.namespace
        self.table: dict[str, Any] = session.namespace["__builtins__"]
        self.restricted = runtime.policy.restricted
        self.admission = Admission(runtime.policy, self.table)
