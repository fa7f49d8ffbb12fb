"""Annotations read lazily (Python 3.14+): annotationlib makes a function of an `__annotate__`
function's code with globals of its own to read annotations as forward references or as strings.

The hook lets it do so for the session's own code when those globals carry the session's builtins
(typing.NamedTuple, TypedDict and dataclasses with forward references), and for a library's code while
the library is imported (numpy's TypedDicts). It refuses it for host code the session hands over, and
for the session's code with globals that lack builtins (annotations read as strings): a function made
so gets the builtins of annotationlib's module, the host's real `__import__` and `__build_class__`.
The hook-level cases hold annotationlib through a test-only back door, as if the first layers (which
refuse importing it and reading `__annotate__`) had been bypassed.
"""

from __future__ import annotations

import sys

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import Limits, ReplEngine

LAZY = sys.version_info >= (3, 14)

# Unquoted forward references are only valid where annotations are evaluated lazily.
LATER = "Later" if LAZY else "'Later'"
FORWARD_REFERENCES = f"""
import dataclasses, typing
class N(typing.NamedTuple):
    a: 'Later'
    b: int = 0
class D(typing.TypedDict):
    a: {LATER}
@dataclasses.dataclass
class P:
    x: {LATER}
    y: int = 0
(N(1), D(a=1), P(1))
"""


def test_classes_with_forward_references_work(engine: ReplEngine) -> None:
    assert ok(run(engine, FORWARD_REFERENCES)).value == "(N(a=1, b=0), {'a': 1}, P(x=1, y=0))"


@pytest.mark.skipif(not LAZY, reason="annotations are read as strings from Python 3.14")
def test_reading_the_sessions_annotations_as_strings_is_refused(engine: ReplEngine) -> None:
    code = "import typing\nclass C:\n    a: int\ntyping.get_type_hints(C, format=4)"  # Format.STRING
    message = refusal(run(engine, code))
    assert "reading annotations as strings" in message
    assert "typing.get_type_hints(obj)" in message


# What the session's cell does with the back door: `al` is annotationlib, `host` a host function.
BACK_DOOR = """
def annotations_of(format, /):
    if format != 1 and format != 2:  # VALUE and VALUE_WITH_FAKE_GLOBALS, as the compiler's
        raise NotImplementedError
    return {'a': Later}
def importing(format, /):
    if format != 1 and format != 2:
        raise NotImplementedError
    import json  # run with the builtins of annotationlib's module, by the host's __import__
    return {'a': json}
outcomes = {}
for name, call in [
    ('own, forward references', lambda: al.call_annotate_function(annotations_of, al.Format.FORWARDREF)),
    ('own, as strings', lambda: al.call_annotate_function(importing, al.Format.STRING)),
    ('host, forward references', lambda: al.call_annotate_function(host, al.Format.FORWARDREF)),
]:
    try:
        outcomes[name] = repr(call())
    except PermissionError as exc:
        outcomes[name] = 'refused: ' + str(exc)
outcomes
"""


def _host_annotate() -> object:
    namespace: dict[str, object] = {}
    # Compiled here without this module's `from __future__ import annotations`: evaluated lazily.
    exec(compile("def f(a: int) -> None:\n    pass\n", "<host>", "exec", dont_inherit=True), namespace)
    return namespace["f"].__annotate__  # type: ignore[attr-defined]


@pytest.mark.skipif(not LAZY, reason="annotationlib exists from Python 3.14")
@pytest.mark.parametrize("policy", ["strict", "standard"])
def test_annotationlib_runs_only_the_sessions_code_with_the_sessions_builtins(policy: str) -> None:
    import annotationlib  # type: ignore[import-not-found,unused-ignore]

    with ReplEngine(boundary="inprocess", policy=policy, limits=Limits(timeout_s=10)) as engine:
        ok(engine.run("x = 1", session="s"))
        namespace = engine.boundary._sessions["s"].namespace  # type: ignore[attr-defined]
        namespace["al"] = annotationlib  # the test-only back door
        namespace["host"] = _host_annotate()
        outcomes = eval(ok(engine.run(BACK_DOOR, session="s")).value or "{}")
    assert outcomes["own, forward references"] == "{'a': ForwardRef('Later')}"
    assert outcomes["own, as strings"].startswith("refused: reading annotations as strings")
    assert outcomes["host, forward references"].startswith("refused: creating functions from code objects")
