"""Defense in depth: code that somehow holds the real builtins still cannot switch the hook off.

The back door below is test-only: it puts the host's real builtins dict into a session's namespace,
as if an escape from the first layers had happened. With it, code tries every switch it could find
(module state of the policy, the execution's context, the session's builtins, the hook's own
activation request, the collector, frames) and then opens a file outside the workspace, spawns a
process and connects a socket.
"""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from _security import ok

from genpark_repl_tools import Limits, ReplEngine
from genpark_repl_tools.policy import _audithook, _restricted

ATTACK = """
outcomes = {}
def attempt(label, fn):
    try:
        fn()
        outcomes[label] = 'allowed'
    except PermissionError:
        outcomes[label] = 'refused'
    except Exception as e:
        outcomes[label] = 'failed: ' + type(e).__name__
imp = bi['__import__']
getattr_ = bi['getattr']
os = imp('os')
sys = imp('sys')
socket = imp('socket')
subprocess = imp('subprocess')
contextvars = imp('contextvars')
def escapes(tag):
    attempt(tag + ' open', lambda: bi['open']('/etc/hostname').read())
    attempt(tag + ' system', lambda: os.system('touch ' + MARKER))
    attempt(tag + ' popen', lambda: subprocess.run(['touch', MARKER]))
    attempt(tag + ' socket', lambda: socket.create_connection(('127.0.0.1', 9), timeout=0.1))
escapes('direct')
# Switches a former design had: module state of the policy, cleared or flipped.
for module in (imp('genpark_repl_tools.policy._audithook', None, None, ['x']),
               imp('genpark_repl_tools.policy._restricted', None, None, ['x'])):
    for name, value in list(bi['vars'](module).items()):
        if bi['isinstance'](value, (bi['dict'], bi['list'], bi['set'])) and not name.startswith('__'):
            value.clear()
escapes('module state cleared')
# The session's builtins table: the hook's former mark of sandboxed frames.
table = bi['globals']()['__builtins__']
del table['__repl_sandbox__']
escapes('mark removed')
# A fresh, empty context: no execution is active in it.
attempt('empty context', lambda: contextvars.Context().run(lambda: bi['open']('/etc/hostname').read()))
# The hook's own activation request, with permissive rules.
permissive = ('x', True, '/', bi['frozenset'](), ())
attempt('activate', lambda: sys.audit('genpark_repl.sandbox.activate', permissive, []))
# Routes to the hook's closure: the collector, frames, the frame of a refusal's traceback.
attempt('gc', lambda: imp('gc').get_referrers(sys))
attempt('getframe', lambda: getattr_(sys, '_getframe')(0))
def traceback_frames():
    try:
        bi['open']('/etc/hostname')
    except PermissionError as e:
        return [f for f, _ in imp('traceback').walk_tb(getattr_(e, '__traceback__'))]
attempt('traceback frames', traceback_frames)
# Event arguments of classes whose methods would run inside the hook, next to its state.
touched = []
class Sneaky(str):
    def __eq__(self, other):
        touched.append('eq')
        return False
    def __hash__(self):
        touched.append('hash')
        return 0
    def __contains__(self, item):
        touched.append('contains')
        return False
class SneakyList(list):
    def append(self, item):
        touched.append('append')
for event, args in (('object.__getattr__', (1, Sneaky('f_code'))), ('open', ('/x', Sneaky('r'), None)),
                    ('genpark_repl.sandbox.installed', (SneakyList(),)),
                    ('object.__setattr__', (1, Sneaky('__code__'), 1))):
    try:
        sys.audit(event, *args)
    except PermissionError:
        pass
outcomes['hostile arguments'] = 'refused' if not touched else 'touched ' + ','.join(touched)
# Shared Python objects the hook could rely on: os.path, the builtins, this module's helpers.
posixpath = imp('posixpath')
hook_module = imp('genpark_repl_tools.policy._audithook', None, None, ['x'])
saved = (posixpath.realpath, bi['any'], bi['issubclass'])
try:
    bi['setattr'](posixpath, 'realpath', lambda path, *args, **kwargs: PREFIX)  # "all library data"
    bi['any'] = lambda items: True
    bi['issubclass'] = lambda kind, base: kind is bi['str']
    for name in ('_inside', 'plain_path', '_path_types', '_data_roots', '_make_realpath', '_codes'):
        bi['setattr'](hook_module, name, lambda *args, **kwargs: True)
    escapes('patched')
finally:
    bi['setattr'](posixpath, 'realpath', saved[0])
    bi['any'], bi['issubclass'] = saved[1], saved[2]
escapes('after all')
outcomes
"""


LATER = """
def read():
    return bi['open']('/etc/hostname').read()
try:
    contextvars.Context().run(read)
    later = 'allowed'
except PermissionError:
    later = 'refused'
later
"""


@pytest.fixture
def restore_policy_modules() -> Iterator[None]:
    saved: list[tuple[Any, Any]] = []
    names: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for module in (_audithook, _restricted):
        names.append((vars(module), dict(vars(module))))
        for name, value in vars(module).items():
            if type(value) in (dict, list, set) and not name.startswith("__"):
                saved.append((value, value.copy()))
    yield
    for container, copy in saved:
        refill = container.extend if type(container) is list else container.update
        container.clear()
        refill(copy)
    for namespace, before in names:
        namespace.update(before)


def test_real_builtins_cannot_switch_the_hook_off(
    tmp_path: Any, restore_policy_modules: None, request: pytest.FixtureRequest
) -> None:
    marker = tmp_path / "spawned"
    for policy in ("strict", "standard"):
        with ReplEngine(boundary="inprocess", policy=policy, limits=Limits(timeout_s=10)) as engine:
            ok(engine.run("x = 1", session="attacker"))
            namespace = engine.boundary._sessions["attacker"].namespace  # type: ignore[attr-defined]
            namespace["bi"] = builtins.__dict__  # the test-only back door
            namespace["MARKER"] = str(marker)
            namespace["PREFIX"] = os.path.realpath(sys.prefix)
            result = ok(engine.run(ATTACK, session="attacker"))
            outcomes = eval(result.value or "{}")  # a dict of str -> str, printed by the engine
            # A later cell, compiled and registered after all of the above, leaves its context.
            later = ok(engine.run(LATER, session="attacker"))
            outcomes["later cell, empty context"] = eval(later.value or "''")
        escapes = {k: v for k, v in outcomes.items() if k != "activate"}
        assert set(escapes.values()) == {"refused"}, (policy, outcomes)
        # The activation request is refused too (its exception is a PolicyViolation).
        assert outcomes["activate"] == "refused", outcomes
        assert not marker.exists()
        assert "hostname" not in result.stdout


def test_the_session_may_still_use_its_workspace_with_real_builtins(tmp_path: Any) -> None:
    from genpark_repl_tools import Policy

    with ReplEngine(boundary="inprocess", policy=Policy.standard().with_workspace(tmp_path)) as engine:
        ok(engine.run("x = 1", session="s"))
        engine.boundary._sessions["s"].namespace["bi"] = builtins.__dict__  # type: ignore[attr-defined]
        path = os.path.join(str(tmp_path), "note.txt")
        code = (
            f"with bi['open']({path!r}, 'w') as f:\n    f.write('hi')\n"
            f"with bi['open']({path!r}) as f:\n    text = f.read()\ntext"
        )
        assert ok(engine.run(code, session="s")).value == "'hi'"
    assert sys.modules["genpark_repl_tools.policy._audithook"] is _audithook
