"""The only globals a snapshot's own records name: placeholders the loader swaps for its rebuilders.

A pickle names them as `genpark_repl_tools.snapshot._markers.<name>`; the loader never returns
these objects, it returns the rebuilders bound to the session being restored. Calling one is a bug.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = [
    "cell",
    "cell_state",
    "class_state",
    "empty_cell",
    "function",
    "function_state",
    "klass",
    "lru_cache",
    "module",
    "namedtuple",
]

MODULE = __name__


def _placeholder(name: str) -> NoReturn:
    raise RuntimeError(f"snapshot marker {name!r} is a placeholder for the snapshot loader; never call it")


def cell(*args: Any) -> NoReturn:
    _placeholder("cell")


def cell_state(*args: Any) -> NoReturn:
    _placeholder("cell_state")


def class_state(*args: Any) -> NoReturn:
    _placeholder("class_state")


def empty_cell(*args: Any) -> NoReturn:
    _placeholder("empty_cell")


def function(*args: Any) -> NoReturn:
    _placeholder("function")


def function_state(*args: Any) -> NoReturn:
    _placeholder("function_state")


def klass(*args: Any) -> NoReturn:
    _placeholder("klass")


def lru_cache(*args: Any) -> NoReturn:
    _placeholder("lru_cache")


def module(*args: Any) -> NoReturn:
    _placeholder("module")


def namedtuple(*args: Any) -> NoReturn:
    _placeholder("namedtuple")


NAMES = frozenset(__all__)
