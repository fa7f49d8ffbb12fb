"""The container boundary's parts: the docker CLI, container settings and mount rules, the zygote in a
container, and the image build. The boundary itself is genpark_repl_tools.boundaries.docker."""
