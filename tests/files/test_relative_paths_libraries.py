"""Relative paths given to libraries mean the session's workspace, on both boundaries.

In a worker the workspace is the process's directory. In-process the thread that runs a cell has a
directory of its own (Linux), the session's workspace for the cell's duration, so every library that
resolves a relative path itself (pandas, numpy, matplotlib, pathlib) finds the session's files; two
sessions running at once in threads each find their own.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator

import pytest

from genpark_repl_tools import Limits, ReplEngine

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread directories are Linux's")

BOUNDARIES = ["inprocess", "subprocess"]
CSV = b"a,b\n1,2\n3,4\n"

# (route, code that writes with a relative name and reads it back, its value, the file it leaves)
ROUTES = [
    ("pandas.read_csv", "import pandas as pd\nint(pd.read_csv('data.csv').a.sum())", "4", None),
    (
        "DataFrame.to_csv",
        "import pandas as pd\npd.DataFrame({'x': [1, 2]}).to_csv('out.csv', index=False)\n"
        "with open('out.csv') as f:\n    text = f.read()\ntext",
        repr("x\n1\n2\n"),
        "out.csv",
    ),
    (
        "DataFrame.to_json / pandas.read_json",
        "import pandas as pd\npd.DataFrame({'x': [5]}).to_json('t.json')\nint(pd.read_json('t.json').x[0])",
        "5",
        "t.json",
    ),
    (
        "numpy.save / numpy.load",
        "import numpy as np\nnp.save('a.npy', np.arange(3))\nnp.load('a.npy').tolist()",
        "[0, 1, 2]",
        "a.npy",
    ),
    (
        "numpy.savez",
        "import numpy as np\nnp.savez('z.npz', v=np.ones(2))\nnp.load('z.npz')['v'].tolist()",
        "[1.0, 1.0]",
        "z.npz",
    ),
    (
        "numpy.savetxt / loadtxt / genfromtxt",
        "import numpy as np\nnp.savetxt('m.txt', [[1, 2]])\n"
        "(np.loadtxt('m.txt').tolist(), np.genfromtxt('m.txt').tolist())",
        "([1.0, 2.0], [1.0, 2.0])",
        "m.txt",
    ),
    (
        "ndarray.tofile / numpy.fromfile",
        "import numpy as np\nnp.arange(4, dtype='int8').tofile('raw.bin')\n"
        "np.fromfile('raw.bin', dtype='int8').tolist()",
        "[0, 1, 2, 3]",
        "raw.bin",
    ),
    (
        "Figure.savefig",
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig.savefig('f.png')\n"
        "plt.close(fig)\nwith open('f.png', 'rb') as f:\n    head = f.read(4)\nhead",
        repr(b"\x89PNG"),
        "f.png",
    ),
    (
        "pyplot.savefig",
        "import matplotlib.pyplot as plt\nplt.plot([1])\nplt.savefig('p.png')\nplt.close('all')\n"
        "with open('p.png', 'rb') as f:\n    head = f.read(4)\nhead",
        repr(b"\x89PNG"),
        "p.png",
    ),
    (
        "pyplot.imsave / imread",
        "import numpy as np\nimport matplotlib.pyplot as plt\nplt.imsave('i.png', np.zeros((2, 3)))\n"
        "plt.imread('i.png').shape",
        "(2, 3, 4)",
        "i.png",
    ),
    (
        "pathlib",
        "import pathlib\npathlib.Path('notes.txt').write_text('hi')\n"
        "(pathlib.Path('notes.txt').read_text(), pathlib.Path('notes.txt').exists(), "
        "sorted(p.name for p in pathlib.Path('.').iterdir())[:2])",
        "('hi', True, ['data.csv', 'notes.txt'])",
        "notes.txt",
    ),
    (
        "csv and json through open",
        "import csv, json\nwith open('data.csv') as f:\n    rows = list(csv.reader(f))\n"
        "with open('rows.json', 'w') as f:\n    json.dump(rows, f)\nwith open('rows.json') as f:\n"
        "    back = json.load(f)\nback[1]",
        "['1', '2']",
        "rows.json",
    ),
]


@pytest.fixture(scope="module", params=BOUNDARIES)
def engine(request: pytest.FixtureRequest) -> Iterator[ReplEngine]:
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    with ReplEngine(policy="standard", boundary=request.param, limits=Limits(timeout_s=60)) as e:
        yield e


def test_the_flow_a_model_writes(engine: ReplEngine) -> None:
    engine.upload("flow", "data.csv", CSV)
    result = engine.run("import pandas as pd\ndf = pd.read_csv('data.csv')\nint(df.b.sum())", session="flow")
    assert result.ok, result.to_observation()
    assert result.value == "6"


@pytest.mark.parametrize(("route", "code", "value", "left"), ROUTES, ids=[r[0] for r in ROUTES])
def test_each_library_route_uses_the_workspace(
    engine: ReplEngine, route: str, code: str, value: str, left: str | None
) -> None:
    session = f"route-{ROUTES.index((route, code, value, left))}"
    engine.upload(session, "data.csv", CSV)
    cwd = os.getcwd()
    before = set(os.listdir(cwd))
    result = engine.run(code, session=session)
    assert result.ok, result.to_observation()
    assert result.value == value
    if left is not None:
        assert left in {f.name for f in engine.files(session)}
    assert os.getcwd() == cwd
    assert set(os.listdir(cwd)) == before  # nothing landed in the host's directory


def test_two_sessions_in_threads_each_read_their_own_file(engine: ReplEngine) -> None:
    for name, total in (("left", 4), ("right", 40)):
        engine.upload(name, "data.csv", f"a\n{total // 2}\n{total // 2}\n".encode())
        engine.run("import pandas as pd", session=name)
    rounds = 15
    barrier = threading.Barrier(2)
    seen: dict[str, list[str | None]] = {"left": [], "right": []}

    def work(name: str) -> None:
        for _ in range(rounds):
            barrier.wait(timeout=60)
            result = engine.run("int(pd.read_csv('data.csv').a.sum())", session=name)
            seen[name].append(result.value if result.ok else result.to_observation())

    threads = [threading.Thread(target=work, args=(name,)) for name in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert seen == {"left": ["4"] * rounds, "right": ["40"] * rounds}


def test_async_runs_use_their_sessions_workspace(engine: ReplEngine) -> None:
    for name, content in (("async-a", b"a\n1\n"), ("async-b", b"a\n2\n")):
        engine.upload(name, "data.csv", content)

    async def both() -> list[str | None]:
        code = "import pandas as pd\nint(pd.read_csv('data.csv').a[0])"
        results = await asyncio.gather(*(engine.arun(code, session=s) for s in ("async-a", "async-b")))
        return [r.value for r in results]

    assert asyncio.run(both()) == ["1", "2"]


def test_host_relative_paths_on_the_running_thread_are_the_hosts_after_a_cell(
    engine: ReplEngine, tmp_path: os.PathLike[str]
) -> None:
    engine.upload("after", "data.csv", CSV)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with open("host.txt", "w") as f:
            f.write("host")
        assert (
            engine.run("import pandas as pd\npd.read_csv('data.csv').shape", session="after").value
            == "(2, 2)"
        )
        with open("host.txt") as f:  # the same thread, after the cell: the host's directory again
            assert f.read() == "host"
        assert os.getcwd() == str(tmp_path)
    finally:
        os.chdir(cwd)
