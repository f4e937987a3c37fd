"""What each subcommand does, on the SDK (`kubepool.jobs`): one function per command, returning its exit code."""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from kubepool import naming
from kubepool.cli.output import MLJOB_KIND, POOL_KIND, Column, render, serialize, table
from kubepool.jobs import manager
from kubepool.kube.errors import NotFound

EXIT_OK, EXIT_JOB_FAILED = 0, 1
LOG_DRAIN_SECONDS = 10.0  # after the job ended, how long `submit --wait` lets the head's last lines arrive

JOB_COLUMNS = (Column("NAMESPACE", lambda d: d["namespace"]), Column("NAME", lambda d: d["name"]),
               Column("STATUS", lambda d: d["status"]), Column("INSTANCES", lambda d: d["instances"]),
               Column("POOL", lambda d: d["pool"]), Column("CREATED", lambda d: d["created"]),
               Column("MESSAGE", lambda d: d["message"], wide=True))
INSTANCE_COLUMNS = (Column("ID", lambda i: i["instanceId"]), Column("GROUP", lambda i: i.get("group")),
                    Column("HOST", lambda i: i.get("host")), Column("POD", lambda i: i.get("pod")),
                    Column("NODE", lambda i: i.get("node") or "-"), Column("PHASE", lambda i: i.get("phase") or "-"),
                    Column("READY", lambda i: "yes" if i.get("ready") else "no"),
                    Column("EXIT", lambda i: "-" if i.get("exitCode") is None else i["exitCode"]),
                    Column("MESSAGE", lambda i: i.get("message") or "", wide=True))
POOL_COLUMNS = (
    Column("NAME", lambda d: d["name"]), Column("FAMILY", lambda d: d["family"] or "-"),
    Column("PHASE", lambda d: d["phase"] or "-"),
    Column("INSTANCE", lambda d: f"{d['cpu']} cpu/{d['memory']}" + (f"/{d['gpus']} gpu" if d["gpus"] else "")),
    Column("NODES", lambda d: d["readyNodes"]), Column("IN-USE", lambda d: d["instancesInUse"]),
    Column("WARM", lambda d: d["warmInstances"]), Column("MIN", lambda d: d["minNodes"]),
    Column("MAX", lambda d: d["maxNodes"]), Column("RUNNING", lambda d: d["runningJobs"]),
    Column("QUEUED", lambda d: d["queuedJobs"]),
    Column("SUSPENDED", lambda d: "yes" if d["suspended"] else "no", wide=True),
    Column("AUTO-SUSPEND", lambda d: f"{d['autoSuspendSeconds']}s" if d["autoSuspendSeconds"] else "-", wide=True),
    Column("IDLE-SINCE", lambda d: d["idleSince"] or "-", wide=True),
)


def session(args: argparse.Namespace) -> Any:
    """The cluster connection the command's flags ask for (kubectl's --kubeconfig, --context, -n)."""
    return manager.connect(getattr(args, "namespace", None), kubeconfig=args.kubeconfig, context=args.context)


