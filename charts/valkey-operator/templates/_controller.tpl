{{/*
What both controllers deploy alike: ServiceAccount, the RBAC scaffolding around each controller's
own rules, the Deployment, the metrics Service, the ServiceMonitor and the PodDisruptionBudget.
Each takes the context described in _helpers.tpl. What differs (the RBAC rules) is written out
in node-controller.yaml and cluster-controller.yaml.
*/}}

{{- define "valkey-operator.serviceAccount" -}}
{{- if .values.serviceAccount.create }}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "valkey-operator.serviceAccountName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
  {{- with .values.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
The controller's own rules (.rules, a YAML list) where it works: a Role in the watched namespace,
or a ClusterRole when it watches every namespace. Bound to its ServiceAccount.
*/}}
{{- define "valkey-operator.workRbac" -}}
{{- $ns := include "valkey-operator.watchNamespace" . }}
{{- $name := ternary (include "valkey-operator.componentName" .) (include "valkey-operator.clusterScopedName" .) (ne $ns "") }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "Role" "ClusterRole" (ne $ns "") }}
metadata:
  name: {{ $name }}
  {{- if $ns }}
  namespace: {{ $ns }}
  {{- end }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
rules:
{{ .rules }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: {{ ternary "RoleBinding" "ClusterRoleBinding" (ne $ns "") }}
metadata:
  name: {{ $name }}
  {{- if $ns }}
  namespace: {{ $ns }}
  {{- end }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {{ ternary "Role" "ClusterRole" (ne $ns "") }}
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "valkey-operator.serviceAccountName" . }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{/*
Leader election: the Lease lives in the release namespace. A Role cannot limit "create" to one
name, so create is granted on leases and get/update only on this controller's own Lease.
*/}}
{{- define "valkey-operator.leaderElectionRbac" -}}
{{- $name := printf "%s-leader-election" (include "valkey-operator.componentName" .) }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ include "valkey-operator.leaseName" . | quote }}]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "valkey-operator.serviceAccountName" . }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{- define "valkey-operator.deployment" -}}
{{- $watch := include "valkey-operator.watchNamespace" . }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "valkey-operator.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
spec:
  replicas: {{ .values.replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "valkey-operator.selectorLabels" . | nindent 6 }}
  # The new pod starts as a standby and takes the Lease when the old one releases it on SIGTERM.
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "valkey-operator.labels" . | nindent 8 }}
        {{- with .values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "valkey-operator.serviceAccountName" . }}
      automountServiceAccountToken: true
      {{- with .root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- with .root.Values.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # A leader releases its Lease on SIGTERM; this leaves it time to finish the pass it is in.
      terminationGracePeriodSeconds: 30
      containers:
        - name: {{ .component }}
          image: {{ include "valkey-operator.image" . | quote }}
          imagePullPolicy: {{ .values.image.pullPolicy }}
          args:
            - --metrics-addr=0.0.0.0:8080
            # Always on, whatever the replicas: a rolling update runs two pods for a while, and
            # two cluster-controllers driving the same Valkey cluster must never both act.
            - --leader-elect
            - --leader-election-namespace={{ .root.Release.Namespace }}
            - --leader-election-id={{ include "valkey-operator.leaseName" . }}
            - --log-format={{ .values.logFormat }}
            - --log-level={{ .values.logLevel }}
            {{- if $watch }}
            - --namespace={{ $watch }}
            {{- end }}
            {{- range .extraArgs }}
            - {{ . }}
            {{- end }}
          env:
            # The Lease holder's identity and the Events' reporting instance.
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: POD_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
          ports:
            - name: metrics
              containerPort: 8080
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /live
              port: metrics
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 3
          # A standby replica is ready too: it serves /metrics and waits for the Lease.
          readinessProbe:
            httpGet:
              path: /ready
              port: metrics
            periodSeconds: 5
            timeoutSeconds: 5
            failureThreshold: 3
          {{- with .values.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .root.Values.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
      {{- with .values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .values.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{- define "valkey-operator.metricsService" -}}
{{- if .values.metrics.service.enabled }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ include "valkey-operator.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "valkey-operator.selectorLabels" . | nindent 4 }}
  ports:
    - name: metrics
      port: 8080
      targetPort: metrics
      protocol: TCP
{{- end }}
{{- end }}

{{- define "valkey-operator.serviceMonitor" -}}
{{- $monitor := .values.metrics.serviceMonitor }}
{{- if $monitor.enabled }}
{{- if not .values.metrics.service.enabled }}
{{- fail (printf "%s.metrics.serviceMonitor needs %s.metrics.service.enabled" (include "valkey-operator.valuesKey" .) (include "valkey-operator.valuesKey" .)) }}
{{- end }}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "valkey-operator.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
    {{- with $monitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "valkey-operator.selectorLabels" . | nindent 6 }}
  namespaceSelector:
    matchNames:
      - {{ .root.Release.Namespace }}
  endpoints:
    - port: metrics
      path: /metrics
      interval: {{ $monitor.interval }}
      scrapeTimeout: {{ $monitor.scrapeTimeout }}
{{- end }}
{{- end }}

{{- define "valkey-operator.podDisruptionBudget" -}}
{{- if .values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "valkey-operator.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "valkey-operator.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "valkey-operator.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/* Everything one controller needs; .rules holds its own RBAC rules. */}}
{{- define "valkey-operator.controller" -}}
{{ include "valkey-operator.serviceAccount" . }}
{{ include "valkey-operator.workRbac" . }}
{{ include "valkey-operator.leaderElectionRbac" . }}
{{ include "valkey-operator.deployment" . }}
{{ include "valkey-operator.metricsService" . }}
{{ include "valkey-operator.serviceMonitor" . }}
{{ include "valkey-operator.podDisruptionBudget" . }}
{{- end }}
