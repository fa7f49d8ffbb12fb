"""Stops pure-Python code that runs past its deadline, without a thread per execution.

One daemon thread watches every armed execution. At the deadline it raises `ExecutionTimeout` in the
executing thread with `PyThreadState_SetAsyncExc`, then again every `REFIRE_S` while the code keeps
running (code may catch the first one). Handlers in executed code re-raise it on entry (see
`_transform`), so `except BaseException` inside `while True` cannot keep it.

Race-freedom: the watchdog injects only during a pass (under `_lock`, with `_passing` set) and only
into a slot that is not done. The runner marks the slot done with a plain store right after the
executed code returns (no eval-breaker check in between), then `release()` clears any pending
injection under the same lock. After that no injection can reach the thread.

`arm` and `release` take no lock when the watchdog is not in the middle of a pass (almost always):
each writes first and reads second, and the watchdog's pass does the same in the other order, so
under the GIL's one-at-a-time interleaving one side always sees the other (see `release` and
`_loop`). Set and dict updates are single bytecodes, atomic under the GIL.

Both the injection and the clearing of one still pending are the watchdog thread's: the executing
thread never calls native code itself. Its context is the execution's, where the audit hook applies
the execution's rules (Python 3.14+ audits calls through ctypes prototypes); the watchdog's is not.

C code (a long `sum(range(10**10))`, a regex, `10**10**8`) sees the exception only when it returns
to Python: the in-process boundary cannot stop it; the subprocess boundary kills the worker instead.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from _thread import LockType, allocate_lock, get_ident, start_new_thread

__all__ = ["ExecutionCancelled", "ExecutionTimeout", "Slot", "Watchdog", "check_expired"]

REFIRE_S = 0.05
# While executions come and go, the watchdog polls every POLL_S instead of being woken by each
# arm() (a thread wake-up per call would cost more than the call); after LINGER_S without any
# execution it sleeps until the next arm().
POLL_S = 0.05
LINGER_S = 2.0

# Two prototypes of one C function: one passes an exception class, the other NULL (clears).
_set_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)
_clear_async_exc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)


class ExecutionTimeout(BaseException):
    """Raised inside executed code when its time is up. Never reaches the host."""


class ExecutionCancelled(ExecutionTimeout):
    """Raised inside executed code that was interrupted (`engine.interrupt`, a cancelled call).

    A subclass, so every guard that keeps code from swallowing a timeout keeps it from swallowing
    an interrupt too.
    """


class Slot:
    __slots__ = ("cancelled", "done", "fires", "next_fire", "tid")

    def __init__(self, tid: int, deadline: float) -> None:
        self.tid = tid
        self.next_fire = deadline  # the deadline until it fires, then the time of the next refire
        self.done = False
        self.cancelled = False
        self.fires = 0

    @property
    def exception(self) -> type[ExecutionTimeout]:
        return ExecutionCancelled if self.cancelled else ExecutionTimeout


# tid -> the slot running on that thread; read by handler guards in executed code.
_by_thread: dict[int, Slot] = {}


def check_expired() -> None:
    """Re-raise the timeout if this thread's execution is past its deadline (called by handlers)."""
    slot = _by_thread.get(get_ident())
    if slot is not None and slot.fires and not slot.done:
        raise slot.exception


