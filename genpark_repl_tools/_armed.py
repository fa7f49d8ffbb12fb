"""`call_armed`: a call under the watchdog's deadline, for the runner, the session and the figure closer.

Its own module, below the session and rich-output modules that both use it (they import each other's
parts otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._watchdog import ExecutionTimeout, watchdog

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["call_armed"]


def call_armed(
    timeout_s: float, owner: Session | None, fn: Any, *args: Any
) -> tuple[Any, BaseException | None]:
    """`fn(*args)` under the watchdog: (its value, None) or (None, the exception it raised).

    With an `owner`, the slot is published as `owner.running` while `fn` runs, for `interrupt()`.

    `slot.done = True` is a plain store right after `fn` returns, in this frame, before any call:
    no pending injection can surface in between (see _watchdog). An injection already under way can
    still surface in the first `release`; after it none can follow.
    """
    slot = watchdog.arm(timeout_s)
    if owner is not None:
        owner.running = slot
        if owner.cancel_pending:
            watchdog.cancel(slot)
    value: Any = None
    failure: BaseException | None = None
    try:
        value = fn(*args)
        slot.done = True
    except BaseException as exc:
        slot.done = True
        failure = exc
    try:
        watchdog.release(slot)
    except ExecutionTimeout:
        watchdog.release(slot)
    if owner is not None:
        owner.running = None
    return value, failure
