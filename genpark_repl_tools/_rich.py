"""Rich outputs: matplotlib figures as PNG attachments, compact summaries of tables and arrays.

Security model: none of its own; it runs under the execution's. Rendering a figure runs the figure's
artists (user code), so `FigureRun.collect` and `plt.show()` run inside the execution's guarded
region: the policy and the deadline apply. This module never imports matplotlib, pandas or numpy: it
looks at `sys.modules` and at the types of the objects it is given, so a session that never uses
them never loads them.

pyplot keeps process-wide state (its backend, its figure registry, its "current figure"); this is
how the engine lives with that in one process:

- Headless. The host's environment is never changed. On every execution where matplotlib is imported
  the engine switches pyplot to `module://genpark_repl_tools._mpl_backend` if the backend is still
  unresolved, Agg, or a GUI backend; when the execution's own code imports pyplot, a finder on
  `sys.meta_path` (added on the first execution in a process where matplotlib is installed) does
  the same before the first figure. Nothing happens at import time. The backend is Agg plus a
  `show()` that opens no window.
- Ownership. A figure is tagged with the session whose execution created it (the backend's figure
  manager and a `figure.hooks` entry read a context variable). An execution attaches and closes only
  its own figures, so concurrent sessions do not take each other's. Untagged new figures (created
  before the hook existed, or by threads the code started) are claimed only by an execution that ran
  alone in the process.
- What is not solved: pyplot's *current* figure is global. Two sessions calling `plt.plot` at the
  same moment can draw into each other's figure; `fig, ax = plt.subplots()` then `ax.plot(...)`
  does not have that problem.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import io
import math
import sys
import threading
import weakref
from contextvars import Token
from typing import Any

from ._armed import call_armed
from ._capture import OutputCapture, TextSink, alone_since, current, enter_execution
from ._limits import Limits
from ._models import Attachment
from ._watchdog import ExecutionTimeout

__all__ = [
    "BACKEND",
    "FigureOwner",
    "FigureRun",
    "png_size",
    "prepare_figures",
    "show_figures",
    "summarize",
    "table_kind",
    "table_repr",
    "table_texts",
    "tag_new_figure",
]

BACKEND = "module://genpark_repl_tools._mpl_backend"
_HOOK = "genpark_repl_tools._rich:tag_new_figure"
_TAG = "_genpark_repl_owner"
# Headless backends a host may have chosen on purpose (vector output, notebooks): kept as they are.
# Agg itself is replaced: ours is Agg plus a show() that attaches instead of warning.
_KEPT_BACKENDS = frozenset({"cairo", "pdf", "pgf", "ps", "svg", "template"})
_MAX_SIDE_PX = 2000  # multimodal models downscale larger images anyway
_RERENDERS = 2
_MIN_SHRINK = 0.3
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_MAX_LABEL = 120
_MAX_MESSAGE = 200
_CLOSE_TIMEOUT_S = 5.0  # closing a figure takes microseconds; only the code's own objects take longer

# A mapping no run writes to: what a run holds until it has figures of its own to note.
_NO_FIGURES: dict[int, Any] = {}
# matplotlib is not thread-safe; drawing one figure at a time keeps its shared caches consistent.
# Re-entrant: an artist's draw() may itself call plt.show() on the same thread.
_render_lock = threading.RLock()


class _Process:
    """Process-wide bookkeeping (pyplot's state is process-wide too). Which executions run at once
    is counted by `_capture.enter_execution`."""

    __slots__ = ("environment_checked",)

    def __init__(self) -> None:
        self.environment_checked = False


_process = _Process()


class FigureOwner:
    """One session's claim on figures: the tag its executions put on new figures."""

    __slots__ = ("shown",)

    def __init__(self) -> None:
        # Figures attached earlier (closed since), with a digest of the PNG the model saw: a figure
        # the code touched again is re-attached only if it now looks different (`fig.savefig` alone
        # marks a figure stale without changing it). Made on the first attachment: a weak dictionary
        # is ~0.7 KiB, and most sessions never draw (idle sessions stay small).
        self.shown: weakref.WeakKeyDictionary[Any, bytes] | None = None


class FigureRun:
    """The figures of one execution: headless backend before it, attachments after, nothing left open.

    It is also the execution's context object: `enter` routes this context's stdout/stderr to the
    execution's two sinks (the run stands in for its capture, see `_capture.enter_execution`) and
    counts the execution, in one step; `_capture.exit_execution` with the token it returns ends
    both. So an execution sets one context variable and takes one lock to start and one to end,
    whatever it does with figures.

    Security model: `enter` is host code before the execution (it touches only pyplot's registry
    and backend, no object of the session); `collect` and `show` render figures, which runs user
    code, and must be called inside the execution's guarded region; `close` touches the session's
    figures after the cell's deadline, so it is called under the guards and sets a deadline of its own.
    """

    __slots__ = (
        "_alone",
        "_before",
        "_created",
        "_done",
        "_dropped",
        "_serial",
        "attachments",
        "finished",
        "limits",
        "notes",
        "owner",
        "stderr",
        "stdout",
    )

    def __init__(self, owner: FigureOwner, limits: Limits, stdout: TextSink, stderr: TextSink) -> None:
        self.owner = owner
        self.limits = limits
        self.stdout = stdout
        self.stderr = stderr
        self.attachments: list[Attachment] = []
        self.notes: list[str] = []
        # Figures this run attached or gave up on (held: ids stay unique); its own once it has one.
        self._done = _NO_FIGURES
        self._dropped = 0
        self._before = _NO_FIGURES
        # Kept here, not only found in pyplot's registry: two threads creating figures at once can
        # get the same number, and the registry then forgets one of them. Made by the first.
        self._created: list[Any] | None = None
        # Set when the run ends, before it leaves the routing (see _capture.enter_execution).
        self.finished = False
        # _serial and _alone are set by enter().

    def enter(self) -> Token[OutputCapture | None]:
        """Before the code runs: route its output, make pyplot headless, note which figures are
        someone else's. Returns the token to end the routing with (`_capture.exit_execution`, in a
        `finally`)."""
        token, self._serial, self._alone = enter_execution(self)
        if _process.environment_checked and "matplotlib" not in sys.modules:
            return token  # the common case: nothing to prepare, nothing open
        try:
            _prepare_matplotlib()
            # Held (not just their ids) so an id cannot be reused by a new figure during the run.
            self._before = {id(m): m for m in _managers()}
        except Exception as exc:  # host-side bookkeeping must never fail the run
            self.notes.append(f"matplotlib could not be made headless: {_message(exc)}")
        return token

    def show(self) -> None:
        """`plt.show()` inside the execution: attach and close its open figures now."""
        self._flush()

    def collect(self, value: Any = None) -> None:
        """After the code ran, still guarded: attach new, changed and shown figures, then close them."""
        if "matplotlib" not in sys.modules:
            return
        try:
            self._flush()
            if self.owner.shown:
                for fig, seen in list(self.owner.shown.items()):
                    if not self._is_done(fig) and getattr(fig, "stale", False):
                        self._attach(fig, seen=seen)
            fig = _figure_of(value)
            if fig is not None and not self._is_done(fig):
                self._attach(fig)
        except ExecutionTimeout:
            raise
        except BaseException as exc:  # a figure's own code failing is the user's; report, keep the run
            self.notes.append(f"Figures could not be collected: {_message(exc)}")
        if self._dropped:
            total = len(self.attachments) + self._dropped
            self.notes.append(
                f"{total} figures were made; the first {len(self.attachments)} are attached "
                f"(Limits.max_figures). Combine plots with plt.subplots() or make fewer per call."
            )
            self._dropped = 0

    def close(self) -> None:
        """After the cell's deadline was released, still under its guards: close what the code left
        open (also on timeout). A figure is the session's object (its canvas and manager may be
        replaced by the code), so closing runs under a deadline of its own."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return  # no figure can be open
        note, failure = call_armed(_CLOSE_TIMEOUT_S, None, self._close_all, pyplot)
        if failure is not None:  # only the deadline gets here: _close_all reports the rest
            note = f"Figures could not be closed within {_CLOSE_TIMEOUT_S:g} s."
        if note is not None:
            self.notes.append(note)
        self._before = _NO_FIGURES
        self._created = None

    def _close_all(self, pyplot: Any) -> str | None:
        try:
            for fig in self._owned_open():
                _close(pyplot, fig)
        except ExecutionTimeout:
            raise
        except BaseException as exc:  # the figure's own code: its message is read under the deadline too
            return f"Figures could not be closed: {_message(exc)}"
        return None

    # ---- internals ------------------------------------------------------------------------------

    def _flush(self) -> None:
        owned = self._owned_open()
        for fig in owned:
            if not self._is_done(fig):
                self._attach(fig)
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            for fig in owned:
                _close(pyplot, fig)

    def _owned_open(self) -> list[Any]:
        """This session's open figures, oldest first: those its code created, and unclaimed new ones."""
        managers = _managers()
        registered = {id(m) for m in managers}
        owned = [fig for fig in self._created or () if _is_open(fig, registered)]
        if managers:
            claim = self._may_claim()
            for manager in managers:
                fig = manager.canvas.figure
                tag = getattr(fig, _TAG, None)
                if tag is None and claim and id(manager) not in self._before:
                    setattr(fig, _TAG, self.owner)
                    tag = self.owner
                if tag is self.owner and not any(f is fig for f in owned):
                    owned.append(fig)
        return owned

    def _may_claim(self) -> bool:
        return self._alone and alone_since(self._serial)

    def _is_done(self, fig: Any) -> bool:
        return id(fig) in self._done

    def _attach(self, fig: Any, seen: bytes | None = None) -> None:
        """Render and attach `fig`; with `seen` (an earlier attachment's digest) only if it changed."""
        if self._done is _NO_FIGURES:
            self._done = {}
        if len(self.attachments) >= self.limits.max_figures:
            if self.limits.max_figures and seen is None:
                self._done[id(fig)] = fig
                self._dropped += 1
            return  # a changed figure over the cap stays stale: it is offered again next time
        self._done[id(fig)] = fig
        # Numbered by position in this result (pyplot reuses numbers once a figure is closed).
        label = _label(fig, len(self.attachments) + 1, updated=seen is not None)
        try:
            data = _render(fig, self.limits)
        except ExecutionTimeout:
            raise
        except _TooLarge as exc:
            self.notes.append(
                f"{label} is not attached: its PNG is {exc.size:,} bytes even at {exc.dpi:.0f} dpi "
                f"(Limits.max_figure_bytes={self.limits.max_figure_bytes:,}). "
                "Plot less data or a smaller figure."
            )
            return
        except BaseException as exc:  # a broken artist is the user's error, not the engine's
            self.notes.append(f"{label} could not be rendered: {_message(exc)}")
            return
        digest = hashlib.blake2b(data, digest_size=16).digest()
        shown = self.owner.shown
        if shown is None:
            shown = self.owner.shown = weakref.WeakKeyDictionary()
        shown[fig] = digest
        if digest == seen:
            return  # touched, not changed
        width, height = png_size(data)
        self.attachments.append(
            Attachment(
                kind="image",
                mime_type="image/png",
                data_base64=base64.b64encode(data).decode("ascii"),
                description=label,
                width=width,
                height=height,
            )
        )


def _current_run() -> FigureRun | None:
    run = current()
    return run if type(run) is FigureRun else None  # a plain capture: a guarded call, not a run


def show_figures() -> None:
    """Called by the backend's `show()`: hand the current execution its figures (no-op outside one)."""
    run = _current_run()
    if run is not None:
        run.show()


def tag_new_figure(fig: Any) -> None:
    """A `figure.hooks` entry and the backend's manager call this for every new pyplot figure."""
    run = _current_run()
    if run is not None and getattr(fig, _TAG, None) is None:
        setattr(fig, _TAG, run.owner)
        if run._created is None:
            run._created = [fig]
        else:
            run._created.append(fig)


def png_size(data: bytes) -> tuple[int | None, int | None]:
    """Width and height from a PNG's IHDR chunk (None, None if `data` is not a PNG)."""
    if len(data) < 24 or not data.startswith(_PNG_MAGIC) or data[12:16] != b"IHDR":
        return None, None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# ---- matplotlib plumbing --------------------------------------------------------------------------


def prepare_figures() -> None:
    """Do now what the first execution of this process would do for figures (look for matplotlib,
    make an imported one headless). A fork template calls it so that each process it forks starts
    with it done; failing here only leaves it to that first execution, which reports it."""
    try:
        _prepare_matplotlib()
    except Exception:
        _process.environment_checked = False  # that first execution tries again and reports it


def _prepare_matplotlib() -> None:
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        if not _process.environment_checked:
            _process.environment_checked = True
            if importlib.util.find_spec("matplotlib"):
                # Not os.environ["MPLBACKEND"]: that would change the host's matplotlib and every
                # process it starts. A finder sees the execution's code import pyplot instead.
                sys.meta_path.insert(0, _import_watch)
        return
    rc = mpl.rcParams
    # dict's own lookup: reads without resolving the "auto" backend, and skips RcParams' checks.
    current = dict.get(rc, "backend")
    if current != BACKEND and not _keep_backend(current if isinstance(current, str) else None):
        mpl.use(BACKEND)
    hooks = dict.get(rc, "figure.hooks")
    if hooks is not None and _HOOK not in hooks:  # None: matplotlib < 3.7, ownership by "ran alone"
        rc["figure.hooks"] = [*hooks, _HOOK]


class _ImportWatch:
    """Makes pyplot headless when an execution's code imports it (matplotlib was not imported before).

    A finder on `sys.meta_path`, first, that finds nothing (every import goes on as without it):
    Python asks it about each module not imported yet. pyplot resolves its backend on its first
    figure; pyplot and the modules it imports are looked up after matplotlib itself finished
    initializing (it reads the host's MPLBACKEND last), and before that first figure. Outside an
    execution it does nothing: the host's own imports are its business.

    Not an audit hook: a hook is called for every audit event of the process from then on (each
    `exec`, `compile`, `id()` of the host's code and of every run: a Python call each, about a
    tenth of a trivial run's cost under a restricted policy) and can never be removed.
    """

    __slots__ = ("_busy",)

    def __init__(self) -> None:
        self._busy = False  # preparing: imports made meanwhile are matplotlib's own

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if self._busy or not name.startswith("matplotlib.") or _current_run() is None:
            return
        mpl = sys.modules.get("matplotlib")
        spec = getattr(mpl, "__spec__", None)
        if mpl is None or spec is None or getattr(spec, "_initializing", False):
            return
        # Host-side bookkeeping must not fail the import; FigureRun.enter retries before the next run.
        self._busy = True
        try:
            with contextlib.suppress(Exception):
                _prepare_matplotlib()
        finally:
            self._busy = False


_import_watch = _ImportWatch()


def _keep_backend(name: str | None) -> bool:
    if not name:
        return False
    if name == BACKEND or name.startswith("module://"):
        return True  # ours, or a host's own (e.g. a notebook's inline backend)
    return name.lower() in _KEPT_BACKENDS


def _managers() -> list[Any]:
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if helpers is None or not helpers.Gcf.figs:
        return []
    return list(helpers.Gcf.figs.values())


def _close(pyplot: Any, fig: Any) -> None:
    pyplot.close(fig)
    manager: Any = getattr(fig.canvas, "manager", None)
    if getattr(manager, "genpark_closed", None) is False:  # lost by pyplot's registry: close it here
        manager.destroy()


def _is_open(fig: Any, registered: set[int]) -> bool:
    manager = getattr(getattr(fig, "canvas", None), "manager", None)
    if manager is None:
        return False
    closed = getattr(manager, "genpark_closed", None)  # set by our backend's manager
    if closed is not None:
        return not closed
    return id(manager) in registered


def _figure_of(value: Any) -> Any:
    """The figure a trailing `fig` or `ax` refers to (REPL-style display), else None."""
    if value is None:
        return None
    figure_module = sys.modules.get("matplotlib.figure")
    if figure_module is None:
        return None
    figure_type = figure_module.Figure
    if isinstance(value, figure_type):
        return value
    axes_module = sys.modules.get("matplotlib.axes")
    if axes_module is not None and isinstance(value, axes_module.Axes):
        fig = value.figure
        for _ in range(3):  # an Axes in a SubFigure: walk up to the root Figure
            if isinstance(fig, figure_type):
                return fig
            fig = getattr(fig, "figure", None)
    return None


def _label(fig: Any, index: int, updated: bool) -> str:
    name = f"figure {index}"
    detail = ""
    try:
        titles = []
        suptitle = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
        if suptitle:
            titles.append(suptitle)
        axes = list(fig.axes)
        titles += [t for t in (ax.get_title() for ax in axes[:4]) if t]
        if titles:
            detail = " " + ", ".join(f'"{t}"' for t in titles[:3])
        elif axes and (axes[0].get_ylabel() or axes[0].get_xlabel()):
            detail = f" ({axes[0].get_ylabel() or '?'} vs {axes[0].get_xlabel() or '?'})"
    except ExecutionTimeout:
        raise
    except BaseException:  # a label is a nicety; a broken artist must not cost the image
        detail = ""
    text = f"{name}{detail}{' (updated)' if updated else ''}"
    return text if len(text) <= _MAX_LABEL else text[: _MAX_LABEL - 3] + "..."


class _TooLarge(Exception):
    def __init__(self, size: int, dpi: float) -> None:
        super().__init__(f"{size} bytes at {dpi:.0f} dpi")
        self.size = size
        self.dpi = dpi


def _render(fig: Any, limits: Limits) -> bytes:
    width_in, height_in = (float(x) for x in fig.get_size_inches())
    dpi = min(float(limits.figure_dpi), _MAX_SIDE_PX / max(width_in, height_in, 0.01))
    size = 0
    for attempt in range(1 + _RERENDERS):
        if attempt:
            dpi *= max(_MIN_SHRINK, 0.9 * math.sqrt(limits.max_figure_bytes / size))
        buffer = io.BytesIO()
        with _render_lock:
            fig.savefig(buffer, format="png", dpi=dpi)
        data = buffer.getvalue()
        size = len(data)
        if size <= limits.max_figure_bytes:
            # savefig leaves the figure stale (it restores the dpi); clear it so a later change shows.
            fig.stale = False
            return data
    raise _TooLarge(size, dpi)


def _message(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except ExecutionTimeout:
        raise
    except BaseException:
        text = type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "..."


# ---- tables and arrays ----------------------------------------------------------------------------

_MAX_ROWS = 20  # up to this many rows are shown whole; longer ones as
_MIN_ROWS = 10  # head 5 + tail 5, like pandas' own truncated repr
_COLUMN_STEPS = (10, 6, 3)
_MAX_COLWIDTH = 30
_LISTED_COLUMNS = 12
_ARRAY_INLINE = 1000  # numpy's own print threshold: smaller arrays keep their plain repr
_PREVIEW_THRESHOLD = 100
_MAX_NAME = 60


_type_mro = type.__dict__["__mro__"].__get__
_type_module = type.__dict__["__module__"].__get__
_type_name = type.__dict__["__name__"].__get__

_PLAIN_TYPES = frozenset(
    {int, float, complex, bool, str, bytes, type(None), list, tuple, dict, set, frozenset}
)


def table_kind(obj: Any) -> str | None:
    """'DataFrame', 'Series' or 'ndarray' for pandas/numpy objects (subclasses too), else None.

    Decided from the type's module name, so it never imports pandas or numpy.
    """
    t = type(obj)
    # The common case (a trailing `x`), without walking the MRO. Only for classes whose metaclass is
    # `type`: hashing another class may run its metaclass's code. (This was `id(type(obj)) in`, never
    # true, and `id()` is an audit event a restricted policy's hook judges.)
    if type(t) is type and t in _PLAIN_TYPES:
        return None
    # Read from `type`'s own slots: a metaclass's `__getattribute__` could otherwise answer for the
    # class (and claim to be pandas), and a `__module__` may be any object the class body stored.
    for cls in _type_mro(t):
        module, name = _type_module(cls), _type_name(cls)
        if type(module) is not str or type(name) is not str:
            continue
        if (module == "pandas" or module.startswith("pandas.")) and name in ("DataFrame", "Series"):
            return "DataFrame" if name == "DataFrame" else "Series"
        if module == "numpy" and name == "ndarray":
            return "ndarray"
    return None


def table_texts(obj: Any, limit: int) -> tuple[str | None, str] | None:
    """(repr, summary) of a DataFrame, Series or ndarray; None for anything else.

    Both come from a head/tail slice, never from the whole object, whatever display options the code
    set (`pd.set_option("display.max_rows", None)` would otherwise print every row). The summary is
    cut to `limit`; the repr is a few KB at most and is cut by the caller like any repr. The repr is
    None for arrays small enough that numpy's own repr is bounded: use `repr()` for those.
    """
    kind = table_kind(obj)
    if kind is None:
        return None
    try:
        if kind == "DataFrame":
            header, body, text = _frame_parts(obj, limit)
        elif kind == "Series":
            header, body, text = _series_parts(obj)
        else:
            header, body, text = _array_parts(obj)
    except ExecutionTimeout:
        raise
    except BaseException:  # a subclass with a broken attribute: fall back to the plain repr path
        return None
    return text, _clip(f"{header}\n{body}", limit)


def table_repr(obj: Any, limit: int) -> str | None:
    """A bounded repr for DataFrames, Series and large arrays; None means "use repr()"."""
    kind = table_kind(obj)
    if kind is None or (kind == "ndarray" and _small_array(obj)):
        return None
    texts = table_texts(obj, limit)
    return texts[0] if texts is not None else None


def summarize(obj: Any, limit: int, *, as_value: bool = False) -> str | None:
    """The compact summary of a DataFrame, Series or ndarray (None for anything else).

    With `as_value` (a cell's trailing value), flat arrays small enough to print whole keep their
    repr, as a REPL shows them.
    """
    kind = table_kind(obj)
    if kind is None:
        return None
    if as_value and kind == "ndarray" and _small_array(obj) and _int_attr(obj, "ndim") <= 2:
        return None
    texts = table_texts(obj, limit)
    return texts[1] if texts is not None else None


# Each returns (summary header, summary body, repr).


def _frame_parts(df: Any, limit: int) -> tuple[str, str, str | None]:
    rows, cols = (int(n) for n in df.shape)
    header = f"DataFrame: {_count(rows, 'row')} x {_count(cols, 'column')}"
    if cols:
        listed = df.iloc[:, :_LISTED_COLUMNS].dtypes
        pairs = ", ".join(f"{_short(name)} {dtype}" for name, dtype in listed.items())
        more = f", ... ({cols - len(listed):,} more)" if cols > len(listed) else ""
        header += f"\ncolumns: {pairs}{more}"
        if more:
            counts = df.dtypes.value_counts()  # one entry per column, not per row: cheap
            header += "\ndtype counts: " + ", ".join(f"{d} {n:,}" for d, n in counts.iloc[:5].items())
    body = ""
    for max_cols in _COLUMN_STEPS:
        body = df.to_string(
            max_rows=_MAX_ROWS,
            min_rows=_MIN_ROWS,
            max_cols=max_cols,
            max_colwidth=_MAX_COLWIDTH,
            show_dimensions=False,
        )
        if len(header) + len(body) < limit:
            break
    cut = rows > _MAX_ROWS or cols > _COLUMN_STEPS[0]
    footer = (
        f"\n\n[{_count(rows, 'row')} x {_count(cols, 'column')}]" if cut else ""
    )  # as pandas' own repr says it
    return header, body, body + footer


def _series_parts(series: Any) -> tuple[str, str, str | None]:
    length = len(series)
    name = series.name
    dtype = series.dtype
    named = f" {_short(repr(name))}" if name is not None else ""
    header = f"Series{named}: {_count(length, 'value')}, dtype {dtype}"
    body = series.to_string(max_rows=_MAX_ROWS, min_rows=_MIN_ROWS, dtype=False, name=False, length=False)
    footer = f"\nName: {_short(name)}, Length: {length}, dtype: {dtype}"
    return header, body, body + footer


def _array_parts(array: Any) -> tuple[str, str, str | None]:
    numpy = sys.modules["numpy"]  # an ndarray exists, so numpy is imported
    shape = tuple(int(n) for n in array.shape)
    size = _int_attr(array, "size")
    dtype = _short(array.dtype)
    nbytes = _bytes(_int_attr(array, "nbytes"))
    header = f"ndarray: shape {shape}, dtype {dtype}, {_count(size, 'element')}, {nbytes}"
    view = array
    prefix = ""
    if array.ndim > 3:
        # (2 * edgeitems) ** ndim elements would be printed; show one 2-D slice instead.
        index = (0,) * (array.ndim - 2)
        view = array[index]
        prefix = f"[{', '.join('0' for _ in index)}, :, :] =\n"
    edge = 3 if view.ndim <= 2 else 2
    body = prefix + numpy.array2string(view, threshold=_PREVIEW_THRESHOLD, edgeitems=edge, max_line_width=100)
    if size <= _ARRAY_INLINE:
        return header, body, None  # numpy's own repr is bounded at this size
    if view is array:
        # numpy's repr with its default summarization, whatever print options the code set.
        inner = numpy.array2string(
            array, threshold=_ARRAY_INLINE, edgeitems=3, separator=", ", prefix="array(", max_line_width=100
        )
        return header, body, f"array({inner}, dtype={dtype})"
    return header, body, f"{header}\n{body}"


def _small_array(obj: Any) -> bool:
    return _int_attr(obj, "size") <= _ARRAY_INLINE


def _int_attr(obj: Any, name: str) -> int:
    # Attributes of a look-alike type may be anything; 0 means "unknown" and keeps the plain repr.
    try:
        value = getattr(obj, name, 0)
        return value if isinstance(value, int) else int(value)
    except ExecutionTimeout:
        raise
    except BaseException:
        return 0


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _MAX_NAME else text[: _MAX_NAME - 3] + "..."


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    size = n / 1024
    for unit in ("KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            break
        size /= 1024
    return f"{size:.1f} {unit}"


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    keep = text[: cut if cut > limit // 2 else limit]
    return f"{keep}\n[... {len(text) - len(keep):,} more characters]"
