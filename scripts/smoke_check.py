"""What a user sees first, on an installed (not editable) genpark-repl-tools: `scripts/dev.py smoke` runs it.

Each check is a claim of the README: its example, a file read outside the workspace refused under
"standard", pandas, a matplotlib figure returned as a PNG attachment, a snapshot round trip through
bytes into a second engine, and a session in a subprocess worker. Exits non-zero with every failed check.
"""

from __future__ import annotations

import base64
import os
import platform
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from genpark_repl_tools import Limits, ReplEngine

KEY = b"smoke-check-snapshot-key-32-byte"


def installed_copy() -> None:
    import genpark_repl_tools

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(genpark_repl_tools.__file__).resolve()
    assert where.is_relative_to(site), f"imported from {where}, not from the venv's {site}"


def readme_example() -> None:
    with ReplEngine(limits=Limits(timeout_s=5)) as engine:
        engine.run("import statistics\nprices = [12.5, 14.0, 13.25]", session="user-42")
        result = engine.run("statistics.mean(prices)", session="user-42")
        assert (result.status, result.value) == ("ok", "13.25"), (result.status, result.value)
        assert result.to_observation() == "OK\nOut: 13.25", result.to_observation()


def refused_read() -> None:
    with ReplEngine(policy="standard") as engine:
        result = engine.run("open('/etc/passwd').read()")
        observation = result.to_observation()
        assert result.status == "blocked", observation  # refused by a runtime guard: blocked, like the audit
        assert "opening '/etc/passwd' is not allowed under policy 'standard'" in observation, observation
        # Its neighbour: a file inside the session's workspace.
        done = engine.run("open('notes.txt', 'w').write('kept')\nopen('notes.txt').read()")
        assert (done.status, done.value) == ("ok", "'kept'"), done.to_observation()


def pandas_frame() -> None:
    with ReplEngine() as engine:
        code = (
            "import pandas as pd\ndf = pd.DataFrame({'price': [12.5, 14.0, 13.25]})\nfloat(df['price'].sum())"
        )
        result = engine.run(code)
        assert (result.status, result.value) == ("ok", "39.75"), result.to_observation()


def figure_attachment() -> None:
    with ReplEngine() as engine:
        code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('smoke')\nplt.show()"
        result = engine.run(code)
        assert result.status == "ok", result.to_observation()
        assert len(result.attachments) == 1, result.attachments
        image = result.attachments[0]
        assert image.mime_type == "image/png", image.mime_type
        assert base64.b64decode(image.data_base64).startswith(b"\x89PNG\r\n\x1a\n")


def snapshot_round_trip() -> None:
    with ReplEngine(snapshot_key=KEY) as engine:
        result = engine.run("prices = [12.5, 14.0]\nlabels = {'a': prices}\nimport math", session="s")
        assert result.status == "ok", result.to_observation()
        blob = engine.snapshot("s").to_bytes()
    with ReplEngine(snapshot_key=KEY) as other:
        restored = other.restore("t", blob)
        assert not restored.not_saved and not restored.failed, restored
        result = other.run("labels['a'] is prices, math.floor(sum(prices))", session="t")
        assert (result.status, result.value) == ("ok", "(True, 26)"), result.to_observation()


def subprocess_session() -> None:
    # "trusted" so the code may ask for its process id; the session still runs in its own worker.
    with ReplEngine(boundary="subprocess", policy="trusted", limits=Limits(timeout_s=30)) as engine:
        first = engine.run("import os\nx = 21", session="w")
        assert first.status == "ok", first.to_observation()
        result = engine.run("os.getpid(), x * 2", session="w")
        assert result.status == "ok" and result.value is not None, result.to_observation()
        pid, answer = result.value.strip("()").split(", ")
        assert answer == "42", result.value
        assert int(pid) != os.getpid(), "the session ran in this process"


CHECKS: list[Callable[[], None]] = [
    installed_copy,
    readme_example,
    refused_read,
    pandas_frame,
    figure_attachment,
    snapshot_round_trip,
    subprocess_session,
]


def main() -> int:
    failed = 0
    for check in CHECKS:
        try:
            check()
        except Exception as exc:  # every check reports, then the exit status says whether all passed
            failed += 1
            print(f"  FAIL {check.__name__}: {type(exc).__name__}: {exc}", flush=True)
        else:
            print(f"  ok   {check.__name__}", flush=True)
    version = platform.python_version()
    print(f"smoke check on Python {version}: {len(CHECKS) - failed} of {len(CHECKS)} passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
