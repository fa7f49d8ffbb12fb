"""What the zygote does once so that each worker it forks does not: figures, the policy's rules."""

from __future__ import annotations

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
