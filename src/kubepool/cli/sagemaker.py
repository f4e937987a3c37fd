"""`kubepool sagemaker create-key|env`: what points SageMaker's own clients (boto3, the SageMaker Python SDK, the
`aws` CLI) at the chart's SageMaker-compatible API server: the AWS SDKs' endpoint variables for its Service, and
an access key (an entry of the documented Secret, kubepool.sagemaker_api.keys) bound to a namespace. The keys'
Secret is in the release's namespace, the only Secret the server reads: minting a key takes the right to write it
(the platform team's), not only rights in the namespace the key is bound to."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping
from typing import Any

from kubepool.sagemaker_api import keys

SERVICE_SUFFIX = "-sagemaker-api"  # the chart's Service: <release>-sagemaker-api
# On the Service: the S3-compatible endpoint the platform team gave the jobs, for the clients' AWS_ENDPOINT_URL_S3.
S3_ENDPOINT_ANNOTATION = "kubepool.dev/s3-endpoint-url"
# On the Service (the chart sets it): the Secret of the server's access keys, which create-key adds each key to.
KEYS_SECRET_ANNOTATION = "kubepool.dev/sagemaker-keys-secret"
# create-key reads the keys Secret, then adds its key only if the Secret is still that version (its
# resourceVersion): concurrent create-keys never overwrite each other's key; the one that lost tries again.
CREATE_KEY_ATTEMPTS = 5
# botocore's service-specific endpoint variables (AWS_ENDPOINT_URL_<service id>): CloudWatch Logs' service id is
# cloudwatch-logs, so its variable is ..._CLOUDWATCH_LOGS (an AWS_ENDPOINT_URL_LOGS is read by no AWS SDK).
API_VARIABLES = ("AWS_ENDPOINT_URL_SAGEMAKER", "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS")
# The SageMaker Python SDK v3 checks a job's RoleArn with IAM before it calls CreateTrainingJob; a RoleArn names a
# ServiceAccount here (docs/sagemaker-api.md), there is no IAM to ask: the SDK's own switch turns that check off.
SDK_VARIABLES = ("SAGEMAKER_VALIDATE_ROLE=false",)
S3_VARIABLE = "AWS_ENDPOINT_URL_S3"
DEFAULT_RELEASE, DEFAULT_RELEASE_NAMESPACE = "kubepool", "kubepool-system"


def service_url(svc: Mapping[str, Any]) -> str:
    """Where the Service answers: a LoadBalancer's address when it has one, else its cluster DNS name (reachable
    from pods, or through a port-forward or an Ingress: --endpoint); https when its port is named so or is 443."""
    meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
    ports = spec.get("ports") or []
    if not ports:
        raise ValueError(f"Service {meta.get('namespace')}/{meta.get('name')} has no port")
    port = next((p for p in ports if p.get("name") in ("http", "https")), ports[0])
    scheme = "https" if port.get("name") == "https" or port.get("port") == 443 else "http"
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    lb = (ingress[0].get("ip") or ingress[0].get("hostname")) if ingress and spec.get("type") == "LoadBalancer" else None
    host = lb or f"{meta['name']}.{meta['namespace']}.svc"
    return f"{scheme}://{host}:{port['port']}"


def exports(api_url: str, s3_url: str | None, key: tuple[str, str] | None = None) -> list[str]:
    """The shell lines: the two API variables, S3's (or a comment saying what it is when unknown), the key."""
    lines = [f"export {var}={shlex.quote(api_url)}" for var in API_VARIABLES]
    if s3_url:
        lines.append(f"export {S3_VARIABLE}={shlex.quote(s3_url)}")
    else:
        lines.append(f"# {S3_VARIABLE}: the S3-compatible endpoint the jobs' data lives on (the Service names none: "
                     "--s3-endpoint)")
    if key:
        lines += [f"export AWS_ACCESS_KEY_ID={key[0]}", f"export AWS_SECRET_ACCESS_KEY={shlex.quote(key[1])}"]
        lines += [f"export {v}" for v in SDK_VARIABLES]
    return lines


def release_service(kube: Any, release: str, namespace: str) -> dict[str, Any]:
    """The release's SageMaker API Service as a dict. Raises NotFound naming it (the chart's sagemakerApi off, or
    another release name or namespace: --release, --release-namespace)."""
    from lightkube.resources.core_v1 import Service

    from kubepool.kube.errors import NotFound
    from kubepool.kube.sync import translate

    name = f"{release}{SERVICE_SUFFIX}"
    try:
        svc = kube.client.get(Service, name, namespace=namespace)
    except Exception as err:  # noqa: BLE001 - lightkube's and httpx's errors, translated to the CLI's
        found = translate(err, f"Service {namespace}/{name}")
        if isinstance(found, NotFound):
            raise NotFound(f"Service {namespace}/{name} not found: is the chart's SageMaker API on in release "
                           f"{release!r} of namespace {namespace!r}? (--release, --release-namespace)", 404) from None
        raise found from None
    doc: dict[str, Any] = svc.to_dict()
    return doc


