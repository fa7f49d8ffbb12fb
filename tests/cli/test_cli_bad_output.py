"""Bad output through `genpark-repl run` as a real process: a sane exit code, and stdout that is the
report alone, valid UTF-8 (and valid JSON with --json), whatever the code printed, returned or named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from genpark_repl_tools import ExecutionResult
from genpark_repl_tools.testing.bad_output import (
    BAD_OUTPUT_TIMEOUT_S,
    BAD_OUTPUTS,
    FD1_BYTES,
    FD1_STDOUT,
    BadOutput,
    assert_bad_output,
    assert_bad_text,
    kind_of,
)

ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 120
EXIT_CODES = {"ok": 0, "error": 1, "timeout": 4}

# Below sys.stdout, from Python and from C: in-process, nothing captures these.
C_PRINTF = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.printf(b'garbage from printf\\n')\n"
    "flushed = libc.fflush(None)\n"
)


def run(
    code: str, *options: str, timeout_s: float = BAD_OUTPUT_TIMEOUT_S
) -> subprocess.CompletedProcess[bytes]:
    args = [sys.executable, "-m", "genpark_repl_tools.cli", "run", "--policy", "trusted"]
    args += ["--timeout", str(timeout_s), *options, "-"]
    return subprocess.run(
        args,
        input=code.encode("utf-8"),
        capture_output=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        check=False,
    )


def case_timeout(case: BadOutput) -> float:
    # The endless __repr__ is stopped sooner: waiting out the generous limit proves nothing more.
    return 1.0 if case.status == "timeout" else BAD_OUTPUT_TIMEOUT_S


def report(done: subprocess.CompletedProcess[bytes]) -> ExecutionResult:
    assert b"Traceback" not in done.stderr, done.stderr.decode("utf-8", "backslashreplace")
    return ExecutionResult.model_validate(json.loads(done.stdout.decode("utf-8")))


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
@pytest.mark.parametrize("case", BAD_OUTPUTS, ids=kind_of)
def test_run_json_reports_every_bad_output(case: BadOutput, boundary: str) -> None:
    done = run(case.code, "--json", "--boundary", boundary, timeout_s=case_timeout(case))
    result = report(done)
    assert done.returncode == EXIT_CODES[case.status]
    assert_bad_output(result, case)


@pytest.mark.parametrize("case", BAD_OUTPUTS, ids=kind_of)
def test_run_prints_every_bad_output_as_utf8_text(case: BadOutput) -> None:
    done = run(case.code, timeout_s=case_timeout(case))
    assert done.returncode == EXIT_CODES[case.status]
    assert b"Traceback" not in done.stderr
    assert_bad_text(done.stdout.decode("utf-8"), case)


def test_subprocess_boundary_captures_bytes_written_to_fd1() -> None:
    done = run(FD1_BYTES, "--json", "--boundary", "subprocess")
    assert done.returncode == 0
    assert report(done).stdout == FD1_STDOUT


@pytest.mark.parametrize(
    ("code", "garbage"),
    [(FD1_BYTES, b"\xff\xfe fd\n"), (C_PRINTF, b"garbage from printf\n")],
    ids=["os.write", "printf"],
)
def test_in_process_fd1_writes_stay_out_of_the_json(code: str, garbage: bytes) -> None:
    done = run(code, "--json", "--boundary", "inprocess")
    assert done.returncode == 0
    result = report(done)  # stdout is the JSON report alone
    assert (result.status, result.stdout) == ("ok", "")
    assert garbage in done.stderr  # still visible, on stderr
