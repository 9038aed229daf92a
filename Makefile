# Scavenger: the two commands that do everything on a fresh machine are
#   make demo   local cluster + operator + a demo ScavengerJob to watch
#   make test   the gates, the docs site, unit tests, then e2e tests on a local cluster started and stopped here
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
KUBECONFIG_LOCAL := $(CURDIR)/.cluster/kubeconfig
PYTEST_ARGS ?=
BENCH_ARGS ?=
VERSION ?=
RELEASE_ARGS ?=

.PHONY: setup venv binaries mpi lint docs docs-check docs-serve chart images node-up node-down test unit e2e cluster-up cluster-down demo demo-down run crd reference bench bench-loop bench-events bench-e2e bench-writes bench-write-costs bench-scale bench-report e2e-kind \
	mutation mutation-smoke fuzz release clean

setup: venv binaries mpi ## .venv with the package and test dependencies, the pinned binaries in .bin/, MPI for the demo tests

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "[setup] Python virtualenv $(VENV) with the operator, its test, lint, docs and mutation-testing dependencies"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,lint,docs,mutation]'
	touch $@

binaries:
	hack/build-binaries

mpi: venv
	hack/install-mpi

SHELL_SCRIPTS := hack/build-binaries hack/cluster hack/demo hack/e2e-kind hack/install-mpi hack/install-operator hack/node \
	hack/mutation hack/release \
	hack/kind/runc-bounded hack/kind/node/preload-images \
	examples/lammps/lammps-run \
	.ci/run
PY_TREES := sj_operator gang tests benchmarks demo hack/images hack/mutation-score hack/kind hack/chart-readme \
	hack/run-docs

lint: venv ## the gates: ruff, mypy --strict, import-linter layers, shellcheck
	@echo "[lint] ruff"; $(VENV)/bin/ruff check $(PY_TREES)
	@echo "[lint] mypy --strict"; $(VENV)/bin/mypy && $(VENV)/bin/mypy --strict hack/kind/netd.py hack/chart-readme && $(VENV)/bin/mypy --strict hack/run-docs \
	  && $(VENV)/bin/mypy --config-file benchmarks/mypy.ini --cache-dir .mypy_cache/benchmarks -p benchmarks
	@echo "[lint] import-linter"; $(VENV)/bin/lint-imports --no-cache
	@echo "[lint] shellcheck"; $(VENV)/bin/shellcheck $(SHELL_SCRIPTS) && $(VENV)/bin/shellcheck -s sh gang/mpi-entrypoint.sh
	@echo "[lint] all gates pass"

docs: venv ## the docs site (mkdocs.yml, docs/) built into site/, strict: a broken link or a page outside the nav fails
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

docs-check: venv ## what `make test` runs: the site builds strictly (into a temporary directory)
	@echo "[docs] mkdocs build --strict"; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir "$$tmp" 2>&1 | { grep -v "^INFO" || true; }

docs-serve: venv ## the docs site on http://127.0.0.1:8000, rebuilt on every change
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

chart: binaries venv ## the Helm chart (deploy/chart): helm lint, and helm template with the default and the local values
	@echo "[chart] helm lint"; .bin/helm lint --strict deploy/chart --kube-version 1.34.4
	@echo "[chart] helm template"; .bin/helm template scavenger deploy/chart --kube-version 1.34.4 >/dev/null
	@.bin/helm template scavenger deploy/chart --kube-version 1.34.4 -f hack/local-install/values.yaml \
	  --set replicas=1,webhook.enabled=false,bandGuard=false,namespaces={a\,b} >/dev/null
	@echo "[chart] README.md"; $(PY) hack/chart-readme --check
	@echo "[chart] ok"

release: binaries venv ## the release artifacts of VERSION=x.y.z under dist/: the Helm chart, the operator image (OCI archive; root), the wheel with kubectl-sj
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z [RELEASE_ARGS=--no-image]" >&2; exit 2; }
	PYTHON=$(abspath $(PY)) hack/release $(VERSION) $(RELEASE_ARGS)

mutation: venv ## on demand: mutation testing of the pure core (policy, state machine, write plan, gang); hours, SAMPLE=N every N-th mutant
	VENV=$(VENV) hack/mutation $(if $(SAMPLE),sample $(SAMPLE),score)

mutation-smoke: venv ## a handful of mutants, so a broken mutation setup fails CI; a few minutes
	VENV=$(VENV) hack/mutation smoke

fuzz: venv ## on demand: the fuzz tests long and random (FUZZ_EXAMPLES per property, default 20,000); minutes
	SJ_HYPOTHESIS_PROFILE=fuzz SJ_FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-20000} $(PY) -m pytest tests/unit/test_fuzz.py -q \
	  $(PYTEST_ARGS)

unit: venv ## fast tests: no cluster, on every core (pytest-xdist)
	$(PY) -m pytest tests/unit tests/demo -q -n auto $(PYTEST_ARGS)

e2e: setup ## e2e tests against a local cluster this target starts and stops, the real-node stage last
	hack/node down >/dev/null 2>&1 || true
	hack/cluster down >/dev/null 2>&1 || true
	hack/cluster up
	trap 'hack/node down; hack/cluster down' EXIT; \
	  KUBECONFIG=$(KUBECONFIG_LOCAL) $(PY) -m pytest tests/e2e -q --durations=25 $(PYTEST_ARGS)

