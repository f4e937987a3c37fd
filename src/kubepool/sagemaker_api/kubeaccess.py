"""The server's calls to the Kubernetes API. Its own identity only reads the access keys' Secret (by name, in its
own namespace) and ComputePools; everything a request does (jobs, pods, logs) goes out impersonating the key's ServiceAccount, so
the cluster's RBAC decides what a key may do, and a key never reaches past its namespace."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import User

from kubepool import naming
from kubepool.kube.errors import KubeError, NotFound, Unreachable, status_error
from kubepool.kube.transport import TRANSPORT_ERRORS, AiohttpHttp, Endpoint
from kubepool.sagemaker_api.keys import DEFAULT_KEYS_SECRET, AccessKey, parse_key, valid_key_id

Obj = dict[str, Any]
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
KEYS_TTL_SECONDS = 5.0  # a deleted key stops working within this
MIN_REFRESH_SECONDS = 0.2
_JOBS = f"/apis/{naming.GROUP}/{naming.VERSION}"


def impersonation(key: AccessKey) -> dict[str, str]:
    """The header that makes the API server act as the key's ServiceAccount. No Impersonate-Group: for a service
    account user the API server adds its groups itself (system:serviceaccounts and that of its namespace)."""
    return {"Impersonate-User": f"system:serviceaccount:{key.namespace}:{key.service_account}"}


def connect() -> Endpoint:
    """The server's own login: KUBECONFIG if set, else the pod's ServiceAccount (as client-go finds it)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not os.environ.get("KUBECONFIG") and host and port and (SA_DIR / "token").is_file():
        server_host = f"[{host}]" if ":" in host else host
        tls = ssl.create_default_context(cafile=str(SA_DIR / "ca.crt"))
        token = (SA_DIR / "token").read_text().strip()
        return Endpoint(f"https://{server_host}:{port}", ssl=tls, headers={"Authorization": f"Bearer {token}"})
    cfg = KubeConfig.from_env().get()
    if cfg is None:
        raise Unreachable("no kubeconfig context: set KUBECONFIG, or run in a pod with a service account")
    user = cfg.user or User()
    headers = {"Authorization": f"Bearer {user.token}"} if user.token else {}
    if not cfg.cluster.server.startswith("https:"):
        return Endpoint(cfg.cluster.server, ssl=False, headers=headers)
    return Endpoint(cfg.cluster.server, ssl=verify_cluster(cfg.cluster, user, cfg.abs_file), headers=headers)


