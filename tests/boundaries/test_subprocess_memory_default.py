"""The subprocess boundary caps a worker's memory by default, and a memory error says which limit."""

from __future__ import annotations

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.boundaries.subprocess import DEFAULT_MEMORY_MB


def test_a_default_memory_cap_protects_the_host() -> None:
    with ReplEngine(policy="trusted", boundary="subprocess") as engine:
        assert engine.limits.memory_mb == DEFAULT_MEMORY_MB
        assert (
            engine.describe()["enforced"]["memory_limit"] == f"RLIMIT_AS {DEFAULT_MEMORY_MB} MiB per worker"
        )
        engine.run("kept = 1")
        result = engine.run(f"x = bytearray({DEFAULT_MEMORY_MB + 1024} * 1024**2)")
        assert result.error is not None and result.error.type == "MemoryError"
        assert result.error.message == (
            f"the worker's memory limit of {DEFAULT_MEMORY_MB} MiB (Limits.memory_mb) was reached"
        )
        assert engine.run("kept").value == "1"


def test_a_chosen_limit_wins_and_the_default_can_be_lifted() -> None:
    with ReplEngine(boundary="subprocess", limits=Limits(memory_mb=1024)) as engine:
        assert engine.limits.memory_mb == 1024
    with ReplEngine(boundary="subprocess", default_memory_mb=None) as engine:
        assert engine.limits.memory_mb is None
        assert engine.describe()["enforced"]["memory_limit"] is False


def test_in_process_a_memory_error_says_out_of_memory_without_claiming_a_limit() -> None:
    with ReplEngine(boundary="inprocess", policy="trusted") as engine:
        result = engine.run("raise MemoryError")
    assert result.error is not None and result.error.message == "out of memory"
