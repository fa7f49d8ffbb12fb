"""Process-wide state of allowed libraries is the session's own, or its setter is refused.

For each piece of state: set in one session, unchanged in another session and in the host. A
formatter installed by one session never runs in another session's or the host's calls.
"""

from __future__ import annotations

import itertools
import random

import pytest
from _security import ok, refusal

from genpark_repl_tools import ReplEngine

_pairs = itertools.count()


def sessions() -> tuple[str, str]:
    n = next(_pairs)
    return f"state-a-{n}", f"state-b-{n}"


def standard_only(engine: ReplEngine, module: str) -> None:
    pytest.importorskip(module)
    if engine.policy.name == "strict":
        pytest.skip(f"{module} is not allowed under strict")


def test_numpy_print_options_belong_to_the_session(engine: ReplEngine) -> None:
    standard_only(engine, "numpy")
    import numpy as np

    a, b = sessions()
    setup = "import numpy as np\nnp.set_printoptions(precision=2, formatter={'bool': lambda v: 'LEAK'})\n"
    assert ok(engine.run(setup + "repr(np.array([1 / 3]))", session=a)).value == "'array([0.33])'"
    assert ok(engine.run("repr(np.array([1 / 3, 2 / 3]))", session=a)).value == "'array([0.33, 0.67])'"
    assert ok(engine.run("import numpy as np\nrepr(np.array([1 / 3]))", session=b)).value == (
        "'array([0.33333333])'"
    )
    assert ok(engine.run("repr(np.array([True]))", session=b)).value == "'array([ True])'"
    assert np.get_printoptions()["precision"] == 8
    assert repr(np.array([True])) == "array([ True])"


def test_numpy_printoptions_context_manager_still_works(engine: ReplEngine) -> None:
    standard_only(engine, "numpy")
    code = "import numpy as np\nwith np.printoptions(precision=1):\n    r = repr(np.array([1 / 3]))\nr"
    assert ok(engine.run(code, session=sessions()[0])).value == "'array([0.3])'"


def test_numpy_global_random_generator_is_the_session_s(engine: ReplEngine) -> None:
    standard_only(engine, "numpy")
    import numpy as np

    host = np.random.get_state()[1].copy()
    a, b = sessions()
    code = "import numpy as np\nnp.random.mtrand.seed(1)\nfloat(np.random.mtrand.random())"
    first = ok(engine.run(code, session=a)).value
    code_b = "import numpy as np\nnp.random.seed(1)\nfloat(np.random.random())"
    assert ok(engine.run(code_b, session=b)).value == first
    assert (np.random.get_state()[1] == host).all()


def test_pandas_options_are_refused(engine: ReplEngine) -> None:
    standard_only(engine, "pandas")
    import pandas as pd

    before = pd.get_option("display.max_rows")
    result = engine.run("import pandas as pd\npd.set_option('display.max_rows', 3)", session=sessions()[0])
    assert (
        result.error is not None and "pandas options are shared by the whole process" in result.error.message
    )
    assert ok(engine.run("import pandas as pd\npd.get_option('display.max_rows')", session=sessions()[0]))
    assert pd.get_option("display.max_rows") == before


def test_matplotlib_rcparams_are_read_only(engine: ReplEngine) -> None:
    standard_only(engine, "matplotlib")
    import matplotlib

    before = matplotlib.rcParams["lines.linewidth"]
    a, b = sessions()
    write = "import matplotlib.pyplot as plt\nplt.rcParams['lines.linewidth'] = 9"
    assert refusal(engine.run(write, session=a)) == (
        "changing matplotlib.pyplot.rcParams is not allowed: it is shared by the whole process (the host "
        "and other sessions); pass style arguments to the plotting call instead (color=, linewidth=, "
        "figsize=, ...)"
    )
    rc = engine.run("import matplotlib\nmatplotlib.rc('lines', linewidth=9)", session=a)
    assert rc.error is not None and "rcParams, shared by the whole process" in rc.error.message
    read = "import matplotlib\nmatplotlib.rcParams['lines.linewidth'] == " + repr(before)
    assert ok(engine.run(read, session=b)).value == "True"
    assert matplotlib.rcParams["lines.linewidth"] == before


def test_calendar_first_weekday_is_the_session_s(engine: ReplEngine) -> None:
    import calendar

    a, b = sessions()
    code = "import calendar\ncalendar.setfirstweekday(6)\n"
    code += "(calendar.firstweekday(), calendar.c.getfirstweekday())"
    assert ok(engine.run(code, session=a)).value == "(6, 6)"
    assert ok(engine.run("calendar.monthcalendar(2024, 1)[0][0]", session=a)).value == "0"
    assert ok(engine.run("import calendar\ncalendar.firstweekday()", session=b)).value == "0"
    assert ok(engine.run("calendar.monthcalendar(2024, 1)[0][0]", session=b)).value == "1"
    assert calendar.firstweekday() == 0
    bad = engine.run("calendar.setfirstweekday(9)", session=a)
    assert bad.error is not None and bad.error.type == "IllegalWeekdayError"


