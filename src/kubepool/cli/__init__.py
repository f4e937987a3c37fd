"""The `kubepool` command line (also `kubectl kubepool`): submit and follow MLJobs, and see the compute pools.

    kubepool [GLOBAL] submit FILE|DIR --pool P [--instances N] [--min-instances M] [--entrypoint E] [--name NAME]
                    [--env K=V]... [--pip REQ]... [--image IMG] [--label K=V]... [--queue Q]
                    [--dry-run -o yaml|json] [--wait [--no-logs]] [--timeout S] [-- ARGS...]
    kubepool list   [-A] [--limit N] [-w] [-o FORMAT]
    kubepool status JOB [-w] [-o FORMAT]
    kubepool logs   JOB [--instance N | --all] [--tail N] [--since 5m] [--timestamps] [-f]
    kubepool wait   JOB [--timeout S]
    kubepool cancel|suspend|resume|delete JOB
    kubepool dashboard JOB [--port P]
    kubepool pools  [-o FORMAT]
    kubepool version [--client] [-o text|json|yaml]
    kubepool sagemaker create-key|env [--service-account SA] [--release R] [--release-namespace NS]
    kubepool completion bash|zsh|fish
    kubepool local  {up,down,status} ...

GLOBAL is kubectl's `--kubeconfig`, `--context` and `-n/--namespace`, before or after the command. FORMAT is
table, wide, json, yaml, name, jsonpath=TEMPLATE or custom-columns=SPEC. JOB is NAME (in --namespace, else the
kubeconfig context's namespace) or NAMESPACE/NAME. `submit` prints the job id on stdout; progress goes to
stderr. Errors are one line on stderr, `kubepool: error: ...`. docs/cli.md has every option.

Exit codes (stable; scripts may rely on them):
    0    success; for `wait` and `submit --wait`: the job is DONE
    1    the job ended FAILED or CANCELLED
    2    usage error or invalid arguments (min > target, payload too large, bad name or path)
    3    not found (job, compute pool, instance pod)
    4    not authorised (HTTP 403)
    5    cluster unreachable, or no Kubernetes configuration (or no such context)
    6    the API server refused the request (validation, conflict, other API error)
    124  timed out waiting
    130  interrupted
"""

from __future__ import annotations

import sys

from kubepool.cli.output import format_table
from kubepool.cli.parser import parse_args

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_FORBIDDEN, EXIT_UNREACHABLE, EXIT_API = 0, 1, 2, 3, 4, 5, 6
EXIT_TIMEOUT, EXIT_INTERRUPTED = 124, 130

__all__ = ["exit_code_for", "format_table", "main", "parse_args"]


def exit_code_for(err: BaseException) -> int:
    """The documented exit code of an error."""
    from kubepool.jobs import PoolNotFound
    from kubepool.kube.errors import Forbidden, KubeError, NotFound, Unreachable

    if isinstance(err, (PoolNotFound, NotFound)):
        return EXIT_NOT_FOUND
    if isinstance(err, Forbidden):
        return EXIT_FORBIDDEN
    if isinstance(err, Unreachable):
        return EXIT_UNREACHABLE
    if isinstance(err, KubeError):
        return EXIT_API
    if isinstance(err, TimeoutError):
        return EXIT_TIMEOUT
    if isinstance(err, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_USAGE  # ValueError (bad arguments, payload too large) and missing local files


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["local"]:
        from kubepool.local.cli import main as local_main

        return local_main(argv[1:])
    args, script_args = parse_args(argv)
    from kubepool.cli.commands import run
    from kubepool.kube.errors import KubeError

    try:
        return run(args, script_args)
    except (KubeError, ValueError, OSError, TimeoutError, KeyboardInterrupt) as err:
        message = str(err) or type(err).__name__
        print(f"kubepool: error: {message}", file=sys.stderr)
        return exit_code_for(err)
