# Quick start: `make demo` and `make test` work from a fresh clone; each sets up .venv on its own.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The benchmark scripts `make bench` runs (those present); `make bench BENCH_ARGS=--quick`.
BENCHMARKS := $(wildcard benchmarks/bench_hot_path.py benchmarks/bench_handoff.py \
	benchmarks/bench_workloads.py benchmarks/bench_jax_grad.py benchmarks/bench_grad_boundary.py \
	benchmarks/bench_torch_call.py)
BENCH_ARGS ?=

# `make test-newest-jax`: the handoff and training tests against the newest JAX, which
# needs Python >= 3.12 (JAX dropped 3.11 at 0.11). Not run in CI. On Linux it downloads
# torch's CUDA build from PyPI (about 5 GB installed; the local CPU wheel is for 3.11).
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
VENV312 := .venv-py312
# The torch it runs against: `make test-newest-jax NEWEST_TORCH=2.15.0` (where pip's
# configuration caps torch through a constraints file, PIP_CONFIG_FILE=/dev/null lifts it).
NEWEST_TORCH ?= 2.13.0
NEWEST_JAX_TESTS := tests/bridge tests/shared/test_private.py

.PHONY: demo picture notebooks test lint typecheck pytest bench clean test-newest-jax

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: 2.13.0 is a CPU build on local disk; a bare `torch` would pull a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out && $(PY) -m interop --png out/layout.png

# The README's picture: the demo on the CPU; tests/docs/test_demo.py checks it is current.
picture: $(STAMP)
	JAX_PLATFORMS=cpu $(PY) -m interop --device cpu --png docs/layout.png

# Execute the notebooks as the tests do and write their outputs back (no timings).
notebooks: $(STAMP)
	$(PY) tests/support/notebook_runner.py notebooks/*.ipynb

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy functional_ws interop benchmarks

pytest: $(STAMP)
	JAX_PLATFORMS=cpu HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -q

# lint, types, doctests and tests; fails if any fails.
test: lint typecheck pytest

# The peers bench_jax_grad.py measures (benchmark-only: `make test` never needs them).
$(VENV)/.bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	touch $(VENV)/.bench

bench: $(STAMP) $(VENV)/.bench
	set -e; for script in $(BENCHMARKS); do \
		echo "=== $$script ==="; $(PY) $$script $(BENCH_ARGS); done

test-newest-jax:
	test -x $(VENV312)/bin/python || $(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/python -m pip install --quiet torch==$(NEWEST_TORCH)
	$(VENV312)/bin/python -m pip install --quiet -e '.[dev]'
	$(VENV312)/bin/python -m pip install --quiet --upgrade jax jaxlib
	$(VENV312)/bin/python -c "import sys, jax, torch; print('python', sys.version.split()[0], \
		'| jax', jax.__version__, '| torch', torch.__version__)"
	JAX_PLATFORMS=cpu HYPOTHESIS_PROFILE=ci $(VENV312)/bin/python -m pytest -q $(NEWEST_JAX_TESTS)

clean:
	rm -rf $(VENV) $(VENV312) build *.egg-info out
