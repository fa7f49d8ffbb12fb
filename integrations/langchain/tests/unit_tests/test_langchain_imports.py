from __future__ import annotations

import langchain_genpark_repl

EXPECTED_ALL = [
    "GenparkCodeExecutor",
    "GenparkDownloadTool",
    "GenparkFilesTool",
    "GenparkForkTool",
    "GenparkInspectTool",
    "GenparkReplTool",
    "GenparkResetTool",
    "GenparkReplToolkit",
    "GenparkVariablesTool",
    "SessionResolver",
    "__version__",
    "thread_session",
]


def test_all_imports() -> None:
    assert sorted(langchain_genpark_repl.__all__) == sorted(EXPECTED_ALL)
    for name in EXPECTED_ALL:
        assert hasattr(langchain_genpark_repl, name)
