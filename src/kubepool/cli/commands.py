"""What each subcommand does, on the SDK (`kubepool.jobs`): one function per command, returning its exit code."""

from __future__ import annotations

import argparse
import copy
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

from kubepool import naming
from kubepool.cli.output import MLJOB_KIND, POOL_KIND, Column, Doc, render, render_objects, serialize, table
from kubepool.jobs import manager
from kubepool.kube.errors import KubeError, NotFound
from kubepool.kube.sync import Kube

EXIT_OK, EXIT_JOB_FAILED = 0, 1
LOG_DRAIN_SECONDS = 10.0  # after the job ended, how long `submit --wait` lets the head's last lines arrive
WATCH_POLL_SECONDS = 1.0  # `-w`: how often the objects are read again
TERMINAL = ("DONE", "FAILED", "CANCELLED")

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


def _env(pairs: Iterable[str], flag: str = "--env") -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} {pair!r}: use KEY=VALUE")
        out[key] = value
    return out


def _labels(args: argparse.Namespace) -> dict[str, str]:
    labels = _env(args.label, "--label")
    if args.queue:
        labels[naming.LABEL_KUEUE_QUEUE] = args.queue
    return labels


class _Captured(Exception):
    def __init__(self, job: Any) -> None:
        super().__init__("dry run")
        self.job = job


def _capture(self: Any, job: Any, namespace: str | None = None) -> Any:
    raise _Captured(job)


def _dry_run(kube: Kube) -> Kube:
    """The session of `submit --dry-run`: the same connection, reading what a submission reads (the pool, its
    image), whose MLJob create hands the object back instead; nothing is written."""
    dry = copy.copy(kube)
    dry.__class__ = type(f"DryRun{type(kube).__name__}", (type(kube),), {"create_job": _capture})
    return dry


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
        image=args.image, parallel=args.parallel, session=session(args), labels=_labels(args),
    )
    if args.dry_run:
        common["session"] = _dry_run(common["session"])
    try:
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
    except _Captured as dry:
        print(serialize(dry.job.wire(), args.output or "yaml"))
        return EXIT_OK
    print(job.id, flush=True)
    if not args.wait:
        return EXIT_OK
    return wait(job, args.timeout) if args.no_logs else wait_with_logs(job, args.timeout)


def _whole(fmt: str) -> bool:
    """Whether `-o fmt` prints whole objects (kubectl get's json, yaml, jsonpath, custom-columns)."""
    return fmt in ("json", "yaml") or "=" in fmt


def _emit(text: str, fmt: str) -> None:
    print(text, end="" if fmt.startswith("jsonpath=") else "\n", flush=True)  # kubectl adds no newline to jsonpath


def watch(read: Callable[[], list[Doc]], key: Callable[[Doc], Any], show: Callable[[list[Doc], bool], None],
          until: Callable[[list[Doc]], bool] = lambda _: False) -> None:
    """kubectl's `-w`: show what `read` returns, then, each time it is read again, the documents that changed
    (`show(docs, first)`), until `until` holds for the latest reading (or the user interrupts)."""
    seen: dict[Any, Doc] = {}
    first = True
    while True:
        docs = read()
        changed = [d for d in docs if seen.get(key(d)) != d]
        seen = {key(d): d for d in docs}
        if changed or first:
            show(changed, first)
            first = False
        if until(docs):
            return
        time.sleep(WATCH_POLL_SECONDS)


def _job_objects(args: argparse.Namespace, kube: Any) -> list[Doc]:
    """The jobs as whole objects, in the API server's order (namespace, name) as `kubectl get` lists them;
    `--limit` keeps the newest."""
    objs = kube.list_jobs(args.namespace, args.all_namespaces)
    if args.limit > 0:
        objs = sorted(objs, key=lambda o: str(o.metadata.get("creationTimestamp", "")), reverse=True)[:args.limit]
    docs = [o.wire() for o in objs]
    return sorted(docs, key=lambda d: (d["metadata"].get("namespace", ""), d["metadata"].get("name", "")))


def cmd_list(args: argparse.Namespace) -> int:
    kube = session(args)
    if _whole(args.output):
        def read() -> list[Doc]:
            return _job_objects(args, kube)

        def show(docs: list[Doc], first: bool) -> None:
            if first:
                _emit(render_objects(docs, args.output), args.output)
            else:  # each change as one object, as kubectl get -w prints them
                for d in docs:
                    _emit(render_objects([d], args.output, single=True), args.output)
    else:
        def read() -> list[Doc]:
            rows = manager.job_summaries(kube, limit=args.limit, namespace=args.namespace,
                                         all_namespaces=args.all_namespaces)
            return [asdict(r) for r in rows]

        def show(docs: list[Doc], first: bool) -> None:
            text = render(docs, args.output, JOB_COLUMNS, MLJOB_KIND)
            if not first and args.output in ("table", "wide"):
                text = "\n".join(text.splitlines()[1:])  # the header once, as kubectl -w
            if text:
                print(text, flush=True)
    if args.watch:
        watch(read, lambda d: (d.get("metadata", d).get("namespace"), d.get("metadata", d).get("name")), show)
    else:
        show(read(), True)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    job = _job(args)
    if not args.watch:
        return _status_once(args, job, job.refresh())
    latest: list[Any] = []

    def read() -> list[Doc]:
        latest[:] = [job.refresh()]
        return [latest[0].wire()]

    def show(docs: list[Doc], first: bool) -> None:
        _status_once(args, job, latest[0])

    # Unlike kubectl's -w, it ends with the job: an ended job does not change any more.
    watch(read, lambda d: "job", show, until=lambda docs: job.status in TERMINAL)
    return EXIT_OK


