#!/usr/bin/env bash
# `make test`: the process-node suite, then the real-node tier (tests/realnode: kubelets on containerd, the
# chart and jobs in containers of the images built here). The tier's preparation (hack/realnode/prepare.sh:
# host packages, CoreDNS, the images; seconds when cached, tens of minutes cold) starts first, in the
# background at the lowest CPU and I/O priority, so a cold machine builds it in the first suite's idle time.
# Arguments go to both pytest runs. REALNODE=0 runs the process-node suite alone, saying so.
# KUBEPOOL_PREPARE_WAIT_S (2700): how long to wait for the preparation once the suite is over.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PYTEST=("$BIN/python" hack/pytest.py)  # pytest, then an exit without the native libraries' teardown
export PYTHONFAULTHANDLER=1  # a crash prints every thread's stack, also after pytest's own handler is gone
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# Beside the clusters' state dirs, not in them: `kubepool local down` removes those.
mkdir -p .kubepool-test-prepare
log=.kubepool-test-prepare/realnode.log

realnode=${REALNODE:-1}
if [[ $realnode != 0 && $(id -u) != 0 ]]; then
    say "the real-node tier needs root (kubelet, containerd, buildah); REALNODE=0 make test runs the rest alone" >&2
    exit 2
fi
prep=
if [[ $realnode != 0 ]]; then
    say "preparing the real-node tier in the background (host packages, CoreDNS, images; log: $log)"
    setsid nice -n 19 ionice -c 3 hack/realnode/prepare.sh >"$log" 2>&1 &
    prep=$!
    # make interrupted or the suite stopped: the background build goes too.
    trap '[[ -n $prep ]] && kill -- -"$prep" 2>/dev/null' EXIT
else
    say "REALNODE=0: the real-node tier (tests/realnode) is not run"
fi
# Ctrl-C reaches pytest, which exits normally: without this the script would go on to the real-node tier.
trap 'say "interrupted"; exit 130' INT TERM

say "pytest on the tests' own local cluster (.kubepool-test/, slot 1; the demo's cluster is left alone)"
"${PYTEST[@]}" -m "not images and not realnode" "$@"
rc=$?
[[ $realnode != 0 ]] || exit $rc

waited=$SECONDS
limit=${KUBEPOOL_PREPARE_WAIT_S:-2700}
while kill -0 "$prep" 2>/dev/null; do
    if ((SECONDS - waited >= limit)); then
        say "FAILED: the real-node preparation still runs ${limit}s after the suite ended; last lines of $log:" >&2
        tail -n 40 "$log" | sed 's/^/  | /' >&2
        exit 1
    fi
    (((SECONDS - waited) % 30 == 0)) && say "waiting for the real-node preparation ($((SECONDS - waited))s): $(tail -n 1 "$log")"
    sleep 1
done
wait "$prep"
prep_rc=$?
prep=
if [[ $prep_rc != 0 ]]; then
    say "FAILED: the real-node preparation (hack/realnode/prepare.sh, exit $prep_rc); last lines of $log:" >&2
    tail -n 40 "$log" | sed 's/^/  | /' >&2
    exit 1
fi
say "$(tail -n 1 "$log")"
say "pytest: the real-node tier (.kubepool-realnode/, slot 4)"
"${PYTEST[@]}" -m realnode tests/realnode "$@"
rc2=$?
[[ $rc2 == 5 ]] && rc2=0  # arguments that select no real-node test
(( rc != 0 )) && exit $rc
exit $rc2
