"""The SDK's and CLI's side of the one place that talks to the Kubernetes API: a small synchronous facade
over lightkube's `Client`.

Configuration comes from the environment as kubectl finds it (`KUBECONFIG`, else the in-cluster service
account, else `~/.kube/config`). Every call returns kubepool's typed models (`kubepool.api.MLJob`,
`kubepool.api.ComputePool`) or lightkube's core models, and every failure leaves as a
`kubepool.kube.errors.KubeError` subclass, never as a raw client exception.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import httpx2
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError
from lightkube.generic_resource import GenericGlobalResource, GenericNamespacedResource
from lightkube.resources.core_v1 import ConfigMap, Pod, Secret
from lightkube.types import CascadeType, PatchType

from kubepool import naming, objectmeta
from kubepool.api import ComputePool, MLJob
from kubepool.kube.errors import Conflict, KubeError, NotFound, Unreachable, status_error
from kubepool.kube.kubeconfig import files_of as kubeconfig_files
from kubepool.kube.kubeconfig import load as load_kubeconfig
from kubepool.kube.lightkube_fence import watch_window
from kubepool.kube.resources import ComputePoolResource, MLJobResource

T = TypeVar("T")
SDK_FIELD_MANAGER = "kubepool-sdk"


def translate(err: Exception, what: str = "") -> KubeError:
    """Map a lightkube/httpx error to ours, keeping the server's message."""
    if isinstance(err, ApiError):
        return status_error(err.status.code or 0, err.status.message or str(err), err.status.reason or "", what)
    return Unreachable(f"{what + ': ' if what else ''}cannot reach the Kubernetes API ({err}); is the cluster up and KUBECONFIG set?")


# Transport errors that mean "the API server was not reached" (or went away mid-stream).
_CLIENT_ERRORS = (ApiError, httpx2.HTTPError, OSError)


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except _CLIENT_ERRORS as err:
        raise translate(err, what) from None


def _stream(what: str, lines: Iterator[T]) -> Iterator[T]:
    """Translate errors raised while a streamed response (log, watch) is being read."""
    try:
        yield from lines
    except _CLIENT_ERRORS as err:
        raise translate(err, what) from None


