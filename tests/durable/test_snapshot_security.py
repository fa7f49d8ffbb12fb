"""A snapshot is data written by untrusted code: altered blobs are refused unread, and a crafted one
(valid HMAC: the session controls its own variables) cannot name anything the policy forbids."""

from __future__ import annotations

import builtins
import io
import json
import os
import pickle
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _durable_support import KEY, keyed_engine

from genpark_repl_tools import ReplEngine
from genpark_repl_tools._models import SnapshotManifest
from genpark_repl_tools.snapshot import SessionSnapshot, SnapshotAuthError, SnapshotRefused
from genpark_repl_tools.snapshot import _markers as markers


class Reduces:
    """Pickles as `func(*args)`: what a session class with its own __reduce__ would emit."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.func, self.args)

    def __call__(self) -> None:  # pickle wants the first item of a reduce tuple to be callable
        raise AssertionError("never called in the test process")


def crafted(value: Any, sources: dict[str, list[Any]] | None = None, key: bytes = KEY) -> SessionSnapshot:
    """A snapshot whose one variable `x` pickles as `value`, correctly signed with `key`."""
    payload = pickle.dumps(value, protocol=5)
    manifest = SnapshotManifest(
        session="default",
        created_at="2026-01-01T00:00:00Z",
        execution_count=1,
        policy="standard",
        python="3.11.0",
    )
    header = {
        "format": 1,
        "manifest": manifest.model_dump(mode="json"),
        "records": [["x", 0, len(payload), 0, 0]],
        "imports": {},
        "sources": sources or {},
        "bookkeeping": {},
    }
    return SessionSnapshot.sign(header, payload, [], key)


def attacks(marker: Path) -> dict[str, Any]:
    return {
        "os.system": Reduces(os.system, f"touch {marker}"),
        "subprocess.Popen": Reduces(subprocess.Popen, ["touch", str(marker)]),
        "builtins.open": Reduces(builtins.open, str(marker), "w"),
        "builtins.eval": Reduces(builtins.eval, f"__import__('os').system('touch {marker}')"),
        "builtins.exec": Reduces(builtins.exec, f"open({str(marker)!r}, 'w')"),
        "builtins.__import__": Reduces(builtins.__import__, "os"),
        "getattr-to-private": Reduces(getattr, object, "__subclasses__"),
        "pickle.loads": Reduces(pickle.loads, b"x"),
    }


@pytest.mark.parametrize("policy", ["strict", "standard"])
@pytest.mark.parametrize(
    "attack",
    [
        "os.system",
        "subprocess.Popen",
        "builtins.open",
        "builtins.eval",
        "builtins.exec",
        "builtins.__import__",
        "getattr-to-private",
        "pickle.loads",
    ],
)
def test_crafted_globals_are_refused(
    engines: list[ReplEngine], tmp_path: Path, policy: str, attack: str
) -> None:
    marker = tmp_path / "pwned"
    engine = keyed_engine(engines, policy)
    engine.run("kept = 41")
    with pytest.raises(SnapshotRefused, match="nothing was loaded"):
        engine.restore("default", crafted(attacks(marker)[attack]))
    assert not marker.exists()
    assert engine.run("kept + 1").value == "42"  # the session is as it was


@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_crafted_source_is_audited_again(engines: list[ReplEngine], tmp_path: Path, policy: str) -> None:
    marker = tmp_path / "pwned"
    filename = "<cell-000000000000>"
    source = f"import os\ndef f():\n    return os.system('touch {marker}')\n"
    value = Reduces(markers.function, filename, 0, "f", "f", None)
    engine = keyed_engine(engines, policy)
    with pytest.raises(SnapshotRefused, match="refused by policy"):
        engine.restore("default", crafted(value, {filename: [1, source]}))
    assert not marker.exists()


def test_a_crafted_call_of_an_allowed_method_meets_the_audit_hook(engines: list[ReplEngine]) -> None:
    """pathlib is allowed under standard, and Path.read_text is public: the call still runs under
    the session's audit hook, which refuses reading outside the workspace."""
    from pathlib import Path as RealPath

    read = Reduces(Reduces(getattr, RealPath("/etc/hostname"), "read_text"))
    engine = keyed_engine(engines, "standard")
    with pytest.raises(SnapshotRefused, match="refused by the policy"):
        engine.restore("default", crafted(read))
    with pytest.raises(SnapshotRefused, match="does not let a restore rebuild"):
        keyed_engine(engines, "strict").restore("default", crafted(read))


def test_crafted_closure_and_unknown_marker_are_refused(engines: list[ReplEngine]) -> None:
    engine = keyed_engine(engines, "standard")
    with pytest.raises(SnapshotRefused, match="no source"):
        engine.restore("default", crafted(Reduces(markers.function, "<cell-nope>", 0, "f", "f", (1, 2))))
    snapshot = crafted(Reduces(markers.cell))
    snapshot.payload = snapshot.payload.replace(b"\x8c\x04cell", b"\x8c\x04evil")
    snapshot.mac = SessionSnapshot.sign(
        __import__("json").loads(snapshot.header), snapshot.payload, [], KEY
    ).mac
    with pytest.raises(SnapshotRefused, match="unknown marker"):
        engine.restore("default", snapshot)


