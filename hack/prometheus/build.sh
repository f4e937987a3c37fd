#!/usr/bin/env bash
# Builds Prometheus (cmd/prometheus only) from its Go module into the cache outside the repo; prints the bin dir.
# Used by hack/dashboard/render.py to scrape the operator for the dashboard's picture. Prometheus's Go module
# tags are v0.3MM.P for release v3.MM.P. Rebuilds only when this recipe (the pin, the tags) changes.
set -euo pipefail
PROMETHEUS_MODULE_VERSION=${PROMETHEUS_MODULE_VERSION:-v0.316.0}  # Prometheus v3.16.0
# no builtinassets: the web UI's assets are not embedded (the HTTP API is all the renderer reads);
# remove_all_sd: only static and file service discovery, not the cloud SDKs (a much smaller build).
TAGS=netgo,remove_all_sd
command -v go >/dev/null || { echo "error: Go >= 1.26.7 is required to build Prometheus ${PROMETHEUS_MODULE_VERSION}" >&2; exit 2; }
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0

key=$(sha256sum "$0" | cut -c1-12)
cache=${KUBEPOOL_CACHE:-$HOME/.cache/kubepool}/prometheus/${PROMETHEUS_MODULE_VERSION}-${key}
bin=$cache/bin
log() { printf '[prometheus-bin %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
if [ -x "$bin/prometheus" ]; then log "cached: $bin"; echo "$bin"; exit 0; fi
mkdir -p "$bin"
# One build at a time per cache: a second caller waits for the first, then finds the binary.
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
  log "another build is running; waiting for it (its output: $cache/build.log)"
  flock 9
  exec bash "$0" "$@"
fi
build_log=$cache/build.log
log "building prometheus ${PROMETHEUS_MODULE_VERSION} (tags ${TAGS}) into $bin (minutes on 2 cores; Go's output: $build_log)"
start=$(date +%s)
( while sleep 60; do log "still building ($(( $(date +%s) - start ))s elapsed)"; done ) & hb=$!
trap 'kill $hb 2>/dev/null || true' EXIT
ldflags="-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_MODULE_VERSION/v0.3/3.} -X github.com/prometheus/common/version.Branch=module"
if ! GOBIN=$bin nice -n 10 go install -trimpath -tags "$TAGS" -ldflags "$ldflags" \
    "github.com/prometheus/prometheus/cmd/prometheus@${PROMETHEUS_MODULE_VERSION}" >"$build_log" 2>&1; then
  log "FAILED: go install prometheus@${PROMETHEUS_MODULE_VERSION} (last lines of $build_log):"
  tail -n 30 "$build_log" >&2
  exit 1
fi
log "done in $(( $(date +%s) - start ))s: $bin"
echo "$bin"
