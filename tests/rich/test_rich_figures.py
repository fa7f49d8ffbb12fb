"""Figures: rendered headless as PNG, bounded in count and size, attached, and always closed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from genpark_repl_tools import Attachment, Limits, ReplEngine
from genpark_repl_tools._rich import BACKEND

pytest.importorskip("matplotlib")
pytest.importorskip("numpy")

PngOf = Callable[[Attachment], tuple[bytes, int, int]]

TWO_FIGURES = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.plot([1, 3, 2])
ax.set_title("Revenue")
fig2 = plt.figure(figsize=(2, 1.5))
plt.plot([3, 2, 1])
plt.xlabel("day")
plt.ylabel("price")
"""
SHOW_SPLITS = """
import matplotlib.pyplot as plt
plt.figure(figsize=(2, 2))
plt.plot([1, 2])
plt.title("first")
plt.show()
plt.plot([2, 1])
plt.title("second")
plt.show()
"""
SEVEN_FIGURES = """
import matplotlib.pyplot as plt
for i in range(7):
    plt.figure(figsize=(1, 1))
    plt.plot([i, i + 1])
"""
NOISE = """
import numpy as np
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3))
ax.imshow(np.random.default_rng(0).random((300, 400)), interpolation="nearest")
"""
BROKEN_ARTIST = """
import matplotlib.pyplot as plt
from matplotlib.artist import Artist

class Broken(Artist):
    def draw(self, renderer):
        raise ValueError("cannot draw this")

fig = plt.figure(figsize=(1, 1))
fig.add_artist(Broken())
"""


def test_each_figure_is_a_png_of_the_requested_size(engine: ReplEngine, png_of: PngOf) -> None:
    result = engine.run(TWO_FIGURES)
    assert result.status == "ok", result.to_observation()
    assert [a.description for a in result.attachments] == ['figure 1 "Revenue"', "figure 2 (price vs day)"]
    sizes = []
    for attachment in result.attachments:
        assert (attachment.kind, attachment.mime_type) == ("image", "image/png")
        _, width, height = png_of(attachment)
        assert (attachment.width, attachment.height) == (width, height)
        sizes.append((width, height))
    assert sizes == [(160, 120), (80, 60)]  # figsize x Limits.figure_dpi (40)


def test_figure_dpi_sets_the_pixel_size() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(figure_dpi=50)) as engine:
        result = engine.run("import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1))\nplt.plot([1, 2])")
    assert [(a.width, a.height) for a in result.attachments] == [(100, 50)]


def test_observation_lists_each_image(engine: ReplEngine) -> None:
    text = engine.run(TWO_FIGURES).to_observation()
    assert 'Attached image/png 160x120: figure 1 "Revenue"' in text
    assert "Attached image/png 80x60: figure 2 (price vs day)" in text


def test_a_cell_that_only_plots_says_ok(engine: ReplEngine) -> None:
    text = engine.run("import matplotlib.pyplot as plt\n_ = plt.plot([1, 2])").to_observation()
    assert text.startswith("OK\n")
    assert text.endswith("Attached image/png 256x192: figure 1")


def test_show_attaches_and_starts_a_new_figure_like_a_notebook(engine: ReplEngine) -> None:
    result = engine.run(SHOW_SPLITS)
    assert result.status == "ok"
    assert result.stderr == ""  # no "non-interactive backend" warning
    assert [a.description for a in result.attachments] == ['figure 1 "first"', 'figure 2 "second"']


def test_figure_show_method_opens_nothing_and_warns_nothing(engine: ReplEngine) -> None:
    result = engine.run("import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(1, 1))\nfig.show()")
    assert (result.status, result.stderr) == ("ok", "")
    assert len(result.attachments) == 1


def test_cells_run_on_the_headless_backend(engine: ReplEngine) -> None:
    result = engine.run("import matplotlib\nmatplotlib.get_backend()")
    assert result.value == repr(BACKEND)


def test_count_is_bounded_and_every_figure_is_closed() -> None:
    with ReplEngine(
        boundary="inprocess", policy="trusted", limits=Limits(max_figures=2, figure_dpi=20)
    ) as engine:
        result = engine.run(SEVEN_FIGURES)
        assert len(result.attachments) == 2
        assert result.notes == [
            "7 figures were made; the first 2 are attached (Limits.max_figures). "
            "Combine plots with plt.subplots() or make fewer per call."
        ]
        assert engine.run("plt.get_fignums()").value == "[]"


def test_max_figures_zero_attaches_nothing_and_still_closes() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(max_figures=0)) as engine:
        result = engine.run(SEVEN_FIGURES)
        assert (result.attachments, result.notes) == ([], [])
        assert engine.run("plt.get_fignums()").value == "[]"


