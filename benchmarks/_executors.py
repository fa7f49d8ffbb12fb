"""The executors the benchmark compares, behind one small adapter interface.

Each adapter maps "run this code in that session" onto one tool the way its own docs use it:
- `bare`: `exec(compile(code, ...), namespace)`, one dict per session: the baseline every ratio uses.
- `inprocess-<policy>` / `subprocess-<policy>`: our `ReplEngine` (discovered at run time).
- `langchain-ast`: LangChain's `PythonAstREPLTool`, one tool instance (its globals/locals) per session,
  called through `_run` so LangChain's BaseTool machinery (measured separately) is not in its numbers.
- `smolagents`: `LocalPythonExecutor`, one executor (its state dict) per session.
- `restrictedpython`: `compile_restricted` + `exec` with RestrictedPython's guards, one globals dict per
  session, plus the few builtins (list, sum, ...) a user adds to run ordinary code.
- `jupyter`: one ipykernel per session through `jupyter_client`.

Security model: none. These adapters run benchmark snippets (some deliberately hostile: endless loops,
memory bombs) in the worker process that imports them; the harness bounds that process in time and,
for the hostile probes, in address space.
"""

from __future__ import annotations

import asyncio
import builtins as _builtins
import contextlib
import io
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PEERS", "Executor", "Outcome", "discover", "make_executor"]


@dataclass
class Outcome:
    """What one call did, in terms every executor can give."""

    ok: bool
    out: str = ""
    error: str | None = None
    status: str = "ok"


class Executor:
    """One tool under test. Sessions are created on first use."""

    key = "base"
    # Why the 32-session concurrency figure does not apply, or None when it does.
    no_concurrency: str | None = None
    # "cpu": all the work happens in this process, timed in process CPU time, which other processes on
    # a shared machine barely disturb. "wall": the work happens in other processes (workers, kernels).
    clock = "cpu"

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s

    def caller(self, session: str) -> Callable[[str], object]:
        """The cheapest call that runs code in `session`: what the timing loops call."""
        raise NotImplementedError

    def run(self, code: str, session: str) -> Outcome:
        raise NotImplementedError

    async def arun(self, code: str, session: str) -> Outcome:
        # Tools without an async API: what a user does, run it on the loop's default executor.
        return await asyncio.get_running_loop().run_in_executor(None, self.run, code, session)

    def close_session(self, session: str) -> None:
        return None

    def close(self) -> None:
        return None


# ---- bare exec ----------------------------------------------------------------------------------


class Bare(Executor):
    key = "bare"
    no_concurrency = "no output capture at all: prints go to the process's stdout"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self._ns: dict[str, dict[str, Any]] = {}
        # run() captures output to check answers; the probes turn that off, as bare exec has no capture.
        self.capture = True

    def _session(self, session: str) -> dict[str, Any]:
        ns = self._ns.get(session)
        if ns is None:
            ns = self._ns[session] = {"__name__": "__main__"}
        return ns

    def caller(self, session: str) -> Callable[[str], object]:
        ns = self._session(session)
        return lambda code: exec(compile(code, "<cell>", "exec"), ns)

    def run(self, code: str, session: str) -> Outcome:
        ns = self._session(session)
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf) if self.capture else contextlib.nullcontext():
                exec(compile(code, "<cell>", "exec"), ns)
        except BaseException as exc:
            return Outcome(False, buf.getvalue(), f"{type(exc).__name__}: {exc}", "error")
        return Outcome(True, buf.getvalue())

    def close_session(self, session: str) -> None:
        self._ns.pop(session, None)


# ---- ours ---------------------------------------------------------------------------------------


class Genpark(Executor):
    def __init__(self, timeout_s: float, policy: str, boundary: str, memory_mb: int | None = None) -> None:
        super().__init__(timeout_s)
        from genpark_repl_tools import Limits, ReplEngine

        extra: dict[str, Any] = {"memory_mb": memory_mb} if memory_mb else {}
        self.engine = ReplEngine(
            policy=policy, boundary=boundary, limits=Limits(timeout_s=timeout_s, **extra)
        )
        self.key = f"{boundary}-{policy}"
        self.clock = "cpu" if boundary == "inprocess" else "wall"

    def caller(self, session: str) -> Callable[[str], object]:
        run = self.engine.run
        return lambda code: run(code, session)

    def run(self, code: str, session: str) -> Outcome:
        try:
            result = self.engine.run(code, session)
        except Exception as exc:  # an engine failure (capacity, worker lost) is a result here
            return Outcome(False, "", f"engine raised {type(exc).__name__}: {exc}", "raised")
        return _from_result(result)

    async def arun(self, code: str, session: str) -> Outcome:
        try:
            result = await self.engine.arun(code, session)
        except Exception as exc:
            return Outcome(False, "", f"engine raised {type(exc).__name__}: {exc}", "raised")
        return _from_result(result)

    def close_session(self, session: str) -> None:
        with contextlib.suppress(Exception):
            self.engine.close(session)

    def close(self) -> None:
        self.engine.close()