def _env(pairs: Iterable[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {pair!r}: use KEY=VALUE")
        out[key] = value
    return out


def _job(args: argparse.Namespace) -> Any:
    return manager.get_job(args.job, namespace=args.namespace, session=session(args))


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


def wait(job: Any, timeout: float) -> int:
    status = job.wait(timeout, on_update=_progress(job.id))
    print(status)
    if status != "DONE" and job.message:
        print(f"{job.id}: {job.message}", file=sys.stderr)
    return EXIT_OK if status == "DONE" else EXIT_JOB_FAILED


def _follow_head(job: Any, done: threading.Event) -> None:
    """Print the head's log lines as they come (the job's progress goes to stderr meanwhile)."""
    try:
        for line in job.follow_logs(0):
            print(line, flush=True)
    except NotFound:  # the job ended before its head started: its status says why
        pass
    finally:
        done.set()


def wait_with_logs(job: Any, timeout: float) -> int:
    done = threading.Event()
    threading.Thread(target=_follow_head, args=(job, done), daemon=True, name="head-logs").start()
    try:
        code = EXIT_OK if job.wait(timeout, on_update=_progress(job.id)) == "DONE" else EXIT_JOB_FAILED
    finally:
        done.wait(LOG_DRAIN_SECONDS)
    print(job.status)
    if code and job.message:
        print(f"{job.id}: {job.message}", file=sys.stderr)
    return code


def cmd_submit(args: argparse.Namespace, script_args: list[str]) -> int:
    path = Path(args.path)
    common: dict[str, Any] = dict(
        args=script_args, target_instances=args.instances, min_instances=args.min_instances, env_vars=_env(args.env),
        pip_requirements=args.pip, name=args.name, namespace=args.namespace, instances_timeout=args.instances_timeout,
        image=args.image, parallel=args.parallel, session=session(args),
    )
    if path.is_dir():
        if not args.entrypoint:
            raise ValueError(f"{path} is a directory: pass --entrypoint FILE (relative to it)")
        job = manager.submit_directory(path, args.pool, entrypoint=args.entrypoint, **common)
    elif path.is_file():
        if args.entrypoint:
            raise ValueError("--entrypoint is only for a directory")
        job = manager.submit_file(path, args.pool, **common)
    else:
        raise ValueError(f"{path} is neither a file nor a directory")
    print(job.id, flush=True)
    if not args.wait:
        return EXIT_OK
    return wait(job, args.timeout) if args.no_logs else wait_with_logs(job, args.timeout)


def cmd_list(args: argparse.Namespace) -> int:
    rows = manager.job_summaries(session(args), limit=args.limit, namespace=args.namespace,
                                 all_namespaces=args.all_namespaces)
    print(render([asdict(r) for r in rows], args.output, JOB_COLUMNS, MLJOB_KIND))
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    job = _job(args)
    obj = job.refresh()
    st = obj.status
    doc = {
        "id": job.id, "name": job.name, "namespace": job.namespace, "status": job.status,
        "reason": st.reason if st else None, "message": job.message,
        "targetInstances": job.target_instances, "minInstances": job.min_instances,
        "readyInstances": st.ready_instances if st else 0, "pools": st.pools if st else obj.spec.compute_pool,
        "instances": [i.wire() for i in job.instances],
    }
    if args.output in ("json", "yaml"):
        print(serialize(doc, args.output))
        return EXIT_OK
    if args.output == "name":
        print(f"{MLJOB_KIND}/{job.name}")
        return EXIT_OK
    print(f"{job.id}: {doc['status']}" + (f" ({doc['reason']})" if doc["reason"] else ""))
    if doc["message"]:
        print(f"  {doc['message']}")
    print(f"  instances: {doc['readyInstances']}/{doc['targetInstances']} ready, min {doc['minInstances']}, "
          f"pools {doc['pools'] or '-'}")
    if doc["instances"]:
        print(table(doc["instances"], INSTANCE_COLUMNS, wide=args.output == "wide"))
    return EXIT_OK


def _instance_ids(job: Any) -> list[int]:
    return [i.instance_id for i in job.instances] or list(range(job.target_instances or 1))


def _merged(streams: dict[str, Iterator[str]]) -> Iterator[str]:
    """Lines of several instances' streams as they arrive, each prefixed with its instance's host."""
    lines: queue.Queue[tuple[str, str | None]] = queue.Queue()

    def pump(prefix: str, stream: Iterator[str]) -> None:
        try:
            for line in stream:
                lines.put((prefix, line))
        except NotFound as e:
            lines.put((prefix, f"kubepool: {e}"))
        finally:
            lines.put((prefix, None))

    for prefix, stream in streams.items():
        threading.Thread(target=pump, args=(prefix, stream), daemon=True, name=f"logs-{prefix}").start()
    open_streams = len(streams)
    while open_streams:
        prefix, line = lines.get()
        if line is None:
            open_streams -= 1
        else:
            yield f"[{prefix}] {line}"


def cmd_logs(args: argparse.Namespace) -> int:
    job = _job(args)
    if args.all:
        ids = _instance_ids(job)
        if args.follow:
            streams = {naming.sagemaker_host(i): iter(job.follow_logs(i, verbose=args.verbose)) for i in ids}
            for line in _merged(streams):
                print(line, flush=True)
            return EXIT_OK
        for i in ids:
            for line in job.get_logs(args.tail, i, as_list=True, verbose=args.verbose):
                print(f"[{naming.sagemaker_host(i)}] {line}")
        return EXIT_OK
    if args.follow:
        for line in job.follow_logs(args.instance, verbose=args.verbose):
            print(line, flush=True)
    else:
        text = job.get_logs(args.tail, args.instance, verbose=args.verbose)
        if text:
            print(text)
    return EXIT_OK


def cmd_pools(args: argparse.Namespace) -> int:
    pools = sorted(session(args).list_pools(), key=lambda p: str(p.metadata.get("name", "")))
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
    print(render(docs, args.output, POOL_COLUMNS, POOL_KIND))
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    doc: dict[str, Any] = {"clientVersion": metadata.version("kubepool"), "python": sys.version.split()[0]}
    if not args.client:
        try:
            doc["serverApiVersions"] = session(args).served_api_versions()
        except NotFound:
            doc["serverApiVersions"] = []  # reachable, but kubepool's CRDs are not installed
    if args.output != "text":
        print(serialize(doc, args.output))
        return EXIT_OK
    print(f"Client Version: {doc['clientVersion']} (Python {doc['python']})")
    if not args.client:
        served = ", ".join(doc["serverApiVersions"]) or "none: kubepool's CRDs are not installed in this cluster"
        print(f"Server API: {served}")
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    from kubepool.cli import completion, parser

    print(completion.script(parser.build(), args.shell), end="")
    return EXIT_OK


def run(args: argparse.Namespace, script_args: list[str]) -> int:
    """Run one parsed command and return its exit code (errors propagate; `main` maps them)."""
    simple = {"list": cmd_list, "status": cmd_status, "logs": cmd_logs, "pools": cmd_pools,
              "version": cmd_version, "completion": cmd_completion}
    if args.command == "submit":
        return cmd_submit(args, script_args)
    if args.command in simple:
        return simple[args.command](args)
    job = _job(args)
    if args.command == "wait":
        return wait(job, args.timeout)
    if args.command in ("cancel", "suspend", "resume"):
        getattr(job, args.command)()
    else:
        job.kube.delete_job(job.name, job.namespace)
    print(f"{job.id}: {args.command} requested")
    return EXIT_OK

