"""`python -m genpark_repl_tools`: the `genpark-repl` command without the console script."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
