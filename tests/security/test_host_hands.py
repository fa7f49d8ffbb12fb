"""Host code that handles the session's objects (listing, observation, inspect, rich outputs,
snapshots, the tool layer) never evaluates the session's text in the host and never runs the
session's code with host rights.

Two rules, one per place (docs/security.md, "Where the host handles session objects"): run under
the session's guards and a deadline, or use only operations that run no code of the object. The
attacks below try each kind of hook the host could trigger; each test checks both that no host value
reaches any reply and that nothing the hook tried outside the workspace happened.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from _security import PARAMS

import genpark_repl_tools
import genpark_repl_tools._limits as planted_module
from genpark_repl_tools import ExecutionResult, Limits, ReplEngine
from genpark_repl_tools.tools import inspect_variable, list_variables, run_python

SECRET = "host-secret-3f9c1a"  # a host module global: no reply may ever contain it
FILE_SECRET = "file-secret-8d2e4b"  # the content of a host file outside every workspace
HOST_PATH = str(Path(genpark_repl_tools.__file__).parent)  # a host value the worker has too

_sessions = itertools.count()


@pytest.fixture(scope="module")
def host_secrets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Plant the secrets before any engine starts (a worker forked from this process has them too)."""
    folder = tmp_path_factory.mktemp("host")
    (folder / "secret.txt").write_text(FILE_SECRET)
    planted_module.HOST_HANDS_SECRET = SECRET  # type: ignore[attr-defined]
    try:
        yield folder
    finally:
        del planted_module.HOST_HANDS_SECRET  # type: ignore[attr-defined]


@pytest.fixture(scope="module", params=PARAMS, ids=[f"{p}-{b}" for p, b in PARAMS])
def engine(request: pytest.FixtureRequest, host_secrets: Path) -> Iterator[ReplEngine]:
    policy, boundary = request.param
    limits = Limits(timeout_s=5)
    with ReplEngine(policy=policy, boundary=boundary, limits=limits, snapshot_key=b"k" * 32) as e:
        yield e


@pytest.fixture
def session(engine: ReplEngine) -> Iterator[str]:
    name = f"hands-{next(_sessions)}"
    yield name
    if name in engine.sessions():
        engine.close(name)


def replies(engine: ReplEngine, code: str, session: str) -> str:
    """Every text the model or a program could read about `code` and the variables it left."""
    return read_all(engine, engine.run(code, session=session), session)


def read_all(engine: ReplEngine, result: ExecutionResult, session: str) -> str:
    texts = [result.to_observation(), result.model_dump_json()]
    texts += [v.model_dump_json() for v in engine.variables(session, include_hidden=True)]
    for info in engine.variables(session):
        texts.append(engine.inspect(info.name, session).model_dump_json())
        reply = inspect_variable(engine, info.name, session)
        texts += [reply.text, str(reply.data)]
    for reply in (run_python(engine, "None", session), list_variables(engine, session)):
        texts += [reply.text, str(reply.data)]
    return "\n".join(texts)


def assert_nothing_of_the_host(text: str) -> None:
    assert SECRET not in text
    assert FILE_SECRET not in text
    assert HOST_PATH not in text


def touch(path: Path) -> str:
    """Session code (a method body) that writes a marker file outside its workspace, then reads a
    host file. `strict` refuses `open` before anything runs; `standard` refuses it when it runs."""
    marker, secret = str(path / "pwned"), str(path / "secret.txt")
    return f"open({marker!r}, 'w').close()\n        return open({secret!r}).read()"


def refused_when_run(result: ExecutionResult) -> bool:
    """Whether the snippet ran (standard) rather than being refused before running (strict)."""
    if result.policy == "strict":
        assert result.status == "blocked", result.to_observation()
        return False
    assert result.status == "ok", result.to_observation()
    return True


# ---- signatures: the text a signature is built from is the session's ---------------------------------

DOCSTRING_SIGNATURE = (
    "class Leaky(int):\n"
    '    """Leaky(a=genpark_repl_tools._limits.HOST_HANDS_SECRET, b=genpark_repl_tools.__file__)\n'
    "--\n\n"
    '    """\n'
)
TEXT_SIGNATURE = (
    "class Leaky:\n"
    "    __text_signature__ = '(a=genpark_repl_tools._limits.HOST_HANDS_SECRET)'\n"
    "    __module__ = 'genpark_repl_tools._limits'\n"
)
SIGNATURE_ATTRIBUTE = (
    "def leaky(x):\n    return x\nleaky.__signature__ = 'genpark_repl_tools._limits.HOST_HANDS_SECRET'\n"
)


@pytest.mark.parametrize("code", [DOCSTRING_SIGNATURE, TEXT_SIGNATURE, SIGNATURE_ATTRIBUTE])
def test_a_signature_never_evaluates_the_sessions_text(engine: ReplEngine, session: str, code: str) -> None:
    assert_nothing_of_the_host(replies(engine, code, session))


@pytest.mark.parametrize("boundary", ["inprocess", "subprocess"])
def test_a_docstring_signature_reads_no_host_global_even_under_trusted(
    host_secrets: Path, boundary: str
) -> None:
    # Under trusted the code may read the host itself; the host's own describing still must not
    # evaluate what the session wrote (inspect.signature did: it showed the planted global).
    with ReplEngine(policy="trusted", boundary=boundary) as engine:
        text = replies(engine, DOCSTRING_SIGNATURE, "default")
        assert "class Leaky(...)" in text
        assert_nothing_of_the_host(text)


# ---- hooks the host may trigger while describing ----------------------------------------------------


def hook_class(host: Path, hook: str) -> str:
    """A class whose `hook` tries to reach the host, and an instance of it as a variable."""
    return f"class Hooked:\n    def {hook}(self, *args):\n        {touch(host)}\nhooked = Hooked()\nhooked\n"


