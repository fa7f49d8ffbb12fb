"""Accounting per session: cumulative usage and the budgets of `Limits`.

The engine keeps the ledger, so figures and budgets work the same on every boundary. A run is
charged what its result reports; a run whose worker was killed reports no CPU time and is charged
its wall time instead (so crashing on purpose does not spend CPU for free). A reported CPU time is
believed only when it could be true: finite, not negative, and no more than the run's wall time (as
the host measured it) on every core of the host; otherwise the run is charged its deadline, never
less, so a worker that lies (NaN, a negative number) cannot refill its budget.
"""

from __future__ import annotations

import math
import os
import threading

from pydantic import BaseModel, ConfigDict, Field

from ._limits import Limits
from ._models import ErrorInfo, ExecutionResult

__all__ = ["Ledger", "SessionUsage"]


class SessionUsage(BaseModel):
    """What one session has used so far, and what its budget leaves."""

    model_config = ConfigDict(extra="forbid")

    session: str
    calls: int = Field(0, description="Runs made (budget refusals not included).")
    cpu_s: float = Field(0.0, description="CPU seconds over all runs (see ExecutionResult.usage).")
    cpu_estimated: bool = Field(
        False,
        description=(
            "Some runs reported no CPU time (worker killed) and were charged wall time, or reported one "
            "that cannot be true and were charged their deadline."
        ),
    )
    wall_s: float = 0.0
    tool_calls: int = Field(0, description="Host tool calls over all runs.")
    tool_s: float = Field(0.0, description="Seconds the host spent in those tool calls.")
    peak_memory_mb: float | None = Field(None, description="Highest peak memory a run reported.")
    statuses: dict[str, int] = Field(default_factory=dict, description="Runs per result status.")
    refused: int = Field(0, description="Runs refused because the budget was spent.")
    max_calls: int | None = None
    max_cpu_s: float | None = None
    remaining_calls: int | None = None
    remaining_cpu_s: float | None = None


class _Account:
    __slots__ = (
        "calls",
        "count",
        "cpu_s",
        "estimated",
        "peak_mb",
        "refused",
        "statuses",
        "tool_calls",
        "tool_s",
        "wall_s",
    )

    def __init__(self) -> None:
        self.calls = 0
        self.count = 0  # the session's execution_count as last reported
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.estimated = False
        self.peak_mb: float | None = None
        self.statuses: dict[str, int] = {}
        self.refused = 0
        self.tool_calls = 0
        self.tool_s = 0.0