images: ## the operator, demo and example images, built without Docker, imported into the real node when it runs
	@if hack/node status >/dev/null 2>&1; then into="--containerd .node/containerd/containerd.sock"; else into=; fi; \
	  hack/images pause operator generic-counter mpi-heat $$into; \
	  hack/images --dockerfile examples/lammps/Dockerfile --tag scavenger/lammps:dev $$into

node-up: setup ## join the real kubelet node to the running local cluster
	hack/node up

node-down:
	hack/node down

e2e-kind: setup ## the e2e suite and both demos (one preemption each) on kind; Docker, kind and its node image made here as root (hack/e2e-kind)
	hack/e2e-kind

test: setup ## the README's test command: the gates, the docs site, the chart, unit tests, then e2e tests on the local cluster
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory docs-check
	$(MAKE) --no-print-directory chart
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory e2e

cluster-up: setup
	hack/cluster up

cluster-down:
	hack/cluster down

demo: venv binaries ## the main job: local cluster, the operator in the background, a demo ScavengerJob (no host MPI needed)
	hack/demo up

demo-down:
	hack/demo down

run: venv ## the operator in the foreground against $$KUBECONFIG
	$(PY) -m sj_operator

crd: venv ## regenerate the CRDs (crds/ and the chart's) and the generated reference pages (docs/reference/) from the models
	for dir in crds deploy/chart/crds; do \
	  $(PY) -m sj_operator.api.crd > $$dir/scavengerjobs.scavenger.dev.yaml && \
	  $(PY) -m sj_operator.api.crd quota > $$dir/scavengerquotas.scavenger.dev.yaml && \
	  $(PY) -m sj_operator.api.crd clusterquota > $$dir/scavengerclusterquotas.scavenger.dev.yaml || exit 1; \
	done
	$(MAKE) --no-print-directory reference

reference: venv ## regenerate every generated page of docs/reference/ (API, flags, metrics, reasons and Events) from the code
	$(PY) -m sj_operator.docgen --write

# Each bench-* target keeps its result as data in benchmarks/results/ (--save); make bench-report renders
# docs/benchmarks.md from them.
bench: venv ## one admission pass of the pure policy over 5,000 waiting SJs and 500 nodes (a minute)
	$(PY) benchmarks/bench_policy.py --save $(BENCH_ARGS)

bench-loop: venv ## one pass of the decision loop at 11,000 SJs and 1,000 nodes, simulated API (a minute)
	$(PY) benchmarks/bench_loop.py --save $(BENCH_ARGS)

bench-events: venv ## kopf's CPU per watch event and the cyclic garbage it leaves, by collector settings (half a minute)
	$(PY) benchmarks/bench_events.py --save $(BENCH_ARGS)

bench-e2e: venv ## SJ creation -> Job latency, operator in-process, against the cluster in $$KUBECONFIG
	@test -n "$${KUBECONFIG:-}" || { echo "bench-e2e: set KUBECONFIG to a running cluster (hack/cluster up prints it)" >&2; exit 1; }
	$(PY) benchmarks/bench_e2e.py --save $(BENCH_ARGS)
	$(PY) benchmarks/bench_e2e.py --burst --save $(BENCH_ARGS)

bench-writes: venv ## CPU per write: a run's Job made on the event loop against the client in a thread, against the cluster in $$KUBECONFIG (a minute)
	@test -n "$${KUBECONFIG:-}" || { echo "bench-writes: set KUBECONFIG to a running cluster (hack/cluster up prints it)" >&2; exit 1; }
	$(PY) benchmarks/bench_writes.py --save $(BENCH_ARGS)

bench-write-costs: venv ## what recording a unit costs the control plane against a plain Job's unit, on the local cluster in $$KUBECONFIG (ten minutes)
	@test -n "$${KUBECONFIG:-}" || { echo "bench-write-costs: set KUBECONFIG to the local cluster (hack/cluster up prints it)" >&2; exit 1; }
	$(PY) benchmarks/bench_write_costs.py --save $(BENCH_ARGS)

bench-scale: setup ## on demand: SJs beside plain Jobs and Kueue on kwok nodes, table and a timeline plot in .cluster/bench-scale.png (BENCH_ARGS='--sjs 2000 --nodes 200 --settle 120': 25 min)
	$(PIP) install --quiet -e '.[bench]'
	hack/build-binaries kueue
	@started=; if ! hack/cluster status >/dev/null 2>&1; then hack/cluster up; started=1; fi; \
	  trap '[[ -z "$$started" ]] || hack/cluster down' EXIT; \
	  KUBECONFIG=$(KUBECONFIG_LOCAL) $(PY) benchmarks/bench_scale.py --kueue --plot .cluster/bench-scale.png \
	    --save $(BENCH_ARGS)

bench-report: venv ## docs/benchmarks.md and its plots from the results kept in benchmarks/results/
	$(PY) -m benchmarks.harness.report --output docs/benchmarks.md

clean: cluster-down
	rm -rf .bin $(VENV) site
