"""`python -m kubepool.controller`: the same as `kopf run -m kubepool.controller.main`, with a liveness
endpoint by default. Argument parsing only."""

from __future__ import annotations

import argparse
import sys

import kopf

from kubepool.controller import main as _registers_handlers  # noqa: F401  (import = registration)
from kubepool.controller.config import OperatorConfig
from kubepool.controller.kopf_fence import quiet_routine_logs

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
    kopf.run(clusterwide=not namespaces, namespaces=namespaces, liveness_endpoint=liveness,
             standalone=ns.standalone, memo=kopf.Memo(cfg=cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