def test_statistics_samples_use_the_session_s_generator(engine: ReplEngine) -> None:
    host = random.getstate()
    a, b = sessions()
    code = (
        "import random, statistics\n"
        "random.seed(7)\n"
        "d = statistics.NormalDist(10, 2)\n"
        "(d.samples(3), statistics.NormalDist.samples(d, 2), len(d.samples(2, seed=1)))"
    )
    first = ok(engine.run(code, session=a)).value
    assert ok(engine.run(code, session=b)).value == first
    assert random.getstate() == host


def test_random_seed_is_the_session_s(engine: ReplEngine) -> None:
    host = random.getstate()
    a, b = sessions()
    assert ok(engine.run("import random\nrandom.seed(3)\nrandom.random()", session=a))
    draw = ok(engine.run("import random\nrandom.random()", session=b)).value
    assert ok(engine.run("import random\nrandom.seed(3)\nrandom.random()", session=b)).value != draw
    assert random.getstate() == host


def test_random_seed_from_text_is_the_session_s(engine: ReplEngine) -> None:
    """A str seed goes through sha512, which Python 3.13+ imports into random's globals on first use:
    the session's generator is seeded, the host's is not."""
    host = random.getstate()
    a, b = sessions()
    code = "import random\nrandom.seed('text')\n[random.random(), random.Random('text').random()]"
    first, own = ok(engine.run(code, session=a)).value.strip("[]").split(", ")
    assert first == own == repr(random.Random("text").random())
    assert ok(engine.run(code, session=b)).value == f"[{first}, {own}]"
    assert random.getstate() == host


def test_class_level_tables_are_the_session_s(engine: ReplEngine) -> None:
    import calendar
    import textwrap

    a, b = sessions()
    code = (
        "import calendar, textwrap\n"
        "calendar.HTMLCalendar.cssclasses.append('leak')\n"
        "textwrap.TextWrapper.unicode_whitespace_trans[65] = 'B'\n"
        "(calendar.HTMLCalendar.cssclasses[-1], textwrap.TextWrapper().fill('A A'))"
    )
    assert ok(engine.run(code, session=a)).value == "('leak', 'B B')"
    check = "import calendar\n'leak' in calendar.HTMLCalendar.cssclasses"
    assert ok(engine.run(check, session=b)).value == "False"
    assert "leak" not in calendar.HTMLCalendar.cssclasses
    assert 65 not in textwrap.TextWrapper.unicode_whitespace_trans


def test_pandas_options_read_but_never_written(engine: ReplEngine) -> None:
    standard_only(engine, "pandas")
    import pandas as pd

    before = pd.get_option("display.max_rows")
    read = "import pandas as pd\npd.options.display.max_rows"
    assert ok(engine.run(read, session=sessions()[0])).value == str(before)
    raw = engine.run("import pandas as pd\npd.options.d['display']['max_rows'] = 3", session=sessions()[0])
    assert raw.status == "error" and raw.error is not None and raw.error.type == "AttributeError"
    assert pd.get_option("display.max_rows") == before


@pytest.mark.parametrize(
    ("code", "what"),
    [
        ("np.ma.masked_print_option.set_display('LEAK')", "numpy.ma.masked_print_option.set_display()"),
        ("np.ma.masked_print_option.enable(False)", "numpy.ma.masked_print_option.enable()"),
        ("np.ma.masked_print_option.set_display(Shown('x'))", "numpy.ma.masked_print_option.set_display()"),
        ("np.ma.masked_print_option.display = print", "changing numpy.ma.masked_print_option.display"),
    ],
    ids=["set_display", "enable", "str subclass", "attribute"],
)
def test_masked_array_display_is_read_only(engine: ReplEngine, code: str, what: str) -> None:
    # Every masked array's repr (the host's and other sessions') prints masked_print_option: a
    # str subclass there would run this session's code inside theirs.
    standard_only(engine, "numpy")
    import numpy as np

    a, b = sessions()
    setup = "import numpy as np\nclass Shown(str):\n    def __str__(self):\n        return 'LEAK'\n"
    assert refusal(engine.run(setup + code, session=a)).startswith(what)
    check = "import numpy as np\n"
    check += "(str(np.ma.masked_array([1, 2], mask=[0, 1])), np.ma.masked_print_option.display())"
    assert ok(engine.run(check, session=b)).value == "('[1 --]', '--')"
    assert str(np.ma.masked_array([1, 2], mask=[0, 1])) == "[1 --]"
    legit = "(str(np.ma.masked_print_option), np.ma.masked_print_option.enabled(), "
    legit += "np.ma.array([1, 2], mask=[1, 0]).filled(0).tolist())"
    assert ok(engine.run(legit, session=b)).value == "('--', True, [0, 2])"