def _from_result(result: Any) -> Outcome:
    error = None
    if result.error is not None:
        error = f"{result.error.type}: {result.error.message}"
    return Outcome(result.status == "ok", result.stdout, error, result.status)


# ---- LangChain PythonAstREPLTool -----------------------------------------------------------------

# The tool returns "ExcType: message" as its output when the code raises; nothing else tells errors apart.
_ERROR_TEXT = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Iteration): ")


class LangchainAst(Executor):
    key = "langchain-ast"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        from langchain_experimental.tools.python.tool import PythonAstREPLTool

        self._cls = PythonAstREPLTool
        self._tools: dict[str, Any] = {}

    def _tool(self, session: str) -> Any:
        tool = self._tools.get(session)
        if tool is None:
            tool = self._tools[session] = self._cls()
        return tool

    def caller(self, session: str) -> Callable[[str], object]:
        return self._tool(session)._run  # type: ignore[no-any-return]

    def run(self, code: str, session: str) -> Outcome:
        try:
            value = self._tool(session)._run(code)
        except BaseException as exc:  # it catches Exception only; SystemExit & co. reach the caller
            return Outcome(False, "", f"raised {type(exc).__name__}: {exc}", "raised")
        return _from_text(value)

    async def arun(self, code: str, session: str) -> Outcome:
        try:
            value = await self._tool(session)._arun(code)
        except BaseException as exc:
            return Outcome(False, "", f"raised {type(exc).__name__}: {exc}", "raised")
        return _from_text(value)

    def close_session(self, session: str) -> None:
        self._tools.pop(session, None)


def _from_text(value: object) -> Outcome:
    text = value if isinstance(value, str) else repr(value)
    if isinstance(value, str) and _ERROR_TEXT.match(value):
        return Outcome(False, "", value.strip(), "error")
    return Outcome(True, text)


# ---- smolagents LocalPythonExecutor --------------------------------------------------------------


class Smolagents(Executor):
    key = "smolagents"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        from smolagents.local_python_executor import LocalPythonExecutor

        self._cls = LocalPythonExecutor
        self._executors: dict[str, Any] = {}

    def _executor(self, session: str) -> Any:
        ex = self._executors.get(session)
        if ex is None:
            # Its timeout is a whole number of seconds.
            ex = self._cls(additional_authorized_imports=[], timeout_seconds=max(1, round(self.timeout_s)))
            ex.send_tools({})
            self._executors[session] = ex
        return ex

    def caller(self, session: str) -> Callable[[str], object]:
        return self._executor(session)  # type: ignore[no-any-return]

    def run(self, code: str, session: str) -> Outcome:
        ex = self._executor(session)
        try:
            output = ex(code)
        except BaseException as exc:
            return Outcome(
                False, str(ex.state.get("_print_outputs", "")), f"{type(exc).__name__}: {exc}", "error"
            )
        return Outcome(True, output.logs)

    def close_session(self, session: str) -> None:
        self._executors.pop(session, None)


# ---- RestrictedPython ----------------------------------------------------------------------------

_INPLACE: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "&=": operator.iand,
    "^=": operator.ixor,
    "|=": operator.ior,
}


def _inplacevar(op: str, x: Any, y: Any) -> Any:
    return _INPLACE[op](x, y)


