"""Fixtures for the MCP tests over streamable HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _mcp_http import HttpServer, run_http_server


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One server for a test module: trusted policy, in-process boundary, small per-client limits."""
    tmp_path = tmp_path_factory.mktemp("mcp-http")
    options = ("--policy", "trusted", "--boundary", "inprocess", "--timeout", "30")
    limits = ("--max-calls-per-client", "1", "--max-sessions-per-client", "3", "--max-body-bytes", "65536")
    with run_http_server(tmp_path, *options, *limits) as server:
        yield server
