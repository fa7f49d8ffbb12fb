"""Carriage-return progress bars collapse to their latest state (BoundedText, squash_returns)."""

from __future__ import annotations

import pytest

from genpark_repl_tools._capture import BoundedText, StreamingText, squash_returns


def written(chunks: list[str], limit: int = 10_000) -> str:
    text = BoundedText(limit)
    for chunk in chunks:
        text.write(chunk)
    return text.getvalue()


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        (["a\n", "\r10%", "\r20%", "\r100%\n", "done\n"], "a\n100%\ndone\n"),
        (["10%\r", "20%\r", "done\n"], "done\n"),
        (["x\r\n", "y\r", "\n"], "x\r\ny\r\n"),  # CRLF line ends are kept as written
        (["a\rb\rc"], "c"),
        (["keep\nold", "\rnew"], "keep\nnew"),
        (["no return\n"], "no return\n"),
    ],
)
def test_a_return_restarts_the_line(chunks: list[str], expected: str) -> None:
    assert written(chunks) == expected


def test_ten_thousand_redraws_leave_one_line() -> None:
    text = BoundedText(1000)
    for i in range(10_000):
        text.write(f"\r{i:5d}/10000 |{'#' * (i // 500):20s}|")
    text.write("\n")
    assert text.getvalue() == f"\r{9999:5d}/10000 |{'#' * 19:20s}|\n".lstrip("\r")
    assert not text.truncated


def test_a_redraw_after_truncation_erases_only_the_tail_line() -> None:
    text = BoundedText(40)
    for i in range(100):
        text.write(f"line {i}\n")
    text.write("\rbar 1")
    text.write("\rbar 2")
    value = text.getvalue()
    assert text.truncated
    assert value.startswith("line 0\n")
    assert value.endswith("line 99\nbar 2")
    assert "bar 1" not in value


@pytest.mark.parametrize(
    "text", ["abc\nX\rA\rB\nq\r", "\r1\r2\r3\n\r4", "plain\n", "a\r\nb\rc\r\r\nd", "\r\r\rx"]
)
def test_squashed_text_writes_the_same_result(text: str) -> None:
    assert written([squash_returns(text)]) == written([text])
    assert squash_returns(text).count("\r") <= text.count("\r")


def test_streaming_text_emits_within_the_bounds_only() -> None:
    seen: list[tuple[str, str]] = []
    text = StreamingText(20, seen.append, "stderr")
    for i in range(10):
        text.write(f"{i}abc\n")
    assert {name for name, _ in seen} == {"stderr"}
    assert "".join(t for _, t in seen) == "0abc\n1abc\n2abc\n3abc\n"  # the first 20 characters, then quiet
    assert text.truncated


def test_a_write_crossing_the_bound_emits_its_part_within_it() -> None:
    # The subprocess host decodes its pipe 64 KiB at a time: one write can cross the bound.
    seen: list[tuple[str, str]] = []
    text = StreamingText(100, seen.append)
    text.write("x" * 30)
    text.write("y" * 1000)
    assert "".join(t for _, t in seen) == "x" * 30 + "y" * 70
    assert text.getvalue().startswith("x" * 30 + "y" * 20)


def test_streamed_text_is_the_kept_text_with_redraws() -> None:
    seen: list[tuple[str, str]] = []
    text = StreamingText(1000, seen.append)
    for chunk in ["a\n", "\r1", "\r2", "\r3\n", "b\n"]:
        text.write(chunk)
    assert written([squash_returns("".join(t for _, t in seen))]) == text.getvalue() == "a\n3\nb\n"
