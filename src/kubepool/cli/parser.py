"""The command line's grammar: every subcommand, its options and its help. kubectl's habits where they apply:
`-n/--namespace`, `--context` and `--kubeconfig` before or after the subcommand, `-o/--output` after it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kubepool import naming
from kubepool.cli.output import output_format

OUTPUT_HELP = ("table (default), wide (more columns), json or yaml (a List of the objects, as kubectl get), name "
               "(kind.group/name), jsonpath=TEMPLATE, or custom-columns=HEADER:PATH,...")


def _connection(parser: argparse.ArgumentParser, *, namespaced: bool, default: object) -> None:
    """kubectl's connection flags. On the subcommands their default is SUPPRESS, so that a value given before
    the subcommand (on the top-level parser, default None) is not overwritten by the subcommand's default."""
    parser.add_argument("--kubeconfig", default=default,
                        help="kubeconfig file (default: KUBECONFIG, its files merged as kubectl merges them; "
                             "in-cluster; ~/.kube/config)")
    parser.add_argument("--context", default=default, help="kubeconfig context (default: its current context)")
    if namespaced:
        parser.add_argument("-n", "--namespace", default=default,
                            help="namespace (default: the kubeconfig context's)")


def build() -> argparse.ArgumentParser:
    conn = argparse.ArgumentParser(add_help=False)
    _connection(conn, namespaced=False, default=argparse.SUPPRESS)
    common = argparse.ArgumentParser(add_help=False)
    _connection(common, namespaced=True, default=argparse.SUPPRESS)
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("-o", "--output", type=output_format, default="table", metavar="FORMAT", help=OUTPUT_HELP)
    watch = argparse.ArgumentParser(add_help=False)
    watch.add_argument("-w", "--watch", action="store_true",
                       help="after the first listing, print each change as it happens (until interrupted)")

    p = argparse.ArgumentParser(prog="kubepool", description="Multi-instance ML jobs on compute pools.")
    _connection(p, namespaced=True, default=None)
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
    s.add_argument("--image", help="runtime image (default: the pool's, else the operator's)")
    s.add_argument("--instances-timeout", type=int, default=naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS,
                   help="seconds to wait for --min-instances")
    s.add_argument("--parallel", action="store_true", help="run on every instance instead of the head")
    s.add_argument("--label", action="append", default=[], metavar="K=V", help="label of the MLJob (repeatable)")
    s.add_argument("--queue", metavar="QUEUE",
                   help=f"Kueue LocalQueue: the label {naming.LABEL_KUEUE_QUEUE}=QUEUE (with the chart's "
                        "operator.kueue, the job runs once Kueue admits it)")
    s.add_argument("--dry-run", nargs="?", const="client", choices=("client",),
                   help="print the MLJob it would create (-o yaml|json), reading the pool as a submission does; "
                        "creates nothing")
    s.add_argument("-o", "--output", choices=("yaml", "json"), help="with --dry-run: how to print the MLJob")
    s.add_argument("--wait", action="store_true",
                   help="follow the head's logs until the job ends (as kubectl-ray does); exit 0 on DONE, 1 otherwise")
    s.add_argument("--no-logs", action="store_true", help="with --wait: progress lines only, no logs")
    s.add_argument("--timeout", type=float, default=-1, help="with --wait: seconds to wait (exit 124 after)")

    ls = sub.add_parser("list", parents=[common, out, watch], help="list jobs, newest first")
    ls.add_argument("-A", "--all-namespaces", action="store_true", help="jobs of every namespace")
    ls.add_argument("--limit", type=int, default=0, help="at most this many jobs (default all)")

    st = sub.add_parser("status", parents=[common, out, watch], help="a job's status and instances "
                        "(-o json|yaml: this summary; jsonpath, custom-columns: the MLJob)")
    st.add_argument("job", metavar="JOB")

    lg = sub.add_parser("logs", parents=[common], help="an instance's logs (default the head)")
    lg.add_argument("job", metavar="JOB")
    which = lg.add_mutually_exclusive_group()
    which.add_argument("--instance", type=int, help="instance id (0 is the head)")
    which.add_argument("--all", action="store_true", help="every instance, each line prefixed with [algo-N]")
    lg.add_argument("--tail", type=int, default=-1, help="last N lines (per instance)")
    lg.add_argument("--since", metavar="DURATION", help="only lines newer than this (5s, 2m, 3h), as kubectl logs")
    lg.add_argument("--timestamps", action="store_true", help="prefix each line with its RFC3339 time")
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

    d = sub.add_parser("dashboard", parents=[common], help="a local port that answers as a running job's Ray "
                       "dashboard (as kubectl ray session), through the API server's pod proxy, until interrupted")
    d.add_argument("job", metavar="JOB")
    d.add_argument("--port", type=int, default=naming.RAY_DASHBOARD_PORT,
                   help="local port (default %(default)s; 0: any free one, printed)")
    d.add_argument("--address", default="127.0.0.1", help="local address to listen on (default %(default)s)")

    sm = sub.add_parser("sagemaker", parents=[common], help="point SageMaker's own clients (boto3, the SageMaker "
                        "SDK, the aws CLI) at the chart's SageMaker API: create-key makes an access key for the "
                        "namespace and prints it with the endpoint variables; env prints the variables only",
                        description="Prints shell lines: eval \"$(kubepool -n NS sagemaker create-key)\". The "
                                    "endpoints are the release's <release>-sagemaker-api Service's (docs/sagemaker-api.md).")
    sm.add_argument("action", choices=("create-key", "env"), metavar="create-key|env")
    sm.add_argument("--service-account", metavar="SA", help="create-key: the ServiceAccount (in the namespace) whose "
                    "rights the key's requests have (default: the namespace's default)")
    sm.add_argument("--release", default="kubepool", help="the chart's release name (default %(default)s)")
    sm.add_argument("--release-namespace", default="kubepool-system",
                    help="the release's namespace, where its Service and its keys Secret (create-key adds to it) are "
                         "(default %(default)s)")
    sm.add_argument("--endpoint", metavar="URL", help="the API's URL as the clients reach it (an Ingress, a "
                    "port-forward) instead of the Service's")
    sm.add_argument("--s3-endpoint", metavar="URL", help="the S3 endpoint the clients use (default: the Service's "
                    "kubepool.dev/s3-endpoint-url annotation)")

    sub.add_parser("pools", parents=[conn, out], help="compute pools: capacity and use")
    v = sub.add_parser("version", parents=[conn], help="kubepool's version, and the API versions the cluster serves")
    v.add_argument("--client", action="store_true", help="only the client's version (no cluster needed)")
    v.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    c = sub.add_parser("completion", help="shell completion script: source <(kubepool completion bash)")
    c.add_argument("shell", choices=("bash", "zsh", "fish"))
    sub.add_parser("local", help="the local cluster (kubepool local --help)", add_help=False)
    return p


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse `argv`; what follows the first `--` is returned apart (the script's arguments for `submit`)."""
    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1:]
    parser = build()
    ns = parser.parse_args(argv)
    if script_args and ns.command != "submit":
        parser.error("arguments after `--` are only for `submit`")
    if ns.command == "submit" and ns.output and not ns.dry_run:
        parser.error("submit: -o is for --dry-run (it prints the MLJob it would create)")
    return ns, script_args
