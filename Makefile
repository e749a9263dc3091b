# Quick start: `make demo` and `make test` work from a fresh clone; each sets up .venv on its own.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: 2.13.0 is a CPU build on local disk; a bare `torch` would pull a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out && $(PY) -m functional_ws --png out/layout.png

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy functional_ws interop benchmarks

pytest: $(STAMP)
	JAX_PLATFORMS=cpu HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -q

# lint, types, doctests and tests; fails if any fails.
test: lint typecheck pytest

bench: $(STAMP)
	$(PY) -m functional_ws bench

clean:
	rm -rf $(VENV) build *.egg-info
