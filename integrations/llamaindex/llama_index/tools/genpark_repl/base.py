"""GenparkReplToolSpec: genpark-repl-tools sessions as LlamaIndex tools, one namespace per conversation."""

# No `from __future__ import annotations` in this module: LlamaIndex reads the tool methods' annotations at
# run time (inspect.signature, no eval_str) to find the injected `Context` parameter and to build the
# schema, so they must be the real objects, not strings.

import asyncio
import concurrent.futures
import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from llama_index.core.base.llms.types import ContentBlock, ImageBlock, TextBlock
from llama_index.core.tools import FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec
from llama_index.core.workflow import Context, Event

from genpark_repl_tools import ReplEngine, tools
from genpark_repl_tools.tools import ToolReply

__all__ = ["STORE_KEY", "GenparkReplStreamEvent", "GenparkReplToolSpec"]

STORE_KEY = "genpark_repl_session"
"""Key under which a conversation's session id lives in `ctx.store` (a plain string, so it serializes)."""

_T = TypeVar("_T")


class GenparkReplStreamEvent(Event):
    """What `arun_python` writes to the workflow's event stream while the code runs.

    `kind` is "output" (`stream` and `text`: text the code wrote; a `\\r` not followed by `\\n`
    restarts the line) or "figure" (`attachment`: the figure as JSON, sent when the run ends).
    Read them with `handler.stream_events()`.
    """

    kind: str
    stream: str = ""
    text: str = ""
    attachment: dict[str, Any] | None = None


