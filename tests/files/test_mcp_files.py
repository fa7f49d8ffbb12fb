"""An MCP client seeds a session with upload_file and reads what the code produced through resources."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import BlobResourceContents, TextResourceContents

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.mcp_server import FILE_URI, create_server

BLOB = bytes(range(256)) * 4


def serve(engine: ReplEngine, scenario: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(30):
            async with Client(create_server(engine)) as client:
                await scenario(client)

    try:
        anyio.run(main)
    finally:
        engine.close()


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_upload_run_and_read_the_result_as_resources(boundary: str) -> None:
    async def scenario(client: Client) -> None:
        up = await client.call_tool("upload_file", {"name": "data.csv", "content": "a,b\n1,2\n"})
        assert not up.is_error, up.content
        assert up.structured_content is not None
        sid = up.structured_content["session_id"]
        assert up.structured_content["file"]["size"] == 8
        code = (
            "with open('data.csv') as f:\n    text = f.read()\n"
            "with open('upper.csv', 'w') as f:\n    n = f.write(text.upper())\n"
            f"with open('blob.bin', 'wb') as f:\n    m = f.write({BLOB!r})"
        )
        run = await client.call_tool("run_python", {"code": code, "session_id": sid})
        assert not run.is_error, run.content
        assert run.structured_content is not None
        files = run.structured_content["result"]["files"]
        assert [(f["name"], f["change"], f["size"]) for f in files] == [
            ("blob.bin", "created", len(BLOB)),
            ("upper.csv", "created", 8),
        ]
        listed = await client.list_resources()
        uris = {r.uri: r for r in listed.resources}
        text_uri = FILE_URI.format(session_id=sid, name="upper.csv")
        blob_uri = FILE_URI.format(session_id=sid, name="blob.bin")
        assert set(uris) == {FILE_URI.format(session_id=sid, name="data.csv"), text_uri, blob_uri}
        assert (uris[text_uri].mime_type, uris[text_uri].size) == ("text/csv", 8)
        text = (await client.read_resource(text_uri)).contents[0]
        assert isinstance(text, TextResourceContents) and text.text == "A,B\n1,2\n"
        blob = (await client.read_resource(blob_uri)).contents[0]
        assert isinstance(blob, BlobResourceContents) and base64.b64decode(blob.blob) == BLOB
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [FILE_URI]

    serve(ReplEngine(policy="standard", boundary=boundary), scenario)


def test_refusals_over_mcp() -> None:
    async def scenario(client: Client) -> None:
        bad = await client.call_tool("upload_file", {"name": "../x.txt", "content": "x"})
        assert bad.is_error
        assert bad.content[0].text.startswith("UnsafeFileName: file name '../x.txt' contains '..'")  # type: ignore[union-attr]
        up = await client.call_tool(
            "upload_file", {"name": "b.bin", "content": "AAEC", "content_base64": True}
        )
        assert up.structured_content is not None
        sid = up.structured_content["session_id"]
        listed = await client.call_tool("list_files", {"session_id": sid})
        assert listed.structured_content is not None
        assert [(f["name"], f["size"]) for f in listed.structured_content["files"]] == [("b.bin", 3)]
        with pytest.raises(MCPError, match="unknown session_id"):
            await client.read_resource(FILE_URI.format(session_id="s-nope", name="b.bin"))
        with pytest.raises(MCPError, match="FileNotFound"):
            await client.read_resource(FILE_URI.format(session_id=sid, name="missing.txt"))

    serve(ReplEngine(boundary="inprocess", policy="standard"), scenario)
