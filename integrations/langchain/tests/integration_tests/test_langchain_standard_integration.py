"""LangChain's standard integration suite for both tools (none of its tests overridden).

The engine runs in-process, so these need no network and no credentials.
"""

from __future__ import annotations

from typing import Any

from langchain_genpark_repl import GenparkInspectTool, GenparkReplTool, GenparkVariablesTool
from langchain_tests.integration_tests import ToolsIntegrationTests

from genpark_repl_tools import ReplEngine


class TestGenparkReplToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> type[GenparkReplTool]:
        return GenparkReplTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"engine": ReplEngine(policy="trusted")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"code": "import math\nprint('hello')\nmath.factorial(5)"}


class TestGenparkVariablesToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> type[GenparkVariablesTool]:
        return GenparkVariablesTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"engine": ReplEngine(policy="trusted")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {}


class TestGenparkInspectToolIntegration(ToolsIntegrationTests):
    @property
    def tool_constructor(self) -> type[GenparkInspectTool]:
        return GenparkInspectTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"engine": ReplEngine(policy="trusted")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"name": "x"}
