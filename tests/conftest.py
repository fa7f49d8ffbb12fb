"""Setup for the whole suite."""

from __future__ import annotations

import signal

# A background job of a non-interactive shell (`python3 scripts/dev.py test > log &` in a script)
# starts with SIGINT ignored. Python then installs no SIGINT handler: `_thread.interrupt_main()` does
# nothing, and the CLI processes the tests start inherit the ignored signal, so every Ctrl-C test
# would fail for a reason that is not the code's. Give this process what a terminal start gives it;
# a process it starts gets the default disposition back when it execs.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
