"""Bad input: malformed and hostile specs are refused by `kubectl apply` or end FAILED/PENDING with a clear
reason; strings that look like shell or Kubernetes expansions reach the payload literally; none of it crashes
the operator or blocks a good job submitted after it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from faultkit import job, pods_of, record, sleep_cmd, wait_terminal

from kubepool import contract
from support.operator_cluster import Operator, wait_phase

HOSTILE = ["$(HOME)", f"$({contract.ENV_INSTANCE_ID})", "; rm -rf /", "`id`", "$(rm -rf /)", "a\nb", "日本語 ✓ 🚀",
           "--help", "../../etc/passwd", "' OR 1=1 --"]
ECHO = ["python", "-c", "import json, os, sys; print('ARGV=' + json.dumps([sys.argv[1:], os.environ['LIT']]))"]

REFUSED = [
    ("huge-count", {"targetInstances": 100000}, "less than or equal to 1000"),
    ("huge-string", {"args": ["x" * 5000]}, "Too long"),
    ("huge-list", {"args": ["x"] * 300}, "must have at most 256 items"),
    ("dotdot-channel", {"channels": [{"name": "..", "source": {"configMap": {"name": "c"}}}]}, "spec.channels[0].name"),
    ("dotdot-channel-path", {"channels": [{"name": "../../etc", "source": {"configMap": {"name": "c"}}}]}, "should match"),
    ("dotdot-entrypoint", {"entrypoint": {"file": "../../etc/shadow"}}, "must be a relative path without '..'"),
    ("dotdot-workdir", {"workingDir": "../.."}, "must not contain '..'"),
    ("env-name-injection", {"env": [{"name": "X; rm -rf /", "value": "1"}]}, "should match"),
    ("negative", {"instancesTimeoutSeconds": -5}, "greater than or equal to 1"),
]


@pytest.mark.parametrize(("case", "patch", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_at_apply(kubectl: Any, namespace: str, crds: None, case: str, patch: dict[str, Any], message: str) -> None:
    obj = job(case, "any-pool", sleep_cmd(1))
    obj["spec"].update(patch)
    if "entrypoint" in patch:
        obj["spec"]["entrypoint"] = patch["entrypoint"]
    proc = kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


NAME_RULE = "MLJob names must be DNS labels of at most 40 characters"


# "a.b", 41 characters and a digit first are valid Kubernetes names: only the MLJob's own rule refuses them (the
# last one names a Service `1job-svc` that Kubernetes 1.30-1.33 refuse: not a DNS-1035 label).
@pytest.mark.parametrize("name", ["jöb-ü", "job_under", "Job-Upper", "a.b", "a" * 41, "1job"])
def test_bad_names_refused(kubectl: Any, namespace: str, crds: None, name: str) -> None:
    obj = job("x", "any-pool", sleep_cmd(1))
    obj["metadata"]["name"] = name
    proc = kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj, allow_unicode=True))
    assert proc.returncode != 0 and NAME_RULE in proc.stderr, proc.stdout + proc.stderr[-2000:]


def test_hostile_jobs_never_block_a_good_one(cluster: Any, kubectl: Any, namespace: str, operator: Operator,
                                            small_pool: Any) -> None:
    pool = small_pool(max_nodes=2)
    t0 = time.monotonic()
    literal = job("literal", pool, ECHO, args=HOSTILE, env=[{"name": "LIT", "value": "$(HOME) $(KUBEPOOL_INSTANCE_ID)"}])
    too_big = job("too-big", pool, sleep_cmd(1), targetInstances=1000)  # valid, but can never fit a pool of 2
    # Large but valid: 10 env values of 30 000 characters (300 kB, more than an annotation may hold).
    bulky = job("bulky", pool, sleep_cmd(1), env=[{"name": f"BIG{i}", "value": "y" * 30000} for i in range(10)])
    no_pool = job("no-pool", "pool-that-does-not-exist", sleep_cmd(1))
    no_image_cmd = job("no-such-binary", pool, ["/nonexistent/binary", "--flag"])
    for obj in (literal, too_big, no_pool, no_image_cmd):
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj, allow_unicode=True), check=True)
    # A client-side apply stores the whole object in an annotation: too large; server-side apply does not.
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=yaml.safe_dump(bulky), check=True)
    good = job("good", pool, sleep_cmd(1), targetInstances=2)
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(good), check=True)
    st = wait_terminal(kubectl, namespace, ["good", "literal", "no-such-binary", "bulky"], 180)
    assert st["good"]["phase"] == "DONE", st["good"]
    assert st["literal"]["phase"] == "DONE", st["literal"]
    head = next(p for p in pods_of(kubectl, namespace, "literal") if p["metadata"]["labels"].get("kubepool.dev/role") == "head")
    logs = kubectl("logs", "-n", namespace, head["metadata"]["name"]).stdout
    line = next((ln for ln in logs.splitlines() if ln.startswith("ARGV=")), None)
    assert line is not None, logs[-2000:]
    assert json.loads(line[len("ARGV="):]) == [HOSTILE, "$(HOME) $(KUBEPOOL_INSTANCE_ID)"], line
    assert st["no-such-binary"]["phase"] == "FAILED" and "nonexistent" in (st["no-such-binary"].get("message") or ""), st["no-such-binary"]
    assert st["bulky"]["phase"] == "DONE", st["bulky"]  # 300 kB of env is valid: it must run
    for name, reason in (("too-big", "PoolTooSmall"), ("no-pool", "PoolNotFound")):
        pending = wait_phase(kubectl, namespace, name, {"PENDING"}, 30, operator)
        assert pending["reason"] == reason and pending.get("message"), pending
    assert operator.proc is not None and operator.proc.poll() is None, "the operator died"
    record(cluster, "hostile-input", faults=5, jobs=6, lost=0, orphaned=0, converge_s=time.monotonic() - t0)