class _WithPersistentIds(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return "outside" if obj == "ref" else None


@pytest.mark.parametrize("policy", ["trusted", "standard"])
@pytest.mark.parametrize("after_a_failed_record", [False, True], ids=["first-reader", "recovery-reader"])
def test_persistent_ids_are_refused_by_both_readers(
    engines: list[ReplEngine], policy: str, after_a_failed_record: bool
) -> None:
    """Snapshots never use persistent ids: one in a crafted blob is refused, also by the reader that
    takes over after a record failed to rebuild."""
    records: list[bytes] = []
    if after_a_failed_record:
        records.append(pickle.dumps(Reduces(int, "not a number"), protocol=5))  # fails: ValueError
    out = io.BytesIO()
    _WithPersistentIds(out, protocol=5).dump(["ref"])
    records.append(out.getvalue())
    snapshot = crafted(None)
    header = json.loads(snapshot.header)
    header["records"] = [[f"v{i}", sum(map(len, records[:i])), len(r), 0, 0] for i, r in enumerate(records)]
    engine = keyed_engine(engines, policy)
    engine.run("kept = 41")
    with pytest.raises(SnapshotRefused, match="persistent ids"):
        engine.restore("default", SessionSnapshot.sign(header, b"".join(records), [], KEY))
    assert engine.run("kept + 1").value == "42"


def test_session_code_cannot_smuggle_a_reducer(engines: list[ReplEngine], tmp_path: Path) -> None:
    """A trusted session may define __reduce__ (it has full rights anyway); its snapshot restored
    under a restricted policy is refused, and the command never runs."""
    marker = tmp_path / "pwned"
    trusted = keyed_engine(engines, "trusted")
    code = (
        "import os\nclass E:\n    def __reduce__(self):\n"
        f"        return (os.system, ('touch {marker}',))\ne = E()\n"
    )
    assert trusted.run(code).status == "ok"
    snapshot = trusted.snapshot()
    assert "e" in {v.name for v in snapshot.manifest.saved}
    restricted = keyed_engine(engines, "standard")
    with pytest.raises(SnapshotRefused):
        restricted.restore("default", snapshot)
    assert not marker.exists()


def test_pickling_runs_session_code_under_its_guards(engines: list[ReplEngine]) -> None:
    """Pickling a list subclass calls its __iter__: that runs under the session's policy."""
    engine = keyed_engine(engines, "standard")
    code = (
        "class Bag(list):\n    def __iter__(self):\n        open('/etc/hostname').read()\n"
        "        return iter([])\nb = Bag([1])\nok = 1\n"
    )
    assert engine.run(code).status == "ok"
    snapshot = engine.snapshot()
    reasons = {s.name: s.reason for s in snapshot.manifest.not_saved}
    assert "b" in reasons and "not allowed" in reasons["b"]
    assert "ok" in {v.name for v in snapshot.manifest.saved}


# ---- authentication ---------------------------------------------------------------------------------


def _flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1 :]


def test_an_altered_blob_is_refused_and_never_unpickled(engines: list[ReplEngine], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    blob = crafted(Reduces(os.system, f"touch {marker}")).to_bytes()
    engine = keyed_engine(engines, "trusted")  # trusted would run the command if it unpickled the blob
    engine.run("kept = 1")
    for at in (20, len(blob) // 2, len(blob) - 40, len(blob) - 1):
        with pytest.raises(SnapshotAuthError, match="failed authentication"):
            engine.restore("default", _flip(blob, at))
    with pytest.raises(SnapshotAuthError):
        engine.restore("default", blob[:-5])
    with pytest.raises(SnapshotAuthError, match="not a session snapshot"):
        engine.restore("default", b"XXXXXXXX" + blob[8:])
    assert not marker.exists()
    assert engine.run("kept").value == "1"
    engine.restore("default", blob)  # the unaltered blob does unpickle here: the check above was real
    assert marker.exists()


def test_a_snapshot_made_with_another_key_is_refused(engines: list[ReplEngine]) -> None:
    maker = keyed_engine(engines, "standard")
    maker.run("x = [1, 2]")
    snapshot = maker.snapshot()
    other = ReplEngine(boundary="inprocess", policy="standard", snapshot_key=b"another-key-0123456789")
    engines.append(other)
    with pytest.raises(SnapshotAuthError):
        other.restore("default", snapshot.to_bytes())


def test_altered_out_of_band_buffer_is_refused(engines: list[ReplEngine]) -> None:
    pytest.importorskip("numpy")
    maker = keyed_engine(engines, "standard")
    maker.run("import numpy as np\na = np.zeros(1000)")
    snapshot = maker.snapshot()
    assert snapshot.buffers
    snapshot.buffers[0] = b"\x01" + bytes(snapshot.buffers[0])[1:]
    with pytest.raises(SnapshotAuthError):
        keyed_engine(engines, "standard").restore("default", snapshot)


def test_keys_must_be_long_enough_and_stores_need_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from genpark_repl_tools.stores import SQLiteStore

    monkeypatch.delenv("GENPARK_REPL_SNAPSHOT_KEY", raising=False)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ReplEngine(boundary="inprocess", snapshot_key=b"short").snapshot()
    with SQLiteStore(tmp_path / "s.db") as store, pytest.raises(ValueError, match="snapshot_key"):
        ReplEngine(boundary="inprocess", store=store)
