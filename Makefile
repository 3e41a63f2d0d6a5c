# gpushare-operator — see README.md.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
# The one version, from pyproject.toml (the image tag; gpushare --version reads the same).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

.PHONY: manifests help setup test test-unit test-integration lint fmt crds crds-check control-plane cluster cluster-down \
        bench bench-webhook demo demo-down gpu-check e2e-kind image image-check image-local helm lock clean \
        promtool monitoring-check soak realnode realnode-prereqs kubelet realnode-bins nvidia-plugin nfd mig-parted fake-nvml docs docs-serve docs-assets chromium

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(BIN)/gpushare: pyproject.toml
	@echo "[setup] creating $(VENV): gpushare and its test and lint tools, about 60 packages" \
	  "(under a minute with pip's cache warm, a few minutes on a first download; pip names each one)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install --progress-bar off -e . --group dev
	@echo "[setup] done: $(BIN)/gpushare"
	@touch $@

setup: $(BIN)/gpushare ## Create .venv and install gpushare with its test and lint tools

control-plane: ## Build (or reuse) kube-apiserver, kcm, scheduler, etcd and kwok in ~/.cache/gpushare
	bash hack/build-control-plane.sh

helm: ## Build (or reuse) the helm CLI in ~/.cache/gpushare (for the chart's tests)
	bash hack/build-helm.sh

# The real-node tier (a real kubelet + containerd node beside the kwok nodes, tests/integration/
# test_realnode.py): on by default; `make test REAL_NODES=0` leaves it out where it cannot run
# (no root, no cgroups) and the test summary says so.
REAL_NODES ?= 1
ifeq ($(REAL_NODES),0)
REALNODE_DEPS :=
else
REALNODE_DEPS := realnode image-local
endif

realnode-prereqs: ## Install containerd, runc, the CNI plugins and iptables from Debian when missing (real-node tier)
	bash hack/realnode-prereqs.sh

kubelet: ## Build (or reuse) kubelet v1.34.4 in ~/.cache/gpushare (real-node tier)
	bash hack/build-kubelet.sh

realnode-bins: ## Build the real node's Go programs (device plugin, pause, workload, node reset, nvidia-caps) into build/realnode
	bash hack/build-realnode.sh

image-local: setup ## Build the image without Docker (debootstrapped Debian, the locked wheels; cached in ~/.cache/gpushare/image) as a docker-archive for the real node (root)
	bash hack/build-image-local.sh

nvidia-plugin: ## Build (or reuse) NVIDIA's device plugin, config-manager and GPU Feature Discovery (realnode/nvidia/go.mod's version) in ~/.cache/gpushare (real-node tier)
	bash hack/build-nvidia-plugin.sh

nfd: ## Build (or reuse) Node Feature Discovery's nfd-master and nfd-worker (realnode/nfd/go.mod's version) and its CRDs in ~/.cache/gpushare (real-node tier)
	bash hack/build-nfd.sh

mig-parted: ## Build (or reuse) NVIDIA's nvidia-mig-parted and nvidia-mig-manager (realnode/migparted/go.mod's version) in ~/.cache/gpushare (real-node tier)
	bash hack/build-mig-parted.sh

fake-nvml: ## Build the project's own libnvidia-ml.so.1 (pretends GPUs; realnode/fakenvml) into build/realnode/driver-root (gcc, Go)
	bash hack/build-fake-nvml.sh

realnode: realnode-prereqs kubelet realnode-bins nvidia-plugin nfd mig-parted fake-nvml ## Everything the real-node tier needs

CLUSTER_DIR ?= .cluster

CLUSTER_REAL_NODES ?= 0
CLUSTER_NVIDIA ?= 0
cluster: setup control-plane ## Start a local control plane in the background, with the fake GPU node pools examples/ selects (CLUSTER_REAL_NODES=1: and a real kubelet node; CLUSTER_NVIDIA=1: running NVIDIA's device plugin)
	$(if $(filter-out 0,$(CLUSTER_REAL_NODES)),$(MAKE) realnode)
	$(BIN)/python -m gpushare.devcluster up --dir $(CLUSTER_DIR) --real-nodes $(CLUSTER_REAL_NODES) $(if $(filter-out 0,$(CLUSTER_NVIDIA)),--nvidia-plugin)

cluster-down: ## Stop the control plane started by `make cluster`
	$(BIN)/python -m gpushare.devcluster down --dir $(CLUSTER_DIR)

test: setup control-plane helm promtool chromium docs-assets fake-nvml $(REALNODE_DEPS) ## Run every test: unit, property, integration (real kube-apiserver) and the real-node tier (REAL_NODES=0: without it)
	GPUSHARE_TEST_PROGRESS=1 GPUSHARE_REAL_NODES=$(REAL_NODES) GPUSHARE_REAL_NODES_ORIGIN="$(origin REAL_NODES)" $(BIN)/pytest tests

