"""What the proxy did with each connection, and the one line a run's observation shows for them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

Verdict = Literal["allowed", "refused", "failed"]


class ConnectionRecord(BaseModel):
    """One connection a session opened through the proxy, recorded when it ends.

    `host` is the name (or IP literal) the client asked for, empty when its request could not be read;
    `verdict` is "allowed" (the proxy connected it), "refused" (policy, limits or a malformed request)
    or "failed" (allowed, but the server could not be reached); `reason` says why for the last two, and
    why an allowed connection was cut short (a byte limit, a timeout).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    session: str
    host: str
    port: int
    method: str
    verdict: Verdict
    reason: str = ""
    address: str | None = None
    bytes_up: int = 0
    bytes_down: int = 0


def _names(counts: Counter[str], limit: int = 3) -> str:
    shown = [name or "(unreadable request)" for name, _ in counts.most_common(limit)]
    rest = len(counts) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest > 0 else "")


def summarise(records: Iterable[ConnectionRecord]) -> str:
    """One line for a run's observation, e.g. "network: 2 connections to api.example.com; 1 refused:
    evil.example". Empty when there were no connections."""
    allowed: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for record in records:
        {"allowed": allowed, "refused": refused, "failed": failed}[record.verdict][record.host] += 1
    parts = []
    if allowed:
        total = sum(allowed.values())
        parts.append(f"{total} connection{'s' if total != 1 else ''} to {_names(allowed)}")
    if refused:
        parts.append(f"{sum(refused.values())} refused: {_names(refused)}")
    if failed:
        parts.append(f"{sum(failed.values())} failed: {_names(failed)}")
    return "network: " + "; ".join(parts) if parts else ""
