{{/*
The operator's permissions: ONE rule set, rendered into the ClusterRole and into the per-namespace Roles
(rbac.namespaced). Call with (dict "ctx" $ "scope" S), S one of:
  all        - everything, for the cluster-wide ClusterRole
  cluster    - only cluster-scoped resources (a Role cannot grant them)
  namespaced - only namespaced resources, for a Role
No wildcards anywhere; tests/chart checks that.
*/}}
{{- define "kubepool.rules" -}}
{{- $v := .ctx.Values }}
{{- if ne .scope "cluster" }}
# Every right below is used by the code (kube/aio.py, kopf's watches and patches); children go with their job
# through owner references (the garbage collector deletes them, not the operator). The list is checked against
# the API server in tests/chart/test_operator_rights.py.
# Application: the MLJobs it reconciles (kopf lists and watches them); delete is for spec.ttlSecondsAfterFinished.
# get and patch are also what the runtime's Role grants, and RBAC lets the operator grant only what it holds.
- apiGroups: [kubepool.dev]
  resources: [mljobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [kubepool.dev]
  resources: [mljobs/status]
  verbs: [patch]
# Application: instance pods (watched; created, deleted one by one).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, create, delete]
# Application: the per-job headless Service (created if absent; watched, so a deleted one is created again; read
# after a create's conflict: an earlier same-name job's Service is waited for, never taken as the job's own).
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create]
# Application: the runtime's ServiceAccount (server-side applied).
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [create, patch]
# Application: each job's Secret of its contract and Ray token (created if absent; its contract key patched by a
# JSON patch that first tests the job owns it), and the metadata of a channel's credentialsSecret (its opt-in
# label). Never list/watch: that would read every Secret in the namespace.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch]
# Application: the access modes of a job's output and checkpoint claims (a job of several instances needs them
# ReadWriteMany).
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get]
# Application: the Role and RoleBinding of the runtime's ServiceAccount (server-side applied).
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [create, patch]
# Application: the EndpointSlice of each job's headless Service (the Service has no selector: the operator
# writes its endpoints once per change of the job's addresses; applied, never read; GC deletes them).
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [create, patch]
# Application: the per-job NetworkPolicy that keeps Ray's ports inside the job (created if absent; watched and
# read like the Service).
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create]
{{- if $v.operator.kueue }}
# Kueue's Workloads of queued MLJobs: written, read, marked finished (or their quota given back on eviction).
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [get, list, watch, create, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [patch]
# The ResourceFlavors an admission assigns (their nodeLabels and tolerations reach the instances).
- apiGroups: [kueue.x-k8s.io]
  resources: [resourceflavors]
  verbs: [get]
{{- end }}
{{- if $v.rbac.kuberay }}
# Application: RayClusters of jobs with backend kuberay (server-side applied; deleted when the job ends).
- apiGroups: [ray.io]
  resources: [rayclusters]
  verbs: [create, patch, delete]
# Application: KubeRay's pods carry kubepool's finalizer until the operator has seen their exit.
- apiGroups: [""]
  resources: [pods]
  verbs: [patch]
{{- end }}
{{- if $v.operator.peering }}
# Framework: kopf's namespaced peering objects (the operator creates its own at startup: main.ensure_peering).
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, create, patch]
{{- end }}
{{- end }}
{{- if ne .scope "namespaced" }}
# Application: ComputePools it reconciles (cluster-scoped; watched, only their status written).
- apiGroups: [kubepool.dev]
  resources: [computepools]
  verbs: [list, watch]
- apiGroups: [kubepool.dev]
  resources: [computepools/status]
  verbs: [patch]
# Application: nodes, to report each pool's ready capacity (watched).
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch]
{{- if $v.operator.warmCapacity }}
# Application: the PriorityClass of warm-capacity placeholder pods (kubepool-placeholder), created if absent at
# the first placeholder; never read, changed or deleted.
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [create]
{{- end }}
# Framework: kopf scans CRDs for the resources it serves; the operator also detects KubeRay's.
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
# Framework: kopf follows namespaces to match the watched ones.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [list, watch]
# The operator posts (never patches) Events about the jobs and pools it handles (kopf about its handlers' failures); those
# of cluster-scoped ComputePools land in `default`, so this stays cluster-wide in both RBAC modes.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- if $v.operator.peering }}
# Framework: kopf's cluster-wide peering objects (created at startup as above).
- apiGroups: [kopf.dev]
  resources: [clusterkopfpeerings]
  verbs: [get, list, watch, create, patch]
{{- end }}
{{- end }}
{{- end }}