class GenparkReplToolSpec(BaseToolSpec):
    """Tools that let an agent run Python in a session that belongs to its conversation.

    Security model: exactly that of the `ReplEngine` it is given (its boundary and policy); this adapter
    adds no protection and removes none. The default in-process boundary guards the host against
    accidents and casual misuse, not against a determined attacker: give untrusted agents
    `ReplEngine(boundary="subprocess")`.

    Sessions: `session="..."` pins every call to that engine session. Otherwise each conversation has
    its own: the tools read the workflow `Context` that LlamaIndex injects and keep only a string
    session id in `ctx.store` (under `STORE_KEY`), so a context saved with `ctx.to_dict()` and restored
    with `Context.from_dict(...)` finds its session again for as long as the engine keeps it. Free a
    finished conversation's session with `engine.close(await spec.session_id(ctx))`.

        spec = GenparkReplToolSpec(engine=ReplEngine(policy="standard"))
        agent = FunctionAgent(tools=spec.to_tool_list(), llm=llm)
        ctx = Context(agent)
        await agent.run("...", ctx=ctx)   # the same ctx keeps the same namespace

    Each tool answers with a `ToolOutput`: the engine's observation text (plus an `ImageBlock` per
    figure) for the model, and the telemetry as plain JSON in `raw_output`. Errors in the agent's code
    are observations (`is_error=True`), never exceptions. Calls are thread-safe; the engine serializes
    calls on one session and runs different sessions in parallel.
    """

    spec_functions: list[SPEC_FUNCTION_TYPE] = [
        ("run_python", "arun_python"),
        ("list_variables", "alist_variables"),
        ("inspect_variable", "ainspect_variable"),
    ]

    def __init__(
        self,
        engine: ReplEngine | None = None,
        *,
        session: str | None = None,
        files: Any = None,
        include_files: bool = False,
    ) -> None:
        """`files` ({name: bytes or host path}, or [host paths]) are put into each conversation's
        session the first time it is used; `include_files` adds list_files and download_file. Each
        run's raw_output lists the files it wrote (`raw_output["files"]`: names and sizes); their
        bytes come from `engine.download(await spec.session_id(ctx), name)`."""
        self.engine = engine if engine is not None else ReplEngine()
        self.session = session
        self.files = None if files is None else tools.SessionFiles(files)
        if include_files:
            self.spec_functions = [
                *type(self).spec_functions,
                ("list_files", "alist_files"),
                ("download_file", "adownload_file"),
            ]
        # ctx.store's write lock is an asyncio.Lock; sync callers each run their own loop, so they take
        # turns here instead of contending for it across loops.
        self._sync_lock = threading.Lock()

    # ---- tools: the signatures and docstrings below are the model's prompt -----------------------

    def run_python(self, code: str, ctx: Context) -> ToolOutput:
        """Run Python code in your persistent Python session and see what happened.

        Variables, functions and imports stay defined between calls in this conversation: build on
        earlier results instead of recomputing them. The reply shows printed output, the value of the
        last line when it is an expression (as in a notebook), any error with the failing line, and
        which variables changed. An error keeps earlier variables: fix the code and run it again.

        Args:
            code (str): Python source to run, e.g. "import math\\nr = 2\\nmath.pi * r ** 2".
        """
        return _output(tools.run_python(self.engine, code, self._session_sync(ctx)), code=code)

    async def arun_python(self, code: str, ctx: Context) -> ToolOutput:
        """Async twin of `run_python`; it also streams the output (`GenparkReplStreamEvent`)."""
        session = await self.session_id(ctx)
        on_event = _stream_to(ctx) if ctx is not None else None
        return _output(await tools.arun_python(self.engine, code, session, on_event), code=code)

    def list_variables(self, ctx: Context) -> ToolOutput:
        """List the variables, functions and classes defined in your Python session.

        Each comes with its type, size and a one-line preview. Use it to recall what already exists
        before writing code that depends on it.
        """
        return _output(tools.list_variables(self.engine, self._session_sync(ctx)))

    async def alist_variables(self, ctx: Context) -> ToolOutput:
        """Async twin of `list_variables`."""
        return _output(await tools.alist_variables(self.engine, await self.session_id(ctx)))

    def inspect_variable(self, name: str, ctx: Context) -> ToolOutput:
        """Show one variable from your Python session in detail.

        Gives its type, length or shape, dtype and a preview of its value; large values are shortened,
        never printed in full.

        Args:
            name (str): The variable's name, e.g. "df".
        """
        return _output(tools.inspect_variable(self.engine, name, self._session_sync(ctx)), name=name)

    async def ainspect_variable(self, name: str, ctx: Context) -> ToolOutput:
        """Async twin of `inspect_variable`."""
        return _output(
            await tools.ainspect_variable(self.engine, name, await self.session_id(ctx)), name=name
        )

    def list_files(self, ctx: Context) -> ToolOutput:
        """List the files in your Python session's working directory (the files you were given and
        the ones your code wrote), each with its size and type. Code opens them by name."""
        return _output(tools.list_files(self.engine, self._session_sync(ctx)))

    async def alist_files(self, ctx: Context) -> ToolOutput:
        """Async twin of `list_files`."""
        return _output(await tools.alist_files(self.engine, await self.session_id(ctx)))

    def download_file(self, name: str, ctx: Context) -> ToolOutput:
        """Read one file of your Python session's working directory: its text when it is text.

        Args:
            name (str): The file's name as list_files shows it, e.g. "clean.csv".
        """
        return _output(tools.download_file(self.engine, name, self._session_sync(ctx)), name=name)

    async def adownload_file(self, name: str, ctx: Context) -> ToolOutput:
        """Async twin of `download_file`."""
        return _output(await tools.adownload_file(self.engine, name, await self.session_id(ctx)), name=name)

    def _description(self, name: str, fn: Callable[..., Any]) -> str:
        # The core's words (one vocabulary in every frontend) after the call's signature. LlamaIndex's
        # default would put the return annotation's dotted path into the prompt.
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.annotation is not Context]
        shown = sig.replace(parameters=params, return_annotation=inspect.Signature.empty)
        known = (*tools.TOOLS, *tools.FILE_TOOLS)
        spec = next((t for t in known if t.name == fn.__name__.removeprefix("a")), None)
        text = spec.describe(self.engine) if spec is not None else inspect.getdoc(fn) or ""
        return f"{name}{shown}\n{text}".strip()

    # ---- sessions -------------------------------------------------------------------------------

    async def session_id(self, ctx: Context | None) -> str:
        """The engine session these tools use for `ctx`'s conversation, created on first use."""
        found = await self._session_id(ctx)
        if self.files is not None:
            await asyncio.to_thread(self.files.seed, self.engine, found)
        return found

    async def _session_id(self, ctx: Context | None) -> str:
        if self.session is not None:
            return self.session
        if ctx is None:
            raise ValueError(
                "no session for this call: pass the workflow Context (agents inject it) "
                "or create GenparkReplToolSpec(session=...)"
            )
        found = await ctx.store.get(STORE_KEY, default=None)
        if isinstance(found, str):
            return found
        # Parallel first calls of one conversation must agree on one id: decide it under the store's
        # write lock. Typed workflow state needs a `genpark_repl_session: str | None = None` field.
        async with ctx.store.edit_state() as state:
            found = getattr(state, STORE_KEY, None)
            if not isinstance(found, str):
                found = uuid.uuid4().hex
                setattr(state, STORE_KEY, found)
        return found

    def _session_sync(self, ctx: Context | None) -> str:
        if self.session is not None:
            if self.files is not None:
                self.files.seed(self.engine, self.session)
            return self.session
        with self._sync_lock:
            return _run_coroutine(self.session_id(ctx))

    # ---- LlamaIndex plumbing --------------------------------------------------------------------

    def to_tool_list(
        self,
        spec_functions: list[SPEC_FUNCTION_TYPE] | None = None,
        func_to_metadata_mapping: dict[str, ToolMetadata] | None = None,
    ) -> list[FunctionTool]:
        """The tools, sync and async, each answering with this spec's own `ToolOutput`."""
        mapping = func_to_metadata_mapping or {}
        tools = []
        for spec in spec_functions or self.spec_functions:
            names = (spec,) if isinstance(spec, str) else spec
            fns = [getattr(self, name) for name in names]
            sync_fn = next((f for f in fns if not inspect.iscoroutinefunction(f)), None)
            async_fn = next((f for f in fns if inspect.iscoroutinefunction(f)), None)
            main = sync_fn or async_fn
            assert main is not None
            metadata = next((mapping[n] for n in names if n in mapping), None)
            name = metadata.get_name() if metadata is not None else main.__name__
            tools.append(
                FunctionTool.from_defaults(
                    fn=sync_fn,
                    async_fn=async_fn,
                    name=name,
                    description=None if metadata is not None else self._description(name, main),
                    tool_metadata=metadata,
                    # FunctionTool would str() a returned ToolOutput; the callback hands it on whole.
                    callback=_keep_output(name),
                    async_callback=_akeep_output(name),
                    # A pinned session needs no Context, so direct `tool.call(code=...)` works too;
                    # an agent's injected ctx still overrides this.
                    partial_params={"ctx": None} if self.session is not None else None,
                )
            )
        return tools


