"""The core engine used directly: sessions, output, an error, a refusal, a timeout, introspection.

Each step prints the code it runs and the observation a model would read back.

Run it with:  python3 scripts/dev.py demo
"""

from __future__ import annotations

from genpark_repl_tools import Limits, ReplEngine


def step(engine: ReplEngine, title: str, code: str, session: str = "alice") -> None:
    print(f"\n=== {title}  [session {session!r}]")
    print("".join(f">>> {line}\n" if i == 0 else f"... {line}\n" for i, line in enumerate(code.splitlines())))
    print(engine.run(code, session=session).to_observation())


def main() -> None:
    # Policy "standard"; on Linux each session runs in its own sandboxed worker process.
    with ReplEngine(limits=Limits(timeout_s=2)) as engine:
        # A session keeps its namespace between calls; the trailing expression's value comes back.
        step(engine, "a session keeps its variables", "import statistics\nprices = [12.5, 14.0, 13.25, 15.5]")
        step(engine, "output and value", "print('mean:', statistics.mean(prices))\nmax(prices)")

        # Another session is another namespace.
        step(engine, "bob cannot see alice's variables", "prices", session="bob")

        # Functions see the session's variables and themselves (recursion works).
        step(
            engine,
            "recursion",
            "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n[fib(i) for i in range(10)]",
        )

        # An error points at the failing line, with only the user's own frames.
        step(engine, "an error", "ratios = [p / (p - 14.0) for p in prices]")

        # The default policy ("standard") refuses what it does not allow before anything runs.
        step(engine, "a refusal (policy 'standard')", "import subprocess")

        # A runaway loop is stopped at the timeout; the session survives.
        step(engine, "a timeout", "n = 0\nwhile True:\n    n += 1")
        step(engine, "the session still answers", "n > 0, len(prices)")

        # Introspection never renders a huge object in full.
        step(engine, "a big value", "big = list(range(1_000_000))")
        info = engine.inspect("big", session="alice")
        print("\n=== engine.inspect('big', session='alice')")
        print(info.to_observation())

        # Telemetry is a pydantic model that dumps to plain JSON.
        result = engine.run("total = sum(prices)\ntotal", session="alice")
        print("\n=== engine.run('total = sum(prices)\\ntotal').model_dump_json(...)")
        print(result.model_dump_json(indent=2, include={"status", "value", "changes"}))


if __name__ == "__main__":
    main()
