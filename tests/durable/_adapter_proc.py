"""One framework tool call in a process of its own, over an engine with a SQLite store.

    python _adapter_proc.py langchain|llamaindex DB THREAD CODE

Prints the observation text the model would read.
"""

from __future__ import annotations

import sys

from _durable_support import KEY

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.stores import SQLiteStore


def main(adapter: str, db: str, thread: str, code: str) -> int:
    with SQLiteStore(db, lease_wait_s=60) as store, ReplEngine(store=store, snapshot_key=KEY) as engine:
        if adapter == "langchain":
            from langchain_core.messages import ToolCall
            from langchain_genpark_repl import GenparkReplTool

            call = ToolCall(name="run_python", args={"code": code}, id="call-1", type="tool_call")
            message = GenparkReplTool(engine=engine).invoke(call, {"configurable": {"thread_id": thread}})
            text = message.content if isinstance(message.content, str) else str(message.content[0])
        else:
            from llama_index.tools.genpark_repl import GenparkReplToolSpec

            output = GenparkReplToolSpec(engine=engine, session=thread).run_python(code, None)  # type: ignore[arg-type]
            text = output.content
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
