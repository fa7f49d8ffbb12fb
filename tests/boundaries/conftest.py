import pytest

# The conformance suite lives in the package (genpark_repl_tools.testing) so other boundaries can run it;
# rewrite its asserts as pytest does for test modules, so a failure shows the values it compared.
pytest.register_assert_rewrite("genpark_repl_tools.testing.conformance")
