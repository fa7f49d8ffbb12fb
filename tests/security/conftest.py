"""The security suite runs every attack under both restricted profiles, strict and standard, and on
both boundaries: in-process (the policy alone holds) and subprocess (the policy inside a sandboxed
worker). Set GENPARK_SECURITY_BOUNDARIES=inprocess to run one boundary only while iterating.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _security import PARAMS

from genpark_repl_tools import Limits, Policy, ReplEngine
from genpark_repl_tools.policy import runtime_for


@pytest.fixture(scope="module", params=PARAMS, ids=[f"{p}-{b}" for p, b in PARAMS])
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    policy, boundary = request.param
    with ReplEngine(policy=policy, boundary=boundary, limits=Limits(timeout_s=5)) as e:
        yield e


# Tests that look at the host process itself (its sys.modules, its objects): on the subprocess boundary
# the code runs in another process, so there is nothing of the host to look at.
HOST_PROCESS_ONLY = {
    "test_audit_hook.py::test_python_imports_allowed_modules_inside_restricted_code": (
        "checks the host's sys.modules"
    ),
}


@pytest.fixture(params=["strict", "standard"])
def sandboxed(request: pytest.FixtureRequest) -> Callable[[Callable[[], Any]], Any]:
    """Call a function as if restricted code were running in this context (in-process)."""
    runtime = runtime_for(Policy.preset(request.param))

    def call(fn: Callable[[], Any]) -> Any:
        token = runtime.enter()
        try:
            return fn()
        finally:
            runtime.exit(token)

    return call


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        key = f"{item.path.name}::{item.originalname}" if isinstance(item, pytest.Function) else ""
        reason = HOST_PROCESS_ONLY.get(key)
        if reason and "-subprocess" in item.name:
            item.add_marker(pytest.mark.skip(reason=f"in-process only: {reason}"))
