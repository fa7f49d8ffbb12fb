"""LangChain tools for genpark-repl-tools: a Python REPL whose sessions follow the agent's thread.

    tools = GenparkReplToolkit(engine=ReplEngine(policy="standard")).get_tools()

For langgraph-codeact's `create_codeact`: `GenparkCodeExecutor(engine).eval_fn`.
See `langchain_genpark_repl.tools`, `langchain_genpark_repl.codeact` and integrations/langchain/README.md.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from . import tools as _tools
from .codeact import GenparkCodeExecutor
from .tools import *  # noqa: F403 - the public names are tools.__all__, listed once

__version__ = _metadata.version("langchain-genpark-repl")  # the one source is pyproject.toml

__all__ = [*_tools.__all__, "GenparkCodeExecutor", "__version__"]  # noqa: PLE0604 - a list of names, as the checker cannot see
