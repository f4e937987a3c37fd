#!/usr/bin/env bash
# Builds CoreDNS (the cluster DNS of the local cluster's real nodes) from its Go module into a cache outside the
# repo; prints the binary's path on its last line. A no-op when cached. Only `kubepool local up` with real
# nodes needs it, so `make test`'s process-node cluster never waits for it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
log() { printf '[coredns %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
command -v go >/dev/null || { log "error: Go is not installed (need Go >= 1.26)"; exit 2; }
export GOTOOLCHAIN=local CGO_ENABLED=0
dir=${KUBEPOOL_CACHE:-$HOME/.cache/kubepool}/coredns/${COREDNS_VERSION}
bin=$dir/coredns
if [ -x "$bin" ]; then log "cached: $bin"; echo "$bin"; exit 0; fi
mkdir -p "$dir"
exec 9>"$dir/.build.lock"
flock -n 9 || { log "another build of CoreDNS is running; waiting for it"; flock 9; exec bash "$0" "$@"; }
start=$(date +%s)
log "building CoreDNS ${COREDNS_VERSION} (go install, ~3-6 minutes cold on 2 cores; Go's output: $dir/build.log)"
( while sleep 60; do log "still building CoreDNS ($(( $(date +%s) - start ))s elapsed)"; done ) & hb=$!
trap 'kill $hb 2>/dev/null || true' EXIT
if ! GOBIN=$dir/tmp go install -trimpath -ldflags '-s -w' "github.com/coredns/coredns@${COREDNS_VERSION}" >"$dir/build.log" 2>&1; then
  log "FAILED: go install github.com/coredns/coredns@${COREDNS_VERSION} (last lines of $dir/build.log):"
  tail -n 30 "$dir/build.log" >&2
  exit 1
fi
mv "$dir/tmp/coredns" "$bin" && rmdir "$dir/tmp"
log "done in $(( $(date +%s) - start ))s: $bin"
echo "$bin"
