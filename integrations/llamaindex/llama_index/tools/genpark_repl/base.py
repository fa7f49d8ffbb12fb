"""GenparkReplToolSpec: genpark-repl-tools sessions as LlamaIndex tools, one namespace per conversation."""

# No `from __future__ import annotations` in this module: LlamaIndex reads the tool methods' signatures at
# run time (inspect.signature, no eval_str) to find the injected `Context` parameter, so their annotations
# must be the real objects, not strings.

import inspect
import threading
import types
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.base.llms.types import ContentBlock, ImageBlock, TextBlock
from llama_index.core.tools import FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.tool_spec.base import SPEC_FUNCTION_TYPE, BaseToolSpec
from llama_index.core.workflow import Context, Event

from genpark_repl_tools import ReplEngine, tools
from genpark_repl_tools.tools import ToolReply, ToolSpec

__all__ = ["STORE_KEY", "GenparkReplStreamEvent", "GenparkReplToolSpec"]

STORE_KEY = "genpark_repl_session"
"""Key under which a conversation's session id lives in `ctx.store` (a plain string, so it serializes)."""

_SPECS = {spec.name: spec for spec in (*tools.TOOLS, *tools.FILE_TOOLS, tools.FORK_SESSION)}


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


def _methods(spec: ToolSpec) -> tuple[Callable[..., ToolOutput], Callable[..., Awaitable[ToolOutput]]]:
    """The core's tool as a sync and an async method `(self, <its arguments>: str, ctx: Context)`: the
    signature LlamaIndex reads (it injects `ctx`, hidden from the schema); the core's docstring.
    Arguments with a default (a forkable spec's `fork`) come after `ctx`, keyword-only."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    required = [name for name in spec.arguments if name not in spec.defaults]
    names = ("self", *required, "ctx")
    annotations: dict[str, Any] = {"self": inspect.Parameter.empty, "ctx": Context}
    parameters = [inspect.Parameter(name, kind, annotation=annotations.get(name, str)) for name in names]
    parameters += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value, annotation=type(value))
        for name, value in spec.defaults.items()
    ]
    signature = inspect.Signature(parameters, return_annotation=ToolOutput)

    def bind(self: Any, args: Any, kwargs: Any) -> tuple[Context | None, dict[str, Any]]:
        arguments = signature.bind(self, *args, **kwargs).arguments  # a name it lacks is a TypeError
        del arguments["self"]
        return arguments.pop("ctx"), arguments

    def method(self: "GenparkReplToolSpec", *args: Any, **kwargs: Any) -> ToolOutput:
        ctx, arguments = bind(self, args, kwargs)
        reply = spec.call(self.engine, self._session_sync(ctx), arguments, self.files)
        return _output(reply, arguments)

    async def amethod(self: "GenparkReplToolSpec", *args: Any, **kwargs: Any) -> ToolOutput:
        ctx, arguments = bind(self, args, kwargs)
        # Streams only from here: the async tool runs on the workflow's own loop.
        options = (
            {"on_event": _stream_to(ctx)} if spec.name == tools.RUN_PYTHON.name and ctx is not None else {}
        )
        reply = await spec.acall(self.engine, await self.session_id(ctx), arguments, self.files, **options)
        return _output(reply, arguments)

    method.__doc__ = spec.docstring
    streamed = (
        "; it also streams the output (`GenparkReplStreamEvent`)"
        if spec.name == tools.RUN_PYTHON.name
        else ""
    )
    amethod.__doc__ = f"Async twin of `{spec.name}`{streamed}."
    for function, name in ((method, spec.name), (amethod, "a" + spec.name)):
        function.__name__, function.__qualname__ = name, f"GenparkReplToolSpec.{name}"
        function.__signature__ = signature  # type: ignore[union-attr]
    return method, amethod


class GenparkReplToolSpec(BaseToolSpec):
    """Tools that let an agent run Python in a session that belongs to its conversation.

    Security model: exactly that of the `ReplEngine` it is given (its boundary and policy); this adapter
    adds no protection and removes none. Without an engine it makes `ReplEngine()`, whose default
    boundary is the sandboxed subprocess one on Linux (in-process elsewhere, with a warning: that guards
    the host against accidents and casual misuse, not against a determined attacker).

    Sessions: `session="..."` pins every call to one engine session; otherwise each conversation (the
    workflow `Context` LlamaIndex injects) has its own, its id a string in `ctx.store[STORE_KEY]`, so a
    saved and restored context finds it again. Each tool answers with a `ToolOutput`: the observation
    (plus an `ImageBlock` per figure), the telemetry as plain JSON in `raw_output`, `is_error` instead
    of exceptions. See integrations/llamaindex/README.md.
    """

    spec_functions: list[SPEC_FUNCTION_TYPE] = [
        ("run_python", "arun_python"),
        ("list_variables", "alist_variables"),
        ("inspect_variable", "ainspect_variable"),
    ]

    # The tools, each a sync/async pair with the core's words (tools.RUN_PYTHON, ...).
    run_python, arun_python = _methods(tools.RUN_PYTHON)
    list_variables, alist_variables = _methods(tools.LIST_VARIABLES)
    inspect_variable, ainspect_variable = _methods(tools.INSPECT_VARIABLE)
    list_files, alist_files = _methods(tools.LIST_FILES)
    download_file, adownload_file = _methods(tools.DOWNLOAD_FILE)
    fork_session, afork_session = _methods(tools.forkable(tools.FORK_SESSION))

    def __init__(
        self,
        engine: ReplEngine | None = None,
        *,
        session: str | None = None,
        files: Any = None,
        include_files: bool = False,
        include_fork: bool = False,
    ) -> None:
        """`files` ({name: bytes or host path}, or [host paths]) are put into each conversation's
        session the first time it is used; `include_files` adds list_files and download_file;
        `include_fork` adds fork_session, and to every tool a `fork` argument naming a copy it made
        of the conversation's session (copies are sessions under the conversation's own, so a model
        reaches only its own conversation's copies)."""
        self.engine = engine if engine is not None else ReplEngine()
        self.session = session
        self.files = None if files is None else tools.SessionFiles(files)
        self.forks = include_fork
        chosen = [*type(self).spec_functions]
        if include_files:
            chosen += [(s.name, "a" + s.name) for s in (tools.LIST_FILES, tools.DOWNLOAD_FILE)]
        if include_fork:
            chosen.append(("fork_session", "afork_session"))
            for spec in _SPECS.values():  # every tool takes `fork`: this instance's methods say so
                method, amethod = _FORKABLE_METHODS[spec.name]
                setattr(self, spec.name, types.MethodType(method, self))
                setattr(self, "a" + spec.name, types.MethodType(amethod, self))
        self.spec_functions = chosen
        # ctx.store's write lock is an asyncio.Lock; sync callers each run their own loop, so they take
        # turns here instead of contending for it across loops.
        self._sync_lock = threading.Lock()

    async def session_id(self, ctx: Context | None) -> str:
        """The engine session these tools use for `ctx`'s conversation, created on first use."""
        found = self.session if self.session is not None else await _conversation(ctx)
        if self.files is not None:
            await self.files.aseed(self.engine, found)
        return found

    def _session_sync(self, ctx: Context | None) -> str:
        if self.session is not None:
            return self.session
        with self._sync_lock:
            return tools.run_sync(self.session_id(ctx))

    def to_tool_list(
        self,
        spec_functions: list[SPEC_FUNCTION_TYPE] | None = None,
        func_to_metadata_mapping: dict[str, ToolMetadata] | None = None,
    ) -> list[FunctionTool]:
        """The tools, sync and async, each answering with this spec's own `ToolOutput`."""
        mapping = func_to_metadata_mapping or {}
        found = []
        for entry in spec_functions or self.spec_functions:
            names = (entry,) if isinstance(entry, str) else entry
            fns = [getattr(self, name) for name in names]
            sync_fn = next((f for f in fns if not inspect.iscoroutinefunction(f)), None)
            async_fn = next((f for f in fns if inspect.iscoroutinefunction(f)), None)
            metadata = next((mapping[n] for n in names if n in mapping), None)
            main = min(fns, key=inspect.iscoroutinefunction)  # the sync one, if there is one
            name = metadata.get_name() if metadata is not None else main.__name__
            # The core's words with this engine's policy and time limit; LlamaIndex's own description
            # would put the return annotation's dotted path into the prompt.
            spec = _SPECS.get(name.removeprefix("a")) if metadata is None else None
            if spec is not None and self.forks:
                spec = tools.forkable(spec)
            described = None if spec is None else f"{name}{spec.signature}\n{spec.describe(self.engine)}"
            keep, akeep = _keep_output(name)  # FunctionTool would str() a returned ToolOutput
            found.append(
                FunctionTool.from_defaults(
                    fn=sync_fn,
                    async_fn=async_fn,
                    name=name,
                    description=described,
                    tool_metadata=metadata,
                    callback=keep,
                    async_callback=akeep,
                    # A pinned session needs no Context, so direct `tool.call(code=...)` works too;
                    # an agent's injected ctx still overrides this.
                    partial_params={"ctx": None} if self.session is not None else None,
                )
            )
        return found


