"""`time.sleep` as restricted code sees it: short steps, so the watchdog's timeout lands between them.

Its own module so that the module views (which hand it out) need nothing from the runtime module
(which builds the guards that build the views): no import cycle inside the policy package.
"""

from __future__ import annotations

import time as _time

__all__ = ["SLEEP_STEP_S", "interruptible_sleep"]

_real_sleep = _time.sleep
SLEEP_STEP_S = 0.02


def interruptible_sleep(seconds: float) -> None:
    """`time.sleep` in short steps, so the watchdog's timeout can land between them."""
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    end = _time.monotonic() + seconds
    while True:
        remaining = end - _time.monotonic()
        if remaining <= 0:
            return
        _real_sleep(min(remaining, SLEEP_STEP_S))