class KubeAccess:
    def __init__(self, http: AiohttpHttp, keys_namespace: str, namespaces: Sequence[str] = (),
                 keys_secret: str = DEFAULT_KEYS_SECRET) -> None:
        if not keys_namespace:
            raise ValueError("the namespace of the access keys (the server's own) is required")
        self.http = http
        self.keys_namespace = keys_namespace  # the only namespace whose Secrets the server reads
        self.keys_secret = keys_secret  # and the only Secret there (its Role's resourceNames)
        self.namespaces = tuple(namespaces)  # the namespaces a key may be bound to; empty: any
        self._keys: dict[str, tuple[float, AccessKey | None]] = {}  # id -> (when its read started, the key)
        self._last_read = -1e9
        self._reading = asyncio.Lock()

    async def _call(self, method: str, path: str, what: str, *, body: Any = None,
                    headers: Mapping[str, str] | None = None, params: Mapping[str, str] | None = None,
                    content_type: str = "application/json", raw: bool = False) -> Any:
        hdrs = {**(headers or {}), "Content-Type": content_type} if body is not None else dict(headers or {})
        try:
            r = await self.http.request(method, path, content=None if body is None else json.dumps(body).encode(),
                                        params=params, headers=hdrs)
        except TRANSPORT_ERRORS as err:
            raise Unreachable(f"{what}: cannot reach the Kubernetes API ({err})") from None
        if r.status_code >= 400:
            try:
                st = json.loads(r.content)
            except ValueError:
                st = {}
            raise status_error(r.status_code, st.get("message") or r.text[:300], st.get("reason") or "", what)
        return r.content if raw else json.loads(r.content)

    # -- the server's own identity --------------------------------------------------------------------------
    async def key(self, key_id: str) -> AccessKey | None:
        """The access key with this id: its entry in the keys Secret of the server's own namespace, bound to a
        namespace it serves. A key is read again when its read is older than KEYS_TTL_SECONDS (a deleted key stops
        working then), and an id it does not hold with a read that started after the request came (a key made just
        before it counts), at most one read every MIN_REFRESH_SECONDS (unknown ids cannot flood the API server)."""
        if not valid_key_id(key_id):
            return None  # never a read for what cannot be a key's id
        arrived = time.monotonic()
        held = self._keys.get(key_id)
        if held and held[1] is not None and arrived - held[0] < KEYS_TTL_SECONDS:
            return held[1]
        async with self._reading:
            held = self._keys.get(key_id)
            if held is None or held[0] < arrived:
                wait = self._last_read + MIN_REFRESH_SECONDS - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                started = self._last_read = time.monotonic()
                found = await self.read_key(key_id)
                # Entries past their TTL go: unknown ids cannot grow the map beyond a TTL's worth of reads.
                self._keys = {i: e for i, e in self._keys.items() if started - e[0] < KEYS_TTL_SECONDS}
                self._keys[key_id] = (started, found)
        return self._keys[key_id][1]

    async def read_key(self, key_id: str) -> AccessKey | None:
        """One `get` of the keys Secret in the server's own namespace: it never reads (nor may it, by its RBAC)
        another Secret, so a Secret in a tenant's namespace is never a key."""
        path = f"/api/v1/namespaces/{self.keys_namespace}/secrets/{self.keys_secret}"
        try:
            k = parse_key(await self._call("GET", path, "access keys"), key_id)
        except NotFound:
            return None
        if k is None or k.key_id != key_id or (self.namespaces and k.namespace not in self.namespaces):
            return None
        return k

    async def pools(self) -> list[Obj]:
        return list((await self._call("GET", f"{_JOBS}/{naming.POOL_PLURAL}", "ComputePools")).get("items") or [])

    # -- as the key's ServiceAccount ------------------------------------------------------------------------
    async def create_job(self, key: AccessKey, body: Obj) -> Obj:
        return dict(await self._call("POST", f"{_JOBS}/namespaces/{key.namespace}/{naming.MLJOB_PLURAL}",
                                     f"MLJob {body['metadata']['name']}", body=body, headers=impersonation(key)))

    async def get_job(self, key: AccessKey, name: str) -> Obj:
        return dict(await self._call("GET", f"{_JOBS}/namespaces/{key.namespace}/{naming.MLJOB_PLURAL}/{quote(name, safe='')}",
                                     f"MLJob {name}", headers=impersonation(key)))

    async def list_jobs(self, key: AccessKey, label: str) -> list[Obj]:
        out = await self._call("GET", f"{_JOBS}/namespaces/{key.namespace}/{naming.MLJOB_PLURAL}", "MLJobs",
                               headers=impersonation(key), params={"labelSelector": label})
        return list(out.get("items") or [])

    async def patch_job(self, key: AccessKey, name: str, patch: Obj) -> Obj:
        return dict(await self._call("PATCH", f"{_JOBS}/namespaces/{key.namespace}/{naming.MLJOB_PLURAL}/{quote(name, safe='')}",
                                     f"MLJob {name}", body=patch, headers=impersonation(key),
                                     content_type="application/merge-patch+json"))

    async def pod_log(self, key: AccessKey, pod: str, since_seconds: int | None = None) -> str:
        params = {"timestamps": "true"}
        if since_seconds:
            params["sinceSeconds"] = str(since_seconds)
        try:
            content = await self._call("GET", f"/api/v1/namespaces/{key.namespace}/pods/{quote(pod, safe='')}/log",
                                       f"log of {pod}", headers=impersonation(key), params=params, raw=True)
        except NotFound:
            return ""
        except KubeError as err:
            if "waiting to start" in str(err):
                return ""  # no log yet: the pod's container has not started
            raise
        return bytes(content).decode(errors="replace")

