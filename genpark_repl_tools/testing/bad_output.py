"""Output no frontend may choke on, and the text every boundary gives for it.

Each `BadOutput` is code an agent may run (under the trusted policy) that prints, returns or names
something awkward, with what the result must say. The rule (genpark_repl_tools/_text.py): every
string of a result encodes to UTF-8; what is not text becomes a Python backslash escape, lone
surrogates as `\\udcff` and bytes that are not UTF-8 as `\\xff`; control characters stay in the
data and are escaped in the observation. The conformance suite runs these on every boundary; the
CLI, MCP and LangChain tests run them through their frontends.

The expectations assume the default `Limits` except `timeout_s` (`BAD_OUTPUT_TIMEOUT_S`, generous: a
loaded machine still moves a megabyte in time; only the endless `__repr__` uses it up).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._models import ExecutionResult

__all__ = [
    "BAD_OUTPUTS",
    "BAD_OUTPUT_TIMEOUT_S",
    "FD1_BYTES",
    "FD1_STDOUT",
    "BadOutput",
    "bounded",
    "kind_of",
]

BAD_OUTPUT_TIMEOUT_S = 5.0
_OUTPUT_CHARS = 20_000  # Limits().max_output_chars
_REPR_CHARS = 2_000  # Limits().max_repr_chars


def bounded(text: str, limit: int = _OUTPUT_CHARS) -> str:
    """A stream of `text` as a result keeps it: head and tail, with the omitted count between."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-(limit - limit // 2) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail):,} characters omitted ...]\n{tail}"


@dataclass(frozen=True)
class BadOutput:
    """One kind of awkward output. A field left None is not pinned (compared across boundaries only)."""

    kind: str
    code: str
    status: str = "ok"
    stdout: str | None = ""
    stderr: str | None = ""
    value: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    created: tuple[str, ...] | None = None  # names of created variables, as the result shows them
    observation: tuple[str, ...] = ()  # snippets the observation contains
    value_pinned: bool = True  # False: `value` is not checked exactly (see `value_contains`)
    value_contains: tuple[str, ...] = ()


def kind_of(case: BadOutput) -> str:
    """The case's test id (`pytest.mark.parametrize(..., ids=kind_of)`)."""
    return case.kind


_ESCAPED_MB = "\\udcff" * 200_000 + "\n"

BAD_OUTPUTS: tuple[BadOutput, ...] = (
    BadOutput(
        "lone-surrogate",
        "print('\\udcff')",
        stdout="\\udcff\n",
        observation=("stdout:\n\\udcff",),
    ),
    BadOutput(
        "surrogateescape-bytes",
        "name = b'caf\\xe9'.decode('utf-8', 'surrogateescape')\nprint(name)\nname",
        stdout="caf\\udce9\n",
        value="'caf\\udce9'",
        created=("name",),
    ),
    BadOutput(
        "surrogate-on-stderr",
        "import sys\nprint('\\udcff', file=sys.stderr)",
        stderr="\\udcff\n",
    ),
    BadOutput(
        "nul-bytes",
        "print('a\\x00b')",
        stdout="a\x00b\n",
        observation=("stdout:\na\\x00b",),
    ),
    BadOutput(
        "ansi-escapes",
        "print('\\x1b[31mred\\x1b[0m plain')",
        stdout="\x1b[31mred\x1b[0m plain\n",
        observation=("stdout:\n\\x1b[31mred\\x1b[0m plain",),
    ),
    BadOutput(
        "invalid-utf8-on-stdout-buffer",
        "import sys\nwritten = sys.stdout.buffer.write(b'\\xff\\xfe ok\\n')",
        stdout="\\xff\\xfe ok\n",
    ),
    BadOutput(
        "megabyte-line",
        "print('x' * 1_000_000)",
        stdout=bounded("x" * 1_000_000 + "\n"),
    ),
    BadOutput(
        "megabyte-line-of-surrogates",
        "print('\\udcff' * 200_000)",
        stdout=bounded(_ESCAPED_MB),
    ),
    BadOutput(
        "megabyte-value-of-surrogates",
        "'\\udcff' * 1_000_000",
        value_pinned=False,
        value_contains=("'\\udcff\\udcff", "[shortened; len 1,000,000]"),
    ),
    BadOutput(
        "repr-raises",
        "class R:\n    def __repr__(self):\n        raise ValueError('no')\nR()",
        value="<repr failed: ValueError>",
    ),
    BadOutput(
        "repr-returns-non-string",
        "class R:\n    def __repr__(self):\n        return 42\nR()",
        value="<repr failed: TypeError>",
    ),
    BadOutput(
        "repr-returns-surrogates",
        "class R:\n    def __repr__(self):\n        return 'caf\\udce9'\nR()",
        value="caf\\udce9",
    ),
    BadOutput(
        "repr-returns-hostile-str-subclass",
        "class S(str):\n    def __len__(self):\n        raise ValueError\n    def __str__(self):\n"
        "        raise ValueError\nclass R:\n    def __repr__(self):\n        return S('hi \\udcff')\nR()",
        value="hi \\udcff",
    ),
    BadOutput(
        "repr-loops-forever",
        "class L:\n    def __repr__(self):\n        while True:\n            pass\nL()",
        status="timeout",
        error_type="Timeout",
    ),
    BadOutput(
        "error-message-with-surrogates",
        "raise ValueError('caf\\udce9')",
        status="error",
        error_type="ValueError",
        error_message="caf\\udce9",
        observation=("Error: ValueError: caf\\udce9",),
    ),
    BadOutput(
        "exception-str-raises",
        "class Bad(Exception):\n    def __str__(self):\n        raise ValueError\nraise Bad()",
        status="error",
        error_type="Bad",
    ),
    BadOutput(
        "odd-variable-names",
        "globals()['caf\\udce9'] = 1\nglobals()['two words\\n'] = 2\nglobals()[1] = 3\n"
        "globals()['n' * 5000] = 4",
        created=("caf\\udce9", "n" * _REPR_CHARS + "... [3,000 more characters]", "two words\n"),
    ),
)


def assert_bad_output(result: ExecutionResult, case: BadOutput) -> None:
    """`result` says what `case` expects; its observation shows control characters as escapes."""
    error = result.error
    assert result.status == case.status, result.to_observation()
    if case.stdout is not None:
        assert result.stdout == case.stdout
    if case.stderr is not None:
        assert result.stderr == case.stderr
    if case.value_pinned:
        assert result.value == case.value
    for part in case.value_contains:
        assert result.value is not None and part in result.value
    if case.error_type is not None:
        assert error is not None and error.type == case.error_type
    if case.error_message is not None:
        assert error is not None and error.message == case.error_message
    if case.created is not None:
        assert [v.name for v in result.changes.created] == list(case.created)
    assert_bad_text(result.to_observation(), case)


def assert_bad_text(text: str, case: BadOutput) -> None:
    """A frontend's text for `case`: UTF-8, with the expected snippets, control characters escaped."""
    text.encode("utf-8")
    for part in case.observation:
        assert part in text
    assert "\x1b" not in text and "\x00" not in text  # shown as escapes, never raw


# Bytes written straight to file descriptor 1 (os.write, C printf): the subprocess boundary captures
# them as stdout; in-process they go wherever fd 1 points (under `mcp`, the server's stderr).
FD1_BYTES = "import os\nwritten = os.write(1, b'\\xff\\xfe fd\\n')"
FD1_STDOUT = "\\xff\\xfe fd\n"
