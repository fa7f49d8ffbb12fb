"""The describing primitives themselves, on objects only trusted code could make (a metaclass, a
`__signature__` attribute, a `__text_signature__`): what they read is `type`'s own slots and code
objects, never the object's or its metaclass's code, and never text evaluated in a host module."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import math
import re
import typing
from typing import Any

import pytest

import genpark_repl_tools._limits as planted_module
from genpark_repl_tools._introspect import describe, signature_text, type_name, unrepresentable

SECRET = "unit-secret-51be07"
LIMIT = 200


@pytest.fixture(autouse=True)
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planted_module, "HOST_HANDS_UNIT_SECRET", SECRET, raising=False)


class Calls:
    """Records every call the metaclass below receives."""

    seen: typing.ClassVar[list[str]] = []


class Meta(type):
    def __getattribute__(cls, name: str) -> Any:
        Calls.seen.append(name)
        return type.__getattribute__(cls, name)

    @property
    def __name__(cls) -> str:  # type: ignore[override]
        Calls.seen.append("__name__ property")
        raise RuntimeError("the metaclass ran")


class Governed(metaclass=Meta):
    def __init__(self, x: int, y: int = 2) -> None:
        self.x = x


def test_a_metaclass_runs_no_code_when_its_class_and_instances_are_described() -> None:
    instance = Governed(1)
    Calls.seen.clear()
    info = describe("g", instance, LIMIT)
    cls_info = describe("Governed", Governed, LIMIT)
    assert type_name(instance).endswith("Governed")
    assert unrepresentable(instance) == "<unrepresentable Governed>"
    assert Calls.seen == []
    assert info.type.endswith("Governed")
    assert cls_info.repr == f"class Governed{inspect.signature(Governed)}"  # what inspect says


def test_a_class_module_that_is_not_text_is_named_as_unknown() -> None:
    odd = type("Odd", (), {"__module__": 42})
    assert type_name(odd()) == "Odd"  # a module that is not a str is treated as no module


DOC_SIGNATURE = "Leaky(a=genpark_repl_tools._limits.HOST_HANDS_UNIT_SECRET, b=math.pi)\n--\n\n"


def leaky_objects() -> list[Any]:
    # A builtin base: inspect found no __init__ in Python and read the docstring's signature line.
    from_docstring = type("FromDocstring", (int,), {"__doc__": DOC_SIGNATURE})

    class TextSignature:
        __text_signature__ = "(a=genpark_repl_tools._limits.HOST_HANDS_UNIT_SECRET)"
        __module__ = "genpark_repl_tools._limits"

    def with_signature(x: int) -> None:
        pass

    with_signature.__signature__ = "genpark_repl_tools._limits.HOST_HANDS_UNIT_SECRET"  # type: ignore[attr-defined]

    def inner() -> None:
        pass

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        pass

    wrapper.__wrapped__ = TextSignature  # type: ignore[attr-defined]
    return [from_docstring, TextSignature, with_signature, wrapper]


@pytest.mark.parametrize("obj", leaky_objects(), ids=["docstring", "text-signature", "signature", "wrapped"])
def test_a_signature_evaluates_no_text_of_the_object(obj: Any) -> None:
    text = describe("leaky", obj, LIMIT).repr
    assert SECRET not in text
    assert str(math.pi) not in text


@dataclasses.dataclass
class Point:
    x: int
    y: float = 0.5
    tags: list[str] = dataclasses.field(default_factory=list)


class Pair(typing.NamedTuple):
    a: int
    b: str = "z"


class Colour(enum.Enum):
    RED = 1


class Documented:
    """Documented(x) -- an ordinary docstring that happens to look like a signature."""

    def __init__(self, x: Any, *, flag: bool = False) -> None:
        self.x = x

    def method(self, a: int, /, b: int = 2, *args: Any, c: Any, **kw: Any) -> Documented:
        return self


def plain(a: Any, b: int = 1, *, c: Any = None, **kw: Any) -> None:
    pass


def annotated(x: int, y: str = "q", /, z: typing.Optional[int] = None) -> typing.List[int]:  # noqa: UP006, UP045
    return []


class Empty:
    pass


NEIGHBOURS = [Point, Pair, Documented, Documented(1).method, plain, annotated, Empty]
BUILTINS = [len, math.sqrt, print, [].append, dict.fromkeys]


@pytest.mark.parametrize("obj", NEIGHBOURS + BUILTINS, ids=lambda o: getattr(o, "__name__", "method"))
def test_legitimate_neighbours_keep_the_signature_inspect_gives(obj: Any) -> None:
    try:
        expected = str(inspect.signature(obj))
    except ValueError:  # a builtin without a text signature on this Python (print on 3.10)
        expected = "(...)"
    # A forward reference (Pair's fields) by the text it refers to, as inspect shows it from 3.14 (before
    # it showed the repr, ForwardRef('int', module=...)).
    expected = re.sub(r"ForwardRef\('([^']*)'(?:, module='[^']*')?\)", r"\1", expected)
    assert signature_text(obj, LIMIT) == expected


def test_a_forward_reference_shows_the_text_it_refers_to_cut_at_the_limit() -> None:
    assert signature_text(Pair, LIMIT) == "(a: int, b: str = 'z')"

    def later(a: Any) -> None:
        pass

    later.__annotations__ = {"a": typing.ForwardRef("Later" * LIMIT)}
    text = signature_text(later, LIMIT)
    assert text.startswith("(a: LaterLater") and "more characters]" in text
    assert len(text) < 2 * LIMIT


def test_an_enum_shows_what_calling_its_metaclass_takes() -> None:
    # Not compared with inspect: 3.13 reads Enum's own __signature__, which a session's class could
    # define too; the metaclass's __call__ is read from its code object on every Python.
    assert signature_text(Colour, LIMIT).startswith("(value, names=")


def test_what_has_no_code_object_reads_as_unknown_arguments() -> None:
    class Mapping(dict):  # type: ignore[type-arg]
        pass

    assert signature_text(Mapping, LIMIT) == "(...)"
    assert signature_text(functools.partial(plain, 1), LIMIT) == "(...)"


def test_a_value_whose_description_fails_reads_unrepresentable() -> None:
    class Defaults(tuple):  # type: ignore[type-arg]
        def __getitem__(self, index: Any) -> Any:
            raise RuntimeError("no")

    def f(x: int = 1) -> None:
        pass

    f.__defaults__ = Defaults((1,))
    info = describe("f", f, LIMIT)
    assert info.repr == "<unrepresentable function>"
    assert info.type == "function"
