{{/* Chart name, truncated to 63 characters: Kubernetes names and label values allow no more. */}}
{{- define "kubepool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name, plus the chart name unless the release name already contains it. */}}
{{- define "kubepool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kubepool.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource of the release (commonLabels first: the chart's own win a clash). */}}
{{- define "kubepool.labels" -}}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
helm.sh/chart: {{ include "kubepool.chart" . }}
{{ include "kubepool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubepool
{{- end }}

{{/* The operator's replica count: `replicaCount` (other charts' name) when set, else `replicas`. */}}
{{- define "kubepool.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount }}{{ int .Values.replicas }}{{ else }}{{ int .Values.replicaCount }}{{ end }}
{{- end }}

{{/* Labels of the `helm test` objects: the release's, but not the operator's component (selectors and
monitors must never pick the test pod). */}}
{{- define "kubepool.testLabels" -}}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
helm.sh/chart: {{ include "kubepool.chart" . }}
app.kubernetes.io/name: {{ include "kubepool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubepool
{{- end }}

{{/* Selector labels: never change them, a Deployment's selector is immutable. */}}
{{- define "kubepool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubepool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The SageMaker API server's labels: the release's, with its own component (never the operator's, whose
Deployment selects by it). */}}
{{- define "kubepool.sagemakerApiSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kubepool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: sagemaker-api
{{- end }}

{{- define "kubepool.sagemakerApiLabels" -}}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
helm.sh/chart: {{ include "kubepool.chart" . }}
{{ include "kubepool.sagemakerApiSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubepool
{{- end }}

{{- define "kubepool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kubepool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kubepool.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The runtime image is published beside the operator's (same registry path, same tag): a mirror that moves
image.repository (and image.tag) moves the job instances' image with it. */}}
{{- define "kubepool.runtimeRepository" -}}
{{- printf "%s/runtime" (dir .Values.image.repository) }}
{{- end }}

{{- define "kubepool.runtimeImage" -}}
{{- default (printf "%s:%s" (include "kubepool.runtimeRepository" .) (default .Chart.AppVersion .Values.image.tag)) .Values.operator.runtimeImage }}
{{- end }}

{{/* The CUDA variant goes with the chart's own runtime image; a runtime image of the user's own is used on GPU
pools too unless gpuRuntimeImage names another. */}}
{{- define "kubepool.gpuRuntimeImage" -}}
{{- if .Values.operator.gpuRuntimeImage }}{{ .Values.operator.gpuRuntimeImage }}
{{- else if not .Values.operator.runtimeImage }}{{ printf "%s:%s-cuda" (include "kubepool.runtimeRepository" .) (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Namespaces that get a Role with rbac.namespaced: the watched ones, plus the release's own for the
operator's Lease and Events. */}}
{{- define "kubepool.roleNamespaces" -}}
{{- $namespaces := .Values.operator.watchNamespaces | default list }}
{{- if not (has .Release.Namespace $namespaces) }}
{{- $namespaces = append $namespaces .Release.Namespace }}
{{- end }}
{{- toJson $namespaces }}
{{- end }}

{{/* Namespace of the warm-capacity placeholder pods: as set, else the release's if watched, else the first
watched one (the operator must watch it). */}}
{{- define "kubepool.placeholderNamespace" -}}
{{- $watched := .Values.operator.watchNamespaces | default list }}
{{- if .Values.operator.placeholderNamespace }}
{{- .Values.operator.placeholderNamespace }}
{{- else if or (empty $watched) (has .Release.Namespace $watched) }}
{{- .Release.Namespace }}
{{- else }}
{{- first $watched }}
{{- end }}
{{- end }}

{{/*
Cross-key checks the schema cannot express. Collects every problem and fails once, so a user fixes all of
them in one round.
*/}}
{{- define "kubepool.validateValues" -}}
{{- $messages := list }}
{{- if and .Values.rbac.namespaced (empty .Values.operator.watchNamespaces) }}
{{- $messages = append $messages "rbac.namespaced: true needs operator.watchNamespaces (the namespaces that get a Role)" }}
{{- end }}
{{- if and (eq .Values.operator.defaultBackend "kuberay") (not .Values.rbac.kuberay) }}
{{- $messages = append $messages "operator.defaultBackend: kuberay needs rbac.kuberay: true (the operator creates RayClusters)" }}
{{- end }}
{{- if and (gt (int (include "kubepool.replicas" .)) 1) (not .Values.operator.leaderElection) }}
{{- $messages = append $messages (printf "replicas: %v needs operator.leaderElection: true (replicas without it would race on the same MLJobs)" (include "kubepool.replicas" .)) }}
{{- end }}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.health.port)) }}
{{- $messages = append $messages (printf "metrics.port and health.port must differ (both are %v)" .Values.metrics.port) }}
{{- end }}
{{- $watched := .Values.operator.watchNamespaces | default list }}
{{- if and .Values.operator.placeholderNamespace $watched (not (has .Values.operator.placeholderNamespace $watched)) }}
{{- $messages = append $messages (printf "operator.placeholderNamespace %q must be one of operator.watchNamespaces (the operator follows its placeholders there)" .Values.operator.placeholderNamespace) }}
{{- end }}
{{- $poolNames := list }}
{{- range .Values.pools }}
{{- if has .name $poolNames }}
{{- $messages = append $messages (printf "pools: duplicate name %q" .name) }}
{{- end }}
{{- $poolNames = append $poolNames .name }}
{{- if and (not .spec.instanceFamily) (not .spec.resources) }}
{{- $messages = append $messages (printf "pools[%s]: set spec.instanceFamily or spec.resources" .name) }}
{{- end }}
{{- $min := ternary .spec.minNodes 1 (hasKey .spec "minNodes") }}
{{- $max := ternary .spec.maxNodes 1 (hasKey .spec "maxNodes") }}
{{- if gt (int $min) (int $max) }}
{{- $messages = append $messages (printf "pools[%s]: spec.minNodes must not exceed spec.maxNodes" .name) }}
{{- end }}
{{- end }}
{{- if $messages }}
{{- printf "\nVALUES VALIDATION:\n  - %s" (join "\n  - " $messages) | fail }}
{{- end }}
{{- end }}
