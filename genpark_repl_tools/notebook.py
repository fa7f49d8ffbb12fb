"""A session's history as a Jupyter notebook, for review or for a person to replay (extra `notebook`).

    nb = engine.export_notebook("user-42", "user-42.ipynb")

Each run becomes a code cell with what it produced: stdout and stderr as streams, figures as
`image/png` display data, the trailing expression's value as the cell's result, and an error (or the
audit's refusal) as an error output. Each cell's metadata keeps the run's status, usage and call id
under `genpark_repl`. A reset becomes a Markdown cell. Values are the bounded reprs the model saw,
not the objects: re-running the notebook recomputes them.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ._exceptions import MissingDependency
from ._history import HistoryEntry
from ._models import ExecutionResult

__all__ = ["history_notebook"]


def _nbformat() -> Any:
    try:
        import nbformat
    except ImportError as exc:
        raise MissingDependency(
            "notebook export needs nbformat: pip install 'genpark-repl-tools[notebook]'"
        ) from exc
    return nbformat


def history_notebook(
    entries: Sequence[HistoryEntry],
    *,
    session: str,
    policy: str,
    boundary: str,
    dropped: int = 0,
    path: str | os.PathLike[str] | None = None,
) -> Any:
    """Build (and write to `path`, if given) the notebook of these history entries."""
    nbformat = _nbformat()
    v4 = nbformat.v4
    header = (
        f"Session `{session}` exported from genpark-repl-tools (policy `{policy}`, boundary `{boundary}`)."
    )
    if dropped:
        header += (
            f"\n\nThe session's first {dropped} runs are not included: the history keeps only the most "
            "recent ones (Limits.max_history_cells and max_history_bytes)."
        )
    cells = [v4.new_markdown_cell(header)]
    for entry in entries:
        if entry.kind == "reset" or entry.result is None:
            cells.append(v4.new_markdown_cell("*The session was reset here: every variable was deleted.*"))
            continue
        cells.append(_code_cell(v4, entry, entry.result))
    nb = v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python", "version": platform.python_version()},
            "genpark_repl": {
                "session": session,
                "policy": policy,
                "boundary": boundary,
                "exported_at": datetime.now(timezone.utc).isoformat(),
                "runs_not_included": dropped,
            },
        },
    )
    nbformat.validate(nb)
    if path is not None:
        nbformat.write(nb, os.fspath(path))
    return nb


def _code_cell(v4: Any, entry: HistoryEntry, result: ExecutionResult) -> Any:
    count = result.execution_count or None
    outputs: list[Any] = []
    if result.stdout:
        outputs.append(v4.new_output("stream", name="stdout", text=result.stdout))
    if result.stderr:
        outputs.append(v4.new_output("stream", name="stderr", text=result.stderr))
    for attachment in result.attachments:
        metadata: dict[str, Any] = {}
        if attachment.width and attachment.height:
            metadata[attachment.mime_type] = {"width": attachment.width, "height": attachment.height}
        outputs.append(
            v4.new_output(
                "display_data",
                data={
                    attachment.mime_type: attachment.data_base64,
                    "text/plain": attachment.description or "<figure>",
                },
                metadata=metadata,
            )
        )
    if result.value is not None:
        outputs.append(
            v4.new_output("execute_result", data={"text/plain": result.value}, execution_count=count)
        )
    error = result.error
    if error is not None and result.status != "ok":
        if result.status == "blocked":
            lines = [f"line {f.line}: {f.message}" if f.line else f.message for f in result.findings]
        else:
            lines = error.traceback.splitlines() or [f"{error.type}: {error.message}"]
        outputs.append(v4.new_output("error", ename=error.type, evalue=error.message, traceback=lines))
    metadata = {
        "genpark_repl": {
            "status": result.status,
            "execution_count": result.execution_count,
            "duration_ms": result.duration_ms,
            "usage": result.usage.model_dump(mode="json"),
            "call_id": entry.call_id,
            "at": entry.at.isoformat(),
            "notes": list(result.notes),
        }
    }
    return v4.new_code_cell(source=entry.code, execution_count=count, outputs=outputs, metadata=metadata)
