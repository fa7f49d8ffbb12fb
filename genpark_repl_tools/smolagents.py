"""A smolagents `PythonExecutor` that runs a CodeAgent's code in a genpark-repl-tools session.

    from smolagents import CodeAgent
    from genpark_repl_tools import ReplEngine
    from genpark_repl_tools.smolagents import GenparkExecutor

    engine = ReplEngine(boundary="subprocess")
    agent = CodeAgent(tools=[...], model=model, executor=GenparkExecutor(engine))

Needs the `smolagents` extra (`pip install genpark-repl-tools[smolagents]`). Importing this module does
not import smolagents; creating an executor does.
"""

from __future__ import annotations

import contextlib
import inspect
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._engine import ReplEngine
from ._exceptions import MissingDependency
from .tools import send_values

if TYPE_CHECKING:
    from smolagents.local_python_executor import CodeOutput  # type: ignore[import-untyped]

__all__ = ["ExecutionFailed", "GenparkExecutor"]

_FINAL_ANSWER = "final_answer"


class ExecutionFailed(Exception):
    """The agent's code did not run to the end (an error, a refusal, a timeout): the message is the
    observation the model reads. smolagents turns it into its own `AgentExecutionError`."""


class _Answered(Exception):
    """Raised by the host's `final_answer` (and any tool called after it in the step) so the session's
    code stops there, as smolagents expects."""


class GenparkExecutor:
    """A smolagents `PythonExecutor` over one `ReplEngine` session: `CodeAgent(..., executor=...)`.

    Security model: the engine's (its boundary and policy); the executor adds no isolation. The agent's
    tools are host tools: calling one from the session runs the real tool on the host, with the host's
    rights, and only copies of plain data cross (see docs/code_mode.md). Offer only tools the model may
    use. Keep untrusted code on a sandboxed boundary (the default of `ReplEngine()` on Linux), not
    `boundary="inprocess"`.

    Sessions: smolagents does not tell an executor which conversation a step belongs to, so each
    executor has one session (`session=`, else a new id) that keeps its variables across steps and
    across `agent.run(...)` calls, like smolagents' own local executor. Give each conversation its own
    executor (and agent); `engine.close(executor.session)` frees it.

    `final_answer(...)` works as in smolagents: it ends the code where it is called, and the step's
    `CodeOutput` has the answer (a copy of plain data) with `is_final_answer=True`. Variables from
    `agent.run(..., additional_args={...})` reach the session as copies, by one run of a generated
    assignment. Code that fails raises `ExecutionFailed` with the observation text, which smolagents
    shows the model.
    """

    def __init__(self, engine: ReplEngine, *, session: str | None = None) -> None:
        _require_smolagents()
        self.engine = engine
        self.session = session if session is not None else f"smolagents-{uuid.uuid4().hex}"
        self._tools: dict[str, Callable[..., Any]] = {}
        self._answers: list[Any] = []  # what final_answer received during the current step

    def send_tools(self, tools: Mapping[str, Any]) -> None:
        """Make `tools` (smolagents `Tool`s, managed agents, callables) the session's host tools."""
        found = {name: self._host_tool(name, tool) for name, tool in tools.items()}
        self._tools = found
        self.engine.set_tools(self.session, found or None)

    def send_variables(self, variables: Mapping[str, Any]) -> None:
        """Set `variables` in the session, each a copy of plain data (as a tool's result would be)."""
        if variables:
            send_values(self.engine, self.session, self._tools, variables)

    def __call__(self, code_action: str) -> CodeOutput:
        from smolagents.local_python_executor import CodeOutput

        self._answers.clear()
        result = self.engine.run(code_action, self.session)
        if self._answers:
            return CodeOutput(output=self._answers[0], logs=result.stdout, is_final_answer=True)
        if result.status != "ok":
            raise ExecutionFailed(result.to_observation(self.engine.limits.max_observation_chars))
        return CodeOutput(output=result.value, logs=result.stdout, is_final_answer=False)

    def cleanup(self) -> None:
        """Frees the session (smolagents calls this when the agent is used as a context manager)."""
        self.engine.close(self.session)

    def _host_tool(self, name: str, tool: Any) -> Callable[..., Any]:
        answers = self._answers

        # Nothing runs on the host after the step's answer, even if the code caught the exception that
        # stopped it (smolagents' own executor stops it with a BaseException, which `except` rarely catches).
        def call(*args: Any, **kwargs: Any) -> Any:
            if answers:
                raise _Answered("the step has ended with final_answer")
            value = tool(*args, **kwargs)
            if name == _FINAL_ANSWER:
                answers.append(value)
                raise _Answered("answer recorded; the code stops here")
            return value

        return _described(call, name, tool)


def _require_smolagents() -> None:
    try:
        from smolagents.local_python_executor import PythonExecutor
    except ImportError as exc:
        raise MissingDependency(
            "GenparkExecutor needs smolagents: install genpark-repl-tools[smolagents]", name="smolagents"
        ) from exc
    # smolagents' executor interface is an ABC: registering keeps this module free of smolagents until used.
    PythonExecutor.register(GenparkExecutor)


def _described(function: Callable[..., Any], name: str, tool: Any) -> Callable[..., Any]:
    """`function` named `name`, with the signature and description the model was shown for `tool` (a
    smolagents Tool's is its `forward`), so a bad call is refused with what the tool accepts."""
    function.__name__ = function.__qualname__ = name
    function.__doc__ = getattr(tool, "description", None) or inspect.getdoc(tool)
    with contextlib.suppress(TypeError, ValueError):  # a callable without one takes any arguments
        signature = inspect.signature(getattr(tool, "forward", tool))
        parameters = list(signature.parameters.values())
        if parameters and parameters[0].name == "self":  # @tool's forward is static yet declares self
            signature = signature.replace(parameters=parameters[1:])
        function.__signature__ = signature  # type: ignore[attr-defined]
    return function
