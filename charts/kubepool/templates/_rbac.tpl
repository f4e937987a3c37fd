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
# Application: the MLJobs it reconciles; delete is for spec.ttlSecondsAfterFinished.
- apiGroups: [kubepool.dev]
  resources: [mljobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [kubepool.dev]
  resources: [mljobs/status]
  verbs: [get, patch]
# Application: instance pods, and their logs for the job's result. The runtime's Role the operator creates
# (per namespace, or per job) lets the runtime read pods and get/patch MLJobs; RBAC only lets it grant what it
# holds itself.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, delete, deletecollection]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# Application: per-job headless Service, contract/payload ConfigMaps and the runtime's ServiceAccount.
- apiGroups: [""]
  resources: [services, configmaps, serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
# Application: per-job Ray token Secrets. Never list/watch: that would read every Secret in the namespace.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, delete]
# Application: the Role and RoleBinding of the runtime's ServiceAccount.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
# Application: the EndpointSlice of each job's headless Service (the Service has no selector: the operator
# writes its endpoints once per change of the job's addresses; applied, never read; GC deletes them).
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [create, patch]
# Application: the per-job NetworkPolicy that keeps Ray's ports inside the job.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
{{- if $v.rbac.kuberay }}
# Application: RayClusters of jobs with backend kuberay.
- apiGroups: [ray.io]
  resources: [rayclusters]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [ray.io]
  resources: [rayclusters/status]
  verbs: [get]
# Application: KubeRay's pods carry kubepool's finalizer until the operator has seen their exit.
- apiGroups: [""]
  resources: [pods]
  verbs: [patch]
{{- end }}
# Framework: the operator's Lease (kopf peering or leader lease).
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
{{- if $v.operator.peering }}
# Framework: kopf's namespaced peering objects.
- apiGroups: [kopf.dev]
  resources: [kopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}
{{- if ne .scope "namespaced" }}
# Application: ComputePools it reconciles (cluster-scoped).
- apiGroups: [kubepool.dev]
  resources: [computepools]
  verbs: [get, list, watch, patch]
- apiGroups: [kubepool.dev]
  resources: [computepools/status]
  verbs: [get, patch]
# Application: nodes, to report each pool's ready capacity.
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
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
# Framework: kopf posts Events about the objects it handles; those of cluster-scoped ComputePools land in
# `default`, so this stays cluster-wide in both RBAC modes.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- if $v.operator.peering }}
# Framework: kopf's cluster-wide peering objects.
- apiGroups: [kopf.dev]
  resources: [clusterkopfpeerings]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}
{{- end }}
