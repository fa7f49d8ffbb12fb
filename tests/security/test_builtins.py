"""Builtins: the dangerous ones are absent (with the reason given), the guarded ones check their input."""

from __future__ import annotations

import pytest
from _security import blocked, ok, refusal, run

from genpark_repl_tools import ReplEngine

REASONS = {
    "eval": "it runs code the audit never saw; compute the value directly",
    "exec": "it runs code the audit never saw; write the code directly",
    "compile": "it builds code the audit never saw; write the code directly",
    "globals": "it exposes the session namespace and builtins; use the variables by name",
    "locals": "it exposes frame internals; use the variables by name",
    "vars": "it exposes an object's __dict__; use getattr(obj, name) or dataclasses.asdict(obj)",
    "input": "there is no interactive input; put the data in the code or a variable",
    "breakpoint": "there is no debugger; print the values you need",
    "help": "there is no interactive help; read the documentation you know",
    "exit": "it would close the host's stdin; raise an exception or let the code end",
    "quit": "it would close the host's stdin; raise an exception or let the code end",
    "license": "it reads files outside the workspace",
}
CALLS = {
    "eval": "eval('1 + 1')",
    "exec": "exec('x = 1')",
    "compile": "compile('1', 'f', 'eval')",
    "globals": "globals()['__builtins__']",
    "locals": "locals()",
    "vars": "vars(object)",
    "input": "input()",
    "breakpoint": "breakpoint()",
    "help": "help(int)",
    "exit": "exit()",
    "quit": "quit()",
    "license": "license()",
}
BUILTINS_NAME = "__builtins__['open']"
DUNDER_IMPORT = "__import__('os')"
BUILD_CLASS = "__build_class__"
OPEN_STRICT = "open('/etc/passwd')"
ALIASED = "e = [eval][0]\ne('1')"


@pytest.mark.parametrize("name", sorted(CALLS))
def test_dangerous_builtins_are_refused_with_the_reason(engine: ReplEngine, name: str) -> None:
    assert blocked(run(engine, CALLS[name])) == (
        f"builtin '{name}' is not available under policy '{engine.policy.name}': {REASONS[name]} "
        f"(if '{name}' is your own variable, rename it)"
    )


@pytest.mark.parametrize(
    ("code", "name"),
    [(BUILTINS_NAME, "__builtins__"), (DUNDER_IMPORT, "__import__"), (BUILD_CLASS, "__build_class__")],
)
def test_reserved_names_are_refused(engine: ReplEngine, code: str, name: str) -> None:
    assert blocked(run(engine, code)) == (
        f"name '{name}' is not allowed under policy '{engine.policy.name}': names starting with '__' are "
        "reserved"
    )


def test_aliasing_a_refused_builtin_does_not_help(engine: ReplEngine) -> None:
    assert blocked(run(engine, ALIASED)).startswith(
        f"builtin 'eval' is not available under policy '{engine.policy.name}'"
    )


def test_a_variable_named_like_a_refused_builtin_works_within_its_cell(engine: ReplEngine) -> None:
    assert ok(run(engine, "eval = 5\neval + 1")).value == "6"


def test_the_refused_builtins_are_stubs_at_run_time(engine: ReplEngine) -> None:
    # A later cell cannot know `eval` was the session's own variable: the audit refuses it, and if
    # the name is reached anyway (here: deleted in the same cell) the stub says why.
    session = "builtin-stubs"
    engine.run("eval = 5", session=session)
    assert blocked(engine.run("eval + 1", session=session)).startswith("builtin 'eval' is not available")
    result = engine.run("eval = 5\ndel eval\neval('1')", session=session)
    assert (
        refusal(result)
        == f"builtin 'eval' is not available under policy '{engine.policy.name}': {REASONS['eval']}"
    )


def test_open_is_refused_under_strict() -> None:
    with ReplEngine(boundary="inprocess", policy="strict") as engine:
        assert blocked(run(engine, OPEN_STRICT)) == (
            "builtin 'open' is not available under policy 'strict': no file access under this policy; "
            "use io.StringIO for text in memory (if 'open' is your own variable, rename it)"
        )


def test_dir_without_an_argument_lists_only_public_names(engine: ReplEngine) -> None:
    session = "dir-names"
    engine.run("alpha = 1\n_hidden = 2", session=session)
    assert engine.run("dir()", session=session).value == "['alpha']"


def test_type_never_hands_out_a_metaclass(engine: ReplEngine) -> None:
    assert (
        ok(run(engine, "type(int) is type, type(type) is type, isinstance(int, type)")).value
        == "(True, True, True)"
    )
    assert refusal(run(engine, "import enum\ntype(enum.Enum)")) == (
        f"type() of class 'Enum' (its metaclass) is not allowed under policy '{engine.policy.name}'; "
        "use isinstance() checks"
    )


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("input = [3, 1, 2]\nsorted(input)", "[1, 2, 3]"),
        ("len('abc'), abs(-2), max([1, 5]), round(2.567, 1)", "(3, 2, 5, 2.6)"),
        ("list(zip(range(2), 'ab'))", "[(0, 'a'), (1, 'b')]"),
        ("isinstance(1, int), issubclass(bool, int), callable(len)", "(True, True, True)"),
        ("type(1) is int, type(1).__name__", "(True, 'int')"),
        ("type('Point', (), {'x': 1})().x", "1"),
        ("issubclass(type, type), isinstance(type, type)", "(True, True)"),
        ("list[int], type[int]", "(list[int], type[int])"),
        ("print('hi')", None),
        ("id(1) == id(1), hash('a') == hash('a')", "(True, True)"),
    ],
)
def test_ordinary_builtins_work(engine: ReplEngine, code: str, value: str | None) -> None:
    assert ok(run(engine, code)).value == value


STRING_ANNOTATION = "import typing\ndef f(x: '().__class__'):\n    pass\ntyping.get_type_hints(f)"


def test_string_annotations_are_not_evaluated(engine: ReplEngine) -> None:
    # typing evaluates string annotations with eval(): code the audit never saw.
    assert refusal(run(engine, STRING_ANNOTATION)) == (
        "running code built at run time (exec, eval, templates, string annotations) is not allowed under "
        "policy "
        f"'{engine.policy.name}'; the annotation uses the private name '__class__'; write the code directly"
    )
    assert ok(
        run(engine, "import typing\ndef f(x: int) -> str:\n    pass\ntyping.get_type_hints(f)")
    ).value == ("{'x': <class 'int'>, 'return': <class 'str'>}")