def test_too_large_png_is_rerendered_smaller(png_of: PngOf) -> None:
    limit = 60_000
    with ReplEngine(
        boundary="inprocess", policy="trusted", limits=Limits(figure_dpi=100, max_figure_bytes=limit)
    ) as engine:
        result = engine.run(NOISE)
    (attachment,) = result.attachments
    data, width, height = png_of(attachment)
    assert len(data) <= limit
    assert width < 400  # 4 in x 100 dpi would be 400 px (about 240 KB of noise)
    assert abs(width / height - 4 / 3) < 0.02


def test_png_that_stays_too_large_is_reported_not_attached(engine: ReplEngine) -> None:
    code = (
        "import matplotlib.pyplot as plt\nfig = plt.figure()\n"
        "fig.savefig = lambda buffer, **kw: buffer.write(b'\\x89PNG' + bytes(3_000_000))"
    )
    result = engine.run(code)
    assert result.status == "ok"
    assert result.attachments == []
    (note,) = result.notes
    assert note.startswith("figure 1 is not attached: its PNG is 3,000,004 bytes even at ")
    assert "Limits.max_figure_bytes=1,000,000" in note


def test_side_is_capped_whatever_the_figsize(png_of: PngOf) -> None:
    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(figure_dpi=100)) as engine:
        result = engine.run("import matplotlib.pyplot as plt\nplt.figure(figsize=(50, 2))\nplt.plot([1, 2])")
    (attachment,) = result.attachments
    _, width, height = png_of(attachment)
    assert width == 2000
    assert height == 80


def test_a_broken_artist_is_reported_and_the_run_is_ok(engine: ReplEngine) -> None:
    result = engine.run(BROKEN_ARTIST)
    assert result.status == "ok"
    assert result.attachments == []
    assert result.notes == ["figure 1 could not be rendered: ValueError: cannot draw this"]


def test_no_figure_leaks_over_50_runs() -> None:
    import matplotlib.pyplot as plt

    with ReplEngine(boundary="inprocess", policy="trusted", limits=Limits(figure_dpi=20)) as engine:
        engine.run("import gc, weakref\nimport matplotlib.pyplot as plt\nrefs = []")
        for i in range(50):
            # The trailing figure is also in pyplot's registry: attached once, not twice.
            code = f"fig = plt.figure(figsize=(1, 1))\nfig.add_subplot().plot([{i}, 1])\n"
            result = engine.run(code + "refs.append(weakref.ref(fig))\nfig")
            assert len(result.attachments) == 1
            assert plt.get_fignums() == []
        engine.run("del fig")  # (a cell's own snapshot keeps the old value alive while it runs)
        alive = engine.run("gc.collect()\nlen(refs), sum(r() is not None for r in refs)")
        assert alive.value == "(50, 0)"


def test_changed_figure_is_attached_again_unchanged_is_not(engine: ReplEngine) -> None:
    first = engine.run(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 2))\n_ = ax.plot([1])"
    )
    assert len(first.attachments) == 1
    changed = engine.run("ax.set_title('Better title')\nx = 1")
    assert [a.description for a in changed.attachments] == ['figure 1 "Better title" (updated)']
    assert engine.run("x = 2").attachments == []
    # savefig marks a figure stale without changing how it looks: not attached again.
    assert (
        engine.run("import io\nfig.savefig(io.BytesIO(), format='png', bbox_inches='tight')").attachments
        == []
    )
    assert len(engine.run("ax.plot([2, 1])\nx = 3").attachments) == 1


def test_trailing_figure_or_axes_is_shown_again(engine: ReplEngine) -> None:
    engine.run("import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 2))\nax.set_title('t')")
    assert [a.description for a in engine.run("fig").attachments] == ['figure 1 "t"']
    assert [a.description for a in engine.run("ax").attachments] == ['figure 1 "t"']


def test_figures_are_closed_after_an_error(engine: ReplEngine) -> None:
    result = engine.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1 / 0")
    assert result.status == "error"
    assert len(result.attachments) == 1  # a half-made plot still helps


def test_figures_are_closed_after_a_timeout(engine: ReplEngine) -> None:
    result = engine.run(
        "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([1, 2])\nwhile True:\n    pass",
        timeout_s=0.5,
    )
    assert result.status == "timeout"
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []


def test_a_host_figure_is_neither_attached_nor_closed(engine: ReplEngine) -> None:
    import matplotlib.pyplot as plt

    engine.run("import matplotlib.pyplot as plt")
    host = plt.figure()
    try:
        result = engine.run("plt.figure(figsize=(1, 1))\n_ = plt.plot([1])")
        assert len(result.attachments) == 1
        assert plt.get_fignums() == [host.number]
    finally:
        plt.close(host)


def test_figure_made_by_a_thread_of_the_cell_is_claimed_when_alone(engine: ReplEngine) -> None:
    code = (
        "import threading\nimport matplotlib.pyplot as plt\n"
        "t = threading.Thread(target=lambda: plt.figure(figsize=(1, 1)))\nt.start()\nt.join()"
    )
    assert len(engine.run(code).attachments) == 1
