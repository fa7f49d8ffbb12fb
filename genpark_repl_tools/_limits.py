"""Resource limits for one execution and for the session that runs it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """What one execution may use.

    The in-process boundary enforces `timeout_s` (pure-Python code and `time.sleep`), and the output
    and repr bounds. `memory_mb`, `cpu_s`, `max_open_files` and `max_file_size_mb` need an OS process
    to hold them: the subprocess boundary enforces them, the in-process boundary reports them as not
    enforced (see `ReplEngine.describe()`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(30.0, gt=0, description="Wall-clock seconds one execution may take.")
    max_output_chars: int = Field(
        20_000, ge=200, description="Characters kept per stream (stdout, stderr): head and tail."
    )
    max_repr_chars: int = Field(2_000, ge=40, description="Characters kept of any value's repr.")
    max_code_chars: int = Field(500_000, ge=100, description="Largest piece of code accepted in one call.")
    max_sessions: int | None = Field(None, gt=0, description="Live sessions one engine may hold.")
    max_observation_chars: int = Field(
        12_000, ge=500, description="Character budget of the text rendered for a model."
    )
    memory_mb: int | None = Field(None, gt=0, description="Address-space cap (subprocess boundary).")
    cpu_s: float | None = Field(None, gt=0, description="CPU seconds per worker (subprocess boundary).")
    max_open_files: int | None = Field(None, gt=0, description="Open file descriptors (subprocess boundary).")
    max_file_size_mb: int | None = Field(
        None, gt=0, description="Largest file written (subprocess boundary)."
    )
    max_figures: int = Field(
        default=4,
        ge=0,
        description="Matplotlib figures attached per execution as PNG (0: none); all are closed.",
    )
    figure_dpi: int = Field(default=100, ge=20, le=600, description="Resolution figures are rendered at.")
    max_figure_bytes: int = Field(
        default=1_000_000,
        ge=10_000,
        description="Largest PNG attached; larger figures are re-rendered at lower dpi.",
    )
    # ---- observability and accounting: enforced by the engine, for every boundary ----
    max_session_calls: int | None = Field(
        None, gt=0, description="Runs one session may make; later runs are refused (a budget)."
    )
    max_session_cpu_s: float | None = Field(
        None,
        gt=0,
        description="CPU seconds one session may use over all its runs; checked before each run.",
    )
    max_history_cells: int = Field(
        0,
        ge=0,
        description="Runs kept per session for engine.history() and notebook export (0, the default: none).",
    )
    max_history_bytes: int = Field(
        2_000_000, ge=0, description="Characters of code, output and figures kept per session's history."
    )
    max_tool_calls: int | None = Field(
        None,
        ge=0,
        description="Host tool calls one run may make (None: no limit); later calls raise ToolError.",
    )
    # ---- files in and out of a session: enforced by the host for uploads ----
    max_upload_bytes: int = Field(
        50_000_000, gt=0, description="Largest file the host uploads into or downloads from a workspace."
    )
    max_workspace_bytes: int = Field(
        500_000_000, gt=0, description="Bytes one session's workspace may hold; uploads beyond are refused."
    )
    max_snapshot_bytes: int | None = Field(
        128 * 1024 * 1024,
        gt=0,
        description="Largest session snapshot made, restored or taken from a worker (None: no limit).",
    )
