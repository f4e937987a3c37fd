"""kubepool's own kubelet: a Python agent that registers a Kubernetes Node and runs its pods as local processes.

Entry point: `python -m kubepool.local.agent --state-dir DIR --node NAME` (see `__main__`). Modules:
`config` (node config, cluster info, on-disk layout), `ipam` (pod IPs), `podspec` (pure pod → process spec,
env, mounts, hosts file, status), `sandbox` (the per-container supervisor, run as a stdlib-only script inside
the container's namespaces), `volumes` (materialising volumes), `runner` (starting/stopping/adopting container
processes), `probes` (startup/liveness/readiness), `pods` (one pod's lifecycle), `node` (Node registration,
Lease, status), `cache` (list+watch caches), `logs_server` (the kubelet HTTPS API for `kubectl logs`),
`agent` (wiring). See docs/local-nodes.md.
"""
