"""Run cells in a session of a store, in a process of its own; prints the results as JSON.

    python _proc_worker.py STORE POLICY SESSION CELL [CELL ...]

STORE is `sqlite:<path>` or `redis:<url>#<prefix>`.
"""

from __future__ import annotations

import json
import sys

from _durable_support import KEY

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.stores import SessionStore, SQLiteStore


def open_store(spec: str) -> SessionStore:
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        return SQLiteStore(rest, lease_wait_s=60)
    from genpark_repl_tools.stores import RedisStore

    url, _, prefix = rest.partition("#")
    return RedisStore(url, prefix=prefix, lease_wait_s=60)


def main(argv: list[str]) -> int:
    spec, policy, session, *cells = argv
    with (
        open_store(spec) as store,
        ReplEngine(boundary="inprocess", policy=policy, store=store, snapshot_key=KEY) as engine,
    ):
        results = [engine.run(cell, session=session).model_dump(mode="json") for cell in cells]
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
