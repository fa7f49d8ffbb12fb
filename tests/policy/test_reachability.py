"""The reachability audit: nothing reachable from a restricted session's builtins and module views
hands code more than its policy grants (see _reachability.py for what counts as a route).

It fails when a new dependency version opens a route: the walk runs against whatever is installed.
The walker's own tests show it finds each kind of route when one is opened on purpose.
"""

from __future__ import annotations

import string
import sys
import threading
import typing
from typing import Any

import pytest
from _reachability import REVIEWED, Walk, reviewed_ids, session_roots, walk

from genpark_repl_tools.policy import Policy

# The walk touches every public attribute, deprecated aliases included (numpy.linalg.linalg on some
# versions warns when read): a warning on the way is not a route.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("policy", [Policy.strict(), Policy.standard()], ids=["strict", "standard"])
def test_no_route_is_reachable(policy: Policy) -> None:
    walker, findings = walk(policy)
    assert len(walker.seen) > 1000  # the walk did reach the modules
    assert [str(f) for f in findings] == []


def test_the_standard_walk_reaches_the_data_stack() -> None:
    pytest.importorskip("numpy")
    walker, _ = walk(Policy.standard())
    import numpy

    assert id(numpy.ndarray) in walker.seen


# ---- the walker finds what it is meant to find --------------------------------------------------------


def frame_depth_api(expr: str, level: int = 0) -> Any:
    return sys._getframe(level + 1).f_locals.get(expr)


_setting = 0
_registry: dict[str, Any] = {}


def global_setter(value: int) -> None:
    global _setting
    _setting = value


def registry_setter(name: str, value: Any) -> None:
    _registry[name.lower()] = value


_lazy: Any = None


def lazy_import() -> Any:
    global _lazy  # the pattern under test: a module imported on first use
    if _lazy is None:
        from json import dumps as _lazy
    return _lazy


def lazy_import_then_setter(value: int) -> None:
    global _lazy, _setting  # the lazy import does not hide the setter beside it
    import json as _lazy

    _setting = value


def masks_its_own(data: Any, mask: Any) -> None:
    data[mask] = 0.0  # a local container and key, loaded by one instruction on Python 3.13+


class _Permissive:
    """Guards that allow every write: the route a forwarding setter opens when nothing checks it."""

    def __init__(self, guards: Any) -> None:
        self.rules = guards.rules
        self.getattr = guards.getattr

    def check_target(self, obj: Any, name: str | None = None) -> None:
        return None


def opened(roots: dict[str, Any], guards: Any = None) -> set[tuple[str, str]]:
    real_guards, _ = session_roots(Policy.strict())
    walker = Walk(guards or real_guards, roots, reviewed_ids())
    return {(f.kind, f.path) for f in walker.run()}


def test_the_walker_finds_a_real_module() -> None:
    assert ("module", "leak['json']") in opened({"leak": {"json": sys.modules["json"]}})


def test_the_walker_finds_a_real_module_behind_attributes() -> None:
    class Holder:
        helper = sys.modules["os"]

    assert ("module", "holder.helper") in opened({"holder": Holder})


def test_the_walker_finds_frames_and_entry_points() -> None:
    found = opened({"frame": sys._getframe(), "runner": exec, "load": __import__, "code": compile})
    assert {("frame", "frame"), ("entry", "runner"), ("entry", "load"), ("entry", "code")} <= found


def test_the_walker_finds_stack_walkers_and_global_setters() -> None:
    found = opened({"api": frame_depth_api, "setter": global_setter, "registry": registry_setter})
    assert {("frame-depth", "api"), ("global-setter", "setter"), ("global-setter", "registry")} <= found


def test_the_walker_tells_lazy_imports_and_local_writes_from_global_setters() -> None:
    found = opened({"lazy": lazy_import, "both": lazy_import_then_setter, "own": masks_its_own})
    assert ("global-setter", "both") in found
    assert not any(path in ("lazy", "own") for _, path in found)


def test_the_walker_reads_routed_names_through_the_guards() -> None:
    class Holder:
        helper = sys.modules["os"]
        parser = sys.modules["posixpath"]  # the guards refuse reading a real module by a routed name

    found = opened({"holder": Holder})
    assert ("module", "holder.helper") in found
    assert not any(path.startswith("holder.parser") for _, path in found)


def test_the_walker_finds_pandas_expression_apis_handed_out_unguarded() -> None:
    pd = pytest.importorskip("pandas")
    found = opened({"eval": pd.eval, "query": pd.DataFrame.query, "df_eval": pd.DataFrame.eval})
    assert {("frame-depth", "eval"), ("frame-depth", "query"), ("frame-depth", "df_eval")} <= found


def test_the_walker_finds_known_setters_of_library_state() -> None:
    import calendar
    import random

    found = opened({"seed": random.seed, "weekday": calendar.setfirstweekday})
    assert {("global-setter", "seed"), ("global-setter", "weekday")} <= found
    pd = pytest.importorskip("pandas")
    assert ("global-setter", "set_option") in opened({"set_option": pd.set_option})


def test_the_walker_finds_format_capable_wrappers() -> None:
    class Mine(string.Formatter):
        pass

    found = opened({"formatter": string.Formatter, "mine": Mine(), "ok": "{}"})
    assert {("format", "formatter"), ("format", "mine")} <= found
    assert not any(path == "ok" for _, path in found)


def test_the_walker_finds_shared_containers() -> None:
    import calendar

    assert ("shared-container", "table") in opened({"table": calendar.HTMLCalendar.cssclasses})
    assert not any(path == "mine" for _, path in opened({"mine": ["a"]}))


def test_the_walker_finds_setters_of_module_level_objects() -> None:
    ma = pytest.importorskip("numpy.ma")

    class Display:
        def __init__(self) -> None:
            self.text = "--"

        def set_text(self, text: str) -> None:
            self.text = text

    mine = Display()  # not held by a module: the session's own
    found = opened({"option": ma.masked_print_option, "mine": mine})
    assert ("shared-setter", "option.set_display") in found
    assert ("shared-setter", "option.enable") in found
    assert not any(path.startswith("mine") for _, path in found)
    assert ("shared-setter", "option.display") not in found  # a reader


def test_the_walker_finds_locks_that_block_for_ever() -> None:
    assert ("lock", "lock") in opened({"lock": threading.Lock()})


def test_the_walker_finds_writes_that_pass_on_when_unchecked() -> None:
    real_guards, _ = session_roots(Policy.strict())
    alias = {"alias": typing.Sequence}
    assert ("host-write", "alias") in opened(alias, _Permissive(real_guards))
    assert ("host-write", "alias") not in opened(alias)  # the real guards refuse those writes


def test_reviewed_routes_resolve_by_identity() -> None:
    import uuid

    ids = reviewed_ids()
    assert id(uuid.getnode) in ids
    assert all(reason for reason in REVIEWED.values())