class Watchdog:
    def __init__(self) -> None:
        # An RLock: arm() and cancel() release it only if this thread holds it (see arm).
        self._lock = threading.RLock()
        self._slots: set[Slot] = set()
        self._wake = threading.Event()
        self._next_wake = float("inf")
        # Whether arm() ran since the loop's last pass. The loop's passes alone rarely see a slot:
        # it takes the GIL when the executing thread blocks, which is between executions (a
        # subprocess worker waiting for its next request), so judged by its passes alone a busy
        # watchdog went to sleep LINGER_S after its start and was then woken by every arm().
        self._armed = False
        # True while the loop's pass looks at the slots (it may be about to inject): release() takes
        # the lock then.
        self._passing = False
        # (thread id, a held lock the watchdog releases once it cleared that thread's injection).
        self._to_clear: list[tuple[int, LockType]] = []
        self.thread_id: int | None = None  # the loop's thread, once started
        # Set once, under the lock, and unset only in a forked child: read without the lock (the
        # runner reads it per run instead of calling `start`).
        self.started = False

    def _after_fork(self) -> None:
        """In a forked child: the loop's thread is not there, and its lock and its event's may have
        been held by a thread that is not there either. Start over; the next arm() starts a loop
        and watches the executions of this thread (the only one) that were armed before the fork."""
        tid = get_ident()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._slots = {slot for slot in self._slots if slot.tid == tid}
        for other in [t for t in _by_thread if t != tid]:
            del _by_thread[other]
        self._armed = bool(self._slots)
        self._next_wake = float("inf")
        self._passing = False
        self._to_clear = []
        self.thread_id = None
        self.started = False

    def start(self) -> None:
        """Start the watchdog's thread if it is not running yet. Call it before sandboxed code runs:
        on Python 3.12 starting a thread raises an audit event that restricted policies refuse."""
        if self.started:
            return
        try:  # as in arm
            self._lock.acquire()
            self._start_locked()
        finally:
            try:  # noqa: SIM105
                self._lock.release()
            except RuntimeError:
                pass

    def _start_locked(self) -> None:
        if self.thread_id is None:
            # A bare thread, not a threading.Thread: its start() waits until the new thread runs,
            # 1-3 ms in a newly forked worker (each first write to a page it shares with the zygote
            # is a copy-on-write fault), all of it on a new session's first call. The loop needs no
            # such handshake: its first pass reads the slots armed before it. Like a daemon thread,
            # it is not waited for at exit.
            self.thread_id = start_new_thread(self._loop, ())
            self.started = True

    def arm(self, timeout_s: float) -> Slot:
        tid = get_ident()
        deadline = time.monotonic() + timeout_s
        slot = Slot(tid, deadline)
        _by_thread[tid] = slot
        # No lock (see the module doc). Written first: the slot, then `_armed`; read last:
        # `_next_wake`. A pass that took its list of slots before the add publishes its `_next_wake`
        # before it reads `_armed` back; if that read missed this arm, this read sees its value.
        self._slots.add(slot)
        self._armed = True
        if self.thread_id is None:
            # Not `with` (nor acquire() before a try): from 3.13 a KeyboardInterrupt can surface
            # right after acquire() returns and would leave the lock held, hanging every later run.
            # In the try it reaches the finally, where the release refuses if the lock is not held.
            try:
                self._lock.acquire()
                self._start_locked()
            finally:
                try:  # noqa: SIM105 - not contextlib.suppress: its __enter__ is a call an interrupt can follow
                    self._lock.release()
                except RuntimeError:  # not held: interrupted before acquire() returned
                    pass
        if deadline < self._next_wake:
            self._wake.set()
        return slot

    def cancel(self, slot: Slot) -> bool:
        """Stop the execution in `slot` as if its deadline had passed now; False if it is done."""
        try:  # as in arm
            self._lock.acquire()
            if slot.done or slot not in self._slots:
                return False
            self._mark_cancelled(slot)
            self._wake.set()
        finally:
            try:  # noqa: SIM105
                self._lock.release()
            except RuntimeError:
                pass
        return True

    def cancel_thread(self, tid: int | None) -> None:
        """`cancel` for the execution running on thread `tid`, safe to call from a signal handler.

        A signal handler runs between two bytecodes of the thread it interrupts, which may hold this
        watchdog's lock or the wake event's: so only plain stores here, and the watchdog, which polls
        every POLL_S while anything is armed, raises the exception at its next pass.
        """
        slot = _by_thread.get(tid) if tid is not None else None
        if slot is not None and not slot.done:
            self._mark_cancelled(slot)

    @staticmethod
    def _mark_cancelled(slot: Slot) -> None:
        slot.cancelled = True
        slot.next_fire = 0.0

    def release(self, slot: Slot) -> None:
        """Forget `slot` and clear an injection still pending for its thread.

        The caller must have stored `slot.done = True` first, in its own frame, right after the
        executed code returned (a function call would be a point where a pending injection can
        surface). An injection that was under way at that moment may still surface here, so call
        it as `try: release(s) / except ExecutionTimeout: release(s)`: after the first attempt none
        can follow.
        """
        tid = slot.tid
        # `done` was written first; `_passing` is read before `fires`. A pass that read `done` before
        # that write had set `_passing` before reading it: seen here, and the clear below follows
        # that pass. A pass that has ended left its `fires` visible. A pass that sets `_passing`
        # after this read sees `done` and injects nothing.
        if self._passing or slot.fires:
            # The watchdog's thread clears it at the start of its next pass, after the pass under way
            # (which may inject) has ended; the slot stays in the set until then, so the watchdog
            # keeps polling. This thread waits blocked in C, where no injection is delivered, and
            # takes no lock of the watchdog's nor sets its event: a lock a `with` statement took can
            # stay held when an injection surfaces right after it is taken (from Python 3.14 the
            # statement calls `__enter__` like any method, and the interpreter delivers pending
            # exceptions after a call returns).
            cleared = allocate_lock()
            cleared.acquire()
            self._to_clear.append((tid, cleared))
            cleared.acquire()
        self._slots.discard(slot)
        if _by_thread.get(tid) is slot:
            del _by_thread[tid]

    def _loop(self) -> None:
        idle_since: float | None = None
        while True:
            with self._lock:
                # Cleared before the slots are read: a wake-up set by an arm() this pass does not
                # see is not lost.
                self._wake.clear()
                while self._to_clear:  # pop(), not iteration and clear(): a request may come meanwhile
                    tid, cleared = self._to_clear.pop()
                    _clear_async_exc(tid, None)
                    cleared.release()
                self._passing = True
                armed = self._armed
                self._armed = False  # an arm() between these two lines has its slot in the list below
                now = time.monotonic()
                next_wake = now + POLL_S
                slots = list(self._slots)
                for slot in slots:
                    if slot.done:
                        continue
                    if now >= slot.next_fire:
                        slot.fires += 1
                        slot.next_fire = now + REFIRE_S
                        _set_async_exc(slot.tid, slot.exception)
                    next_wake = min(next_wake, slot.next_fire)
                if slots or armed:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since > LINGER_S:
                    next_wake = float("inf")  # nothing to watch for a while: sleep until armed
                self._next_wake = next_wake
                self._passing = False
                # An arm() since the list was taken: look again rather than sleep past its deadline
                # (if this read misses it, that arm() sees the `_next_wake` above and wakes us). A
                # release waiting for its clear: look again now.
                again = self._armed or bool(self._to_clear)
            if not again:
                self._wake.wait(None if next_wake == float("inf") else max(0.0, next_wake - time.monotonic()))


watchdog = Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=watchdog._after_fork)
