"""The core engine used directly: sessions, output, an error, a refusal, a timeout, introspection.

Run it with:  python3 scripts/dev.py demo
"""

from __future__ import annotations

from genpark_repl_tools import Limits, ReplEngine


def show(title: str, text: str) -> None:
    print(f"\n=== {title}")
    print(text)


def main() -> None:
    with ReplEngine(limits=Limits(timeout_s=2)) as engine:
        # A session keeps its namespace between calls; the trailing expression's value comes back.
        engine.run("import statistics\nprices = [12.5, 14.0, 13.25, 15.5]", session="alice")
        result = engine.run("print('mean:', statistics.mean(prices))\nmax(prices)", session="alice")
        show("alice: output and value", result.to_observation())

        # Another session is another namespace.
        show("bob cannot see alice's variables", engine.run("prices", session="bob").to_observation())

        # Functions see the session's variables and themselves (recursion works).
        code = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n[fib(i) for i in range(10)]"
        show("recursion", engine.run(code, session="alice").to_observation())

        # An error points at the failing line, with only the user's own frames.
        show(
            "an error",
            engine.run("ratios = [p / (p - 14.0) for p in prices]", session="alice").to_observation(),
        )

        # The default policy ("standard") refuses what it does not allow before anything runs.
        refused = engine.run("import subprocess", session="alice")
        show("a refusal (policy 'standard')", refused.to_observation())

        # A runaway loop is stopped at the timeout; the session survives.
        result = engine.run("n = 0\nwhile True:\n    n += 1", session="alice")
        show(f"a timeout (status={result.status})", result.to_observation())
        show("the session still answers", engine.run("n > 0, len(prices)", session="alice").to_observation())

        # Introspection never renders a huge object in full.
        engine.run("big = list(range(1_000_000))", session="alice")
        info = engine.inspect("big", session="alice")
        show("inspect('big')", f"type={info.type} len={info.len} repr={info.repr[:60]}...")
        show("variables", ", ".join(f"{v.name}: {v.type}" for v in engine.variables(session="alice")))

        # Telemetry is a pydantic model that dumps to plain JSON.
        result = engine.run("total = sum(prices)\ntotal", session="alice")
        show("telemetry (JSON)", result.model_dump_json(indent=2, include={"status", "value", "changes"}))


if __name__ == "__main__":
    main()
