# rayspec — set-up and everyday commands.  `make test` and `make serve` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Machines without CUDA take torch 2.13.0: on these machines pip finds its CPU wheel on disk
# (their pip config's find-links); elsewhere PyPI's build of that version, which is CUDA's on
# Linux (use PyTorch's CPU index to avoid it).  An unpinned torch would pull gigabytes of CUDA
# packages here.  Machines with a GPU take the registry's build.
TORCH_SPEC := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)

export HF_HUB_OFFLINE := 1
export RAY_AUTH_MODE := disabled

.PHONY: install test test-all serve loadtest loadtest-sweep bench-verify clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Test processes.  Much of the suite's time is spent waiting for the processes it starts (Ray
# heads, workers, servers), so two use CI's two cores better than one.  A test file runs whole
# in one process, so that its module fixtures (a launched cluster, workers) start once.
TEST_WORKERS ?= 2
PYTEST       := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

## the whole suite, short versions of the slow statistical/load tests (what CI runs)
test: install
	$(PYTEST) -m "not slow" -q

## everything, long tests included
test-all: install
	$(PYTEST) -q

## the service on the demo pair, on CPU, at 127.0.0.1 (HTTP :8000, gRPC :9000); Ctrl-C stops it
serve: install
	$(VENV)/bin/rayspec serve $(CONFIG)

LOADTEST_HOST    ?= http://127.0.0.1:8000
LOADTEST_GRPC    ?= 127.0.0.1:9000
LOADTEST_USERS   ?= 4
LOADTEST_TIME    ?= 60s
LOADTEST_CLASSES ?=
LOADTEST_ARGS    ?=
LOADTEST_OUT     ?= bench/results/loadtest
LOCUST = RAYSPEC_GRPC=$(LOADTEST_GRPC) $(VENV)/bin/locust -f loadtest/locustfile.py --headless \
	-t $(LOADTEST_TIME) --host $(LOADTEST_HOST) --only-summary --exit-code-on-error 1
LOADTEST_READY = $(PY) -c "import urllib.request; urllib.request.urlopen('$(LOADTEST_HOST)/health', timeout=5)" \
	2>/dev/null || { echo "no rayspec service at $(LOADTEST_HOST): run 'make serve' first"; exit 1; }

## headless locust run against `make serve` (start it first); CSV in bench/results/loadtest/
loadtest: install
	@$(LOADTEST_READY)
	mkdir -p $(LOADTEST_OUT)
	$(LOCUST) -u $(LOADTEST_USERS) -r $(LOADTEST_USERS) --csv $(LOADTEST_OUT)/u$(LOADTEST_USERS) \
	    $(LOADTEST_ARGS) $(LOADTEST_CLASSES)

## the service benchmark's locust runs: streaming requests, 1/4/16 users, HTTP and gRPC
loadtest-sweep: install
	@$(LOADTEST_READY)
	mkdir -p $(LOADTEST_OUT)
	for cls in OpenAIHttpUser GrpcUser; do for u in 1 4 16; do \
	    $(LOCUST) -u $$u -r $$u --tags stream --csv $(LOADTEST_OUT)/$${cls}_u$$u $$cls || exit 1; \
	done; done

## verify_tree timings -> bench/results/verify_bench.{json,md}
bench-verify: install
	$(PY) bench/verify_bench.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
