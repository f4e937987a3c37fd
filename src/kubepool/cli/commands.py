"""The `kubepool` command line: submit and follow MLJobs, and see the compute pools.

    kubepool submit FILE|DIR --pool P [--instances N] [--min-instances M] [--entrypoint E] [--name NAME]
                    [--namespace NS] [--env K=V]... [--pip REQ]... [--image IMG] [--wait] [--timeout S] [-- ARGS...]
    kubepool list   [--namespace NS | -A] [--limit N] [--output table|json]
    kubepool status JOB [--output table|json]
    kubepool logs   JOB [--instance N] [--tail N] [-f]
    kubepool wait   JOB [--timeout S]
    kubepool cancel JOB
    kubepool delete JOB
    kubepool pools  [--output table|json]
    kubepool local  {up,down,status} ...

JOB is NAME (in --namespace, else the kubeconfig context's namespace) or NAMESPACE/NAME. `submit` prints the
job id on stdout; progress goes to stderr. Errors are one line on stderr, `kubepool: error: ...`.

Exit codes (stable; scripts may rely on them):
    0    success; for `wait` and `submit --wait`: the job is DONE
    1    the job ended FAILED or CANCELLED
    2    usage error or invalid arguments (min > target, payload too large, bad name or path)
    3    not found (job, compute pool, instance pod)
    4    not authorised (HTTP 403)
    5    cluster unreachable, or no Kubernetes configuration
    6    the API server refused the request (validation, conflict, other API error)
    124  timed out waiting
    130  interrupted
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kubepool import naming

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_FORBIDDEN, EXIT_UNREACHABLE, EXIT_API = 0, 1, 2, 3, 4, 5, 6
EXIT_TIMEOUT, EXIT_INTERRUPTED = 124, 130


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    out = argparse.ArgumentParser(add_help=False)
    out.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")

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
    s.add_argument("--instances-timeout", type=int, default=naming.DEFAULT_INSTANCES_TIMEOUT_SECONDS, help="seconds to wait for --min-instances")
    s.add_argument("--parallel", action="store_true", help="run on every instance instead of the head")
    s.add_argument("--wait", action="store_true", help="wait for the job; exit 0 on DONE, 1 otherwise")
    s.add_argument("--timeout", type=float, default=-1, help="with --wait: seconds to wait (exit 124 after)")

    ls = sub.add_parser("list", parents=[common, out], help="list jobs, newest first")
    ls.add_argument("-A", "--all-namespaces", action="store_true")
    ls.add_argument("--limit", type=int, default=0, help="at most this many jobs (default all)")

    st = sub.add_parser("status", parents=[common, out], help="a job's status and instances")
    st.add_argument("job", metavar="JOB")

    lg = sub.add_parser("logs", parents=[common], help="an instance's logs (default the head)")
    lg.add_argument("job", metavar="JOB")
    lg.add_argument("--instance", type=int, help="instance id (0 is the head)")
    lg.add_argument("--tail", type=int, default=-1, help="last N lines")
    lg.add_argument("-f", "--follow", action="store_true", help="stream until the instance exits")
    lg.add_argument("--verbose", action="store_true", help="the whole log: Ray's start-up output and the runtime's result line too (default: the payload's output and kubepool's lines)")

    w = sub.add_parser("wait", parents=[common], help="wait for a job, showing progress")
    w.add_argument("job", metavar="JOB")
    w.add_argument("--timeout", type=float, default=-1, help="seconds (exit 124 after; default forever)")

    for name, text in (("cancel", "cancel a job (its pods are removed)"), ("delete", "delete a job and its logs")):
        c = sub.add_parser(name, parents=[common], help=text)
        c.add_argument("job", metavar="JOB")

    sub.add_parser("pools", parents=[out], help="compute pools: capacity and use")
    sub.add_parser("local", help="the local cluster (kubepool local --help)", add_help=False)
    return p


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Parse `argv`; what follows the first `--` is returned apart (the script's arguments for `submit`)."""
    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, script_args = argv[:i], argv[i + 1:]
    ns = _parser().parse_args(argv)
    if script_args and ns.command != "submit":
        _parser().error("arguments after `--` are only for `submit`")
    return ns, script_args


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces (kubectl's style)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _env(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {pair!r}: use KEY=VALUE")
        out[key] = value
    return out


def _job(args: argparse.Namespace) -> Any:
    from kubepool.jobs import get_job

    return get_job(args.job, namespace=args.namespace)


def _progress(job_id: str) -> Any:
    last: list[tuple[Any, ...]] = []

    def show(obj: Any) -> None:
        st = obj.status
        key = (st.phase if st else None, st.ready_instances if st else 0, st.reason if st else None)
        if last and last[-1] == key:
            return
        last.append(key)
        target = (st.target_instances if st else None) or obj.spec.resolved_target()
        reason = f" ({key[2]})" if key[2] else ""
        print(f"{time.strftime('%H:%M:%S')} {job_id}: {key[0] or 'PENDING'}, {key[1]}/{target} instances ready{reason}",
              file=sys.stderr, flush=True)

    return show


def _wait(job: Any, timeout: float) -> int:
    status = job.wait(timeout, on_update=_progress(job.id))
    print(status)
    if status != "DONE" and job.message:
        print(f"{job.id}: {job.message}", file=sys.stderr)
    return EXIT_OK if status == "DONE" else EXIT_JOB_FAILED


def cmd_submit(args: argparse.Namespace, script_args: list[str]) -> int:
    from kubepool.jobs import submit_directory, submit_file

    path = Path(args.path)
    common: dict[str, Any] = dict(
        args=script_args, target_instances=args.instances, min_instances=args.min_instances, env_vars=_env(args.env),
        pip_requirements=args.pip, name=args.name, namespace=args.namespace, instances_timeout=args.instances_timeout,
        image=args.image, parallel=args.parallel,
    )
    if path.is_dir():
        if not args.entrypoint:
            raise ValueError(f"{path} is a directory: pass --entrypoint FILE (relative to it)")
        job = submit_directory(path, args.pool, entrypoint=args.entrypoint, **common)
    elif path.is_file():
        if args.entrypoint:
            raise ValueError("--entrypoint is only for a directory")
        job = submit_file(path, args.pool, **common)
    else:
        raise ValueError(f"{path} is neither a file nor a directory")
    print(job.id, flush=True)
    return _wait(job, args.timeout) if args.wait else EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from kubepool.jobs.manager import connect, job_summaries

    rows = job_summaries(connect(args.namespace), limit=args.limit, namespace=args.namespace,
                         all_namespaces=args.all_namespaces)
    if args.output == "json":
        print(json.dumps([asdict(r) for r in rows], indent=1))
    else:
        print(format_table(["NAMESPACE", "NAME", "STATUS", "INSTANCES", "POOL", "CREATED"],
                           [[r.namespace, r.name, r.status, r.instances, r.pool, r.created] for r in rows]))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    job = _job(args)
    obj = job.refresh()
    st = obj.status
    doc = {
        "id": job.id, "status": job.status, "reason": st.reason if st else None, "message": job.message,
        "targetInstances": job.target_instances, "minInstances": job.min_instances,
        "readyInstances": st.ready_instances if st else 0, "pools": st.pools if st else obj.spec.compute_pool,
        "instances": [i.wire() for i in job.instances],
    }
    if args.output == "json":
        print(json.dumps(doc, indent=1))
        return EXIT_OK
    print(f"{job.id}: {doc['status']}" + (f" ({doc['reason']})" if doc["reason"] else ""))
    if doc["message"]:
        print(f"  {doc['message']}")
    print(f"  instances: {doc['readyInstances']}/{doc['targetInstances']} ready, min {doc['minInstances']}, "
          f"pools {doc['pools'] or '-'}")
    rows = [[i.instance_id, i.group, i.host, i.pod, i.node or "-", i.phase or "-", "yes" if i.ready else "no",
             "-" if i.exit_code is None else i.exit_code, i.message or ""] for i in job.instances]
    if rows:
        print(format_table(["ID", "GROUP", "HOST", "POD", "NODE", "PHASE", "READY", "EXIT", "MESSAGE"], rows))
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    job = _job(args)
    if args.follow:
        for line in job.follow_logs(args.instance, verbose=args.verbose):
            print(line, flush=True)
    else:
        text = job.get_logs(args.tail, args.instance, verbose=args.verbose)
        if text:
            print(text)
    return EXIT_OK


def cmd_pools(args: argparse.Namespace) -> int:
    from kubepool.jobs.manager import connect

    pools = sorted(connect(None).list_pools(), key=lambda p: str(p.metadata.get("name", "")))
    docs = []
    for p in pools:
        st, size = p.status, p.spec.instance_size()
        docs.append({
            "name": p.metadata.get("name"), "family": p.spec.instance_family, "phase": st.phase if st else None,
            "cpu": size.cpu, "memory": size.memory, "gpus": size.gpus, "minNodes": p.spec.min_nodes,
            "maxNodes": p.spec.max_nodes, "readyNodes": st.ready_nodes if st else 0,
            "instancesInUse": st.instances_in_use if st else 0, "warmInstances": st.warm_instances if st else 0,
            "runningJobs": st.running_jobs if st else 0, "queuedJobs": st.queued_jobs if st else 0,
            "suspended": p.spec.suspend, "autoSuspendSeconds": p.spec.auto_suspend_seconds,
            "idleSince": st.idle_since if st else None,
        })
    if args.output == "json":
        print(json.dumps(docs, indent=1, default=str))
        return EXIT_OK
    print(format_table(
        ["NAME", "FAMILY", "PHASE", "INSTANCE", "NODES", "IN-USE", "WARM", "MIN", "MAX", "RUNNING", "QUEUED"],
        [[d["name"], d["family"] or "-", d["phase"] or "-", f"{d['cpu']} cpu/{d['memory']}" + (
            f"/{d['gpus']} gpu" if d["gpus"] else ""), d["readyNodes"], d["instancesInUse"], d["warmInstances"],
          d["minNodes"], d["maxNodes"], d["runningJobs"], d["queuedJobs"]] for d in docs]))
    return EXIT_OK


def run(args: argparse.Namespace, script_args: list[str]) -> int:
    """Run one parsed command and return its exit code (errors propagate; `main` maps them)."""
    if args.command == "submit":
        return cmd_submit(args, script_args)
    if args.command == "list":
        return cmd_list(args)
    if args.command == "status":
        return cmd_status(args)
    if args.command == "logs":
        return cmd_logs(args)
    if args.command == "wait":
        return _wait(_job(args), args.timeout)
    if args.command in ("cancel", "delete"):
        job = _job(args)
        if args.command == "cancel":
            job.cancel()
        else:
            job.kube.delete_job(job.name, job.namespace)
        print(f"{job.id}: {args.command} requested")
        return EXIT_OK
    return cmd_pools(args)


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
    from kubepool.kube.errors import KubeError

    try:
        return run(args, script_args)
    except (KubeError, ValueError, OSError, TimeoutError, KeyboardInterrupt) as err:
        message = str(err) or type(err).__name__
        print(f"kubepool: error: {message}", file=sys.stderr)
        return exit_code_for(err)


if __name__ == "__main__":
    sys.exit(main())
