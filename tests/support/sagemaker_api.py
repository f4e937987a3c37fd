"""The SageMaker-API server for tests: `python -m kubepool.sagemaker_api` as a subprocess on loopback against the
local cluster (start_sagemaker_api), access keys (entries of the documented Secret, in the server's own namespace: KEYS_SECRET
of KEYS_NAMESPACE for the servers tests start) bound to a namespace whose ServiceAccount has the rights a SageMaker user needs
(make_key), and boto3 clients signed with them (SageMakerApi.client).
tests/sagemaker_api/conftest.py makes fixtures of them."""

from __future__ import annotations

import io
import json
import os
import socket
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml

from kubepool.sagemaker_api.keys import key_entry, keys_secret, keys_secret_name, new_key
from support.operator_cluster import ROOT

STARTUP_TIMEOUT_S = 30.0
REGION = "us-west-2"
# The servers tests start all keep their keys here, as the chart's keeps them in the release namespace (shared by
# concurrent sessions: a key's Secret is named by its random id).
KEYS_NAMESPACE = "kubepool-test-sagemaker-keys"
KEYS_SECRET = keys_secret_name("kubepool-test-sagemaker-api")  # each key one more entry (its id random)


@dataclass(frozen=True)
class Key:
    key_id: str
    secret: str
    namespace: str
    keys_namespace: str = KEYS_NAMESPACE
    keys_secret: str = KEYS_SECRET


@dataclass
class SageMakerApi:
    """A running server: its endpoint and its log."""

    endpoint: str
    log_path: Path

    def client(self, service: str, key: Key, **kwargs: Any) -> Any:
        """A boto3 client of `service` (sagemaker, logs) signed with `key`, talking to this server."""
        return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=key.key_id,
                            aws_secret_access_key=key.secret, **kwargs)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextmanager
def start_sagemaker_api(kubeconfig: Path, log_path: Path, *args: str, host: str = "127.0.0.1",
                        ca_file: Path | None = None) -> Iterator[SageMakerApi]:
    """The server in a subprocess (its keys in KEYS_SECRET of KEYS_NAMESPACE, bound to any namespace); stopped on exit. With
    `ca_file` it serves HTTPS (args give --tls-cert and --tls-key) with a certificate that CA signed."""
    port = free_port(host)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    with log_path.open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kubepool.sagemaker_api", "--host", host, "--port", str(port),
                                 "--keys-namespace", KEYS_NAMESPACE, "--keys-secret", KEYS_SECRET, *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=ROOT)
    api = SageMakerApi(f"{'https' if ca_file else 'http'}://{host}:{port}", log_path)
    tls = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert proc.poll() is None, f"the SageMaker API server exited:\n{api.logs()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{api.endpoint}/healthz", timeout=2, context=tls) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the SageMaker API server did not start:\n{api.logs()[-3000:]}"
            time.sleep(0.2)
        yield api
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# What a SageMaker user's ServiceAccount may do in its namespace (docs: the key's ServiceAccount needs these).
USER_RULES = [
    {"apiGroups": ["kubepool.dev"], "resources": ["mljobs"], "verbs": ["create", "get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
]


def grant_user_rights(kubectl: Any, namespace: str, service_account: str) -> None:
    """A Role with USER_RULES bound to the ServiceAccount (made if missing)."""
    docs = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": service_account}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "sagemaker-user"},
             "rules": USER_RULES},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": f"sagemaker-user-{service_account}"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sagemaker-user"},
             "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]}]
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs), check=True)


def ensure_namespace(kubectl: Any, namespace: str = KEYS_NAMESPACE) -> None:
    """The namespace, made if missing (KEYS_NAMESPACE outlives sessions: concurrent ones share it)."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(ns), check=True)


def add_entry(kubectl: Any, keys_namespace: str, keys_secret_: str, entry: dict[str, str]) -> None:
    """`entry` added to the keys Secret (made if missing) by a merge patch: the other keys stay."""
    made = kubectl("create", "-f", "-", input=yaml.safe_dump(keys_secret(keys_namespace, keys_secret_, entry)))
    if made.returncode != 0:
        assert "AlreadyExists" in made.stderr, made.stderr
        kubectl("patch", "secret", keys_secret_, "-n", keys_namespace, "--type", "merge", "-p",
                json.dumps({"data": entry}), check=True)


def make_key(kubectl: Any, namespace: str, service_account: str | None = None, rights: bool = True,
             keys_namespace: str = KEYS_NAMESPACE, keys_secret_: str = KEYS_SECRET) -> Key:
    """A new access key (an entry of the keys Secret in `keys_namespace`, the server's) bound to `namespace` (and
    `service_account`, else `default`), its account given the user's rights unless `rights` is False."""
    key_id, secret = new_key()
    ensure_namespace(kubectl, keys_namespace)
    add_entry(kubectl, keys_namespace, keys_secret_, key_entry(key_id, secret, namespace, service_account))
    if rights:
        grant_user_rights(kubectl, namespace, service_account or "default")
    return Key(key_id, secret, namespace, keys_namespace, keys_secret_)


def delete_key(kubectl: Any, key: Key) -> None:
    """The key's entry removed (a JSON patch's remove: the other keys stay; gone already is fine)."""
    kubectl("patch", "secret", key.keys_secret, "-n", key.keys_namespace, "--type", "json", "-p",
            json.dumps([{"op": "remove", "path": f"/data/{key.key_id}"}]))


CREDENTIALS_SECRET = "s3-keys"  # the namespace's S3 credentials Secret, as the platform team keeps it


# What the SDK tests share: a training bucket with two data files on a moto server, the server run with the
# platform team's data settings (that endpoint and a credentials Secret), and the files of a model.tar.gz.
@contextmanager
def s3_with_data(address: str, bucket: str) -> Iterator[str]:
    from support.s3 import client, s3_server

    with s3_server(address) as url:  # the local nodes' pods share the host's network
        s3 = client(url)
        s3.create_bucket(Bucket=bucket)
        for part in ("a.csv", "b.csv"):
            s3.put_object(Bucket=bucket, Key=f"data/{part}", Body=b"x,y\n1,2\n")
        yield url


@contextmanager
def sagemaker_api_with_s3(kubeconfig: Path, log_path: Path, s3_endpoint: str, credentials_secret: str) -> Iterator[Any]:
    with start_sagemaker_api(kubeconfig, log_path, "--s3-endpoint-url", s3_endpoint,
                             "--s3-credentials-secret", credentials_secret) as api:
        yield api


def tar_members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
