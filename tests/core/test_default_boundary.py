"""The default boundary: sandboxed wherever the OS offers it, in-process elsewhere with a warning.

A model's code is untrusted by default, so `ReplEngine()` (and every frontend that makes one) runs it
in a worker process on Linux; sessions beyond the live workers hibernate to the engine's own
temporary store instead of being refused.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest

from genpark_repl_tools import ReplEngine

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the sandboxed default is Linux's"
)


def test_the_default_engine_runs_code_outside_the_host_process() -> None:
    with ReplEngine(policy="trusted") as engine:
        assert engine.boundary.name == "subprocess"
        assert engine.run("import os\nos.getpid()").value != str(os.getpid())
        # The explicit choice is still there, and silent.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with ReplEngine(boundary="inprocess", policy="trusted") as inprocess:
                assert inprocess.run("import os\nos.getpid()").value == str(os.getpid())


def test_the_readme_example_gives_the_same_answer() -> None:
    with ReplEngine() as engine:  # policy "standard", as the README's
        engine.run("import statistics\nprices = [12.5, 14.0, 13.25]", session="user-42")
        result = engine.run("statistics.mean(prices)", session="user-42")
    assert (result.status, result.value) == ("ok", "13.25")
    assert result.to_observation() == "OK\nOut: 13.25"


def test_sessions_beyond_the_live_workers_hibernate_and_come_back() -> None:
    with ReplEngine(max_workers=2) as engine:
        store = engine.store
        assert store is not None
        folder = Path(store.path)  # type: ignore[attr-defined]
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        for i in range(7):
            assert engine.run(f"x = {i}\nname = 's{i}'", session=f"s{i}").status == "ok"
        assert len(store.list()) >= 5  # at most two are live; the rest wait in the store
        for i in range(7):
            assert engine.run("x, name", session=f"s{i}").value == repr((i, f"s{i}"))
        # A closed session is gone, not hibernated: its name starts over.
        engine.close("s0")
        assert engine.run("'x' in dir()", session="s0").value == "False"
    assert not folder.exists()  # the store goes with the engine


def test_a_store_of_ones_own_is_used_as_given(tmp_path: Path) -> None:
    from genpark_repl_tools.stores import SQLiteStore

    with SQLiteStore(tmp_path / "s.db") as store, ReplEngine(store=store, snapshot_key=b"k" * 32) as engine:
        assert engine.store is store
        engine.run("x = 1", session="kept")
    with SQLiteStore(tmp_path / "s.db") as store:
        assert [entry.session for entry in store.list()] == ["kept"]  # saved on close, and still there


def test_elsewhere_in_process_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.warns(RuntimeWarning, match=r"no sandboxed boundary on darwin .* boundary='inprocess'"):
        engine = ReplEngine()
    with engine:
        assert engine.boundary.name == "inprocess"
        assert engine.store is None
        assert engine.run("1 + 1").value == "2"


def test_the_framework_toolkits_default_to_the_sandbox() -> None:
    llama = pytest.importorskip("llama_index.tools.genpark_repl")
    spec = llama.GenparkReplToolSpec()
    try:
        assert spec.engine.boundary.name == "subprocess"
    finally:
        spec.engine.close()


def test_a_private_tmpdir_does_not_stop_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import tempfile

    private = tempfile.mkdtemp(prefix="genpark-private-")  # 0700: closed to any other user
    monkeypatch.setattr(tempfile, "tempdir", private)  # what $TMPDIR=private gives
    try:
        with ReplEngine(policy="trusted") as engine:
            assert engine.run("open('kept.txt', 'w').write('x')").status == "ok"
            place = engine.boundary.session_workspace("default")
            assert place is not None and (place.path / "kept.txt").exists()
            if place.owner is not None:  # workers run as another user, who cannot enter `private`
                assert not str(place.path).startswith(private)
    finally:
        shutil.rmtree(private, ignore_errors=True)
