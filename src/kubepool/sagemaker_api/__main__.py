"""`python -m kubepool.sagemaker_api`: the SageMaker-compatible API server (see the package's docstring)."""

from __future__ import annotations

import argparse
import logging
import os
import ssl

from aiohttp import web

from kubepool.kube.transport import AiohttpHttp
from kubepool.sagemaker_api.keys import DEFAULT_KEYS_SECRET
from kubepool.sagemaker_api.kubeaccess import SA_DIR, KubeAccess, connect
from kubepool.sagemaker_api.server import make_app
from kubepool.sagemaker_api.translate import DataConfig

ENV = "KUBEPOOL_SAGEMAKER_API_"


def _env(name: str, default: str = "") -> str:
    return os.environ.get(ENV + name, default)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kubepool.sagemaker_api",
                                description="SageMaker-compatible API server (AWS JSON 1.1) for kubepool's MLJobs")
    p.add_argument("--host", default=_env("BIND_ADDRESS", "0.0.0.0"))
    p.add_argument("--port", type=int, default=int(_env("PORT", "8080")))
    p.add_argument("--keys-namespace", default=_env("KEYS_NAMESPACE") or None,
                   help="the server's own namespace, where the access keys' Secret is "
                        "(default: its pod's namespace)")
    p.add_argument("--keys-secret", default=_env("KEYS_SECRET", DEFAULT_KEYS_SECRET),
                   help="the Secret of that namespace holding the access keys, the only Secret it reads "
                        f"(default {DEFAULT_KEYS_SECRET})")
    p.add_argument("--namespace", action="append", default=[n for n in _env("NAMESPACES").split(",") if n],
                   help="a namespace access keys may be bound to (repeat; default every namespace)")
    p.add_argument("--tls-cert", default=_env("TLS_CERT") or None, help="PEM certificate: serve HTTPS")
    p.add_argument("--tls-key", default=_env("TLS_KEY") or None)
    p.add_argument("--s3-endpoint-url", default=_env("S3_ENDPOINT_URL") or None,
                   help="S3-compatible endpoint the jobs' instances use for channels, outputs and checkpoints")
    p.add_argument("--s3-credentials-secret", default=_env("S3_CREDENTIALS_SECRET") or None,
                   help="Secret (in each job's namespace, labelled kubepool.dev/credentials=true) with the AWS keys "
                        "the instances use for S3")
    p.add_argument("--verbose", action="store_true")
    ns = p.parse_args(argv)
    if bool(ns.tls_cert) != bool(ns.tls_key):
        p.error("--tls-cert and --tls-key go together")
    ns.keys_namespace = ns.keys_namespace or _pod_namespace()
    if not ns.keys_namespace:
        p.error("--keys-namespace: the server's own namespace, where the access keys are (not in a pod)")
    return ns


def _pod_namespace() -> str | None:
    path = SA_DIR / "namespace"
    return path.read_text().strip() or None if path.is_file() else None


def main(argv: list[str] | None = None) -> None:
    ns = parse(argv)
    logging.basicConfig(level=logging.DEBUG if ns.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    kube = KubeAccess(AiohttpHttp(connect), ns.keys_namespace, ns.namespace, ns.keys_secret)
    data = DataConfig(ns.s3_endpoint_url, ns.s3_credentials_secret)
    tls = None
    if ns.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(ns.tls_cert, ns.tls_key)
    logging.getLogger("kubepool.sagemaker_api").info("kubepool sagemaker api serving on %s:%d", ns.host, ns.port)
    web.run_app(make_app(kube, data), host=ns.host, port=ns.port, ssl_context=tls, print=None,
                access_log=None)


if __name__ == "__main__":
    main()
