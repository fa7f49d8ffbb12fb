"""The only globals a snapshot's own records name: placeholders the loader swaps for its rebuilders.

A pickle names them as `genpark_repl_tools.snapshot._markers.<name>`; the loader never returns
these objects, it returns the rebuilders bound to the session being restored. Calling one is a bug.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _marker(name: str) -> Callable[..., NoReturn]:
    """The placeholder `name`: a module-level function pickle finds again as `MODULE.name`."""

    def placeholder(*args: Any) -> NoReturn:
        raise RuntimeError(
            f"snapshot marker {name!r} is a placeholder for the snapshot loader; never call it"
        )

    placeholder.__name__ = placeholder.__qualname__ = name
    return placeholder


cell = _marker("cell")
cell_state = _marker("cell_state")
class_state = _marker("class_state")
empty_cell = _marker("empty_cell")
function = _marker("function")
function_state = _marker("function_state")
klass = _marker("klass")
lru_cache = _marker("lru_cache")
module = _marker("module")
namedtuple = _marker("namedtuple")

NAMES = frozenset(__all__)
