#!/usr/bin/env bash
# Everything the real-node tier needs before its `kubepool local up`: the host packages (deps.sh), CoreDNS
# (coredns.sh) and the images its tests run (operator, runtime-lean, runtime-marked). Each step is cached, so
# a prepared machine passes through in seconds; a cold one takes tens of minutes, which is why `make test`
# runs this in the background while the process-node suite runs (hack/test.sh). Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { printf '[real-node prepare %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
start=$(date +%s)
[[ $(id -u) == 0 ]] || { log "error: the real-node tier needs root (apt-get, buildah, kubelet, containerd)"; exit 2; }
log "host packages (hack/realnode/deps.sh)"
"$here/deps.sh"
log "CoreDNS (hack/realnode/coredns.sh)"
"$here/coredns.sh" >/dev/null
log "images: operator runtime-lean runtime-marked (hack/images/build.sh)"
"$here/../images/build.sh" operator runtime-lean runtime-marked
log "ready in $(( $(date +%s) - start ))s"