@pytest.mark.parametrize("hook", ["__repr__", "__len__", "__sizeof__", "__format__", "__str__"])
def test_hooks_run_under_the_sessions_guards_or_not_at_all(
    engine: ReplEngine, session: str, host_secrets: Path, hook: str
) -> None:
    result = engine.run(hook_class(host_secrets, hook), session=session)
    text = read_all(engine, result, session)
    assert_nothing_of_the_host(text)
    assert not (host_secrets / "pwned").exists()
    if hook == "__repr__" and refused_when_run(result):  # the host did call it: under the guards
        assert result.value == "<repr failed: PolicyViolation>"
        assert engine.inspect("hooked", session).repr == "<repr failed: PolicyViolation>"


@pytest.mark.parametrize("attribute", ["shape", "dtype", "size"])
def test_properties_the_host_reads_run_under_the_guards(
    engine: ReplEngine, session: str, host_secrets: Path, attribute: str
) -> None:
    # Duck-typed summaries read `.shape`, `.dtype` and `.size` of any object that has them.
    code = (
        f"class Table:\n    shape = (2, 2)\n    @property\n    def {attribute}(self):\n"
        f"        {touch(host_secrets)}\nt = Table()\nt\n"
    )
    assert_nothing_of_the_host(replies(engine, code, session))
    assert not (host_secrets / "pwned").exists()


def test_a_default_value_is_shown_by_its_repr_under_the_guards(
    engine: ReplEngine, session: str, host_secrets: Path
) -> None:
    code = (
        f"class Default:\n    def __repr__(self):\n        {touch(host_secrets)}\n"
        "def f(x=Default()):\n    return x\n"
    )
    result = engine.run(code, session=session)
    text = read_all(engine, result, session)
    assert_nothing_of_the_host(text)
    assert not (host_secrets / "pwned").exists()
    if refused_when_run(result):
        assert "def f(x=<repr failed: PolicyViolation>)" in text


# ---- snapshots: host reducers and host rebuilders reach the session's code --------------------------


@pytest.mark.parametrize(
    "code",
    [
        # list's inherited reducer iterates the list: the session's __iter__.
        "class Items(list):\n    def __iter__(self):\n        {touch}\nitems = Items([1, 2])\n",
        # dict's inherited reducer calls items(): the session's.
        "class Pairs(dict):\n    def items(self):\n        {touch}\npairs = Pairs(a=1)\n",
        # rebuilding the class on restore runs __init_subclass__ and __set_name__ of its parts.
        "class Base:\n    def __init_subclass__(cls, **kw):\n        {touch}\nclass Child(Base):\n    pass\n",
        "class Field:\n    def __set_name__(self, owner, name):\n        {touch}\n"
        "class Holder:\n    f = Field()\n",
        "class Generic:\n    def __class_getitem__(cls, item):\n        {touch}\nG = Generic\n",
    ],
    ids=["list-iter", "dict-items", "init-subclass", "set-name", "class-getitem"],
)
def test_snapshot_and_restore_run_the_sessions_hooks_under_its_guards(
    engine: ReplEngine, session: str, host_secrets: Path, code: str
) -> None:
    code = code.replace("{touch}", touch(host_secrets))
    text = replies(engine, code, session)
    marker = host_secrets / "pwned"
    assert not marker.exists()
    try:
        snapshot = engine.snapshot(session)
    except genpark_repl_tools.ReplError as exc:  # refused or failed: said as an error, nothing ran
        text += str(exc)
    else:
        text += snapshot.manifest.model_dump_json()
        engine.reset(session)
        try:
            engine.restore(session, snapshot)
        except genpark_repl_tools.ReplError as exc:
            text += str(exc)
        text += replies(engine, "None", session)
    assert not marker.exists()
    assert_nothing_of_the_host(text)


# ---- a value that cannot be described does not break the reply --------------------------------------


def test_a_value_whose_description_loops_is_reported_not_hung(engine: ReplEngine, session: str) -> None:
    engine.run(
        "class Forever:\n    def __len__(self):\n        while True:\n            pass\nf = Forever()",
        session=session,
    )
    (info,) = [v for v in engine.variables(session) if v.name == "f"]
    assert info.repr == "<repr timed out>"
    assert info.type == "Forever"
    assert engine.run("1 + 1", session=session).value == "2"


# ---- the legitimate neighbours keep their real signatures -------------------------------------------

NEIGHBOURS = (
    "import dataclasses, typing\n"
    "@dataclasses.dataclass\n"
    "class Point:\n    x: int\n    y: float = 0.5\n"
    "class Pair(typing.NamedTuple):\n    a: int\n    b: str = 'z'\n"
    "class Doc:\n"
    '    """Doc(x) made from x, with an ordinary docstring."""\n'
    "    def __init__(self, x, *, flag=False):\n        self.x = x\n"
    "    def method(self, y, /, z=3):\n        return y\n"
    "def scale(values, factor=2.0, *, clip=None, **options):\n    return values\n"
    "bound = Doc(1).method\n"
)


def test_the_legitimate_neighbours_list_with_their_real_signatures(engine: ReplEngine, session: str) -> None:
    assert engine.run(NEIGHBOURS, session=session).status == "ok"
    shown = {v.name: v.repr for v in engine.variables(session)}
    assert shown["Point"] == "class Point(x: int, y: float = 0.5) -> None"
    assert shown["Pair"] == "class Pair(a: int, b: str = 'z')"
    assert shown["Doc"] == "class Doc(x, *, flag=False)"
    assert shown["scale"] == "def scale(values, factor=2.0, *, clip=None, **options)"
    assert shown["bound"] == "def bound(y, /, z=3)"
