"""Container probes (exec, tcpSocket, httpGet) for startup, liveness and readiness, with the kubelet's
thresholds (`Prober`). Exec probes run in the container's mount and UTS namespaces (nsenter
into its supervisor) with its environment; network probes target the pod IP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

Obj = dict[str, Any]


@dataclass(frozen=True)
class ProbeTiming:
    initial_delay_s: float
    period_s: float
    timeout_s: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, probe: Obj) -> ProbeTiming:
        return cls(
            initial_delay_s=float(probe.get("initialDelaySeconds", 0)),
            period_s=float(probe.get("periodSeconds", 10)),
            timeout_s=float(probe.get("timeoutSeconds", 1)),
            success_threshold=int(probe.get("successThreshold", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
        )


def resolve_port(port: int | str, container: Obj) -> int:
    """A probe port by number or by the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"container has no port named {port!r}")


async def probe_once(
    probe: Obj, container: Obj, pod_ip: str, supervisor_pid: int, env: Mapping[str, str]
) -> bool:
    timeout = ProbeTiming.of(probe).timeout_s
    try:
        if "exec" in probe:
            nsenter = ["nsenter", "-t", str(supervisor_pid), "-m", "-u", "--"]
            proc = await asyncio.create_subprocess_exec(
                *nsenter, *probe["exec"]["command"], env=dict(env),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                return await asyncio.wait_for(proc.wait(), timeout) == 0
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return False
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            _, writer = await asyncio.wait_for(asyncio.open_connection(t.get("host") or pod_ip, resolve_port(t["port"], container)), timeout)  # fmt: skip
            writer.close()
            return True
        if "httpGet" in probe:
            h = probe["httpGet"]
            scheme = str(h.get("scheme") or "HTTP").lower()
            url = f"{scheme}://{h.get('host') or pod_ip}:{resolve_port(h['port'], container)}{h.get('path') or '/'}"
            headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
                async with session.get(
                    url, headers=headers, ssl=False
                ) as r:  # no verification, as the kubelet
                    return 200 <= r.status < 400
    except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
        return False
    return True  # gRPC probes are not run: passing beats restarting a healthy container forever


class Prober:
    """One probe of one container run: `readiness` reports changes until cancelled, `startup` settles on
    success or failure, `until_failed` returns once a liveness probe has failed often enough."""

    def __init__(self, probe: Obj, container: Obj, pod_ip: str, pid: int, env: Mapping[str, str]) -> None:
        self.probe, self.container, self.pod_ip, self.pid, self.env = probe, container, pod_ip, pid, env
        self.timing = ProbeTiming.of(probe)

    async def _results(self) -> AsyncIterator[bool]:
        await asyncio.sleep(self.timing.initial_delay_s)
        while True:
            yield await probe_once(self.probe, self.container, self.pod_ip, self.pid, self.env)
            await asyncio.sleep(self.timing.period_s)

    async def readiness(self, on_change: Callable[[bool], None]) -> None:
        ready, streak = False, 0
        async for ok in self._results():
            streak = streak + 1 if ok == (not ready) else 0
            if streak >= (self.timing.success_threshold if not ready else self.timing.failure_threshold):
                ready, streak = not ready, 0
                on_change(ready)

    async def startup(self) -> bool:
        """True at the first success, False after failureThreshold failures in a row."""
        failures = 0
        async for ok in self._results():
            if ok:
                return True
            failures += 1
            if failures >= self.timing.failure_threshold:
                return False
        return False

    async def until_failed(self) -> None:
        failures = 0
        async for ok in self._results():
            failures = 0 if ok else failures + 1
            if failures >= self.timing.failure_threshold:
                return
