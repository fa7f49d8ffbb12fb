"""engine.history (bounded) and the export of a session as a Jupyter notebook."""

from __future__ import annotations

import base64
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from genpark_repl_tools import Limits, ReplEngine

KEEP = Limits(max_history_cells=100)

nbformat = pytest.importorskip("nbformat")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURE = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot([1, 2, 3], [1, 4, 9])
"""


def test_history_keeps_each_run_with_its_result() -> None:
    with ReplEngine(boundary="inprocess", limits=KEEP) as engine:
        engine.run("x = 1", "s", call_id="c1")
        engine.run("print(x)\nx + 1", "s", call_id="c2")
        engine.reset("s")
        engine.run("1 / 0", "s")
        history = engine.history("s")
        assert [(h.kind, h.code, h.call_id) for h in history] == [
            ("run", "x = 1", "c1"),
            ("run", "print(x)\nx + 1", "c2"),
            ("reset", "", None),
            ("run", "1 / 0", None),
        ]
        assert history[1].result is not None and history[1].result.value == "2"
        assert history[3].result is not None and history[3].result.status == "error"
        assert engine.history("other") == []
        engine.close("s")
        assert engine.history("s") == []


def test_history_is_bounded_by_cells() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_history_cells=3)) as engine:
        for i in range(10):
            engine.run(f"x = {i}")
        assert [h.code for h in engine.history()] == ["x = 7", "x = 8", "x = 9"]


def test_history_is_bounded_by_bytes() -> None:
    with ReplEngine(
        boundary="inprocess", limits=Limits(max_history_cells=100, max_history_bytes=10_000)
    ) as engine:
        for i in range(10):
            engine.run(f"print('{i}' * 3000)")
        kept = engine.history()
        assert [h.code[7] for h in kept] == ["7", "8", "9"]  # 3 x ~3,000 characters fit, 4 do not


def test_history_is_off_by_default() -> None:
    assert Limits().max_history_cells == 0
    with ReplEngine(boundary="inprocess") as engine:
        engine.run("x = 1")
        engine.reset()
        assert engine.history() == []


def test_a_run_larger_than_the_budget_is_kept_without_its_figures() -> None:
    limits = Limits(max_history_cells=100, max_history_bytes=10_000)
    with ReplEngine(boundary="inprocess", limits=limits) as engine:
        result = engine.run(FIGURE)
        assert len(result.attachments) == 1  # the caller still gets the figure
        [entry] = engine.history()
        assert entry.result is not None and entry.result.attachments == []


def _png_size(data_base64: str) -> tuple[int, int]:
    data = base64.b64decode(data_base64, validate=True)
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_export_notebook_validates_and_opens_with_its_images(tmp_path: Path) -> None:
    path = tmp_path / "session.ipynb"
    with ReplEngine(boundary="inprocess", limits=KEEP) as engine:
        engine.run("x = 41\nprint('hello')", "s", call_id="call_1")
        figure = engine.run(FIGURE, "s")
        engine.run("x + 1", "s")
        engine.run("import os", "s")
        engine.run("undefined_name", "s")
        engine.reset("s")
        engine.run("y = 2", "s")
        nb = engine.export_notebook("s", path)
    nbformat.validate(nb)
    reread = nbformat.read(path, as_version=4)
    nbformat.validate(reread)
    assert reread == nb
    code_cells = [c for c in reread.cells if c.cell_type == "code"]
    assert [c.source for c in code_cells] == ["x = 41\nprint('hello')", FIGURE, "x + 1", "import os",
                                              "undefined_name", "y = 2"]  # fmt: skip
    assert [c.execution_count for c in code_cells] == [1, 2, 3, 4, 5, 1]

    hello = code_cells[0]
    assert hello.outputs[0].output_type == "stream" and hello.outputs[0].text == "hello\n"
    assert hello.metadata.genpark_repl.call_id == "call_1"
    assert hello.metadata.genpark_repl.status == "ok"

    [image] = [o for o in code_cells[1].outputs if o.output_type == "display_data"]
    attachment = figure.attachments[0]
    assert image.data["image/png"] == attachment.data_base64
    assert _png_size(image.data["image/png"]) == (attachment.width, attachment.height)

    [value] = code_cells[2].outputs
    assert value.output_type == "execute_result" and value.data["text/plain"] == "42"

    [blocked] = code_cells[3].outputs
    assert blocked.output_type == "error" and blocked.ename == "PolicyViolation"
    assert "os" in blocked.traceback[0] and code_cells[3].metadata.genpark_repl.status == "blocked"

    [error] = code_cells[4].outputs
    assert (error.output_type, error.ename) == ("error", "NameError")
    assert any("undefined_name" in line for line in error.traceback)

    markdown = [c.source for c in reread.cells if c.cell_type == "markdown"]
    assert "Session `s`" in markdown[0]
    assert any("reset" in text for text in markdown[1:])
    assert reread.metadata.genpark_repl.session == "s"
    assert reread.metadata.kernelspec.name == "python3"


def test_the_exported_image_decodes_as_a_picture(tmp_path: Path) -> None:
    image_module = pytest.importorskip("matplotlib.image")
    with ReplEngine(boundary="inprocess", limits=KEEP) as engine:
        engine.run(FIGURE)
        nb = engine.export_notebook()
    [output] = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "display_data"
    ]
    png = tmp_path / "figure.png"
    png.write_bytes(base64.b64decode(output.data["image/png"]))
    pixels = image_module.imread(png)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0  # not a blank canvas


def test_dropped_runs_are_said_in_the_header() -> None:
    with ReplEngine(boundary="inprocess", limits=Limits(max_history_cells=2)) as engine:
        for i in range(5):
            engine.run(f"x = {i}")
        nb = engine.export_notebook()
    nbformat.validate(nb)
    assert "first 3 runs are not included" in nb.cells[0].source
    assert nb.metadata.genpark_repl.runs_not_included == 3


@pytest.mark.slow
def test_export_from_the_subprocess_boundary_keeps_usage(sub_engine: ReplEngine) -> None:
    sub_engine.run("print('from the worker')", "nb")
    nb = sub_engine.export_notebook("nb")
    nbformat.validate(nb)
    [cell] = [c for c in nb.cells if c.cell_type == "code"]
    assert cell.outputs[0].text == "from the worker\n"
    assert cell.metadata.genpark_repl.usage["peak_memory_mb"] > 0


def test_missing_nbformat_is_an_actionable_error() -> None:
    code = """
        import sys
        sys.modules["nbformat"] = None  # as if the extra were not installed
        from genpark_repl_tools import MissingDependency, ReplEngine
        with ReplEngine() as engine:
            engine.run("x = 1")
            try:
                engine.export_notebook()
            except MissingDependency as exc:
                print(exc)
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "genpark-repl-tools[notebook]" in proc.stdout