test-integration: setup control-plane helm chromium docs-assets $(REALNODE_DEPS) ## Run only the tests against the local control plane (and the real node)
	GPUSHARE_TEST_PROGRESS=1 GPUSHARE_REAL_NODES=$(REAL_NODES) GPUSHARE_REAL_NODES_ORIGIN="$(origin REAL_NODES)" $(BIN)/pytest tests -m integration

test-unit: setup helm promtool fake-nvml ## Run the tests that need no control plane
	GPUSHARE_TEST_PROGRESS=1 $(BIN)/pytest tests -m "not integration"

chromium: ## Find headless Chromium, or install it (Debian's chromium package) for the documentation site's browser test
	bash hack/chromium.sh

promtool: ## Find promtool, or install it (Debian's prometheus package) to check the monitoring rules
	bash hack/promtool.sh

monitoring-check: setup promtool ## Alerts, ServiceMonitor, dashboard: promtool check/test rules, every dashboard query, metric names
	$(BIN)/pytest -q tests/unit/test_monitoring.py

lint: setup docs-assets ## ruff, mypy --strict (the package and tests/), the import contracts (layers), the CRD and docs drift checks, the strict site build
	$(BIN)/ruff check operator tests
	$(BIN)/ruff format --check operator tests
	$(BIN)/mypy  # operator/gpushare and tests: pyproject.toml [tool.mypy] files
	$(BIN)/lint-imports --no-logo
	@test -z "$$(gofmt -l realnode)" || { echo "realnode/: run gofmt -w realnode"; gofmt -l realnode; exit 1; }
	$(BIN)/python -m gpushare.api.crd | diff -u crds/gpushare.io_gpusharepools.yaml - \
	  || { echo "crds/ is stale: run 'make crds'"; exit 1; }
	$(BIN)/python -m gpushare.admission.webhook_config | diff -u manifests/webhook/webhook.yaml - \
	  || { echo "manifests/webhook/webhook.yaml is stale: run 'make manifests'"; exit 1; }
	$(BIN)/python -m gpushare.admission.vap | diff -u manifests/webhook/policy.yaml - \
	  || { echo "manifests/webhook/policy.yaml is stale: run 'make manifests'"; exit 1; }
	$(BIN)/python -m gpushare.admission.vap --pods | diff -u manifests/webhook/policy-pods.yaml - \
	  || { echo "manifests/webhook/policy-pods.yaml is stale: run 'make manifests'"; exit 1; }
	$(BIN)/python -m gpushare.docsgen --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # not --quiet: it hides the warnings --strict fails on

docs-assets: ## Fetch the site's pinned Mermaid and iframe-worker from the npm registry into docs/assets/vendor (checksummed, cached)
	bash hack/docs-assets.sh

docs: setup docs-assets ## Regenerate docs/reference/ from the code and build the site into site/ (mkdocs build --strict, offline)
	$(BIN)/python -m gpushare.docsgen
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: setup docs-assets ## Serve the site on http://127.0.0.1:8000 (regenerates docs/reference/ first)
	$(BIN)/python -m gpushare.docsgen
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

fmt: setup ## Format the code
	$(BIN)/ruff format operator tests
	$(BIN)/ruff check --fix operator tests

crds: setup ## Regenerate crds/ from the pydantic models
	$(BIN)/python -m gpushare.api.crd > crds/gpushare.io_gpusharepools.yaml
	cp crds/gpushare.io_gpusharepools.yaml manifests/crd/gpushare.io_gpusharepools.yaml
	cp crds/gpushare.io_gpusharepools.yaml charts/gpushare-operator/crds/gpushare.io_gpusharepools.yaml
	$(BIN)/python -m gpushare.admission.webhook_config > manifests/webhook/webhook.yaml
	$(BIN)/python -m gpushare.admission.vap > manifests/webhook/policy.yaml
	$(BIN)/python -m gpushare.admission.vap --pods > manifests/webhook/policy-pods.yaml

manifests: setup ## Regenerate manifests/crd/, manifests/webhook/ (VWC, ValidatingAdmissionPolicy) and the chart's CRD and webhooks from the code
	$(BIN)/python -m gpushare.api.crd > manifests/crd/gpushare.io_gpusharepools.yaml
	$(BIN)/python -m gpushare.admission.webhook_config > manifests/webhook/webhook.yaml
	$(BIN)/python -m gpushare.admission.vap > manifests/webhook/policy.yaml
	$(BIN)/python -m gpushare.admission.vap --pods > manifests/webhook/policy-pods.yaml
	cp manifests/crd/gpushare.io_gpusharepools.yaml charts/gpushare-operator/crds/gpushare.io_gpusharepools.yaml
	$(BIN)/python hack/chart-webhooks.py
	if [ -d manifests/monitoring ]; then mkdir -p charts/gpushare-operator/files/dashboards \
	  && cp manifests/monitoring/prometheusrule.yaml charts/gpushare-operator/files/ \
	  && cp manifests/monitoring/dashboards/gpushare-operator.json charts/gpushare-operator/files/dashboards/; fi

