"""LangChain's standard unit suite for both tools (none of its tests overridden)."""

from __future__ import annotations

from typing import Any

from langchain_genpark_repl import GenparkInspectTool, GenparkReplTool, GenparkVariablesTool
from langchain_tests.unit_tests import ToolsUnitTests

from genpark_repl_tools import ReplEngine


class TestGenparkReplToolStandard(ToolsUnitTests):
    @property
    def tool_constructor(self) -> type[GenparkReplTool]:
        return GenparkReplTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"engine": ReplEngine(policy="trusted")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"code": "x = 6 * 7\nx"}


class TestGenparkVariablesToolStandard(ToolsUnitTests):
    @property
    def tool_constructor(self) -> type[GenparkVariablesTool]:
        return GenparkVariablesTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"engine": ReplEngine(policy="trusted")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {}


class TestGenparkInspectToolStandard(ToolsUnitTests):
    @property
    def tool_constructor(self) -> type[GenparkInspectTool]:
        return GenparkInspectTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        return {"engine": ReplEngine(policy="trusted")}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"name": "x"}
