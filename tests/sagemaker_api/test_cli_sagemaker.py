"""`kubepool sagemaker create-key|env` against the local cluster's API server: the key it adds to the keys Secret
(the one the release's Service names, made if missing) is the documented entry (kubepool.sagemaker_api.keys reads
it back), the keys already there stay, and the SageMaker API server takes it; the variables are the release
Service's; the keys Secret is in the release's namespace (the server's), the key bound to the command's namespace;
what is missing (the Service, the ServiceAccount) is refused before anything is made."""

from __future__ import annotations

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


def test_the_keys_secret_is_the_one_the_service_names() -> None:
    named = {"metadata": {"annotations": {smcli.KEYS_SECRET_ANNOTATION: "the-keys"}}}
    assert smcli.keys_secret_of(named, "kp") == "the-keys"
    assert smcli.keys_secret_of({"metadata": {}}, "kp") == smcli.keys_secret_of(None, "kp") == "kp-sagemaker-api-keys"


def release_service(kubectl: Any, namespace: str, s3: str | None, release: str = "kp",
                    keys_secret: str | None = None) -> None:
    """What the chart's Service looks like to the CLI: <release>-sagemaker-api in the release's namespace."""
    meta: dict[str, Any] = {"name": f"{release}-sagemaker-api"}
    annotations = {smcli.S3_ENDPOINT_ANNOTATION: s3, smcli.KEYS_SECRET_ANNOTATION: keys_secret}
    if s3 or keys_secret:
        meta["annotations"] = {k: v for k, v in annotations.items() if v}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": meta,
           "spec": {"selector": {"app": "none"}, "ports": [{"name": "http", "port": 8080}]}}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(svc), check=True)


@pytest.mark.cluster
@pytest.mark.api
def test_create_key_makes_a_key_the_server_takes_and_env_prints_the_services_variables(
        cluster: Any, kubectl: Any, namespace: str, sagemaker_api: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from support.sagemaker_api import (
        KEYS_NAMESPACE,
        KEYS_SECRET,
        Key,
        delete_key,
        ensure_namespace,
        grant_user_rights,
    )

    # The release lives where the session's server keeps its keys (its namespace and Secret), under a name of this
    # test's.
    name = f"r{namespace[-12:]}"
    ensure_namespace(kubectl)
    release_service(kubectl, KEYS_NAMESPACE, "http://minio.data.svc:9000", name, KEYS_SECRET)
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
        secret = kubectl.json("get", "secret", "-n", KEYS_NAMESPACE, KEYS_SECRET)
        key = keys.parse_key(secret, env["AWS_ACCESS_KEY_ID"])
        assert key == keys.AccessKey(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], namespace, "trainer")
        # The SageMaker API server takes it: a signed call answers (no job yet), as the namespace's trainer.
        client = boto3.client("sagemaker", endpoint_url=sagemaker_api.endpoint, region_name=REGION,
                              aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        assert client.list_training_jobs()["TrainingJobSummaries"] == []

        # A Service naming no keys Secret: the chart's name for it, made by the first key; the second key is added
        # to it, the first stays.
        release_service(kubectl, KEYS_NAMESPACE, "http://minio.data.svc:9000", name)
        made = []
        for _ in range(2):
            assert cli.main(["sagemaker", "create-key", *conn, *release]) == 0
            made.append(exported(capsys.readouterr().out))
        own = kubectl.json("get", "secret", "-n", KEYS_NAMESPACE, f"{name}-sagemaker-api-keys")
        assert sorted(own["data"]) == sorted(e["AWS_ACCESS_KEY_ID"] for e in made)
        for e in made:
            assert keys.parse_key(own, e["AWS_ACCESS_KEY_ID"]) == keys.AccessKey(
                e["AWS_ACCESS_KEY_ID"], e["AWS_SECRET_ACCESS_KEY"], namespace, "default")
    finally:
        kubectl("delete", "service", "-n", KEYS_NAMESPACE, f"{name}-sagemaker-api", "--ignore-not-found", check=True)
        kubectl("delete", "secret", "-n", KEYS_NAMESPACE, f"{name}-sagemaker-api-keys", "--ignore-not-found", check=True)
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


class _Keys:
    """A stand-in client holding the keys Secret: `raced` is an entry another create-key writes between this
    one's read and its patch (the same id: what a patch without the read's version would overwrite)."""

    def __init__(self, data: dict[str, str], raced: dict[str, str]) -> None:
        self.data, self.version, self.raced = dict(data), 1, raced

    def get(self, kind: Any, name: str, namespace: str) -> Any:
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Secret

        held = Secret(metadata=ObjectMeta(name=name, namespace=namespace, resourceVersion=str(self.version)),
                      data=dict(self.data))
        if self.raced:  # the other writer, right after this read
            self.data.update(self.raced)
            self.version, self.raced = self.version + 1, {}
        return held

    def patch(self, kind: Any, name: str, patch: dict[str, Any], namespace: str, patch_type: Any) -> None:
        import httpx
        from lightkube import ApiError

        if patch["metadata"].get("resourceVersion", str(self.version)) != str(self.version):
            raise ApiError(response=httpx.Response(409, json={"code": 409, "reason": "Conflict", "message": "modified"}))
        self.data.update(patch["data"])


def test_create_key_never_overwrites_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """An id the Secret already holds is not taken, and a Secret changed since it was read is read again: the
    other writer's key stays as it wrote it."""
    held, raced, mine = keys.new_key(), keys.new_key(), keys.new_key()
    theirs = keys.key_entry(*raced, "team-b")
    ids = iter([raced, held, mine])  # the raced id first: its patch finds the Secret changed
    monkeypatch.setattr(keys, "new_key", lambda: next(ids))
    kube = type("Kube", (), {"client": _Keys(keys.key_entry(*held, "team-c"), theirs)})()
    assert smcli.create_key(kube, "kubepool-system", "keys", "team-a", None) == mine
    data = kube.client.data
    assert data[held[0]] == keys.key_entry(*held, "team-c")[held[0]] and data[raced[0]] == theirs[raced[0]]
    body = {"metadata": {"labels": {keys.KEY_LABEL: "true"}}, "data": data}
    assert keys.parse_key(body, mine[0]) == keys.AccessKey(*mine, "team-a", "default")