class Restricted(Executor):
    key = "restrictedpython"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        import RestrictedPython as rp
        from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
        from RestrictedPython.Guards import full_write_guard, guarded_iter_unpack_sequence, safer_getattr

        self._compile = rp.compile_restricted
        # safe_builtins lacks list/sum/...: what a user adds to run ordinary code.
        builtins = dict(rp.safe_builtins)
        for name in ("list", "dict", "set", "sum", "min", "max", "enumerate", "sorted", "zip", "any", "all"):
            builtins[name] = getattr(_builtins, name)
        self._template: dict[str, Any] = {
            "__builtins__": builtins,
            "__name__": "restricted",
            "__metaclass__": type,
            "_print_": rp.PrintCollector,
            "_getattr_": safer_getattr,
            "_getitem_": default_guarded_getitem,
            "_getiter_": default_guarded_getiter,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_write_": full_write_guard,
            "_inplacevar_": _inplacevar,
        }
        self._globals: dict[str, dict[str, Any]] = {}

    def _session(self, session: str) -> dict[str, Any]:
        glb = self._globals.get(session)
        if glb is None:
            glb = self._globals[session] = dict(self._template)
        return glb

    def caller(self, session: str) -> Callable[[str], object]:
        glb = self._session(session)
        compile_restricted = self._compile
        return lambda code: exec(compile_restricted(code, "<string>", "exec"), glb)

    def run(self, code: str, session: str) -> Outcome:
        glb = self._session(session)
        try:
            exec(self._compile(code, "<string>", "exec"), glb)
        except BaseException as exc:
            return Outcome(False, _printed(glb), f"{type(exc).__name__}: {exc}", "error")
        return Outcome(True, _printed(glb))

    def close_session(self, session: str) -> None:
        self._globals.pop(session, None)


def _printed(glb: dict[str, Any]) -> str:
    # Module-level print() goes to a collector bound to `_print` in the globals.
    collector = glb.pop("_print", None)
    return str(collector()) if collector is not None else ""


# ---- Jupyter kernel ------------------------------------------------------------------------------


class Jupyter(Executor):
    key = "jupyter"
    clock = "wall"
    no_concurrency = "one kernel process per session; 32 kernels cost ~2 GB and ~20 s to start"

    def __init__(self, timeout_s: float) -> None:
        super().__init__(timeout_s)
        from jupyter_client.manager import KernelManager

        self._cls = KernelManager
        self._kernels: dict[str, tuple[Any, Any]] = {}

    def _kernel(self, session: str) -> tuple[Any, Any]:
        pair = self._kernels.get(session)
        if pair is None:
            km = self._cls(kernel_name="python3")
            km.start_kernel()
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            pair = self._kernels[session] = (km, kc)
        return pair

    def caller(self, session: str) -> Callable[[str], object]:
        _, kc = self._kernel(session)
        timeout = self.timeout_s
        return lambda code: kc.execute_interactive(code, timeout=timeout, output_hook=_ignore)

    def run(self, code: str, session: str) -> Outcome:
        km, kc = self._kernel(session)
        out: list[str] = []
        errors: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            kind = msg["header"]["msg_type"]
            content = msg["content"]
            if kind == "stream" and content.get("name") == "stdout":
                out.append(content["text"])
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")

        try:
            reply = kc.execute_interactive(code, timeout=self.timeout_s, output_hook=hook)
        except TimeoutError:
            # What a notebook user does: interrupt the kernel, wait for the cell to stop, carry on.
            km.interrupt_kernel()
            stopped = _await_reply(kc, _INTERRUPT_WAIT_S)
            message = f"timeout after {self.timeout_s:g} s; kernel interrupted"
            if not stopped:
                message += f", still busy {_INTERRUPT_WAIT_S:g} s later"
            return Outcome(False, "".join(out), message, "timeout")
        if reply["content"]["status"] != "ok":
            message = errors[0] if errors else f"status {reply['content']['status']}"
            return Outcome(False, "".join(out), message, "error")
        return Outcome(True, "".join(out))

    def close_session(self, session: str) -> None:
        pair = self._kernels.pop(session, None)
        if pair is not None:
            km, kc = pair
            kc.stop_channels()
            km.shutdown_kernel(now=True)

    def close(self) -> None:
        for session in list(self._kernels):
            with contextlib.suppress(Exception):
                self.close_session(session)


_INTERRUPT_WAIT_S = 3.0


def _await_reply(kc: Any, wait_s: float) -> bool:
    """Wait for the reply of the one outstanding execute request (the interrupted cell)."""
    import queue

    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = kc.get_shell_msg(timeout=left)
        except queue.Empty:
            return False
        if msg["msg_type"] == "execute_reply":
            return True
    return False


def _ignore(msg: object) -> None:
    return None


# ---- registry -----------------------------------------------------------------------------------

