"""`kubepool sagemaker create-key|env` against the local cluster's API server: the key Secret it makes is the
documented one (kubepool.sagemaker_api.keys reads it back) and the SageMaker API server takes it; the variables
are the release Service's; the key's Secret goes in the release's namespace (the server's), bound to the command's
namespace; what is missing (the Service, the ServiceAccount) is refused before anything is made."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from kubepool import cli
from kubepool.cli import sagemaker as smcli
from kubepool.sagemaker_api import keys

REGION = "us-west-2"


def exported(out: str) -> dict[str, str]:
    """The `export K=V` lines as the shell would read them."""
    return dict(shlex.split(line)[1].split("=", 1) for line in out.splitlines() if line.startswith("export "))


def test_the_url_is_the_services_as_the_clients_reach_it() -> None:
    svc = {"metadata": {"name": "kp-sagemaker-api", "namespace": "ops"},
           "spec": {"type": "ClusterIP", "ports": [{"name": "metrics", "port": 9090}, {"name": "http", "port": 8080}]}}
    assert smcli.service_url(svc) == "http://kp-sagemaker-api.ops.svc:8080"
    lb = {**svc, "spec": {"type": "LoadBalancer", "ports": [{"name": "https", "port": 8443}]},
          "status": {"loadBalancer": {"ingress": [{"hostname": "sm.example.com"}]}}}
    assert smcli.service_url(lb) == "https://sm.example.com:8443"
    with pytest.raises(ValueError, match="has no port"):
        smcli.service_url({**svc, "spec": {"ports": []}})
    lines = smcli.exports("http://a:8080", None, ("KPID", "s/cr+t"))
    assert exported("\n".join(lines)) == {"AWS_ENDPOINT_URL_SAGEMAKER": "http://a:8080",
                                          "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": "http://a:8080",
                                          "AWS_ACCESS_KEY_ID": "KPID", "AWS_SECRET_ACCESS_KEY": "s/cr+t",
                                          "SAGEMAKER_VALIDATE_ROLE": "false"}
    assert any(line.startswith("# AWS_ENDPOINT_URL_S3") for line in lines)


@pytest.mark.parametrize("service", ["sagemaker", "logs", "s3"])
def test_the_variables_are_the_ones_boto3_reads(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 itself, given only the printed variables, talks to the printed endpoints (the service-specific
    variable's name comes from botocore's service id: CloudWatch Logs' is cloudwatch-logs)."""
    url = f"http://{service}.example:8080"
    lines = smcli.exports(url, url)
    for var, value in exported("\n".join(lines)).items():
        monkeypatch.setenv(var, value)
    made = boto3.client(service, region_name=REGION, aws_access_key_id="KP", aws_secret_access_key="x")
    assert made.meta.endpoint_url == url


def release_service(kubectl: Any, namespace: str, s3: str | None, release: str = "kp") -> None:
    """What the chart's Service looks like to the CLI: <release>-sagemaker-api in the release's namespace."""
    meta: dict[str, Any] = {"name": f"{release}-sagemaker-api"}
    if s3:
        meta["annotations"] = {smcli.S3_ENDPOINT_ANNOTATION: s3}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
           "spec": {"selector": {"app": "none"}, "ports": [{"name": "http", "port": 8080}]}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(svc), check=True)


@pytest.mark.cluster
@pytest.mark.api
def test_create_key_makes_a_key_the_server_takes_and_env_prints_the_services_variables(
        cluster: Any, kubectl: Any, namespace: str, sagemaker_api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from support.sagemaker_api import KEYS_NAMESPACE, Key, delete_key, ensure_namespace, grant_user_rights

    # The release lives where the session's server keeps its keys (its namespace), under a name of this test's.
    name = f"r{namespace[-12:]}"
    ensure_namespace(kubectl)
    release_service(kubectl, KEYS_NAMESPACE, "http://minio.data.svc:9000", name)
    conn = ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    release = ["--release", name, "--release-namespace", KEYS_NAMESPACE]
    url = f"http://{name}-sagemaker-api.{KEYS_NAMESPACE}.svc:8080"
    try:
        assert cli.main(["sagemaker", "env", *conn, *release]) == 0
        assert exported(capsys.readouterr().out) == {"AWS_ENDPOINT_URL_SAGEMAKER": url,
                                                      "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": url,
                                                      "AWS_ENDPOINT_URL_S3": "http://minio.data.svc:9000"}

        kubectl("create", "serviceaccount", "trainer", "-n", namespace, check=True)
        grant_user_rights(kubectl, namespace, "trainer")
        assert cli.main(["sagemaker", "create-key", "--service-account", "trainer", *conn, *release]) == 0
        env = exported(capsys.readouterr().out)
        assert (env["AWS_ENDPOINT_URL_SAGEMAKER"], env["AWS_ENDPOINT_URL_S3"]) == (url, "http://minio.data.svc:9000")
        assert env["SAGEMAKER_VALIDATE_ROLE"] == "false"
        assert kubectl.json("get", "secrets", "-n", namespace, "-l", f"{keys.KEY_LABEL}=true")["items"] == []
        secret = kubectl.json("get", "secret", "-n", KEYS_NAMESPACE, keys.secret_name(env["AWS_ACCESS_KEY_ID"]))
        key = keys.parse_key_secret(secret)
        assert key == keys.AccessKey(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], namespace, "trainer")
        assert base64.b64decode(secret["data"][keys.ACCESS_KEY_ID_FIELD]).decode() == env["AWS_ACCESS_KEY_ID"]
        # The SageMaker API server takes it: a signed call answers (no job yet), as the namespace's trainer.
        client = boto3.client("sagemaker", endpoint_url=sagemaker_api.endpoint, region_name=REGION,
                              aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        assert client.list_training_jobs()["TrainingJobSummaries"] == []
    finally:
        kubectl("delete", "service", "-n", KEYS_NAMESPACE, f"{name}-sagemaker-api", "--ignore-not-found", check=True)
        if "env" in locals():
            delete_key(kubectl, Key(env["AWS_ACCESS_KEY_ID"], "", namespace))


@pytest.mark.cluster
@pytest.mark.api
def test_what_is_missing_is_refused_before_a_key_is_made(cluster: Any, kubectl: Any, namespace: str,
                                                         capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    conn = ["--kubeconfig", str(cluster.kubeconfig), "-n", namespace]
    release = ["--release", "kp", "--release-namespace", namespace]
    assert cli.main(["sagemaker", "create-key", *conn, *release]) == 3  # no Service: the chart's API is off
    assert f"Service {namespace}/kp-sagemaker-api not found" in capsys.readouterr().err
    release_service(kubectl, namespace, None)
    assert cli.main(["sagemaker", "create-key", "--service-account", "nobody", *conn, *release]) == 3
    assert f"ServiceAccount {namespace}/nobody not found" in capsys.readouterr().err
    assert cli.main(["sagemaker", "env", "--service-account", "x", *conn, *release]) == 2
    assert "--service-account is create-key's" in capsys.readouterr().err
    assert kubectl.json("get", "secrets", "-n", namespace, "-l", f"{keys.KEY_LABEL}=true")["items"] == []
    # Without the S3 annotation the S3 line says what it is instead of guessing.
    assert cli.main(["sagemaker", "env", *conn, *release]) == 0
    assert "# AWS_ENDPOINT_URL_S3" in capsys.readouterr().out
