"""`genpark-repl store list|show|delete --store SPEC`: a view of a session store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine
from genpark_repl_tools.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from genpark_repl_tools.stores import SQLiteStore

KEY = b"cli-store-tests-key-0123456789abcdef"


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "sessions.db"
    with (
        SQLiteStore.from_path(path) as store,
        ReplEngine(boundary="inprocess", store=store, snapshot_key=KEY) as engine,
    ):
        engine.run("import math\nradii = [1, 2]\ngen = (i for i in radii)", session="conv-1")
        engine.run("x = 1", session="conv-2")
        engine.run("x = 2", session="conv-2")
    return f"sqlite:{path}"


def test_list(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "list", "--store", spec]) == EXIT_OK
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["SESSION", "VERSION", "SIZE", "AGE"]
    assert lines[1].split()[:2] == ["conv-1", "1"] and lines[2].split()[:2] == ["conv-2", "2"]
    assert lines[-1] == "2 session(s)"
    assert main(["store", "list", "--store", spec, "--json"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)
    assert [(r["session"], r["version"]) for r in rows] == [("conv-1", 1), ("conv-2", 2)]
    assert all(r["size"] > 0 and r["age_s"] >= 0 for r in rows)


def test_show(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "show", "conv-1", "--store", spec]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("session conv-1: version 1")
    assert "saved      radii: list" in out
    assert "import     math = math" in out
    assert "not saved  gen: generator (a generator" in out
    assert "read without checking the snapshot key" in out
    assert main(["store", "show", "conv-1", "--store", spec, "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert [v["name"] for v in data["manifest"]["saved"]] == ["radii"]
    assert data["authenticated"] is False


def test_delete(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "delete", "conv-1", "--store", spec]) == EXIT_OK
    assert capsys.readouterr().out == "deleted conv-1\n"
    assert main(["store", "delete", "conv-1", "--store", spec]) == EXIT_ERROR
    assert "no session 'conv-1'" in capsys.readouterr().err
    assert main(["store", "show", "conv-1", "--store", spec]) == EXIT_ERROR
    main(["store", "list", "--store", spec, "--json"])
    assert [r["session"] for r in json.loads(capsys.readouterr().out)] == ["conv-2"]


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "show", "--store", f"sqlite:{tmp_path / 'x.db'}"]) == EXIT_USAGE
    assert "needs a session ID" in capsys.readouterr().err
    assert main(["store", "list", "--store", "mongodb://nope"]) == EXIT_USAGE
    assert "unknown store" in capsys.readouterr().err