def _load_config(kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> SingleConfig:
    """kubectl's order: `kubeconfig` when given, else `KUBECONFIG` when set (several files merged as kubectl
    merges them), else in-cluster, else `~/.kube/config`; then `context`, else the current context."""
    files = [] if kubeconfig else kubeconfig_files(os.environ.get("KUBECONFIG", ""))
    merged = load_kubeconfig(files) if len(files) > 1 else None
    path = kubeconfig or (files[0] if files else None)
    if merged is not None:
        config = KubeConfig.from_dict(merged)
    else:
        config = KubeConfig.from_file(path) if path else KubeConfig.from_env()
    if context is not None and context not in config.contexts:
        raise ConfigError(f"context {context!r} is not in the kubeconfig (it has: {', '.join(sorted(config.contexts)) or 'none'})")
    single = config.get(context)
    assert single is not None  # get() raises when there is no context at all
    return single


def _job(obj: GenericNamespacedResource) -> MLJob:
    return MLJob.model_validate(obj.to_dict())


def _pool(obj: GenericGlobalResource) -> ComputePool:
    return ComputePool.model_validate(obj.to_dict())


class Kube:
    """A connection to one cluster, with kubepool's operations on it.

    Args:
        namespace: Default namespace of namespaced calls; defaults to the kubeconfig context's namespace.
        client: An existing lightkube client (tests); by default one is built from the environment.
        kubeconfig: The kubeconfig file (kubectl's `--kubeconfig`); default `KUBECONFIG`, in-cluster or
            `~/.kube/config`.
        context: The kubeconfig context (kubectl's `--context`); default its current context.

    Raises:
        Unreachable: No Kubernetes configuration was found (or not the context asked for).
    """

    def __init__(self, namespace: str | None = None, client: Client | None = None, *,
                 kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None) -> None:
        if client is None:
            try:
                config = _load_config(kubeconfig, context)
            except (ConfigError, OSError) as err:
                hint = "" if context else "; set KUBECONFIG or run `kubepool local up`"
                raise Unreachable(f"no Kubernetes configuration ({err}){hint}") from None
            client = Client(config, field_manager=SDK_FIELD_MANAGER)
        self.client = client
        self.namespace: str = namespace or client.namespace or "default"

    def close(self) -> None:
        """Release the connection pool."""
        self.client.close()

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.namespace

    # --- MLJob ---------------------------------------------------------------------------------------
    def get_job(self, name: str, namespace: str | None = None) -> MLJob:
        ns = self._ns(namespace)
        return _job(_call(f"MLJob {ns}/{name}", lambda: self.client.get(MLJobResource, name, namespace=ns)))

    def list_jobs(self, namespace: str | None = None, all_namespaces: bool = False) -> list[MLJob]:
        ns = "*" if all_namespaces else self._ns(namespace)
        return _call("list MLJobs", lambda: [_job(o) for o in self.client.list(MLJobResource, namespace=ns)])

    def create_job(self, job: MLJob, namespace: str | None = None) -> MLJob:
        ns = self._ns(namespace)
        body = MLJobResource.from_dict(job.wire())
        name = objectmeta.name(job)
        return _job(_call(f"create MLJob {ns}/{name}", lambda: self.client.create(body, namespace=ns)))

    def patch_job(self, name: str, patch: dict[str, Any], namespace: str | None = None) -> MLJob:
        """Apply a JSON merge patch to the job (e.g. `{"spec": {"suspend": True}}`)."""
        ns = self._ns(namespace)
        return _job(_call(f"update MLJob {ns}/{name}", lambda: self.client.patch(
            MLJobResource, name, patch, namespace=ns, patch_type=PatchType.MERGE)))

    def delete_job(self, name: str, namespace: str | None = None) -> None:
        """Delete the job; its pods, Service and ConfigMaps go with it (they are owned by it)."""
        ns = self._ns(namespace)
        _call(f"delete MLJob {ns}/{name}", lambda: self.client.delete(
            MLJobResource, name, namespace=ns, cascade=CascadeType.BACKGROUND))

    def watch_job(self, name: str, resource_version: str | None, seconds: int,
                  namespace: str | None = None) -> Iterator[tuple[str, MLJob]]:
        """Changes of one job for at most `seconds` (the server ends the watch), as (event type, job)."""
        ns = self._ns(namespace)
        events = self._watch_window(MLJobResource, ns, {"fieldSelector": f"metadata.name={name}"}, resource_version, seconds)
        for kind, obj in _stream(f"watch MLJob {ns}/{name}", events):
            yield kind, _job(obj)

    def _watch_window(self, res: Any, namespace: str, params: dict[str, str], resource_version: str | None,
                      seconds: int) -> Iterator[tuple[str, Any]]:
        return watch_window(self.client, res, namespace, {**params, "resourceVersion": resource_version}, seconds)

    # --- ComputePool ---------------------------------------------------------------------------------
    def get_pool(self, name: str) -> ComputePool:
        return _pool(_call(f"ComputePool {name}", lambda: self.client.get(ComputePoolResource, name)))

    def list_pools(self) -> list[ComputePool]:
        return _call("list ComputePools", lambda: [_pool(o) for o in self.client.list(ComputePoolResource)])

    def served_api_versions(self) -> list[str]:
        """The MLJob API versions the cluster serves (from the installed CRD).

        Raises:
            NotFound: kubepool's CRDs are not installed.
        """
        from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

        crd = _call(f"CRD {naming.MLJOB_PLURAL}.{naming.GROUP}",
                    lambda: self.client.get(CustomResourceDefinition, f"{naming.MLJOB_PLURAL}.{naming.GROUP}"))
        return [f"{naming.GROUP}/{v.name}" for v in (crd.spec.versions if crd.spec else []) if v.served]

    # --- core objects ---------------------------------------------------------------------------------
    def create_configmap(self, cm: ConfigMap, namespace: str | None = None) -> None:
        ns = self._ns(namespace)
        name = cm.metadata.name if cm.metadata else ""
        _call(f"create ConfigMap {ns}/{name}", lambda: self.client.create(cm, namespace=ns))

    def get_configmap(self, name: str, namespace: str | None = None) -> ConfigMap:
        ns = self._ns(namespace)
        return _call(f"ConfigMap {ns}/{name}", lambda: self.client.get(ConfigMap, name, namespace=ns))

    def replace_configmap(self, cm: ConfigMap, namespace: str | None = None) -> None:
        """Create the ConfigMap, or replace the one of that name."""
        ns = self._ns(namespace)
        name = cm.metadata.name if cm.metadata else ""
        try:
            self.create_configmap(cm, ns)
        except Conflict:
            _call(f"replace ConfigMap {ns}/{name}", lambda: self.client.replace(cm))  # namespace: cm.metadata.namespace

    def delete_configmap(self, name: str, namespace: str | None = None) -> None:
        ns = self._ns(namespace)
        _call(f"delete ConfigMap {ns}/{name}", lambda: self.client.delete(ConfigMap, name, namespace=ns))

    def list_pods(self, labels: Mapping[str, str], namespace: str | None = None) -> list[Pod]:
        ns = self._ns(namespace)
        return _call(f"list pods in {ns}", lambda: list(self.client.list(Pod, namespace=ns, labels=dict(labels))))

    def secret_value(self, name: str, key: str, namespace: str | None = None) -> str:
        """One key of a Secret, decoded."""
        ns = self._ns(namespace)
        secret = _call(f"Secret {ns}/{name}", lambda: self.client.get(Secret, name, namespace=ns))
        data = secret.data or {}
        if key not in data:
            raise NotFound(f"Secret {ns}/{name} has no key {key!r}", 404)
        return base64.b64decode(data[key]).decode()

    def pod_proxy(self, name: str, port: int, path: str, *, method: str = "GET", body: bytes = b"",
                  headers: Mapping[str, str] | None = None, namespace: str | None = None) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request to a pod's port through the API server's pod proxy (what `kubectl proxy` reaches):
        status, headers, body. lightkube has no raw request, so it goes through its HTTP client, which carries
        the kubeconfig's server and credentials."""
        ns = self._ns(namespace)
        http = self.client._client._client  # lightkube's configured httpx client
        url = f"/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path.lstrip('/')}"
        resp = _call(f"proxy to pod {ns}/{name}:{port}",
                     lambda: http.request(method, url, content=body or None, headers=dict(headers or {})))
        return resp.status_code, dict(resp.headers), resp.content

    def pod_log(self, name: str, *, container: str | None = None, tail_lines: int | None = None,
                follow: bool = False, namespace: str | None = None, since_seconds: int | None = None,
                timestamps: bool = False) -> Iterator[str]:
        """Lines (without newlines) of one container's log, through the API server's pod log endpoint."""
        ns = self._ns(namespace)
        what = f"logs of pod {ns}/{name}"
        lines = _call(what, lambda: self.client.log(name, namespace=ns, container=container, tail_lines=tail_lines,
                                                    follow=follow, newlines=False, since=since_seconds,
                                                    timestamps=timestamps))
        return _stream(what, lines)

