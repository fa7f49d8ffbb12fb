# Shortcuts; the README's commands (python3 scripts/dev.py ...) work without make.
.PHONY: demo test lint test-matrix smoke ci bench bench-quick
demo:
	python3 scripts/dev.py demo
test:
	python3 scripts/dev.py test
lint:
	python3 scripts/dev.py lint
test-matrix:
	python3 scripts/dev.py test-matrix
smoke:
	python3 scripts/dev.py smoke
ci:
	.ci/run
bench:
	python3 scripts/dev.py bench
bench-quick:
	python3 scripts/dev.py bench --quick