def _stream_to(ctx: Context) -> tools.OnEvent:
    # Only from the async tool: it runs on the workflow's loop, where writing to the stream is safe.
    def write(event: Any) -> None:
        ctx.write_event_to_stream(GenparkReplStreamEvent(**event.model_dump(mode="json")))

    return write


def _output(reply: ToolReply, **kwargs: str) -> ToolOutput:
    """The tool layer's reply as a ToolOutput: text (+ an ImageBlock per image), data as raw_output."""
    blocks: list[ContentBlock] = [TextBlock(text=reply.text)]
    blocks.extend(
        ImageBlock(image=a.data_base64.encode("ascii"), image_mimetype=a.mime_type) for a in reply.images
    )
    return ToolOutput(
        tool_name=reply.tool,
        blocks=blocks,
        raw_input={"args": (), "kwargs": kwargs},
        raw_output=reply.data,
        is_error=reply.is_error,
    )


def _keep_output(name: str) -> Callable[[Any], ToolOutput | None]:
    def keep(raw: Any) -> ToolOutput | None:
        if isinstance(raw, ToolOutput):
            raw.tool_name = name
            return raw
        return None

    return keep


def _akeep_output(name: str) -> Callable[[Any], Awaitable[ToolOutput | None]]:
    keep = _keep_output(name)

    async def akeep(raw: Any) -> ToolOutput | None:
        return keep(raw)

    return akeep


def _run_coroutine(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` to completion from synchronous code.

    Agents call the async tools; the sync ones serve callers outside an event loop, where this is a
    plain `asyncio.run`. Called on a thread whose loop is running, it uses a helper thread instead of
    refusing. The in-memory `ctx.store` tolerates this; a store bound to another loop may not.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