_FORKABLE_METHODS = {name: _methods(tools.forkable(spec)) for name, spec in _SPECS.items()}


async def _conversation(ctx: Context | None) -> str:
    """The session id kept in `ctx.store`, created on first use."""
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


def _stream_to(ctx: Context) -> tools.OnEvent:
    return lambda event: ctx.write_event_to_stream(GenparkReplStreamEvent(**event.model_dump(mode="json")))


def _output(reply: ToolReply, arguments: dict[str, Any]) -> ToolOutput:
    """The tool layer's reply as a ToolOutput: text (+ an ImageBlock per image), data as raw_output."""
    blocks: list[ContentBlock] = [TextBlock(text=reply.text)]
    blocks += [
        ImageBlock(image=a.data_base64.encode("ascii"), image_mimetype=a.mime_type) for a in reply.images
    ]
    return ToolOutput(
        tool_name=reply.tool,
        blocks=blocks,
        raw_input={"args": (), "kwargs": arguments},
        raw_output=reply.data,
        is_error=reply.is_error,
    )


def _keep_output(name: str) -> tuple[Callable[[Any], ToolOutput | None], Callable[[Any], Awaitable[Any]]]:
    def keep(raw: Any) -> ToolOutput | None:
        if isinstance(raw, ToolOutput):
            raw.tool_name = name
            return raw
        return None

    async def akeep(raw: Any) -> ToolOutput | None:  # as a coroutine: no executor hop per call
        return keep(raw)

    return keep, akeep
