# rayspec — set-up and everyday commands.  `make test` and `make serve` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Machines without CUDA take the CPU wheel of torch 2.13.0 that lies on disk; an unpinned
# torch would pull gigabytes of CUDA packages.  Machines with a GPU take the registry's build.
TORCH_SPEC := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)

export HF_HUB_OFFLINE := 1
export RAY_AUTH_MODE := disabled

.PHONY: install test test-all bench-verify clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## the whole suite, short versions of the slow statistical/load tests (what CI runs)
test: install
	$(PY) -m pytest -m "not slow" -q

## everything, long tests included
test-all: install
	$(PY) -m pytest -q

## verify_tree timings -> bench/results/verify_bench.{json,md}
bench-verify: install
	$(PY) bench/verify_bench.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
