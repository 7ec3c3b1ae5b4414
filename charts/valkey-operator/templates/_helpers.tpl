{{/*
Names and labels. The per-controller templates take a context
{root: $, component: "node-controller"|"cluster-controller", values: that controller's values}.
*/}}

{{- define "valkey-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's prefix: the release name, with the chart name unless it already holds it. */}}
{{- define "valkey-operator.fullname" -}}
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

{{/*
A controller's namespaced resource name: <fullname>-<component>, at most 63 characters so that it
is a valid Service and label value. The component suffix is kept whole when truncating.
*/}}
{{- define "valkey-operator.componentName" -}}
{{- $prefix := include "valkey-operator.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-" }}
{{- printf "%s-%s" $prefix .component }}
{{- end }}

{{/*
Cluster-scoped names (ClusterRole, ClusterRoleBinding) carry the release namespace too, so two
releases of the same name in different namespaces do not collide.
*/}}
{{- define "valkey-operator.clusterScopedName" -}}
{{- printf "%s-%s" .root.Release.Namespace (include "valkey-operator.componentName" .) }}
{{- end }}

{{/* The Lease the controller's replicas elect their leader with, in the release namespace. */}}
{{- define "valkey-operator.leaseName" -}}
{{- include "valkey-operator.componentName" . }}
{{- end }}

{{- define "valkey-operator.serviceAccountName" -}}
{{- if .values.serviceAccount.create }}
{{- default (include "valkey-operator.componentName" .) .values.serviceAccount.name }}
{{- else }}
{{- required (printf "%s.serviceAccount.name is required when serviceAccount.create is false" (include "valkey-operator.valuesKey" .)) .values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* nodeController or clusterController, for messages. */}}
{{- define "valkey-operator.valuesKey" -}}
{{- ternary "nodeController" "clusterController" (eq .component "node-controller") }}
{{- end }}

{{/* The one watched namespace, or "" for all namespaces. */}}
{{- define "valkey-operator.watchNamespace" -}}
{{- $namespaces := .values.watchNamespaces | default list }}
{{- if gt (len $namespaces) 1 }}
{{- fail (printf "%s.watchNamespaces lists %d namespaces; the controller watches one namespace or all of them: install one release per namespace" (include "valkey-operator.valuesKey" .) (len $namespaces)) }}
{{- end }}
{{- first $namespaces | default "" }}
{{- end }}

{{- define "valkey-operator.image" -}}
{{- printf "%s:%s" .values.image.repository (default .root.Chart.AppVersion .values.image.tag) }}
{{- end }}

{{- define "valkey-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "valkey-operator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "valkey-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "valkey-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: valkey-operator
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}
