"""An import refusal lists only modules that are importable here, the closest to the refused name first."""

from __future__ import annotations

from genpark_repl_tools import Policy, ReplEngine


def test_modules_that_are_not_installed_are_not_offered() -> None:
    policy = Policy.strict().allow_imports("genpark_not_installed_module")
    with ReplEngine(boundary="inprocess", policy=policy) as engine:
        result = engine.run("import socket")
    assert result.status == "blocked"
    message = result.findings[0].message
    assert "allowed include: " in message
    assert "genpark_not_installed_module" not in message


def test_the_closest_allowed_module_comes_first() -> None:
    with ReplEngine(boundary="inprocess", policy="standard") as engine:
        message = engine.run("import nump").findings[0].message
    assert message.startswith(
        "import of 'nump' is not allowed under policy 'standard'; allowed include: numpy, "
    )
    assert message.endswith(" more")
