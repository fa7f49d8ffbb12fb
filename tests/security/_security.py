"""Helpers for the security suite: fresh sessions per snippet, one way to read a refusal."""

from __future__ import annotations

import itertools
import os

from genpark_repl_tools import ExecutionResult, ReplEngine

ALLOWED_STRICT = (
    "abc, array, base64, binascii, bisect, calendar, cmath, collections, colorsys, copy, csv, dataclasses, "
    "datetime, decimal, difflib, enum, fractions, functools, graphlib, hashlib, heapq, hmac, html, io, "
    "itertools, json, keyword, math, numbers, operator, pprint, queue, random, re, secrets, statistics, "
    "string, struct, textwrap, time, typing, unicodedata, uuid, zoneinfo"
)
ALLOWED_STANDARD = (
    "abc, array, base64, binascii, bisect, calendar, cmath, collections, colorsys, copy, csv, dataclasses, "
    "datetime, decimal, difflib, enum, fractions, functools, graphlib, hashlib, heapq, hmac, html, io, "
    "itertools, json, keyword, math, matplotlib, mpl_toolkits, numbers, numpy, operator, pandas, pathlib, "
    "pprint, queue, random, re, scipy, secrets, statistics, string, struct, textwrap, time, typing, "
    "unicodedata, uuid, zoneinfo"
)

# (policy, boundary) pairs every engine fixture of the suite runs under.
BOUNDARIES = tuple(os.environ.get("GENPARK_SECURITY_BOUNDARIES", "inprocess,subprocess").split(","))
PARAMS = [(policy, boundary) for boundary in BOUNDARIES for policy in ("strict", "standard")]

_sessions = itertools.count()


def run(engine: ReplEngine, code: str) -> ExecutionResult:
    """Run `code` in a session of its own, so snippets never see each other's state.

    On the subprocess boundary the session (its worker process) is closed right after.
    """
    session = f"snippet-{next(_sessions)}"
    try:
        return engine.run(code, session=session)
    finally:
        if engine.boundary.name != "inprocess":
            engine.close(session)


def refusal(result: ExecutionResult) -> str:
    """The policy's message for a refused snippet, whether refused before running or while running."""
    if result.status == "blocked":
        assert result.findings, result.to_observation()
        assert result.error is not None and result.error.type == "PolicyViolation"
        return result.findings[0].message
    assert result.status == "error", result.to_observation()
    assert result.error is not None
    assert result.error.type == "PolicyViolation", result.to_observation()
    return result.error.message


def blocked(result: ExecutionResult) -> str:
    """The audit's message for a snippet refused before anything ran."""
    assert result.status == "blocked", result.to_observation()
    assert result.changes.is_empty()
    return result.findings[0].message


def ok(result: ExecutionResult) -> ExecutionResult:
    assert result.status == "ok", result.to_observation()
    return result


def allowed_modules(policy: str) -> str:
    return ALLOWED_STRICT if policy == "strict" else ALLOWED_STANDARD


def assert_import_refused(message: str, module: str, policy: str) -> None:
    """An import refusal names the module and the policy, then a short list of allowed modules that are
    importable here (closest to the refused name first) and how many more there are."""
    head = f"import of '{module}' is not allowed under policy '{policy}'; allowed include: "
    assert message.startswith(head), message
    listed, _, more = message[len(head) :].rpartition(" and ")
    names = listed.split(", ")
    assert more.endswith(" more") and int(more.split()[0]) > 0, message
    assert len(names) == 16 and "math" in names and "json" in names, message
    full = allowed_modules(policy).split(", ")
    assert set(names) <= set(full), message
    assert len(names) + int(more.split()[0]) <= len(full), message
