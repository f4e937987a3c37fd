#!/usr/bin/env bash
# End-to-end on kind, for machines with Docker: create a kind cluster with three CPU-pool workers, build and
# load the operator and runtime images, install the chart, run the ray-tasks example to DONE, and check that
# `helm uninstall` leaves the MLJob in place.
#   hack/kind-e2e.sh            # deletes the cluster at the end
#   KEEP=1 hack/kind-e2e.sh     # keeps it (kubectl --context kind-kubepool-e2e ...)
# Needs docker, kind and kubectl on PATH. helm comes from PATH, or from hack/k8s-bin/build.sh.
set -euo pipefail

cd "$(dirname "$0")/.."
CLUSTER=${CLUSTER:-kubepool-e2e}
TAG=${TAG:-dev}
RELEASE=kubepool
SYSTEM_NS=kubepool-system
JOBS_NS=kubepool-e2e
TIMEOUT=${TIMEOUT:-15m}
HELM=$(command -v helm || echo "$(hack/k8s-bin/build.sh | tail -1)/helm")
CTX="kind-$CLUSTER"
k() { kubectl --context "$CTX" "$@"; }
log() { echo "[kind-e2e $(date +%H:%M:%S)] $*"; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is not on PATH" >&2; exit 2; }
done

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    log "FAILED; state of the cluster:"
    k get mljobs,pods -A -o wide || true
    k -n "$SYSTEM_NS" logs deployment/"$RELEASE" --tail=100 || true
  fi
  if [ "${KEEP:-0}" != 1 ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
  exit "$rc"
}
trap cleanup EXIT

log "cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s --config - <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
$(for _ in 1 2 3; do printf '  - role: worker\n    labels: {kubepool.dev/node-pool: cpu}\n'; done)
KIND

log "images kubepool/operator:$TAG, kubepool/runtime:$TAG"
docker build -f operator/Dockerfile -t "kubepool/operator:$TAG" .
docker build -f runtime-image/Dockerfile -t "kubepool/runtime:$TAG" .
kind load docker-image --name "$CLUSTER" "kubepool/operator:$TAG" "kubepool/runtime:$TAG"

log "helm install"
"$HELM" --kube-context "$CTX" install "$RELEASE" charts/kubepool --namespace "$SYSTEM_NS" --create-namespace \
  --values charts/kubepool/ci/ci-values.yaml --set image.tag="$TAG" --set operator.runtimeImage="kubepool/runtime:$TAG" \
  --wait --timeout 5m

log "example job"
k create namespace "$JOBS_NS"
k -n "$JOBS_NS" apply -f examples/ray-tasks-job.yaml
k -n "$JOBS_NS" wait mljob/ray-tasks --for=jsonpath='{.status.phase}'=DONE --timeout="$TIMEOUT"
k -n "$JOBS_NS" logs -l kubepool.dev/job=ray-tasks,kubepool.dev/role=head --tail=-1 | grep 'score:'

log "helm uninstall keeps users' MLJobs"
"$HELM" --kube-context "$CTX" uninstall "$RELEASE" --namespace "$SYSTEM_NS" --wait
test "$(k -n "$JOBS_NS" get mljob ray-tasks -o jsonpath='{.status.phase}')" = DONE
k get crd mljobs.kubepool.dev computepools.kubepool.dev >/dev/null
log "OK"