lock: setup ## Re-pin the image's dependencies with hashes (requirements/*.txt, used by the Dockerfile)
	$(BIN)/pip install -q --group lock
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes \
	  --custom-compile-command "make lock" -q -o requirements/image.txt $(LOCK_ARGS)
	$(BIN)/uv pip compile requirements/build.in --universal --python-version 3.11 --generate-hashes \
	  --custom-compile-command "make lock" -q -o requirements/build.txt $(LOCK_ARGS)

clean: ## Remove local build state
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .import_linter_cache

BENCH_NODES ?= 100,1000
BENCH_STEADY ?= 60
bench: setup control-plane ## All benchmarks: operator vs kubectl on kwok nodes (BENCH_NODES=100,1000 BENCH_STEADY=60), the model's cost per event and object, the webhook, the real-node tier's start
	$(BIN)/python bench/bench_operator.py --nodes $(BENCH_NODES) --steady $(BENCH_STEADY)
	$(BIN)/python bench/bench_model.py --nodes 5000 --pods 10000 --pending 500 --rounds 3
	$(BIN)/python bench/bench_webhook.py --requests 2000 --creates 1350 --rounds 9 --nodes 30 --burst 150
	$(BIN)/python bench/bench_webhook_server.py --requests 3000 --rounds 5
	$(BIN)/python bench/bench_webhook_call.py --nodes 30 --creates 600 --rounds 6
	$(if $(filter-out 0,$(REAL_NODES)),$(MAKE) realnode && )$(BIN)/python bench/bench_realnode.py --runs 3

bench-webhook: setup control-plane ## Admission webhook benchmark: direct HTTPS load, pod create latency with/without; the server alone per review; the apiserver's call per server; see docs/benchmarks.md
	$(BIN)/python bench/bench_webhook.py --requests 2000 --creates 1350 --rounds 9 --nodes 30 --burst 150
	$(BIN)/python bench/bench_webhook_server.py --requests 3000 --rounds 5
	$(BIN)/python bench/bench_webhook_call.py --nodes 30 --creates 600 --rounds 6

gpu-check: setup ## On an NVIDIA GPU machine: agent inventory via real NVML + quota helper with PyTorch (fails clearly without a GPU)
	$(BIN)/python -m gpushare.gpu.check

SEED ?= 1
MINUTES ?= 10
SOAK_REAL_NODE ?= 0
soak: setup control-plane ## Seeded fault-injection soak on a control plane of its own: pool edits, GPU pods, overlapping faults, then the invariants (SEED=1 MINUTES=10; SOAK_REAL_NODE=1: the real node too; docs/how-to/soak.md)
	$(if $(filter-out 0,$(SOAK_REAL_NODE)),$(MAKE) realnode)
	$(BIN)/python -m gpushare.devcluster.soak --seed $(SEED) --minutes $(MINUTES) $(if $(filter-out 0,$(SOAK_REAL_NODE)),--real-node)

DEMO_DIR ?= .demo
DEMO_REAL_NODES ?= 1
demo: setup control-plane promtool ## The whole product on one machine: control plane, fake GPU nodes and a real kubelet node where the host allows it (an ACK pool, then an NVIDIA pool), operator + webhook, a Prometheus with the shipped alerts, example pools and jobs (docs/getting-started/demo.md; DEMO_REAL_NODES=0: kwok only)
	@real=$(DEMO_REAL_NODES); \
	if [ "$$real" != 0 ] && ! $(MAKE) realnode; then \
	  echo "demo: the real node's prerequisites could not be built (above); kwok nodes only"; real=0; \
	fi; \
	if [ "$$real" != 0 ] && ! $(MAKE) image-local; then \
	  echo "demo: the product's image could not be built (above): no NVIDIA pool on the real node"; \
	fi; \
	DEMO_DIR=$(DEMO_DIR) DEMO_REAL_NODES=$$real bash hack/demo.sh up

demo-down: ## Stop everything `make demo` started (Prometheus, operator, control plane)
	DEMO_DIR=$(DEMO_DIR) bash hack/demo.sh down

image: ## Build the operator/agent image (needs a Docker engine)
	@docker info >/dev/null 2>&1 || { echo "image: no Docker engine (docker info failed); nothing was built (make image-local builds it without one, as root)"; exit 1; }
	docker build -t gpushare-operator:$(VERSION) .

image-check: setup control-plane ## Build the image (local Debian base when no registry is reachable) and run it: --version, check, operator vs local control plane (prints "skipped, no engine" without Docker)
	bash hack/image-check.sh

e2e-kind: setup ## With Docker + kind: build the image, deploy manifests/ to a kind cluster, run tests/e2e (prints SKIPPED and tests nothing without them)
	bash hack/e2e-kind.sh
