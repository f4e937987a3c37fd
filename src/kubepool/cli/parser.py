"""The command line's grammar: every subcommand, its options and its help. kubectl's habits where they apply:
`-n/--namespace`, `--context`, `--kubeconfig` and `-o/--output` after any subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kubepool import naming

OUTPUTS = ("table", "wide", "json", "yaml", "name")


def build() -> argparse.ArgumentParser:
    conn = argparse.ArgumentParser(add_help=False)
    conn.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, in-cluster, ~/.kube/config)")
    conn.add_argument("--context", help="kubeconfig context (default: its current context)")
    common = argparse.ArgumentParser(add_help=False, parents=[conn])
    common.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                     help="table (default), wide (more columns), json, yaml, or name (kind.group/name)")

    p = argparse.ArgumentParser(prog="kubepool", description="Multi-instance ML jobs on compute pools.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("submit", parents=[common], help="submit a file or directory as a job",
                       description="Submit FILE (run on the head) or DIR (run --entrypoint). Arguments after `--` "
                                   "are passed to the script.")
    s.add_argument("path", metavar="FILE|DIR")
    s.add_argument("--pool", required=True, help="ComputePool of every instance")
    s.add_argument("--instances", type=int, default=1, help="target instances, head included (default 1)")
    s.add_argument("--min-instances", type=int, help="instances needed to start (default: --instances)")
    s.add_argument("--entrypoint", help="for DIR: the .py file to run, relative to DIR")
    s.add_argument("--name", help="job name (default: generated from the file name)")
    s.add_argument("--env", action="append", default=[], metavar="K=V", help="environment variable (repeatable)")
    s.add_argument("--pip", action="append", default=[], metavar="REQ", help="pip requirement (repeatable)")
    s.add_argument("--image", help="runtime image (default: the operator's)")
    s.add_argument("--instances-timeout", type=int, default=naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS,
                   help="seconds to wait for --min-instances")
    s.add_argument("--parallel", action="store_true", help="run on every instance instead of the head")
    s.add_argument("--wait", action="store_true",
                   help="follow the head's logs until the job ends (as kubectl-ray does); exit 0 on DONE, 1 otherwise")
    s.add_argument("--no-logs", action="store_true", help="with --wait: progress lines only, no logs")
    s.add_argument("--timeout", type=float, default=-1, help="with --wait: seconds to wait (exit 124 after)")

    ls = sub.add_parser("list", parents=[common, out], help="list jobs, newest first")
    ls.add_argument("-A", "--all-namespaces", action="store_true")
    ls.add_argument("--limit", type=int, default=0, help="at most this many jobs (default all)")

    st = sub.add_parser("status", parents=[common, out], help="a job's status and instances")
    st.add_argument("job", metavar="JOB")

    lg = sub.add_parser("logs", parents=[common], help="an instance's logs (default the head)")
    lg.add_argument("job", metavar="JOB")
    which = lg.add_mutually_exclusive_group()
    which.add_argument("--instance", type=int, help="instance id (0 is the head)")
    which.add_argument("--all", action="store_true", help="every instance, each line prefixed with [algo-N]")
    lg.add_argument("--tail", type=int, default=-1, help="last N lines (per instance)")
    lg.add_argument("-f", "--follow", action="store_true", help="stream until the instance (every one with --all) exits")
    lg.add_argument("--verbose", action="store_true", help="the whole log: Ray's start-up output too "
                    "(default: the payload's output and kubepool's lines)")

    w = sub.add_parser("wait", parents=[common], help="wait for a job, showing progress")
    w.add_argument("job", metavar="JOB")
    w.add_argument("--timeout", type=float, default=-1, help="seconds (exit 124 after; default forever)")

    for name, text in (("cancel", "cancel a job for good (its pods are removed)"),
                       ("suspend", "pause a job: its pods are removed and its capacity released until resume"),
                       ("resume", "run a suspended job again, from scratch, once it gets capacity"),
                       ("delete", "delete a job and its logs")):
        c = sub.add_parser(name, parents=[common], help=text)
        c.add_argument("job", metavar="JOB")

    sub.add_parser("pools", parents=[conn, out], help="compute pools: capacity and use")
    v = sub.add_parser("version", parents=[conn], help="kubepool's version, and the API versions the cluster serves")
    v.add_argument("--client", action="store_true", help="only the client's version (no cluster needed)")
    v.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    c = sub.add_parser("completion", help="shell completion script: source <(kubepool completion bash)")
    c.add_argument("shell", choices=("bash", "zsh"))
    sub.add_parser("local", help="the local cluster (kubepool local --help)", add_help=False)
    return p


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse `argv`; what follows the first `--` is returned apart (the script's arguments for `submit`)."""
    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1:]
    ns = build().parse_args(argv)
    if script_args and ns.command != "submit":
        build().error("arguments after `--` are only for `submit`")
    return ns, script_args
