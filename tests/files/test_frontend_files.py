"""Files through every frontend: seeded sessions, produced files in the artifact / raw output, the same
words as the core's tool layer, and the CLI's --upload / --download / :files / :download."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_genpark_repl import GenparkReplToolkit
from llama_index.tools.genpark_repl import GenparkReplToolSpec

from genpark_repl_tools import ReplEngine, tools
from genpark_repl_tools.cli import main, repl

CSV = b"city,temp\nOslo,4\nLima,19\n"
WRITE = (
    "with open('data.csv') as f:\n    text = f.read()\n"
    "with open('upper.csv', 'w') as f:\n    n = f.write(text.upper())"
)


def test_langchain_toolkit_seeds_each_thread_and_lists_what_a_run_wrote() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        toolkit = GenparkReplToolkit(engine=engine, files={"data.csv": CSV}, include_files=True)
        by_name = {t.name: t for t in toolkit.get_tools()}
        assert set(by_name) == {
            "run_python",
            "list_variables",
            "inspect_variable",
            "list_files",
            "download_file",
        }
        config: Any = {"configurable": {"thread_id": "t1"}}
        call = {"name": "run_python", "args": {"code": WRITE}, "id": "c1", "type": "tool_call"}
        message = by_name["run_python"].invoke(call, config)
        assert isinstance(message, ToolMessage) and message.status == "success", message.content
        assert [(f["name"], f["size"]) for f in message.artifact["files"]] == [("upper.csv", len(CSV))]
        assert "Files: wrote upper.csv (25 B)" in message.content
        listed = by_name["list_files"].invoke(
            {"name": "list_files", "args": {}, "id": "c2", "type": "tool_call"}, config
        )
        assert listed.content == tools.list_files(engine, "t1").text
        assert "data.csv  25 B  text/csv" in listed.content
        read = by_name["download_file"].invoke(
            {"name": "download_file", "args": {"name": "upper.csv"}, "id": "c3", "type": "tool_call"}, config
        )
        assert read.content == "upper.csv (25 B, text/csv):\n" + CSV.decode().upper()
        assert "content_base64" not in read.artifact  # bytes only on request
        assert engine.download("t1", "upper.csv") == CSV.upper()
        # Another thread gets its own copy of the seed files, not t1's outputs.
        other: Any = {"configurable": {"thread_id": "t2"}}
        by_name["list_files"].invoke(
            {"name": "list_files", "args": {}, "id": "c4", "type": "tool_call"}, other
        )
        assert [f.name for f in engine.files("t2")] == ["data.csv"]
        missing = by_name["download_file"].invoke(
            {"name": "download_file", "args": {"name": "../x"}, "id": "c5", "type": "tool_call"}, other
        )
        assert missing.status == "error" and missing.content.startswith("UnsafeFileName: ")


def test_llamaindex_spec_seeds_the_session_and_reports_files_in_raw_output() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        spec = GenparkReplToolSpec(engine, session="li", files={"data.csv": CSV}, include_files=True)
        by_name = {t.metadata.name: t for t in spec.to_tool_list()}
        assert set(by_name) == {
            "run_python",
            "list_variables",
            "inspect_variable",
            "list_files",
            "download_file",
        }
        assert tools.LIST_FILES.description in (by_name["list_files"].metadata.description or "")
        output = by_name["run_python"].call(code=WRITE)
        assert not output.is_error, output.content
        assert [(f["name"], f["size"]) for f in output.raw_output["files"]] == [("upper.csv", len(CSV))]
        listed = by_name["list_files"].call()
        assert listed.content == tools.list_files(engine, "li").text
        read = by_name["download_file"].call(name="upper.csv")
        assert read.raw_output["text"] == CSV.decode().upper()


def test_cli_run_uploads_and_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_bytes(CSV)
    (tmp_path / "job.py").write_text(WRITE)
    code = main(
        ["run", "--upload", "data.csv", "--download", "upper.csv", "--download", "nope.txt", "job.py"]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "Files: wrote upper.csv (25 B)" in captured.out
    assert f"Saved file: {tmp_path / 'upper.csv'}" in captured.err
    assert "Cannot download nope.txt: no file 'nope.txt' in the workspace" in captured.err
    assert (tmp_path / "upper.csv").read_bytes() == CSV.upper()
    assert main(["run", "--upload", "missing.csv", "job.py"]) == 2
    assert "cannot upload missing.csv" in capsys.readouterr().err


def test_cli_repl_files_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_bytes(CSV)
    engine = ReplEngine(boundary="inprocess", policy="standard")
    lines = (
        ":upload data.csv\n:files\nwith open('out.txt', 'w') as f: f.write('hey')\n\n"
        ":download out.txt\n:download ../x\n"
    )
    out = io.StringIO()
    assert repl(engine, stdin=io.StringIO(lines), stdout=out, downloads=["data.csv"]) == 0
    text = out.getvalue()
    assert "Uploaded data.csv." in text
    assert "Files (1):\ndata.csv  25 B  text/csv" in text
    assert "Files: wrote out.txt (3 B)" in text
    assert f"Saved file: {tmp_path / 'out.txt'}" in text
    assert "Cannot download ../x: file name '../x' contains '..'" in text
    assert f"Saved file: {tmp_path / 'data.2.csv'}" in text  # on leaving; never overwrites
    assert (tmp_path / "out.txt").read_text() == "hey"
