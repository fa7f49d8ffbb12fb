"""A warm call on the container boundary goes down the subprocess boundary's straight line: session
table, worker client, wire; the launcher (the containers) is not on it. The trace and its rules are
tests/boundaries/test_request_path.py's, loaded from there."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_PATH = Path(__file__).resolve().parents[1] / "boundaries" / "test_request_path.py"
_spec = importlib.util.spec_from_file_location("_request_path_rules", _PATH)
assert _spec is not None and _spec.loader is not None
rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules)


def test_a_warm_container_run_goes_down_the_same_straight_line(make_engine: Any) -> None:
    engine = make_engine(policy="trusted")
    assert engine.run("warm = True", session="path").status == "ok"
    trace = rules.PathTrace()
    sys.setprofile(trace.profile)
    try:
        result = engine.run("print('out'); 2", session="path")
    finally:
        sys.setprofile(None)
    assert (result.status, result.value, result.stdout) == ("ok", "2", "out\n")
    assert trace.returns == []
    assert trace.edges <= rules.STRAIGHT, sorted(trace.edges - rules.STRAIGHT)
    assert (rules.TABLE, rules.CLIENT) in trace.edges
