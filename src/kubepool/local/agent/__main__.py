"""`python -m kubepool.local.agent --state-dir DIR --node NAME`: run one local node until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from kubepool.local.agent.agent import main
from kubepool.local.agent.config import Layout


def cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kubepool.local.agent", description=__doc__)
    parser.add_argument("--state-dir", required=True, type=Path, help="the cluster's state dir (.kubepool)")
    parser.add_argument("--node", required=True, help="node name, as in <state-dir>/nodes.yaml")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format=f"%(asctime)s {args.node} %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("httpx", "httpx2"):  # one line per API request drowns the agent's own log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    asyncio.run(main(Layout(state_dir=args.state_dir.resolve(), node=args.node)))


if __name__ == "__main__":
    cli()
