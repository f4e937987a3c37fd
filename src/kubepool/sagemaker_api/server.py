"""The HTTP side: one POST endpoint speaking AWS JSON 1.1 for SageMaker and CloudWatch Logs (by
X-Amz-Target), each request size-limited, SigV4-verified against the access keys and run as the key's
ServiceAccount; /healthz and /metrics beside it."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from kubepool.sagemaker_api import errors, handlers, sigv4
from kubepool.sagemaker_api.errors import AwsError
from kubepool.sagemaker_api.kubeaccess import KubeAccess
from kubepool.sagemaker_api.translate import DataConfig

log = logging.getLogger("kubepool.sagemaker_api")
MAX_BODY = 1024 * 1024  # far above any SageMaker request (100 hyperparameters of 2,500 characters is 0.3 MB)
SERVICES = {"SageMaker": ("sagemaker", handlers.SAGEMAKER), "Logs_20140328": ("logs", handlers.LOGS)}
# A registry of its own: the operator's (the default one) is what its dashboard plots, metric by metric.
METRICS = CollectorRegistry()
REQUESTS = Counter("kubepool_sagemaker_api_requests_total", "Requests by operation and answer code",
                   ["operation", "code"], registry=METRICS)
SECONDS = Histogram("kubepool_sagemaker_api_request_seconds", "Time to answer a request", ["operation"],
                    registry=METRICS)
KUBE_KEY = web.AppKey("kube", KubeAccess)
DATA_KEY = web.AppKey("data", DataConfig)


def _answer(body: dict[str, Any], status: int = 200) -> web.Response:
    return web.Response(body=json.dumps(body, default=str).encode(), status=status,
                        content_type=errors.JSON_CONTENT_TYPE)


async def _read_body(request: web.Request) -> bytes:
    """The body, refused past MAX_BODY (never more than that is read)."""
    body = bytearray()
    while chunk := await request.content.read(64 * 1024):
        body += chunk
        if len(body) > MAX_BODY:
            raise errors.too_large(MAX_BODY)
    return bytes(body)


async def _dispatch(request: web.Request, body: bytes) -> tuple[str, dict[str, Any]]:
    target = request.headers.get("X-Amz-Target", "")
    prefix, _, operation = target.partition(".")
    if prefix not in SERVICES or operation not in SERVICES[prefix][1]:
        raise errors.unknown_operation(target)
    service, table = SERVICES[prefix]
    kube = request.app[KUBE_KEY]
    keys: dict[str, Any] = {}

    path, _, query = request.raw_path.partition("?")
    key_id = _key_id(request.headers.get("Authorization", ""))
    if key_id:
        keys[key_id] = await kube.key(key_id)
    verified = sigv4.verify(request.method, path, query, request.headers, body,
                            lambda k: keys[k].secret if keys.get(k) else None, (service,))
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        raise errors.serialization("The request body is not valid JSON") from None
    if not isinstance(req, dict):
        raise errors.serialization("The request body must be a JSON object")
    ctx = handlers.Context(kube, keys[verified.key_id], verified.region, request.app[DATA_KEY])
    return operation, await table[operation](ctx, req)


def _key_id(auth: str) -> str | None:
    _, _, rest = auth.partition("Credential=")
    key_id = rest.partition("/")[0]
    return key_id if 0 < len(key_id) <= 128 else None


async def api(request: web.Request) -> web.Response:
    started, operation = time.monotonic(), request.headers.get("X-Amz-Target", "?").partition(".")[2] or "?"
    try:
        body = await _read_body(request)
        operation, answer = await _dispatch(request, body)
        code, response = "200", _answer(answer)
    except AwsError as err:
        code, response = err.code, web.Response(body=err.body_bytes(), status=err.status,
                                                content_type=errors.JSON_CONTENT_TYPE)
        if err.status >= 500:
            log.warning("%s: %s", operation, err.message)
    except Exception as err:  # an answer, not aiohttp's HTML page: the SDKs read only AWS-shaped errors
        log.exception("%s failed", operation)
        failure = AwsError("InternalFailure", f"internal error ({type(err).__name__})", status=500)
        code, response = failure.code, web.Response(body=failure.body_bytes(), status=500,
                                                    content_type=errors.JSON_CONTENT_TYPE)
    op_label = operation if operation in handlers.SAGEMAKER or operation in handlers.LOGS else "unknown"
    REQUESTS.labels(op_label, code).inc()
    SECONDS.labels(op_label).observe(time.monotonic() - started)
    response.headers["x-amzn-RequestId"] = request.headers.get("amz-sdk-invocation-id", "") or "kubepool"
    return response


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(METRICS), headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(kube: KubeAccess, data: DataConfig) -> web.Application:
    # aiohttp's own limit sits above ours, so an oversized body gets the AWS error from _read_body.
    app = web.Application(client_max_size=MAX_BODY * 2)
    app[KUBE_KEY] = kube
    app[DATA_KEY] = data
    app.router.add_post("/", api)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)

    async def close(app: web.Application) -> None:
        await kube.http.close()

    app.on_cleanup.append(close)
    return app
