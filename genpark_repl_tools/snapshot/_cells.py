"""Session code by reference: which cell, which code object in it.

Functions and classes a session defined are never pickled as code. A snapshot names the cell they
came from (its source travels in the snapshot header) and the position of their code object in
that cell's compiled form; a restore compiles the source again under the restoring policy (audit,
transform, timeout guards: `compile_cell`, the same path the cell took when it ran) and takes the
code object from there. Compiling is deterministic, so the code is the one that ran.
"""

from __future__ import annotations

from types import CodeType

from .._compile import CompiledCell

__all__ = ["cell_codes"]


def cell_codes(cell: CompiledCell) -> list[CodeType]:
    """Every code object nested in the cell, in a fixed depth-first order."""
    found: list[CodeType] = []

    def walk(code: CodeType) -> None:
        for const in code.co_consts:
            if isinstance(const, CodeType):
                found.append(const)
                walk(const)

    if cell.body is not None:
        walk(cell.body)
    return found
