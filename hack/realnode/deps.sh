#!/usr/bin/env bash
# Installs what the local cluster's real nodes run besides the Kubernetes binaries: containerd 1.6, runc, the CNI
# plugins and iptables from Debian's apt (17 s on a fresh machine), and gcc for the pause image. A no-op when
# all are present. Needs root. kubelet 1.36 accepts containerd 1.6 (1.37 will need containerd >= 2.0).
set -euo pipefail
log() { printf '[real-node deps %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# command-or-path:package
want=(containerd:containerd ctr:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins
      iptables:iptables gcc:gcc ip:iproute2)
missing=()
for w in "${want[@]}"; do
  [[ -e ${w%%:*} ]] || command -v "${w%%:*}" >/dev/null || missing+=("${w#*:}")
done
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | sed '/^$/d')
if [[ ${#missing[@]} -eq 0 ]]; then log "present: containerd runc CNI plugins iptables gcc"; exit 0; fi
[[ $(id -u) == 0 ]] || { log "error: installing ${missing[*]} needs root (apt-get)"; exit 1; }
log "apt-get install ${missing[*]}"
out=$(mktemp)
if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } >"$out" 2>&1; then
  log "FAILED: apt-get install ${missing[*]}; last lines:"; tail -n 20 "$out" >&2; rm -f "$out"; exit 1
fi
rm -f "$out"
# The package may ship a service; the real nodes run their own containerd per node, never the system one.
log "installed: ${missing[*]}"
