"""Starting files through the async tools: each thread's session gets its own copy, once."""

from __future__ import annotations

from typing import Any

from langchain_genpark_repl import GenparkReplToolkit

from genpark_repl_tools import ReplEngine

CSV = b"city,temp\nOslo,4\n"
READ = "with open('data.csv') as f:\n    text = f.read()\ntext"


async def test_async_calls_seed_each_thread_once() -> None:
    with ReplEngine(policy="standard") as engine:
        run = GenparkReplToolkit(engine=engine, files={"data.csv": CSV}).get_tools()[0]
        one: Any = {"configurable": {"thread_id": "one"}}
        two: Any = {"configurable": {"thread_id": "two"}}
        first = await run.ainvoke({"code": READ}, one)
        await run.ainvoke({"code": "with open('data.csv', 'w') as f:\n    n = f.write('changed')"}, one)
        assert first.splitlines()[1] == f"Out: {CSV.decode()!r}"
        again = await run.ainvoke({"code": READ}, one)
        assert again.splitlines()[1] == "Out: 'changed'"  # seeded on first use only, not again
        other = await run.ainvoke({"code": READ}, two)
        assert other.splitlines()[1] == f"Out: {CSV.decode()!r}"  # the other thread's own copy
        assert [engine.download(s, "data.csv") for s in ("one", "two")] == [b"changed", CSV]
