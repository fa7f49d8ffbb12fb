"""The compile cache: two generations, a lock-free hit, a bound on what it holds."""

from __future__ import annotations

import threading

from genpark_repl_tools import _compile
from genpark_repl_tools._compile import compile_cell
from genpark_repl_tools.policy import runtime_for
from genpark_repl_tools.policy._model import Policy

TRUSTED = runtime_for(Policy.trusted())
STRICT = runtime_for(Policy.strict())


def _held() -> int:
    return sum(len(generation) for generation in _compile._generations)


def test_a_cell_run_again_is_the_same_compiled_cell() -> None:
    first = compile_cell("cache_probe = 1", TRUSTED)
    assert compile_cell("cache_probe = 1", TRUSTED) is first


def test_policies_do_not_share_cells() -> None:
    assert compile_cell("shared_probe = 2", TRUSTED) is not compile_cell("shared_probe = 2", STRICT)


def test_a_cell_used_once_per_generation_stays() -> None:
    hot = compile_cell("hot_probe = 3", TRUSTED)
    for n in range(4 * _compile._GENERATION):
        compile_cell(f"cold_probe = {n}", TRUSTED)
        if n % (_compile._GENERATION // 2) == 0:
            assert compile_cell("hot_probe = 3", TRUSTED) is hot


def test_a_cell_not_used_for_two_generations_is_dropped() -> None:
    gone = compile_cell("gone_probe = 4", TRUSTED)
    for n in range(2 * _compile._GENERATION):
        compile_cell(f"filler_probe = {n}", TRUSTED)
    again = compile_cell("gone_probe = 4", TRUSTED)
    assert again is not gone and again.source == gone.source


def test_the_cache_holds_at_most_two_generations() -> None:
    for n in range(5 * _compile._GENERATION):
        compile_cell(f"bound_probe = {n}", TRUSTED)
        assert _held() <= 2 * _compile._GENERATION


def test_threads_compiling_at_once_get_working_cells() -> None:
    failures: list[str] = []

    def work(t: int) -> None:
        for n in range(600):
            source = f"thread_probe_{t} = {n % 700}"
            cell = compile_cell(source, TRUSTED)
            if cell.source != source or cell.body is None:
                failures.append(source)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert _held() <= 2 * _compile._GENERATION
