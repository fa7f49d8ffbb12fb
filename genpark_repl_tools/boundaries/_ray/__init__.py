"""The actors of the Ray boundary (genpark_repl_tools.boundaries.ray). Imported only when it is used."""
