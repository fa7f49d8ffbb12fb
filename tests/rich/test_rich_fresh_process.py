"""What happens to a fresh host process: nothing imported or changed until needed, never a window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from genpark_repl_tools._rich import BACKEND

pytest.importorskip("matplotlib")

UNUSED = r"""
import json, os, sys
import genpark_repl_tools
from genpark_repl_tools import ReplEngine
env_after_import = os.environ.get("MPLBACKEND")
with ReplEngine(boundary="inprocess", policy="trusted") as engine:
    engine.run("rows = [{'a': i} for i in range(10_000)]\nrows")
    engine.run("class DataFrame:\n    shape = (2, 2)\n    def __repr__(self):\n        return 'fake'\n"
               "DataFrame.__module__ = 'pandas.core.frame'\nfake = DataFrame()\nfake")
    engine.run("class ndarray:\n    shape = (3,)\n    def __repr__(self):\n        return 'arr'\n"
               "ndarray.__module__ = 'numpy'\narr = ndarray()\narr")
    engine.run("print('hi')\n1 / 0")
    engine.variables()
    info = engine.inspect("fake")
    arr = engine.run("arr")
print(json.dumps({
    "loaded": [m for m in ("numpy", "pandas", "matplotlib") if m in sys.modules],
    "env_after_import": env_after_import,
    "env_after_runs": os.environ.get("MPLBACKEND"),
    "fake_repr": info.repr,
    "arr_value": arr.value,
}))
"""

GUI_REQUESTED = r"""
import json, sys
from genpark_repl_tools import ReplEngine
with ReplEngine(boundary="inprocess", policy="trusted") as engine:
    result = engine.run(
        "import matplotlib\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
        "fig = plt.figure()\nfig.show()\nmatplotlib.get_backend()"
    )
print(json.dumps({"status": result.status, "value": result.value, "stderr": result.stderr,
                  "images": len(result.attachments), "tk": "tkinter" in sys.modules}))
"""

HOST_CHOSE = r"""
import json, sys
import matplotlib
matplotlib.use(sys.argv[1])
from genpark_repl_tools import ReplEngine
with ReplEngine(boundary="inprocess", policy="trusted") as engine:
    result = engine.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])")
import matplotlib.pyplot as plt
print(json.dumps({"status": result.status, "backend": matplotlib.get_backend(),
                  "images": [(a.mime_type, a.width, a.height) for a in result.attachments],
                  "open": plt.get_fignums()}))
"""


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "DISPLAY")}
    environ.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def test_nothing_is_imported_when_unused_and_import_changes_nothing() -> None:
    out = _run(UNUSED)
    assert out["loaded"] == []
    assert out["env_after_import"] is None
    # Runs leave the host's environment alone (pyplot is made headless without MPLBACKEND).
    assert out["env_after_runs"] is None
    # Look-alike types are described by their own repr, without a crash.
    assert (out["fake_repr"], out["arr_value"]) == ("fake", "arr")


def test_a_gui_backend_requested_by_the_environment_is_never_used() -> None:
    out = _run(GUI_REQUESTED, env={"MPLBACKEND": "TkAgg", "DISPLAY": ":99"})
    assert out == {"status": "ok", "value": repr(BACKEND), "stderr": "", "images": 2, "tk": False}


def test_a_gui_backend_the_host_chose_is_switched_before_the_cell() -> None:
    out = _run(HOST_CHOSE, "TkAgg", env={"DISPLAY": ":99"})
    assert (out["status"], out["backend"], out["open"]) == ("ok", BACKEND, [])
    assert out["images"] == [["image/png", 640, 480]]


def test_a_headless_backend_the_host_chose_is_kept_and_figures_are_still_png() -> None:
    out = _run(HOST_CHOSE, "svg")
    assert (out["status"], out["backend"], out["open"]) == ("ok", "svg", [])
    assert out["images"] == [["image/png", 640, 480]]


NO_AUDIT_HOOK = r"""
import json, sys
added = []
real = sys.addaudithook
sys.addaudithook = lambda hook: (added.append(getattr(hook, "__qualname__", repr(hook))), real(hook))[1]
from genpark_repl_tools import ReplEngine
with ReplEngine(boundary="inprocess", policy="trusted") as engine:
    engine.run("x = 1")
    result = engine.run("import matplotlib\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                        "matplotlib.get_backend()")
print(json.dumps({"status": result.status, "value": result.value, "images": len(result.attachments),
                  "hooks": added}))
"""


def test_pyplot_imported_by_a_cell_is_made_headless_without_an_audit_hook() -> None:
    # An audit hook would be called for every audit event of the host process from then on.
    out = _run(NO_AUDIT_HOOK, env={"MPLBACKEND": "TkAgg", "DISPLAY": ":99"})
    assert out == {"status": "ok", "value": repr(BACKEND), "images": 1, "hooks": []}


NO_ID_EVENTS = r"""
import json, sys
from genpark_repl_tools import ReplEngine
seen = []
with ReplEngine(boundary="inprocess", policy="trusted") as engine:
    engine.run("x = 1")
    sys.addaudithook(lambda event, args: seen.append(event) if event == "builtins.id" else None)
    result = engine.run("x = 2\ny = x * 2\ns = 'text'\ny")
described = [v.name for v in result.changes.created + result.changes.rebound]
print(json.dumps({"value": result.value, "described": described, "ids": len(seen)}))
"""


def test_describing_plain_values_raises_no_audit_event() -> None:
    # id() is an audit event: under a restricted policy its hook judges each one. Plain values (a
    # trailing int, the variables a cell bound) are described without calling it.
    out = _run(NO_ID_EVENTS)
    assert out == {"value": "4", "described": ["s", "y", "x"], "ids": 0}
