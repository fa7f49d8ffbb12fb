"""LlamaIndex tools for genpark-repl-tools: run Python in a session that follows the agent's conversation.

from genpark_repl_tools import ReplEngine
from llama_index.tools.genpark_repl import GenparkReplToolSpec

tools = GenparkReplToolSpec(engine=ReplEngine(policy="standard")).to_tool_list()
"""

from __future__ import annotations

from llama_index.tools.genpark_repl.base import STORE_KEY, GenparkReplStreamEvent, GenparkReplToolSpec
from llama_index.tools.genpark_repl.code import GenparkCodeExecutor

__all__ = ["STORE_KEY", "GenparkCodeExecutor", "GenparkReplStreamEvent", "GenparkReplToolSpec"]
