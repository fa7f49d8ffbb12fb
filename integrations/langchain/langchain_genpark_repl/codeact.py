"""GenparkCodeExecutor: the `eval_fn` of langgraph-codeact's `create_codeact`, over an engine session.

executor = GenparkCodeExecutor(engine)
agent = create_codeact(model, tools, executor.eval_fn).compile(checkpointer=InMemorySaver())
agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool

from genpark_repl_tools import ReplEngine
from genpark_repl_tools import tools as tool_layer

from .tools import SessionResolver, thread_session

__all__ = ["GenparkCodeExecutor"]

_UNSET = object()


class GenparkCodeExecutor:
    """Runs the code of a langgraph-codeact agent in a genpark-repl-tools session; its tools are host tools.

    Security model: the engine's (its boundary and policy); the executor adds no isolation. The tools
    `create_codeact` passes in `_locals` become host tools: the agent's code calls each by its name,
    the real function runs on the host with the host's rights, and only copies of plain data cross
    (see docs/code_mode.md). Offer only tools the model may use; keep untrusted code on a
    sandboxed boundary (the default of `ReplEngine()` on Linux), not `boundary="inprocess"`.

    Sessions: one per LangGraph thread (`configurable.thread_id` of the run that calls `eval_fn`, read
    from LangGraph's run context; `session_resolver=` maps a config differently, as for
    `GenparkReplToolkit`). Outside a thread the executor's own session (`default_session=`, else a new
    id) is used. `eval_fn` is the sync form (`invoke` and `ainvoke`); `aeval_fn` the async one (only
    `ainvoke`/`astream`; on Python 3.10 LangGraph does not pass its config into async nodes, so there
    it uses the default session).

    Variables stay in the session, not in the graph state: `new_vars` is always empty, so a
    checkpointer never holds the session's values. Plain values in the state's `context` (seeded by
    the caller) are copied into the session when first seen and whenever they change there.
    """

    def __init__(
        self,
        engine: ReplEngine,
        *,
        session_resolver: SessionResolver = thread_session,
        default_session: str | None = None,
    ) -> None:
        self.engine = engine
        self.session_resolver = session_resolver
        self.default_session = default_session or f"codeact-{uuid.uuid4().hex}"
        self._sent: dict[str, dict[str, Any]] = {}  # session: the values from the graph state sent to it
        self._lock = threading.Lock()

    def eval_fn(self, code: str, _locals: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Run `code` in the thread's session; return (the observation, no new variables)."""
        session = self._prepare(_locals)
        return tool_layer.run_python(self.engine, code, session).text, {}

    async def aeval_fn(self, code: str, _locals: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Async twin of `eval_fn`."""
        session = await asyncio.to_thread(self._prepare, _locals)
        return (await tool_layer.arun_python(self.engine, code, session)).text, {}

    def session_id(self) -> str:
        """The session of the LangGraph run this is called from (the default one outside a run)."""
        return self.session_resolver(ensure_config()) or self.default_session

    def _prepare(self, found: Mapping[str, Any]) -> str:
        """The run's session, its host tools set to the callables and LangChain tools in `found` and its
        variables to the plain values there that it has not received yet."""
        session = self.session_id()
        # An async-only LangChain tool reaches `_locals` as None (create_codeact passes `tool.func`):
        # there is nothing to call, and a None would only shadow the name.
        tools = {name: _host_tool(value) for name, value in found.items() if _is_tool(value)}
        values = {name: value for name, value in found.items() if value is not None and not _is_tool(value)}
        with self._lock:
            # Every time: it only updates the engine's table, and a session closed meanwhile lost its tools.
            self.engine.set_tools(session, tools or None)
            sent = self._sent.setdefault(session, {})
            fresh = {n: value for n, value in values.items() if not _same(sent.get(n, _UNSET), value)}
            if fresh:
                tool_layer.send_values(self.engine, session, tools, fresh)
                sent.update(fresh)
        return session


def _is_tool(value: Any) -> bool:
    return isinstance(value, BaseTool) or callable(value)


def _host_tool(value: Any) -> Callable[..., Any]:
    if not isinstance(value, BaseTool):
        return value  # type: ignore[no-any-return]
    tool = value

    def call(*args: Any, **kwargs: Any) -> Any:
        return tool.invoke(args[0] if args and not kwargs else kwargs)

    call.__name__ = call.__qualname__ = tool.name
    call.__doc__ = tool.description
    return call


def _same(old: Any, new: Any) -> bool:
    if old is new:
        return True
    try:
        return bool(old == new)
    except Exception:  # an array's elementwise == has no single truth: count it as changed
        return False
