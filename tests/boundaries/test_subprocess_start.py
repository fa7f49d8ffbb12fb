"""What the zygote does once so that each worker it forks does not: figures, the policy's rules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genpark_repl_tools import Limits, ReplEngine, _rich
from genpark_repl_tools._rich import BACKEND
from genpark_repl_tools.policy import Policy, runtime_for
from genpark_repl_tools.policy._restricted import RestrictedRuntime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote forks")

FIGURE = (
    "import matplotlib\nimport matplotlib.pyplot as plt\n"
    "plt.plot([1, 2, 3])\nplt.show()\nmatplotlib.get_backend()"
)


@pytest.mark.parametrize("preload", [(), ("matplotlib",)], ids=["imported-by-the-code", "preloaded"])
def test_a_forked_workers_figures_are_headless_and_attached(preload: tuple[str, ...]) -> None:
    pytest.importorskip("matplotlib")
    # The zygote looked for matplotlib (or made the preloaded one headless) before it forked: the
    # worker's pyplot still draws with our backend, and the figure comes back.
    with ReplEngine(boundary="subprocess", preload=preload, limits=Limits(timeout_s=60)) as engine:
        for session in ("a", "b"):  # two workers forked from the same zygote
            result = engine.run(FIGURE, session)
            assert result.status == "ok", result.error
            assert result.value == repr(BACKEND)
            assert [a.mime_type for a in result.attachments] == ["image/png"]
            assert not any("headless" in note for note in result.notes), result.notes


def test_prepare_figures_leaves_a_failed_look_to_the_first_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> None:
        raise ValueError(f"no spec for {name}")

    monkeypatch.setattr(_rich._process, "environment_checked", False)
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.setattr(_rich.importlib.util, "find_spec", broken)
    _rich.prepare_figures()  # does not raise
    assert _rich._process.environment_checked is False  # the first execution looks again, and says so


def test_prepare_figures_does_what_the_first_run_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rich._process, "environment_checked", False)
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not _rich._import_watch])
    monkeypatch.setattr(_rich.importlib.util, "find_spec", lambda name: object())
    _rich.prepare_figures()
    assert _rich._process.environment_checked is True
    assert sys.meta_path[0] is _rich._import_watch


def test_a_workers_runtime_keeps_the_rules_and_names_its_workspace(tmp_path: Path) -> None:
    for name in ("standard", "strict"):
        base = runtime_for(Policy.preset(name))
        assert isinstance(base, RestrictedRuntime)
        worker = base.with_workspace(str(tmp_path))
        assert worker.policy == base.policy.with_workspace(tmp_path)
        assert worker.workspace == str(tmp_path)
        assert base.policy.workspace is None  # the zygote's own runtime is unchanged
        # Shared, not derived again; and the same as deriving them would give.
        assert worker.rules is base.rules
        derived = runtime_for(base.policy.with_workspace(tmp_path)).rules
        skip = {"policy", "key", "_import_refusals"}  # the policy object, its digest, a cache
        assert {k: v for k, v in vars(derived).items() if k not in skip} == {
            k: v for k, v in vars(worker.rules).items() if k not in skip
        }


WARM_UP_CHECK = """
import json, os, sys, threading
from genpark_repl_tools import Limits
from genpark_repl_tools._watchdog import watchdog
from genpark_repl_tools.boundaries._subprocess import _worker
from genpark_repl_tools.policy import Policy, runtime_for
if {pandas!r}:
    import pandas
ran = []
real = _worker.run_cell
_worker.run_cell = lambda *args, **kwargs: ran.append(real(*args, **kwargs)) or ran[-1]
workspace, cwd = sys.argv[1], os.getcwd()
_worker.warm_up(runtime_for(Policy.preset({policy!r})), Limits(), "subprocess", workspace)
result = ran[0]
print(json.dumps({{
    "status": result.status, "value": result.value, "count": result.execution_count,
    "threads": threading.active_count(), "watchdog": watchdog.started,
    "cwd": os.getcwd() == cwd, "files": os.listdir(workspace),
}}))
"""


@pytest.mark.parametrize("pandas", [False, True], ids=["plain", "pandas"])
@pytest.mark.parametrize("policy", ["standard", "trusted"])
def test_a_spares_warm_up_runs_a_first_call_and_leaves_the_process_single_threaded(
    tmp_path: Path, policy: str, pandas: bool
) -> None:
    # A spare runs it before its sandbox: the watchdog's thread must not start there (it would stay
    # outside the sandbox), nothing may be written, and the call itself must have worked (a failing
    # warm-up is silent by design, so only this shows that it warms anything).
    if pandas:
        pytest.importorskip("pandas")
    script = WARM_UP_CHECK.format(pandas=pandas, policy=policy)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == "ok", report
    assert "mean" in report["value"] if pandas else report["value"] == "[1, 2.5, 'x']"
    assert report["count"] == 1
    assert report["threads"] == 1 and report["watchdog"] is False
    assert report["cwd"] is True and report["files"] == []
