"""smolagents' CodeAgent runs its code through GenparkExecutor, offline, with a scripted model.

The agent's tools are host tools: the code calls them in the session, they run here in the test's
process (their calls are recorded), variables stay in the executor's session between steps, and
`final_answer` ends a step as smolagents' own executor does.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.smolagents import ExecutionFailed, GenparkExecutor

smolagents = pytest.importorskip("smolagents", reason="the smolagents extra is not installed")
from smolagents import ChatMessage, CodeAgent, Model, tool  # noqa: E402 - after the skip
from smolagents.local_python_executor import PythonExecutor  # noqa: E402

PRICES: dict[str, float] = {"apple": 0.5, "pear": 0.75, "fig": 2.0}
CALLS: list[str] = []


@tool
def lookup_price(item: str) -> float:
    """The price of one item, in euros.

    Args:
        item: the item's name, such as "apple".
    """
    CALLS.append(item)
    return PRICES[item]


class ScriptedModel(Model):
    """Plays the model: the code of each step, in order, as smolagents' CodeAgent expects it."""

    def __init__(self, steps: list[str]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen: list[str] = []  # the last message of each request: the previous step's observation

    def generate(
        self, messages: list[Any], stop_sequences: list[str] | None = None, **kwargs: Any
    ) -> ChatMessage:
        last = messages[-1]
        content = last.content if hasattr(last, "content") else last["content"]
        self.seen.append(
            content if isinstance(content, str) else " ".join(c.get("text", "") for c in content)
        )
        return ChatMessage(
            role="assistant", content=f"Thought: next step.\n<code>\n{self.steps.pop(0)}\n</code>"
        )


@pytest.fixture(params=["inprocess", "subprocess"])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    with ReplEngine(policy="standard", boundary=request.param) as e:
        yield e


@pytest.fixture(autouse=True)
def _no_calls_yet() -> None:
    CALLS.clear()


STEPS = [
    # Step 1 calls the host tool in a loop and keeps the result in a variable.
    "prices = {item: lookup_price(item) for item in ['apple', 'pear', 'fig']}\nprint(len(prices), 'prices')",
    # Step 2 uses it (the session kept it) and a variable the caller passed, then answers.
    "total = sum(prices.values()) * (1 - discount)\nfinal_answer(total)\nprint('not reached')",
]


def test_code_agent_with_the_executor_runs_two_steps(engine: ReplEngine) -> None:
    executor = GenparkExecutor(engine)
    model = ScriptedModel(STEPS)
    agent = CodeAgent(tools=[lookup_price], model=model, executor=executor, verbosity_level=0)
    answer = agent.run("What do they cost with the discount?", additional_args={"discount": 0.2})

    assert answer == pytest.approx(2.6)
    assert CALLS == ["apple", "pear", "fig"]  # the real tool ran on the host, once per call
    assert "3 prices" in model.seen[1]  # step 1's output, as the model read it before step 2
    assert agent.python_executor is executor
    assert isinstance(executor, PythonExecutor)
    assert {v.name for v in engine.variables(executor.session)} >= {"prices", "total", "discount"}


def test_a_failing_step_is_an_observation_the_model_fixes(engine: ReplEngine) -> None:
    model = ScriptedModel(["print(undefined_name)", "final_answer('fixed')"])
    agent = CodeAgent(tools=[], model=model, executor=GenparkExecutor(engine), verbosity_level=0)
    assert agent.run("go") == "fixed"
    assert "NameError: name 'undefined_name' is not defined" in model.seen[1]


def test_the_executor_alone_keeps_state_and_ends_at_final_answer(engine: ReplEngine) -> None:
    executor = GenparkExecutor(engine, session="mine")
    agent = CodeAgent(tools=[lookup_price], model=ScriptedModel([]), executor=executor)
    executor.send_tools({**agent.tools})  # what CodeAgent sends: its tools and final_answer
    executor.send_variables({"items": ["fig", "pear"]})

    step = executor("cost = [lookup_price(i) for i in items]\ncost")
    assert (step.output, step.is_final_answer) == ("[2.0, 0.75]", False)
    step = executor("print('before')\nfinal_answer({'sum': sum(cost)})\nprint('after')")
    assert step.is_final_answer
    assert step.output == {"sum": 2.75}  # a copy of the plain data the code passed
    assert step.logs == "before\n"  # the code stopped at final_answer
    # Code that swallows final_answer's stop still ends the step there: no tool runs after the answer.
    step = executor("try:\n    final_answer(1)\nexcept Exception:\n    pass\nlookup_price('fig')")
    assert (step.output, step.is_final_answer) == (1, True)
    assert CALLS == ["fig", "pear"]  # the two calls of the first step only
    caught = executor("try:\n    lookup_price('kiwi')\nexcept ToolError as exc:\n    print(exc)")
    assert caught.logs.startswith("lookup_price: ")
    with pytest.raises(ExecutionFailed, match="ZeroDivisionError"):
        executor("1 / 0")
    executor.cleanup()
    assert "mine" not in engine.sessions()


def test_variables_with_a_name_that_is_not_one_are_refused() -> None:
    with ReplEngine(boundary="inprocess") as engine:
        executor = GenparkExecutor(engine)
        with pytest.raises(ValueError, match="not a variable name"):
            executor.send_variables({"not a name": 1})


def test_the_module_imports_without_smolagents() -> None:
    code = (
        "import sys\nsys.modules['smolagents'] = None\n"
        "from genpark_repl_tools import MissingDependency, ReplEngine\n"
        "from genpark_repl_tools.smolagents import GenparkExecutor\n"
        "try:\n    GenparkExecutor(ReplEngine(boundary='inprocess'))\n"
        "except MissingDependency as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "GenparkExecutor needs smolagents: install genpark-repl-tools[smolagents]\n"


@pytest.mark.slow
def test_the_example_runs_offline() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "code_mode_smolagents.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr
    # The tool ran once, on the host; step 2 used step 1's variable; final_answer's value came back.
    assert done.stdout.count("[host] find_orders('open')") == 1
    assert "3 open orders" in done.stdout
    assert "answer: {'big_open_orders': [3, 4], 'open_total': 325.5}\n" in done.stdout
    assert done.stdout.endswith("session variables: open_orders, big\n")