# key -> (label, module whose presence makes it available, distribution for its version)
PEERS: dict[str, tuple[str, str, str]] = {
    "langchain-ast": (
        "LangChain PythonAstREPLTool",
        "langchain_experimental.tools.python.tool",
        "langchain-experimental",
    ),
    "smolagents": ("smolagents LocalPythonExecutor", "smolagents.local_python_executor", "smolagents"),
    "restrictedpython": ("RestrictedPython", "RestrictedPython", "RestrictedPython"),
    "jupyter": ("Jupyter kernel (ipykernel)", "ipykernel", "ipykernel"),
}
_PEER_CLASSES: dict[str, type[Executor]] = {
    "langchain-ast": LangchainAst,
    "smolagents": Smolagents,
    "restrictedpython": Restricted,
    "jupyter": Jupyter,
}
_POLICY_CANDIDATES = ("trusted", "standard", "strict")


def make_executor(key: str, timeout_s: float, memory_mb: int | None = None) -> Executor:
    if key == "bare":
        return Bare(timeout_s)
    if key in _PEER_CLASSES:
        if key == "jupyter":
            import jupyter_client  # noqa: F401 - fail here, not at the first session
        return _PEER_CLASSES[key](timeout_s)
    boundary, _, policy = key.partition("-")
    if boundary in ("inprocess", "subprocess") and policy:
        return Genpark(timeout_s, policy, boundary, memory_mb if boundary == "subprocess" else None)
    raise ValueError(f"unknown executor {key!r}")


def _smoke(policy: str, boundary: str) -> str | None:
    """Why `x = 1` does not run on this policy and boundary here, or None when it does."""
    from genpark_repl_tools import ReplEngine

    try:
        with ReplEngine(policy=policy, boundary=boundary) as engine:
            result = engine.run("x = 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None if result.status == "ok" else f"x = 1 gave status {result.status}: {result.error}"[:300]


def discover() -> dict[str, Any]:
    """What can run here: our policies and boundaries, the LangChain adapter, the peers (with versions)."""
    import importlib.metadata as md
    import inspect

    from genpark_repl_tools import Policy, ReplEngine

    found: dict[str, Any] = {"executors": {}, "skipped": {}}
    ex, skipped = found["executors"], found["skipped"]
    ex["bare"] = {"label": "bare compile+exec", "group": "ours", "version": None}
    version = md.version("genpark-repl-tools")
    for name in _POLICY_CANDIDATES:
        try:
            Policy.preset(name)
        except ValueError:
            skipped[f"inprocess-{name}"] = f"no policy preset {name!r} yet"
            continue
        # A preset whose mechanism is still being built is reported, not benchmarked.
        why = _smoke(name, "inprocess")
        if why is None:
            ex[f"inprocess-{name}"] = {
                "label": f"genpark inprocess/{name}",
                "group": "ours",
                "version": version,
            }
        else:
            skipped[f"inprocess-{name}"] = f"policy {name!r} does not run yet: {why}"

    default_policy = inspect.signature(ReplEngine).parameters["policy"].default
    found["default_policy"] = default_policy
    key = f"subprocess-{default_policy}"
    if not _importable("genpark_repl_tools.boundaries.subprocess"):
        skipped[key] = "genpark_repl_tools.boundaries.subprocess not built yet"
    elif (why := _smoke(default_policy, "subprocess")) is not None:
        skipped[key] = f"subprocess boundary failed to start: {why}"
    else:
        ex[key] = {"label": f"genpark subprocess/{default_policy}", "group": "ours", "version": version}

    if not _importable("langchain_genpark_repl"):
        skipped["langchain-tool"] = "langchain_genpark_repl is not installed"
    else:
        ex["langchain-tool"] = {
            "label": "langchain GenparkReplTool",
            "group": "ours",
            "version": md.version("langchain-genpark-repl"),
            "langchain_core": md.version("langchain-core"),
        }
    for key, (label, module, dist) in PEERS.items():
        started = time.perf_counter()
        if not _importable(module) or (key == "jupyter" and not _importable("jupyter_client")):
            skipped[key] = f"{dist} is not installed or fails to import (benchmarks/requirements.txt)"
            continue
        import_s = round(time.perf_counter() - started, 3)
        ex[key] = {"label": label, "group": "peers", "version": md.version(dist), "import_s": import_s}
    return found


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True
