#!/usr/bin/env bash
# `make test`: the process-node suite and, beside it, the real-node tier (tests/realnode: kubelets on containerd,
# the chart and jobs in containers of the images built here). The tier's preparation (hack/realnode/prepare.sh:
# host packages, CoreDNS, the images; seconds when cached, tens of minutes cold) starts first, in the background
# at the lowest CPU and I/O priority, and the tier itself follows it there, at the same priority, while the
# process-node suite runs in the foreground: most of that suite's time is spent waiting on jobs, so the two
# share the machine's cores instead of running one after the other. The tier's output is shown once the suite
# is over (its log: .kubepool-test-prepare/realnode-tier.log). Arguments go to both pytest runs. REALNODE=0 runs
# the process-node suite alone, saying so. KUBEPOOL_PREPARE_WAIT_S (2700): how long to wait, once the suite is
# over, for the tier.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PYTEST=("$BIN/python" hack/pytest.py)  # pytest, then an exit without the native libraries' teardown
export PYTHONFAULTHANDLER=1  # a crash prints every thread's stack, also after pytest's own handler is gone
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# Beside the clusters' state dirs, not in them: `kubepool local down` removes those.
mkdir -p .kubepool-test-prepare
log=.kubepool-test-prepare/realnode.log
tier_log=.kubepool-test-prepare/realnode-tier.log
rcfile=.kubepool-test-prepare/realnode-tier.rc

realnode=${REALNODE:-1}
if [[ $realnode != 0 && $(id -u) != 0 ]]; then
    say "the real-node tier needs root (kubelet, containerd, buildah); REALNODE=0 make test runs the rest alone" >&2
    exit 2
fi
tier=
if [[ $realnode != 0 ]]; then
    say "the real-node tier in the background: its preparation (host packages, CoreDNS, images; log: $log), then its tests (log: $tier_log)"
    rm -f "$rcfile"
    : >"$tier_log"
    # The tier's own session: interrupted, the whole of it goes (kubelets and containerd included).
    setsid nice -n 19 ionice -c 3 bash -c '
        log=$1 tier_log=$2 rcfile=$3
        shift 3
        hack/realnode/prepare.sh >"$log" 2>&1 || { echo "prepare:$?" >"$rcfile"; exit 0; }
        echo "[real-node tier $(date +%H:%M:%S)] $(tail -n 1 "$log")" >"$tier_log"
        "$@" -m realnode tests/realnode >>"$tier_log" 2>&1
        echo "tests:$?" >"$rcfile"' tier "$log" "$tier_log" "$rcfile" "${PYTEST[@]}" "$@" &
    tier=$!
    trap '[[ -n $tier ]] && kill -- -"$tier" 2>/dev/null' EXIT
else
    say "REALNODE=0: the real-node tier (tests/realnode) is not run"
fi
# Ctrl-C reaches pytest, which exits normally: without this the script would go on waiting for the tier.
trap 'say "interrupted"; exit 130' INT TERM

say "pytest on the tests' own local cluster (.kubepool-test/, slot 1; the demo's cluster is left alone)"
"${PYTEST[@]}" -m "not images and not realnode" "$@"
rc=$?
[[ $realnode != 0 ]] || exit $rc

waited=$SECONDS
limit=${KUBEPOOL_PREPARE_WAIT_S:-2700}
while kill -0 "$tier" 2>/dev/null; do
    if ((SECONDS - waited >= limit)); then
        say "FAILED: the real-node tier still runs ${limit}s after the suite ended; last lines of $log and $tier_log:" >&2
        tail -n 20 "$log" "$tier_log" | sed 's/^/  | /' >&2
        exit 1
    fi
    (((SECONDS - waited) % 30 == 0)) && say "waiting for the real-node tier ($((SECONDS - waited))s): $(tail -n 1 "$tier_log" 2>/dev/null || tail -n 1 "$log")"
    sleep 1
done
wait "$tier"
tier=
say "pytest: the real-node tier (.kubepool-realnode/, slot 4), run beside the suite:"
cat "$tier_log"
outcome=$(cat "$rcfile" 2>/dev/null || echo "tests:1")
case $outcome in
    prepare:*)
        say "FAILED: the real-node preparation (hack/realnode/prepare.sh, exit ${outcome#prepare:}); last lines of $log:" >&2
        tail -n 40 "$log" | sed 's/^/  | /' >&2
        exit 1 ;;
esac
rc2=${outcome#tests:}
[[ $rc2 == 5 ]] && rc2=0  # arguments that select no real-node test
(( rc != 0 )) && exit $rc
exit $rc2