def endpoints(args: argparse.Namespace, kube: Any) -> tuple[str, str | None, dict[str, Any] | None]:
    """(the API's URL, S3's URL or None, the release's Service or None): the flags first, else the Service's."""
    if args.endpoint and args.s3_endpoint:
        return args.endpoint, args.s3_endpoint, None
    svc = release_service(kube, args.release, args.release_namespace)
    s3 = args.s3_endpoint or ((svc.get("metadata") or {}).get("annotations") or {}).get(S3_ENDPOINT_ANNOTATION)
    return args.endpoint or service_url(svc), s3, svc


def keys_secret_of(svc: Mapping[str, Any] | None, release: str) -> str:
    """The release's keys Secret: as its Service names it, else by the chart's naming."""
    named = ((svc or {}).get("metadata") or {}).get("annotations") or {}
    return str(named.get(KEYS_SECRET_ANNOTATION) or keys.keys_secret_name(f"{release}{SERVICE_SUFFIX}"))


def create_key(kube: Any, keys_namespace: str, keys_secret: str, namespace: str,
               service_account: str | None) -> tuple[str, str]:
    """A new key, added to the keys Secret `keys_secret` of `keys_namespace` (the release's; made if missing) and
    bound to `namespace` (and to `service_account`, which must exist there); (id, secret). It never overwrites
    another key: the Secret is patched only at the version read, with an id it does not hold."""
    from lightkube.resources.core_v1 import Secret, ServiceAccount
    from lightkube.types import PatchType

    from kubepool.kube.errors import Conflict, NotFound
    from kubepool.kube.sync import translate

    if service_account:
        try:
            kube.client.get(ServiceAccount, service_account, namespace=namespace)
        except Exception as err:  # noqa: BLE001 - translated below
            found = translate(err, f"ServiceAccount {namespace}/{service_account}")
            if isinstance(found, NotFound):
                raise NotFound(f"ServiceAccount {namespace}/{service_account} not found: the key would act as "
                               "nobody (create it and give it the rights the key's users need)", 404) from None
            raise found from None
    what = f"Secret {keys_namespace}/{keys_secret}"
    for _ in range(CREATE_KEY_ATTEMPTS):
        key_id, secret = keys.new_key()
        entry = keys.key_entry(key_id, secret, namespace, service_account)
        try:
            try:
                held = kube.client.get(Secret, keys_secret, namespace=keys_namespace)
            except Exception as err:  # noqa: BLE001 - translated: a missing Secret is made with this key
                if not isinstance(translate(err, what), NotFound):
                    raise
                kube.client.create(Secret.from_dict(keys.keys_secret(keys_namespace, keys_secret, entry)),
                                   namespace=keys_namespace)
                return key_id, secret
            if key_id in (held.data or {}):
                continue
            patch = {"metadata": {"resourceVersion": held.metadata.resourceVersion, "labels": {keys.KEY_LABEL: "true"}},
                     "data": entry}
            kube.client.patch(Secret, keys_secret, patch, namespace=keys_namespace, patch_type=PatchType.MERGE)
            return key_id, secret
        except Exception as err:  # noqa: BLE001 - no rights there (not the platform team), no namespace: the API's words
            found = translate(err, what)
            if not isinstance(found, Conflict):
                raise found from None
    raise Conflict(f"{what}: changed under every one of {CREATE_KEY_ATTEMPTS} attempts to add a key; try again", 409)


def cmd_sagemaker(args: argparse.Namespace, kube: Any) -> int:
    if args.action == "env":
        if args.service_account:
            raise ValueError("sagemaker env: --service-account is create-key's")
        api_url, s3_url, _ = endpoints(args, kube)
        print("\n".join(exports(api_url, s3_url)))
        return 0
    api_url, s3_url, svc = endpoints(args, kube)  # before the key: a missing Service creates nothing
    namespace = kube.namespace
    name = keys_secret_of(svc, args.release)
    key_id, secret = create_key(kube, args.release_namespace, name, namespace, args.service_account)
    print(f"# access key {key_id}: in Secret {args.release_namespace}/{name}, acting as ServiceAccount "
          f"{namespace}/{args.service_account or keys.DEFAULT_SERVICE_ACCOUNT}")
    print("\n".join(exports(api_url, s3_url, (key_id, secret))))
    return 0
