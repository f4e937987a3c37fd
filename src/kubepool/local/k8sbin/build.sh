#!/usr/bin/env bash
# Builds the pinned upstream binaries of the local cluster from Go modules into a cache outside the repo.
# Prints the cache's bin directory on its last line. Rebuilds only when a pin (versions.env, go.mod) changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# KUBEPOOL_KUBE_VERSION: another Kubernetes than the pin, for the compatibility run on the lowest minor the chart
# claims (tests/release/test_compat.py); its wrapper module is kubernetes-<major.minor>/ beside the pinned one.
kube_mod=$here/kubernetes
if [ -n "${KUBEPOOL_KUBE_VERSION:-}" ] && [ "$KUBEPOOL_KUBE_VERSION" != "$KUBE_VERSION" ]; then
  kube_mod=$here/kubernetes-$(echo "$KUBEPOOL_KUBE_VERSION" | sed -E 's/^v([0-9]+[.][0-9]+)[.].*/\1/')
  if ! grep -q "k8s.io/kubernetes $KUBEPOOL_KUBE_VERSION\b" "$kube_mod/go.mod" 2>/dev/null; then
    echo "error: no wrapper module requires k8s.io/kubernetes $KUBEPOOL_KUBE_VERSION (expected in $kube_mod/go.mod)" >&2
    exit 2
  fi
  KUBE_VERSION=$KUBEPOOL_KUBE_VERSION
fi

if ! command -v go >/dev/null 2>&1; then
  echo "error: Go is not installed (need Go >= 1.26 to build Kubernetes ${KUBE_VERSION}); install it from https://go.dev/dl or your package manager" >&2
  exit 2
fi
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

key=$(cat "$here/versions.env" "$kube_mod/go.mod" "$here/etcd/go.mod" "$here/etcd/main.go" | sha256sum | cut -c1-12)
cache=${KUBEPOOL_CACHE:-$HOME/.cache/kubepool}/k8s/${KUBE_VERSION}-${key}
bin=$cache/bin
mkdir -p "$bin"
log() { printf '[k8s-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# The Go tool's own output (hundreds of "go: downloading" lines) goes to a log; a failure shows its tail.
build_log=$cache/build.log
quiet() {
  if ! "$@" >>"$build_log" 2>&1; then
    log "FAILED: $* (last lines of $build_log):"
    tail -n 30 "$build_log" >&2
    return 1
  fi
}

ver_flags() {  # servers report their real version (helm's .Capabilities.KubeVersion reads it)
  local v=$1 minor; minor=$(echo "$v" | cut -d. -f2)
  local f="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f="$f -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.gitCommit=release-$v -X $p.buildDate=2026-01-01T00:00:00Z"
  done
  echo "$f"
}

# helm as Helm's own Makefile links it: its version, and the Kubernetes version its chart library assumes without
# a cluster (`helm template`, `helm lint`) from the client-go its go.mod requires (major + 1, minor), not the
# library's 1.20 fallback. A recipe change rebuilds helm alone (helm.ldflags records the flags it was built with).
helm_ldflags() {
  local mod client minor
  mod=$(go mod download -json "helm.sh/helm/v3@${HELM_VERSION}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  client=$(awk '$1 == "k8s.io/client-go" {print $2}' "$mod")  # v0.MINOR.PATCH
  minor=$(echo "$client" | cut -d. -f2)
  [ -n "$minor" ] || { echo "error: no k8s.io/client-go in helm's go.mod ($mod)" >&2; return 1; }
  local f="-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    f="$f -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
  done
  echo "$f"
}
need=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet etcd kwok helm; do
  [ -x "$bin/$b" ] || need+=("$b")
done
HELM_LDFLAGS=$(helm_ldflags)
helm_ok() { [ -x "$bin/helm" ] && [ "$(cat "$bin/helm.ldflags" 2>/dev/null)" == "$HELM_LDFLAGS" ]; }
helm_ok || [[ " ${need[*]} " == *" helm "* ]] || need+=(helm)
stages_ok() { [ -f "$cache/kwok-stages/node/fast/node-initialize.yaml" ] && [ -f "$cache/kwok-stages/pod/fast/pod-ready.yaml" ]; }
if [ ${#need[@]} -eq 0 ] && stages_ok; then
  log "cached: $bin"
  echo "$bin"; exit 0
fi
# One build at a time per cache (make demo, make test and pytest may all ask at once): wait for the other.
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  log "another build of these binaries is running; waiting for it (its output: $cache/build.log)"
  flock 9
  exec bash "$0" "$@"  # it may have built everything: check again
fi
[ ${#need[@]} -eq 0 ] || log "building ${need[*]} into $bin (a cold build takes about 7 minutes on 2 cores; Go's output: $build_log)"

start=$(date +%s)
step() { log "$* ($(( $(date +%s) - start ))s elapsed)"; }
build_kube() {
  local missing=()
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do [ -x "$bin/$b" ] || missing+=("k8s.io/kubernetes/cmd/$b"); done
  [ ${#missing[@]} -eq 0 ] && return
  step "kubernetes ${KUBE_VERSION}: ${missing[*]##*/} (the longest step)"
  (cd "$kube_mod" && quiet go build -trimpath -tags 'selinux,notest,grpcnotrace' -ldflags "$(ver_flags "$KUBE_VERSION")" -o "$bin/" "${missing[@]}")
}
[ -x "$bin/etcd" ] || { step "etcd ${ETCD_VERSION}"; (cd "$here/etcd" && quiet go build -trimpath -ldflags '-s -w' -o "$bin/etcd" .); }
[ -x "$bin/kwok" ] || { step "kwok ${KWOK_VERSION}"; GOBIN=$bin quiet go install -trimpath -ldflags '-s -w' "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"; }
# Built beside, then moved in: a helm that tests are running stays whole while its successor builds.
helm_ok || { step "helm ${HELM_VERSION}"; GOBIN=$cache/helm-build quiet go install -trimpath -ldflags "$HELM_LDFLAGS" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" \
  && mv "$cache/helm-build/helm" "$bin/helm" && echo "$HELM_LDFLAGS" >"$bin/helm.ldflags"; }
# A heartbeat a minute so the long compile and link never look hung.
( while sleep 60; do log "still building kubernetes ($(( $(date +%s) - start ))s elapsed)"; done ) & hb=$!
trap 'kill $hb 2>/dev/null || true' EXIT
build_kube
# kwok's default stages are not compiled in since v0.8.0: keep them beside the binary.
stages_ok || {
  kdir=$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$cache/kwok-stages" && cp -r "$kdir/kustomize/stage/." "$cache/kwok-stages/" && chmod -R u+w "$cache/kwok-stages"
}
log "done in $(( $(date +%s) - start ))s: $bin"
echo "$bin"
