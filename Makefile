# Scavenger: the two commands that do everything on a fresh machine are
#   make demo   local cluster + operator + a demo ScavengerJob to watch
#   make test   unit tests, then e2e tests on a local cluster started and stopped here
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
KUBECONFIG_LOCAL := $(CURDIR)/.cluster/kubeconfig
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup venv binaries mpi test unit e2e cluster-up cluster-down demo demo-down run crd bench bench-e2e e2e-kind clean

setup: venv binaries mpi ## .venv with the package and test dependencies, the pinned binaries in .bin/, MPI for the demo tests

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "[setup] Python virtualenv $(VENV) with the operator and its test dependencies"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test]'
	touch $@

binaries:
	hack/build-binaries

mpi: venv
	hack/install-mpi

unit: venv ## fast tests: no cluster
	$(PY) -m pytest tests/unit tests/demo -q $(PYTEST_ARGS)

e2e: setup ## e2e tests against a local cluster this target starts and stops
	hack/cluster down >/dev/null 2>&1 || true
	hack/cluster up
	trap 'hack/cluster down' EXIT; \
	  KUBECONFIG=$(KUBECONFIG_LOCAL) $(PY) -m pytest tests/e2e -q $(PYTEST_ARGS)

e2e-kind: ## with Docker and kind: both demos on a kind cluster, one interruption (hack/e2e-kind)
	hack/e2e-kind

test: setup ## the README's test command: unit tests, then e2e tests on the local cluster
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory e2e

cluster-up: setup
	hack/cluster up

cluster-down:
	hack/cluster down

demo: setup ## the main job: local cluster, the operator in the background, a demo ScavengerJob
	hack/demo up

demo-down:
	hack/demo down

run: venv ## the operator in the foreground against $$KUBECONFIG
	$(PY) -m sj_operator

crd: venv ## regenerate crds/ from the model
	$(PY) -m sj_operator.api.crd > crds/scavengerjobs.scavenger.dev.yaml

bench: venv
	$(PY) benchmarks/bench_policy.py

bench-e2e: venv ## SJ creation -> Job latency, operator in-process, against the cluster in $$KUBECONFIG
	@test -n "$${KUBECONFIG:-}" || { echo "bench-e2e: set KUBECONFIG to a running cluster (hack/cluster up prints it)" >&2; exit 1; }
	$(PY) benchmarks/bench_e2e.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_e2e.py --burst $(BENCH_ARGS)

clean: cluster-down
	rm -rf .bin $(VENV)
