"""The pyplot backend the engine selects: Agg rendering, never a window.

Security model: none of its own. It only decides where figures go: `plt.show()` and `Figure.show()`
open nothing; inside an execution `plt.show()` hands that execution's open figures to its result
(rendered and closed, like a notebook cell), outside one it does nothing.

Nothing in the package imports this module: matplotlib does, when `genpark_repl_tools._rich` has
made it pyplot's backend (`module://genpark_repl_tools._mpl_backend`), so matplotlib is already
imported by then.
"""

from __future__ import annotations

from matplotlib.backend_bases import FigureCanvasBase, FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ._rich import show_figures, tag_new_figure

__all__ = ["FigureCanvas", "FigureManager", "show"]


class FigureManager(FigureManagerBase):
    def __init__(self, canvas: FigureCanvasBase, num: int | str) -> None:
        super().__init__(canvas, num)
        # pyplot's registry can lose a figure when two threads create one at once; this flag, not
        # the registry, says whether the code closed it.
        self.genpark_closed = False
        # Every pyplot figure gets a manager: the one place no user setting can skip.
        tag_new_figure(canvas.figure)

    def destroy(self) -> None:
        self.genpark_closed = True
        super().destroy()

    def show(self) -> None:
        # Agg's manager warns "non-interactive, cannot be shown" when a display exists; the figure is
        # attached to the result instead, so there is nothing to warn about.
        return None


class FigureCanvas(FigureCanvasAgg):
    manager_class = FigureManager


def show(*, block: bool | None = None) -> None:
    """Attach the current execution's open figures now and close them (no window is ever opened)."""
    show_figures()
