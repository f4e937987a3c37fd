"""Attack: delete a finished MLJob and create another under its name with the same spec.output. Its outputs go to
SageMaker's `<location>/<job>/output/`, keyed by the name alone: before runtime.ownership the new job's
archives replaced the earlier job's model.tar.gz (and its hosts' archives were aggregated with the earlier
ones). Now the first job's instances claim the prefix for its uid, and the new job's refuse it before their
payload runs: the job FAILS saying whose prefix it is, and the earlier outputs stay as they were."""

from __future__ import annotations

import io
import tarfile
import time
from typing import Any

import pytest
import yaml
from faultkit import Recorder, job, record, wait_terminal

from kubepool import naming
from support.operator_cluster import Operator
from support.s3 import CREDENTIALS, client, s3_server

pytestmark = [pytest.mark.cluster]
WRITE = ("import os, pathlib; d = pathlib.Path(os.environ.get('KUBEPOOL_BASE_DIR', '/opt/ml')) / 'model'; "
         "d.mkdir(parents=True, exist_ok=True); (d / 'who.txt').write_text(os.environ['WHO'])")


def _model(s3: Any, key: str) -> dict[str, bytes]:
    blob = s3.get_object(Bucket="out", Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def test_a_recreated_job_never_writes_over_the_earlier_jobs_outputs(cluster: Any, kubectl: Any, namespace: str,
                                                                   operator: Operator, small_pool: Any,
                                                                   recorder: Recorder) -> None:
    with s3_server("127.0.5.39") as url:  # the local nodes' pods share the host's network
        s3 = client(url)
        s3.create_bucket(Bucket="out")
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys",
                  "labels": {naming.LABEL_CREDENTIALS: "true"}}, "stringData": CREDENTIALS}
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(secret), check=True)
        pool = small_pool(max_nodes=1)

        def same(who: str) -> dict[str, Any]:
            return job("same", pool, ["python", "-c", WRITE], env=[{"name": "WHO", "value": who}],
                       output={"s3": {"uri": f"s3://out/{namespace}", "endpointUrl": url,
                                      "credentialsSecret": "s3-keys"}})

        key = f"{namespace}/same/output/model.tar.gz"
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(same("first")), check=True)
        first = wait_terminal(kubectl, namespace, ["same"], 180)["same"]
        assert first["phase"] == "DONE", first
        assert _model(s3, key) == {"who.txt": b"first"}
        kubectl("delete", "mljob", "same", "-n", namespace, "--wait=true", check=True)
        t0 = time.monotonic()
        kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(same("second")), check=True)
        second = wait_terminal(kubectl, namespace, ["same"], 180)["same"]
        took = time.monotonic() - t0
        assert second["phase"] == "FAILED", f"the re-created job was allowed to write the earlier job's prefix: {second}"
        assert "holds the outputs of another MLJob" in (second.get("message") or ""), second
        assert _model(s3, key) == {"who.txt": b"first"}, "the earlier job's model.tar.gz was overwritten"
        own = f"{namespace}/same/output/{naming.sagemaker_host(0)}/model.tar.gz"
        assert _model(s3, own) == {"who.txt": b"first"}, "the earlier job's host archive was overwritten"
        record(cluster, "same-name-outputs", faults=1, jobs=2, lost=0, orphaned=0, converge_s=took)
