"""Library APIs that walk the stack see only the session's frames.

pandas resolves names in expressions ('@name' and plain names) in the frame `level` above its
caller; with a frame depth of its choosing, code could read the host's frames. The guard hands
pandas the calling session code's namespace (or nothing, when a library is the caller) and takes
no frame depth from the code.
"""

from __future__ import annotations

import pytest
from _security import ok, refusal, run

from genpark_repl_tools import ReplEngine

SETUP = "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6]})\n"
LEVEL_EVAL = SETUP + "pd.eval('@self', level=3)"
LEVEL_QUERY = SETUP + "df.query('a > @self', level=2)"
LEVEL_DF_EVAL = SETUP + "df.eval('@session', level=4)"
# A library (DataFrame.pipe) calls query: names resolve in nobody's frame, never pandas' own.
LIBRARY_CALLER = SETUP + "func = pd.DataFrame.query\ndf.pipe(func, 'a > @func')"
LEGIT = SETUP + (
    "t = 1\n"
    "def above(frame, limit):\n"
    "    return frame.query('a > @limit')\n"
    "(\n"
    "    df.query('a > @t').a.tolist(),\n"
    "    above(df, 2).a.tolist(),\n"
    "    pd.eval('df.a + df.b').tolist(),\n"
    "    df.eval('c = a * b + @t').c.tolist(),\n"
    "    pd.eval('t + 1'),\n"
    ")"
)


def _standard(engine: ReplEngine) -> None:
    pytest.importorskip("pandas")
    if engine.policy.name == "strict":
        pytest.skip("pandas is not allowed under strict")


@pytest.mark.parametrize("code", [LEVEL_EVAL, LEVEL_QUERY, LEVEL_DF_EVAL])
def test_no_frame_depth_from_the_code(engine: ReplEngine, code: str) -> None:
    _standard(engine)
    assert "with level= is not allowed under policy 'standard'" in refusal(run(engine, code))


def test_a_library_caller_resolves_nothing(engine: ReplEngine) -> None:
    _standard(engine)
    result = run(engine, LIBRARY_CALLER)
    assert result.status == "error", result.to_observation()
    assert result.error is not None and result.error.type == "UndefinedVariableError", result.to_observation()


def test_expressions_on_the_session_s_own_names_work(engine: ReplEngine) -> None:
    _standard(engine)
    assert ok(run(engine, LEGIT)).value == "([2, 3], [3], [5, 7, 9], [5, 11, 19], 2)"