class Ledger:
    """Per-session totals. Thread-safe: one lock, held for a few dict operations per run."""

    def __init__(self, limits: Limits) -> None:
        self.max_calls = limits.max_session_calls
        self.max_cpu_s = limits.max_session_cpu_s
        self.budgeted = self.max_calls is not None or self.max_cpu_s is not None
        self.timeout_s = limits.timeout_s
        self.cores = os.cpu_count() or 1
        self._accounts: dict[str, _Account] = {}
        self._lock = threading.RLock()  # see record

    def admit(self, session: str, policy: str, boundary: str) -> tuple[ExecutionResult, str] | None:
        """Reserve a call for `session`: None if it may run, else (the refusal, the rule spent).

        Without budgets there is nothing to reserve: `record` counts the call.
        """
        if not self.budgeted:
            return None
        with self._lock:
            account = self._accounts.get(session)
            if account is None:
                account = self._accounts[session] = _Account()
            spent = self._spent(account)
            if spent is None:
                account.calls += 1  # reserved now, so concurrent calls cannot all pass the last slot
                return None
            account.refused += 1
            count = account.count
        rule, message = spent
        refusal = ExecutionResult(
            status="error",
            session=session,
            execution_count=count,
            policy=policy,
            boundary=boundary,
            error=ErrorInfo(
                type="BudgetExceeded",
                message=message,
                hint="Nothing ran and the variables are unchanged. Tell the user the budget is spent.",
            ),
        )
        return refusal, rule

    def _spent(self, account: _Account) -> tuple[str, str] | None:
        if self.max_calls is not None and account.calls >= self.max_calls:
            return "calls", f"this session has used its budget of {self.max_calls} runs; nothing ran"
        if self.max_cpu_s is not None and account.cpu_s >= self.max_cpu_s:
            return "cpu", (
                f"this session has used its CPU budget ({account.cpu_s:.2f} s of {self.max_cpu_s:g} s); "
                "nothing ran"
            )
        return None

    def release(self, session: str) -> None:
        """Give back a reserved call that ran nothing (the boundary raised)."""
        if not self.budgeted:
            return
        with self._lock:
            account = self._accounts.get(session)
            if account is not None and account.calls:
                account.calls -= 1

    def charge(
        self, cpu_ms: float | None, wall_s: float, timeout_s: float | None = None
    ) -> tuple[float, bool]:
        """The CPU seconds a run is charged, and whether they are an estimate (not what it reported)."""
        if cpu_ms is None:  # the worker was killed before it could report
            return wall_s, True
        cpu_s = cpu_ms / 1000
        # Clock granularity and rounding: a run near zero may read a few milliseconds over its wall.
        most = wall_s * self.cores + 0.05
        if math.isfinite(cpu_s) and 0.0 <= cpu_s <= most:
            return cpu_s, False
        return max(timeout_s or self.timeout_s, wall_s), True

    def record(self, result: ExecutionResult, wall_s: float, timeout_s: float | None = None) -> int:
        """Charge `result` to its session; returns the number of sessions with an account.
        `timeout_s` is the run's deadline (None: Limits.timeout_s), charged for a CPU time that
        cannot be true."""
        # The result is read before the lock is taken: the lock is held for the sums only.
        usage = result.usage
        cpu_s, estimated = self.charge(usage.cpu_ms, wall_s, timeout_s)
        peak = usage.peak_memory_mb
        if peak is not None and not (math.isfinite(peak) and peak >= 0):
            peak = None  # a figure that cannot be true would stick as the high-water mark
        session = result.session
        status = result.status
        count = result.execution_count
        # Not `with` (nor acquire() before the try): from 3.13 a KeyboardInterrupt can surface right
        # after acquire() returns and would leave the lock held; in the try it reaches the finally,
        # where an RLock's release refuses if this thread does not hold it.
        try:
            self._lock.acquire()
            account = self._accounts.get(session)
            if self.budgeted:
                if account is None:  # forgotten (closed) while the call ran: nothing to charge
                    return len(self._accounts)
            else:
                if account is None:
                    account = self._accounts[session] = _Account()
                account.calls += 1
            account.count = count
            account.wall_s += wall_s
            account.cpu_s += cpu_s
            if estimated:
                account.estimated = True
            if usage.tool_calls:
                account.tool_calls += usage.tool_calls
                account.tool_s += usage.tool_ms / 1000
            if peak is not None and (account.peak_mb is None or peak > account.peak_mb):
                account.peak_mb = peak
            statuses = account.statuses
            statuses[status] = statuses.get(status, 0) + 1
            return len(self._accounts)
        finally:
            try:  # noqa: SIM105 - not contextlib.suppress: its __enter__ is a call an interrupt can follow
                self._lock.release()
            except RuntimeError:  # not held: interrupted before acquire() returned
                pass

    def usage(self, session: str) -> SessionUsage:
        with self._lock:
            account = self._accounts.get(session) or _Account()
            return SessionUsage(
                session=session,
                calls=account.calls,
                cpu_s=round(account.cpu_s, 6),
                cpu_estimated=account.estimated,
                wall_s=round(account.wall_s, 6),
                tool_calls=account.tool_calls,
                tool_s=round(account.tool_s, 6),
                peak_memory_mb=account.peak_mb,
                statuses=dict(account.statuses),
                refused=account.refused,
                max_calls=self.max_calls,
                max_cpu_s=self.max_cpu_s,
                remaining_calls=None if self.max_calls is None else max(0, self.max_calls - account.calls),
                remaining_cpu_s=None
                if self.max_cpu_s is None
                else round(max(0.0, self.max_cpu_s - account.cpu_s), 6),
            )

    def forget(self, session: str) -> None:
        with self._lock:
            self._accounts.pop(session, None)

    def __len__(self) -> int:
        """Sessions with an account."""
        return len(self._accounts)

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._accounts)
