#!/usr/bin/env bash
# gobuild NAME PACKAGE@VERSION [LDFLAGS]: `go install` one command from its Go module into the cache outside the
# repo (~/.cache/kubepool/NAME/VERSION-KEY/bin) and print that bin dir. Rebuilds only when the pin or the
# calling recipe changes (KEY hashes both). Sourced by hack/registry/build.sh and hack/actionlint/build.sh.
gobuild() {
  local name=$1 pkg=$2 ldflags=${3:-"-s -w"}
  local version=${pkg##*@} key cache bin start hb
  command -v go >/dev/null || { echo "error: Go >= 1.26 is required to build $pkg" >&2; return 2; }
  export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOFLAGS=-mod=mod
  key=$(printf '%s\n' "$pkg" "$ldflags" | cat - "$0" | sha256sum | cut -c1-12)
  cache=${KUBEPOOL_CACHE:-$HOME/.cache/kubepool}/$name/$version-$key
  bin=$cache/bin
  log() { printf '[%s-bin %s] %s\n' "$name" "$(date +%H:%M:%S)" "$*" >&2; }
  if [ -x "$bin/$name" ]; then log "cached: $bin"; echo "$bin"; return 0; fi
  mkdir -p "$bin"
  # One build at a time per cache: a second caller waits for the first, then finds the binary.
  exec 9>"$cache/.build.lock"
  if ! flock -n 9; then
    log "another build is running; waiting for it (its output: $cache/build.log)"
    flock 9
    if [ -x "$bin/$name" ]; then echo "$bin"; return 0; fi
  fi
  log "building $pkg into $bin (a minute or two on 2 cores; Go's output: $cache/build.log)"
  start=$(date +%s)
  ( while sleep 60; do log "still building ($(( $(date +%s) - start ))s elapsed)"; done ) & hb=$!
  if ! GOBIN=$bin nice -n 10 go install -trimpath -ldflags "$ldflags" "$pkg" >"$cache/build.log" 2>&1; then
    kill $hb 2>/dev/null || true
    log "FAILED: go install $pkg (last lines of $cache/build.log):"
    tail -n 30 "$cache/build.log" >&2
    return 1
  fi
  kill $hb 2>/dev/null || true
  log "done in $(( $(date +%s) - start ))s: $bin"
  echo "$bin"
}
