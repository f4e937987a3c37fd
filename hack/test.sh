#!/usr/bin/env bash
# `make test`: the process-node suite in the foreground and, beside it, in the background, `make lint` and the tests that bring
# clusters of their own: the real-node tier (tests/realnode: kubelets on containerd, the chart and jobs in
# containers of the images built here), then the fresh-clone, wheel and lowest-Kubernetes runs (OWN_CLUSTER
# below: their own local clusters on slots of their own). The background starts with the real-node preparation
# (hack/realnode/prepare.sh: host packages, CoreDNS, the images; seconds when cached, tens of minutes cold), all
# of it at the lowest CPU and I/O priority: most of the foreground suite's time is spent waiting on jobs, so the
# two share the machine's cores instead of running one after the other. The background's output is shown once
# the suite is over (its log: .kubepool-test-prepare/realnode-tier.log). Arguments go to every pytest run.
# REALNODE=0 runs the process-node suite alone (the own-cluster tests included), saying so.
# KUBEPOOL_TEST_WORKERS (2): the process-node suite's pytest processes (pytest-xdist; 1: a single one). A cluster
# test spends most of its time waiting on the cluster, so two run side by side: each file's tests on one worker,
# a test marked `exclusive` alone (tests/conftest.py).
# KUBEPOOL_PREPARE_WAIT_S (2700): how long to wait, once the suite is over, for the background.
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

# Tests that start clusters of their own (never the suite's): run in the background beside the suite.
OWN_CLUSTER=(tests/newcomer/test_fresh_clone.py tests/newcomer/test_pip_install.py
             tests/release/test_compat.py::test_lowest_claimed_minor)

realnode=${REALNODE:-1}
if [[ $realnode != 0 && $(id -u) != 0 ]]; then
    say "the real-node tier needs root (kubelet, containerd, buildah); REALNODE=0 make test runs the rest alone" >&2
    exit 2
fi
# make lint (ruff, the layers, mypy) beside the suite rather than before it: a minute of the machine's CPU that the
# suite's first minutes, spent starting its cluster, leave free. Its verdict comes first once the suite is over.
lint_log=.kubepool-test-prepare/lint.log
say "in the background: make lint (log: $lint_log)"
nice -n 10 make --no-print-directory lint >"$lint_log" 2>&1 &
lint=$!
tier=
if [[ $realnode != 0 ]]; then
    say "in the background: the real-node preparation (host packages, CoreDNS, images; log: $log), then the real-node tier and the tests with clusters of their own (log: $tier_log)"
    rm -f "$rcfile"
    : >"$tier_log"
    # The tier's own session: interrupted, the whole of it goes (kubelets and containerd included).
    setsid nice -n 19 ionice -c 3 bash -c '
        log=$1 tier_log=$2 rcfile=$3
        shift 3
        hack/realnode/prepare.sh >"$log" 2>&1 || { echo "prepare:$?" >"$rcfile"; exit 0; }
        echo "[real-node tier $(date +%H:%M:%S)] $(tail -n 1 "$log")" >"$tier_log"
        n=$1
        shift
        own=("${@:1:n}")
        shift "$n"
        "$@" -m realnode tests/realnode >>"$tier_log" 2>&1
        rn=$?
        ((rn == 5)) && rn=0  # arguments that select no real-node test
        echo "[own clusters $(date +%H:%M:%S)] ${own[*]}" >>"$tier_log"
        "$@" -m "not images and not realnode" "${own[@]}" >>"$tier_log" 2>&1
        oc=$?
        ((oc == 5)) && oc=0
        echo "tests:$((rn != 0 ? rn : oc))" >"$rcfile"' tier "$log" "$tier_log" "$rcfile" \
        "${#OWN_CLUSTER[@]}" "${OWN_CLUSTER[@]}" "${PYTEST[@]}" "$@" &
    tier=$!
else
    say "REALNODE=0: the real-node tier (tests/realnode) is not run"
fi
trap '[[ -n $lint ]] && kill "$lint" 2>/dev/null; [[ -n $tier ]] && kill -- -"$tier" 2>/dev/null' EXIT
# Ctrl-C reaches pytest, which exits normally: without this the script would go on waiting for the tier.
trap 'say "interrupted"; exit 130' INT TERM

workers=${KUBEPOOL_TEST_WORKERS:-2}
parallel=()
# Files go out in collection order, which tests/conftest.py makes the longest first, each file with an exclusive test
# beside files without cluster tests (support/file_order.py; weights in tests/durations.json, written anew from a
# run with --durations=0 by hack/durations.py): not xdist's own order, the most tests first.
((workers > 1)) && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
say "pytest on the tests' own local cluster (.kubepool-test/, slot 1; the demo's cluster is left alone), on $workers worker(s)"
deselect=()
if [[ $realnode != 0 ]]; then
    for t in "${OWN_CLUSTER[@]}"; do deselect+=(--deselect "$t"); done
fi
"${PYTEST[@]}" -m "not images and not realnode" "${parallel[@]}" "${deselect[@]}" "$@"
rc=$?
wait "$lint"
lint_rc=$?
lint=
if ((lint_rc != 0)); then
    say "FAILED: make lint (exit $lint_rc), run beside the suite:" >&2
    sed 's/^/  | /' "$lint_log" >&2
    ((rc == 0)) && rc=$lint_rc
else
    say "make lint, run beside the suite: clean"
fi
[[ $realnode != 0 ]] || exit $rc

waited=$SECONDS
limit=${KUBEPOOL_PREPARE_WAIT_S:-2700}
while kill -0 "$tier" 2>/dev/null; do
    if ((SECONDS - waited >= limit)); then
        say "FAILED: the background tests still run ${limit}s after the suite ended; last lines of $log and $tier_log:" >&2
        tail -n 20 "$log" "$tier_log" | sed 's/^/  | /' >&2
        exit 1
    fi
    (((SECONDS - waited) % 30 == 0)) && say "waiting for the background tests ($((SECONDS - waited))s): $(tail -n 1 "$tier_log" 2>/dev/null || tail -n 1 "$log")"
    sleep 1
done
wait "$tier"
tier=
say "pytest, run beside the suite: the real-node tier (.kubepool-realnode/, slot 4), then the tests with clusters of their own:"
cat "$tier_log"
outcome=$(cat "$rcfile" 2>/dev/null || echo "tests:1")
case $outcome in
    prepare:*)
        say "FAILED: the real-node preparation (hack/realnode/prepare.sh, exit ${outcome#prepare:}); last lines of $log:" >&2
        tail -n 40 "$log" | sed 's/^/  | /' >&2
        exit 1 ;;
esac
rc2=${outcome#tests:}
(( rc != 0 )) && exit $rc
exit $rc2
