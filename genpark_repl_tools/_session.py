"""One conversation's state, shared by every boundary: the session and the table that holds them.

`Session` is what code runs in (the in-process boundary keeps one per session id; a subprocess worker
keeps exactly one): its namespace, its bookkeeping, and the operations every boundary offers on it
(reset, "is this name defined", describe variables within a time budget). `SessionTable` is how a
boundary finds, creates and caps its sessions, whatever it keeps per session.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ._armed import call_armed
from ._capture import Capture, OutputCapture, capturing
from ._compile import GUARD_NAME
from ._exceptions import CapacityError, SessionNotFound, VariableNotFound
from ._introspect import describe, short_type_name, unrepresentable, variable_name
from ._limits import Limits
from ._models import VariableInfo
from ._rich import FigureOwner
from ._watchdog import ExecutionTimeout, Slot, check_expired, watchdog
from .policy._runtime import PolicyRuntime

if TYPE_CHECKING:
    from ._host_tools import ToolStubs

__all__ = ["Session", "SessionTable", "call_guarded", "not_defined"]

# A whole variables() listing shares one budget, so many slow reprs cannot stall the caller.
DESCRIBE_BUDGET_S = 5.0
# Shared by every session that declared no `global` names (`frozenset()` is a new object each time).
_NO_NAMES: frozenset[str] = frozenset()

S = TypeVar("S")


def not_defined(name: str, session: str) -> VariableNotFound:
    """The one wording for a name a session does not have."""
    return VariableNotFound(f"name {name!r} is not defined in session {session!r}")


class Session:
    """One conversation's namespace and bookkeeping. The bookkeeping never enters the namespace.

    Security model: the policy's (`runtime`): the namespace gets the policy's builtins, and every
    operation here that may run user code (`describe`: `__repr__`, `__len__`) runs under the policy
    and a deadline. Callers hold `lock` around every method that reads or changes the namespace.
    """

    __slots__ = (
        "builtins",
        "cancel_pending",
        "created_at",
        "dynamic",
        "execution_count",
        "figures",
        "global_names",
        "last_used",
        "lock",
        "name",
        "namespace",
        "restarted",
        "running",
        "runtime",
        "sources",
        "tools",
        "touches_host",
    )

    def __init__(self, name: str, runtime: PolicyRuntime) -> None:
        self.name = name
        self.runtime = runtime
        self.namespace: dict[str, Any] = {}
        self.lock = threading.RLock()  # released if held: see InProcessBoundary.execute
        # Source lines of recent cells by filename, oldest first (for tracebacks and snapshots). A
        # plain dict: an OrderedDict costs a few hundred bytes more per idle session.
        self.sources: dict[str, tuple[int, tuple[str, ...]]] = {}
        self.figures = FigureOwner()
        self.running: Slot | None = None  # the watchdog slot of the cell running now, for interrupt()
        self.cancel_pending = False
        # Once a session imported a module that can change process-wide state, the runner checks
        # that state after each of its runs. A reset keeps the flag: what the module (or a thread
        # the code started) does to the process outlives the namespace.
        self.touches_host = False
        self.created_at = self.last_used = time.monotonic()
        self.tools: ToolStubs | None = None  # the host tools' stubs in `builtins`, once it has had any
        self.reset()

    def reset(self) -> None:
        """Empty the namespace and forget what the runner learnt about it (the caller holds `lock`).

        The one reset every boundary uses: the session stays, its counter restarts, and the next
        result does not report a restart (an empty namespace is what was asked for).
        """
        builtins_table = self.runtime.new_builtins()
        builtins_table[GUARD_NAME] = check_expired
        self.builtins = builtins_table  # what the runtime's enter() is given for this session's cells
        self.namespace.clear()
        self.namespace.update({"__builtins__": builtins_table, "__name__": "__main__"})
        self.execution_count = 0
        self.sources.clear()
        self.global_names: frozenset[str] = _NO_NAMES
        self.dynamic = False
        self.restarted = False

    def interrupt(self) -> bool:
        """Stop the cell this session is about to run or is running, as a timeout would.

        Call it only while a call holds the session (its boundary knows); the boundary clears
        `cancel_pending` when that call ends, so a late interrupt never reaches the next cell.
        """
        self.cancel_pending = True  # seen by call_armed if the cell is not armed yet
        slot = self.running
        return slot is None or watchdog.cancel(slot) or not slot.done

    def defines(self, name: str) -> bool:
        """Whether `name` is a variable of this session (the builtins table is not)."""
        return name in self.namespace and name != "__builtins__"

    def user_names(self, include_hidden: bool = False) -> list[str]:
        """The names a listing shows: without modules and `_private` names unless asked."""
        names = []
        for key, value in self.namespace.items():
            if not isinstance(key, str):  # `globals()[1] = ...`: not a variable anyone can name
                continue
            if not include_hidden and (str.startswith(key, "_") or isinstance(value, types.ModuleType)):
                continue
            if key == "__builtins__":
                continue
            names.append(key)
        return names

    def variables(self, limits: Limits, include_hidden: bool = False) -> list[VariableInfo]:
        """Every listed variable, described within one budget (the caller holds `lock`)."""
        return self.describe(self.user_names(include_hidden), limits)

    def inspect(self, name: str, limits: Limits) -> VariableInfo:
        """One variable in detail; VariableNotFound if the session has no such name."""
        if not self.defines(name):
            raise not_defined(name, self.name)
        return self.describe([name], limits)[0]

    def describe(self, names: Iterable[str], limits: Limits) -> list[VariableInfo]:
        """Describe `names` under the policy, all within min(timeout, 5 s): a description that
        does not finish in what is left (a `__repr__` that loops) says so instead.

        Outside the guarded call nothing touches a value but `type()` and `type`'s own name slot
        (`unrepresentable`): no code of the value, its class or its metaclass runs with host rights.
        """
        deadline = time.monotonic() + min(limits.timeout_s, DESCRIBE_BUDGET_S)
        infos = []
        for name in names:
            value = self.namespace[name]
            remaining = deadline - time.monotonic()
            info: VariableInfo | None = None
            timed_out = True
            if remaining > 0:
                try:
                    info = call_guarded(self.runtime, remaining, describe, name, value, limits.max_repr_chars)
                    timed_out = False
                except ExecutionTimeout:
                    pass
                except Exception:  # describe reports the value's failures itself; this is a last resort
                    timed_out = False
            if info is None:
                text = "<repr timed out>" if timed_out else unrepresentable(value)
                info = VariableInfo(
                    name=variable_name(name, limits.max_repr_chars),
                    type=short_type_name(value),
                    repr=text,
                    repr_truncated=True,
                )
            infos.append(info)
        return infos


class SessionTable(Generic[S]):
    """A boundary's live sessions by id: lookup, creation under `Limits.max_sessions`, removal.

    `S` is whatever the boundary keeps per session (a `Session` in-process, the host's handle on a
    worker in the subprocess boundary). Thread-safe; `lock` is re-entrant, so a boundary can hold
    it to combine several calls, or guard its own bookkeeping with it.
    """

    def __init__(self, max_sessions: int | None) -> None:
        self.max_sessions = max_sessions
        self.lock = threading.RLock()
        self._items: dict[str, S] = {}

    def find(self, name: str) -> S | None:
        with self.lock:
            return self._items.get(name)

    def get(self, name: str) -> S:
        """The session; SessionNotFound if there is none."""
        with self.lock:
            item = self._items.get(name)
        if item is None:
            raise SessionNotFound(f"no session {name!r}; run code in it first")
        return item

    __getitem__ = get

    def get_or_create(self, name: str, create: Callable[[str], S]) -> S:
        """The session, made with `create(name)` (under `lock`) on first use; CapacityError at the cap."""
        # A session that exists is found without the lock (a dict read is atomic; the lock would
        # only order it before or after a concurrent pop, which a caller cannot tell apart either).
        item = self._items.get(name)
        if item is not None:
            return item
        with self.lock:
            item = self._items.get(name)
            if item is None:
                cap = self.max_sessions
                if cap is not None and len(self._items) >= cap:
                    raise CapacityError(
                        f"{cap} sessions are live (Limits.max_sessions); close one with engine.close(session)"
                    )
                item = self._items[name] = create(name)
            return item

    def pop(self, name: str, item: S | None = None) -> S | None:
        """Remove the session (only if it is still `item`, when given); what was removed, if anything."""
        with self.lock:
            current = self._items.get(name)
            if current is None or (item is not None and current is not item):
                return None
            del self._items[name]
            return current

    def clear(self) -> list[S]:
        """Remove every session; what was removed."""
        with self.lock:
            items = list(self._items.values())
            self._items.clear()
            return items

    def names(self) -> list[str]:
        with self.lock:
            return list(self._items)

    def values(self) -> list[S]:
        with self.lock:
            return list(self._items.values())


# ---- calls under the watchdog ---------------------------------------------------------------------


def call_guarded(
    runtime: PolicyRuntime,
    timeout_s: float,
    fn: Any,
    *args: Any,
    capture_factory: Callable[[int], OutputCapture] = Capture,
) -> Any:
    """Call `fn(*args)` (which may run user code: __repr__, __len__) under the policy and a deadline.

    Output is discarded. Raises ExecutionTimeout if the deadline passed.
    """
    capture = capture_factory(1000)
    with capturing(capture):
        watchdog.start()  # outside the sandbox: starting a thread is refused inside it (3.12 audits it)
        token = runtime.enter()
        value, failure = call_armed(timeout_s, None, fn, *args)
        runtime.exit(token)
    if failure is not None:
        raise failure
    return value