def _status_once(args: argparse.Namespace, job: Any, obj: Any) -> int:
    if "=" in args.output:
        _emit(render_objects([obj.wire()], args.output, single=True), args.output)
        return EXIT_OK
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


_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def duration_seconds(text: str) -> int:
    """kubectl's --since: a Go duration of hours, minutes and seconds (`90s`, `5m`, `1h30m`), at least 1 s."""
    m = _DURATION.fullmatch(text)
    if not text or not m:
        raise ValueError(f"--since {text!r}: use a duration such as 30s, 5m or 1h")
    seconds = int(m[1] or 0) * 3600 + int(m[2] or 0) * 60 + int(m[3] or 0)
    return max(seconds, 1)


def cmd_logs(args: argparse.Namespace) -> int:
    when = {"verbose": args.verbose, "timestamps": args.timestamps,
            "since_seconds": duration_seconds(args.since) if args.since else None}
    job = _job(args)
    if args.all:
        ids = _instance_ids(job)
        if args.follow:
            streams = {naming.sagemaker_host(i): iter(job.follow_logs(i, **when)) for i in ids}
            for line in _merged(streams):
                print(line, flush=True)
            return EXIT_OK
        for i in ids:
            for line in job.get_logs(args.tail, i, as_list=True, **when):
                print(f"[{naming.sagemaker_host(i)}] {line}")
        return EXIT_OK
    if args.follow:
        for line in job.follow_logs(args.instance, **when):
            print(line, flush=True)
    else:
        text = job.get_logs(args.tail, args.instance, **when)
        if text:
            print(text)
    return EXIT_OK


def cmd_pools(args: argparse.Namespace) -> int:
    pools = sorted(session(args).list_pools(), key=lambda p: str(p.metadata.get("name", "")))
    if _whole(args.output):
        _emit(render_objects([p.wire() for p in pools], args.output), args.output)
        return EXIT_OK
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


_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


def dashboard_server(job: Any, pod: str, address: str, port: int) -> ThreadingHTTPServer:
    """A local HTTP server whose every request goes to the job's Ray dashboard on its head pod, through the API
    server's pod proxy (the user's own credentials; no route to the pod network needed)."""
    kube, namespace = job.kube, job.namespace
    # Ray's dashboard asks for the job's token; proxies pass it in its own header (the browser never sees it).
    # A job without the Secret runs Ray without token authentication.
    try:
        token: str | None = kube.secret_value(naming.job_secret_name(job.name), naming.RAY_TOKEN_KEY, namespace)
    except NotFound:
        token = None

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_HEADERS}
            if token is not None:
                headers["X-Ray-Authorization"] = f"Bearer {token}"
            try:
                status, out_headers, content = kube.pod_proxy(pod, naming.RAY_DASHBOARD_PORT, self.path,
                                                             method=self.command, body=body, headers=headers,
                                                             namespace=namespace)
            except KubeError as err:
                status, out_headers, content = 502, {"content-type": "text/plain"}, str(err).encode()
            self.send_response(status)
            for key, value in out_headers.items():
                if key.lower() not in _HOP_HEADERS:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the terminal is the user's
            pass

    return ThreadingHTTPServer((address, port), Forward)


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`kubectl ray session`'s habit: a local port that answers as the job's Ray dashboard, until interrupted."""
    job = _job(args)
    try:
        job.get_ray_dashboard_url()  # refuses a job that runs no dashboard
    except RuntimeError as err:
        raise ValueError(str(err)) from None
    head = next((i.pod for i in job.instances if i.instance_id == 0 and i.pod and i.phase == "Running"), None)
    if job.status != "RUNNING" or head is None:
        raise NotFound(f"job {job.id} is {job.status}: its Ray dashboard is served while its head runs", 404)
    server = dashboard_server(job, head, args.address, args.port)
    port = server.server_address[1]
    print(f"Ray dashboard of {job.id}: http://{args.address}:{port} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return EXIT_OK


def cmd_completion(args: argparse.Namespace) -> int:
    from kubepool.cli import completion, parser

    print(completion.script(parser.build(), args.shell), end="")
    return EXIT_OK


def run(args: argparse.Namespace, script_args: list[str]) -> int:
    """Run one parsed command and return its exit code (errors propagate; `main` maps them)."""
    simple = {"list": cmd_list, "status": cmd_status, "logs": cmd_logs, "pools": cmd_pools,
              "version": cmd_version, "completion": cmd_completion, "dashboard": cmd_dashboard}
    if args.command == "submit":
        return cmd_submit(args, script_args)
    if args.command == "sagemaker":
        from kubepool.cli.sagemaker import cmd_sagemaker

        return cmd_sagemaker(args, session(args))
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

