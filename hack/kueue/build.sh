#!/usr/bin/env bash
# Builds Kueue's controller manager from Go modules into a cache outside the repo, with Kueue's CRDs and its
# manager's RBAC beside it (from the same module). Prints the cache directory on its last line:
#   <cache>/bin/kueue, <cache>/crds/*.yaml, <cache>/rbac/{role,manager_secrets_role}.yaml
# Used by tests/operator/test_operator_kueue.py (the operator as Kueue's controller of MLJobs).
set -euo pipefail
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
command -v go >/dev/null 2>&1 || { echo "error: Go is not installed (needed to build Kueue ${KUEUE_VERSION})" >&2; exit 2; }
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
cache=${KUBEPOOL_CACHE:-$HOME/.cache/kubepool}/kueue/${KUEUE_VERSION}
mkdir -p "$cache/bin"
log() { printf '[kueue %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
ready() { [ -x "$cache/bin/kueue" ] && [ -f "$cache/crds/kueue.x-k8s.io_workloads.yaml" ] && [ -f "$cache/rbac/manager_secrets_role.yaml" ]; }
if ready; then log "cached: $cache"; echo "$cache"; exit 0; fi
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  log "another build of Kueue is running; waiting for it (its output: $cache/build.log)"
  flock 9
  exec bash "$0" "$@"
fi
start=$(date +%s)
log "building Kueue ${KUEUE_VERSION} into $cache (a cold build takes several minutes on 2 cores; Go's output: $cache/build.log)"
( while sleep 60; do log "still building Kueue ($(( $(date +%s) - start ))s elapsed)"; done ) & hb=$!
trap 'kill $hb 2>/dev/null || true' EXIT
if ! GOBIN=$cache/bin go install -trimpath -ldflags '-s -w' "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}" >>"$cache/build.log" 2>&1; then
  log "FAILED: go install sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION} (last lines of $cache/build.log):"
  tail -n 30 "$cache/build.log" >&2
  exit 1
fi
src=$(go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
mkdir -p "$cache/crds" "$cache/rbac"
cp "$src"/config/components/crd/bases/*.yaml "$cache/crds/"
cp "$src/config/components/rbac/role.yaml" "$src/config/components/rbac/manager_secrets_role.yaml" "$cache/rbac/"
chmod -R u+w "$cache/crds" "$cache/rbac"
log "done in $(( $(date +%s) - start ))s: $cache"
echo "$cache"
