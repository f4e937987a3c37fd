# kubepool — every entry point a developer or CI needs. `make demo` and `make test` set up everything.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
export KUBECONFIG ?= $(CURDIR)/.kubepool/kubeconfig
PYTEST_ARGS ?=

.PHONY: docs demo-plan help venv k8s-bin kuberay-bin prometheus-bin dashboard-picture cluster-up cluster-down cluster-status crds verify-crds lint test test-unit test-fast demo bench images kind-e2e clean

help:
	@echo "make demo        set up everything, run a 3-instance job on the local cluster, print its logs and result"
	@echo "make test        set up everything and run the whole test suite"
	@echo "make test-fast   the inner loop: unit and API-server tests (no Ray, no job runs), two workers, about 3 minutes"
	@echo "make cluster-up  start the local cluster (make cluster-down stops it)"
	@echo "make crds        regenerate crds/ and the chart's copy from the pydantic models"
	@echo "make bench       benchmarks (not part of make test)"
	@echo "make dashboard-picture  re-render docs/images/dashboard.png from a real run (Prometheus, private cluster; not part of make test)"
	@echo "make images      build kubepool/operator:dev and kubepool/runtime:dev as OCI archives, no Docker (docs/images.md)"
	@echo "make images-cuda the runtime image's CUDA variant; make images-test runs the built images under runc"
	@echo "make test-realnode  the real-node tier alone (make test runs it beside the rest; root)"
	@echo "make mutants     break each protection on purpose (hack/mutants/mutants.toml); fails if a test still passes"
	@echo "make release REGISTRY=host[:port]/path  publish images, chart (oci://) and wheel of pyproject's version (docs/install.md)"

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "[venv $$(date +%H:%M:%S)] installing kubepool and its dependencies into $(VENV) (torch is large: a first install downloads several GB and takes minutes)"
	@t0=$$(date +%s); $(BIN)/pip install -q --upgrade pip setuptools wheel \
	  && $(BIN)/pip install -q --progress-bar off -c constraints.txt -e '.[dev]' \
	  && echo "[venv $$(date +%H:%M:%S)] installed in $$(( $$(date +%s) - t0 ))s"
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

k8s-bin:
	@hack/k8s-bin/build.sh >/dev/null

k8s-bin-compat:  # the lowest Kubernetes the chart claims (tests/release/test_compat.py): ~7 minutes of 2 cores cold, cached
	@KUBEPOOL_KUBE_VERSION=$$(awk '$$1 == "k8s.io/kubernetes" {print $$2}' src/kubepool/local/k8sbin/kubernetes-1.35/go.mod) hack/k8s-bin/build.sh >/dev/null

kuberay-bin:  # the KubeRay operator (backend tests, benchmark peer): built before pytest, not inside a test's timeout
	@hack/kuberay/build.sh >/dev/null

cluster-up: venv k8s-bin
	$(BIN)/kubepool local up

cluster-down: venv
	$(BIN)/kubepool local down

cluster-status: venv
	$(BIN)/kubepool local status

docs: venv
	$(BIN)/python -m kubepool.cli.docgen > docs/cli.md

crds: venv
	$(BIN)/python -m kubepool.api.crdgen crds
	rm -rf charts/kubepool/crds && mkdir -p charts/kubepool && cp -r crds charts/kubepool/crds

lint: venv  # ruff; the layers (import-linter, contracts in pyproject.toml); types: strict where a slip costs most (the API, the contract, the runtime, the operator and its API client), plain mypy on the rest of src/, tests/support and bench/
	$(BIN)/ruff check src tests bench hack/pytest.py
	$(BIN)/lint-imports
	$(BIN)/mypy --strict src/kubepool/api src/kubepool/contract.py src/kubepool/runtime src/kubepool/controller src/kubepool/kube \
		src/kubepool/objectmeta.py
	$(BIN)/mypy src/kubepool/__init__.py src/kubepool/naming.py src/kubepool/payload_format.py src/kubepool/demo.py \
		src/kubepool/cli src/kubepool/jobs src/kubepool/sagemaker \
		src/kubepool/sagemaker_api src/kubepool/distributors src/kubepool/runtime_cluster src/kubepool/local tests/support bench

test-unit: venv
	$(BIN)/pytest -m "not cluster and not ray and not realnode" $(PYTEST_ARGS)

test-fast: venv k8s-bin  # unit tests and the cluster tests that need the API server alone (marker api); make test runs them all
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder -m "(api or not cluster) and not ray and not slow and not realnode and not images" $(PYTEST_ARGS)

test: venv k8s-bin k8s-bin-compat kuberay-bin  # the process-node suite and, beside it, make lint and the real-node tier (hack/test.sh; REALNODE=0 leaves the tier out)
	@hack/test.sh $(PYTEST_ARGS)

demo: demo-plan venv k8s-bin
	@$(BIN)/python -m kubepool.demo

demo-plan:
	@echo "[demo $$(date +%H:%M:%S)] steps: venv -> Kubernetes binaries -> local cluster -> helm install -> 3-instance XGBoost job (a cold first run takes ~15 minutes)"

bench: venv k8s-bin kuberay-bin
	$(BIN)/python -m bench

prometheus-bin:  # Prometheus from its Go module, cached in ~/.cache/kubepool/prometheus (the dashboard's picture)
	@hack/prometheus/build.sh >/dev/null

dashboard-picture: venv k8s-bin prometheus-bin  # the chart's dashboard drawn from a real run, without Grafana (docs/install.md)
	@$(BIN)/python -c 'import matplotlib' 2>/dev/null || $(BIN)/pip install -q --progress-bar off -e '.[dashboard]'
	$(BIN)/python -m bench.dashboard

.PHONY: images-cuda images-test test-realnode release k8s-bin-compat
release: venv k8s-bin  # REGISTRY=host[:port]/path: images, the chart (OCI) and the wheel of pyproject's version, pushed (docs/install.md)
	PYTHON=$(BIN)/python hack/release/release.sh

images:  # no Docker engine: a Debian base from mmdebstrap, buildah, the Dockerfiles; cached in ~/.cache/kubepool/images
	hack/images/build.sh operator runtime

images-cuda:  # what the CUDA variant is where no nvidia/cuda base can be pulled: docs/images.md
	hack/images/build.sh runtime-cuda

test-realnode: venv lint k8s-bin  # the real-node tier alone: kubelet + containerd nodes running the built images (docs/local-nodes.md)
	hack/realnode/prepare.sh
	$(BIN)/pytest -m realnode tests/realnode $(PYTEST_ARGS)

.PHONY: mutants
mutants: venv k8s-bin  # every named mutation of a protection (hack/mutants/mutants.toml) must fail its tests; the unit level also runs in make test (docs/reliability.md, "Mutations")
	$(BIN)/python hack/mutants/run.py $(MUTANTS_ARGS)

images-test: venv  # the built images under runc (tests/images, marker `images`); skips images not built
	$(BIN)/pytest -m images tests/images $(PYTEST_ARGS)

kind-e2e:  # machines with Docker: kind cluster, images loaded, helm install, the e2e tests
	hack/kind-e2e.sh

clean: venv  # both local clusters: the demo's (.kubepool/) and the tests' (.kubepool-test/)
	$(BIN)/kubepool local down --state-dir .kubepool
	$(BIN)/kubepool local down --state-dir .kubepool-test
