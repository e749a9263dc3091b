# Quick start: `make demo` and `make test` work from a fresh clone; each sets up .venv on its own.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The benchmark scripts `make bench` runs (those present); `make bench BENCH_ARGS=--quick`.
BENCHMARKS := $(wildcard benchmarks/bench_hot_path.py benchmarks/bench_handoff.py \
	benchmarks/bench_workloads.py)
BENCH_ARGS ?=

.PHONY: demo picture notebooks test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: 2.13.0 is a CPU build on local disk; a bare `torch` would pull a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out && $(PY) -m interop --png out/layout.png

# The README's picture: the demo on the CPU; tests/test_demo.py checks it is current.
picture: $(STAMP)
	JAX_PLATFORMS=cpu $(PY) -m interop --device cpu --png docs/layout.png

# Execute the notebooks as the tests do and write their outputs back (no timings).
notebooks: $(STAMP)
	$(PY) tests/_notebook_runner.py notebooks/*.ipynb

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
	set -e; for script in $(BENCHMARKS); do \
		echo "=== $$script ==="; $(PY) $$script $(BENCH_ARGS); done

clean:
	rm -rf $(VENV) build *.egg-info out
