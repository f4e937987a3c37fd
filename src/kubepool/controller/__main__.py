"""`python -m kubepool.controller`: the same as `kopf run -m kubepool.controller.main`, with a liveness
endpoint by default. Argument parsing only."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import importlib
import logging
import sys
import threading
from collections.abc import Iterator

import kopf

import kubepool
from kubepool.controller import main as _main  # import = registration of the handlers
from kubepool.controller.config import OperatorConfig
from kubepool.controller.kopf_fence import install_lean_readiness, quiet_routine_logs
from kubepool.controller.leader import LeaderElector

LOG_FORMATS = {"full": kopf.LogFormat.FULL, "plain": kopf.LogFormat.PLAIN, "json": kopf.LogFormat.JSON}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kubepool.controller", description="The kubepool operator.")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    p.add_argument("--liveness", default=None, metavar="URL",
                   help="liveness endpoint (default http://<KUBEPOOL_OPERATOR_BIND_ADDRESS>:<KUBEPOOL_OPERATOR_LIVENESS_PORT>/healthz)")
    p.add_argument("--standalone", action="store_true", help="ignore peering (a single replica)")
    p.add_argument("--log-level", choices=("debug", "info", "warning"), default="info")
    p.add_argument("--log-format", choices=tuple(LOG_FORMATS), default="full",
                   help="full: timestamped lines; plain: messages only; json: one object per line")
    p.add_argument("--verbose", action="store_true", help="the same as --log-level=debug")
    p.add_argument("--version", action="version", version=f"kubepool-operator {kubepool.__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    ns = _parser().parse_args(argv)
    cfg = OperatorConfig.from_env()
    namespaces = ns.namespace or list(cfg.namespaces)
    # The operator's configuration (handed to its startup in kopf's memo) names the same namespaces as kopf.
    cfg = cfg.model_copy(update={"namespaces": tuple(namespaces)})
    liveness = ns.liveness or (f"http://{cfg.url_host}:{cfg.liveness_port}/healthz" if cfg.liveness_port else None)
    debug = ns.verbose or ns.log_level == "debug"
    kopf.configure(verbose=debug, quiet=ns.log_level == "warning", log_format=LOG_FORMATS[ns.log_format])
    quiet_routine_logs()
    if not install_lean_readiness():
        logging.getLogger(__name__).warning("kopf's readiness set is not what kubepool expects: a restart with "
                                            "many jobs waits quadratically long for its first pass")
    if cfg.kueue:
        importlib.import_module("kubepool.controller.kueuehandlers")  # import = registration (Workloads)
    memo = kopf.Memo(cfg=cfg)
    if cfg.leader_election:
        # Stand by until this replica holds the lease: kopf (its watches, handlers and writes) starts only then.
        memo.elector = _main.new_elector(cfg, _main.own_namespace())
        with _standby_liveness(cfg):
            asyncio.run(_acquire(memo.elector))
    # With leader election the lease decides who works: kopf's peering would only add its own pause.
    kopf.run(clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=liveness,
             standalone=ns.standalone or cfg.leader_election, memo=memo)
    return 0


async def _acquire(elector: LeaderElector) -> None:
    api = _main.new_api(kopf.OperatorSettings())
    try:
        await elector.acquire(api)
    finally:
        await api.close()


@contextlib.contextmanager
def _standby_liveness(cfg: OperatorConfig) -> Iterator[None]:
    """While standing by, answer the liveness endpoint (kopf serves it once it runs): a standby is alive."""
    if not cfg.liveness_port:
        yield
        return

    class Alive(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"standing by for the lease\n")

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((cfg.bind_address, cfg.liveness_port), Alive)
    thread = threading.Thread(target=server.serve_forever, name="standby-liveness", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
