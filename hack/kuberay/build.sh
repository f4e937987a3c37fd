#!/usr/bin/env bash
# v1.6.1: the newest ray-operator release the Go proxy serves here (v1.7.0's zip answers 403; the proxy's @v/list
# names only v1.4.0 and v1.5.0, yet serves v1.6.0 and v1.6.1 when asked by version).
# Builds the KubeRay operator (the Go peer kubepool is benchmarked against, and the optional backend) from
# its Go module into the cache outside the repo, and copies its CRDs beside it. Prints the cache dir.
set -euo pipefail
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.6.1}
command -v go >/dev/null || { echo "error: Go >= 1.26 is required to build the KubeRay operator" >&2; exit 2; }
export GOTOOLCHAIN=local CGO_ENABLED=0
dir=${KUBEPOOL_CACHE:-$HOME/.cache/kubepool}/kuberay/$KUBERAY_VERSION
if [ ! -x "$dir/bin/ray-operator" ]; then
  mkdir -p "$dir/bin"
  log=$dir/build.log
  echo "[kuberay $(date +%H:%M:%S)] building ray-operator $KUBERAY_VERSION (a few minutes on 2 cores; Go's output: $log)" >&2
  t0=$(date +%s)
  if ! GOBIN=$dir/bin go install -trimpath -ldflags '-s -w' "github.com/ray-project/kuberay/ray-operator@${KUBERAY_VERSION}" >"$log" 2>&1; then
    echo "[kuberay] FAILED: go install ray-operator@${KUBERAY_VERSION} (last lines of $log):" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  echo "[kuberay $(date +%H:%M:%S)] built in $(( $(date +%s) - t0 ))s" >&2
fi
if [ ! -d "$dir/crds" ]; then
  src=$(go mod download -json "github.com/ray-project/kuberay/ray-operator@${KUBERAY_VERSION}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$dir/crds" && cp "$src"/config/crd/bases/*.yaml "$dir/crds/" && chmod -R u+w "$dir/crds"
fi
echo "$dir"
