from __future__ import annotations

import base64
import struct
import sys
from collections.abc import Callable, Iterator

import pytest

from genpark_repl_tools import Attachment, Limits, ReplEngine

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


PngOf = Callable[[Attachment], tuple[bytes, int, int]]


def _png_of(attachment: Attachment) -> tuple[bytes, int, int]:
    data = base64.b64decode(attachment.data_base64, validate=True)
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return data, width, height


@pytest.fixture
def png_of() -> PngOf:
    """The attachment's bytes and the size its own PNG header states (read here, not by the engine)."""
    return _png_of


@pytest.fixture
def engine() -> Iterator[ReplEngine]:
    # Small renders keep the suite fast on a loaded machine; sizes below are computed from these.
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(timeout_s=20, figure_dpi=40)) as e:
        yield e


@pytest.fixture(autouse=True)
def _no_figure_left_open() -> Iterator[None]:
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        left = pyplot.get_fignums()
        pyplot.close("all")
        assert left == [], f"figures left open: {left}"
