{{/*
Helpers of the warmscale chart. Object names are fixed (warmscale-scaler, warmscale-controller, ...):
the processes find each other, their Secrets and their webhook configuration by these names, and the
cluster-scoped ones (ClusterRoles, the PriorityClass, the webhook configuration) allow one install
per cluster.
*/}}

{{- define "warmscale.chart" -}}
{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of every object: (dict "ctx" $ "name" "warmscale-scaler" "component" "scaler"); name optional. */}}
{{- define "warmscale.labels" -}}
{{- $l := dict "app.kubernetes.io/part-of" "warmscale" "app.kubernetes.io/instance" .ctx.Release.Name
    "app.kubernetes.io/managed-by" .ctx.Release.Service "app.kubernetes.io/version" .ctx.Chart.AppVersion
    "helm.sh/chart" (include "warmscale.chart" .ctx) }}
{{- with .name }}{{ $_ := set $l "app.kubernetes.io/name" . }}{{ end }}
{{- with .component }}{{ $_ := set $l "app.kubernetes.io/component" . }}{{ end }}
{{- toYaml $l }}
{{- end }}

{{/* The labels of a pod template: the object's labels and the component's podLabels (which cannot
replace the selector's app.kubernetes.io/name). */}}
{{- define "warmscale.podLabels" -}}
{{- $l := include "warmscale.labels" . | fromYaml }}
{{- toYaml (merge $l (.values.podLabels | default dict)) }}
{{- end }}

{{/* Pod annotations: the component's podAnnotations ("" when none). */}}
{{- define "warmscale.podAnnotations" -}}
{{- with .values.podAnnotations }}
{{- dict "annotations" . | toYaml }}
{{- end }}
{{- end }}

{{/* Scheduling and pull settings of a pod spec ("" when none): (dict "ctx" $ "values" .Values.scaler) */}}
{{- define "warmscale.podScheduling" -}}
{{- $s := dict }}
{{- with .ctx.Values.imagePullSecrets }}{{ $_ := set $s "imagePullSecrets" . }}{{ end }}
{{- with .values.priorityClassName }}{{ $_ := set $s "priorityClassName" . }}{{ end }}
{{- with .values.nodeSelector }}{{ $_ := set $s "nodeSelector" . }}{{ end }}
{{- with .values.tolerations }}{{ $_ := set $s "tolerations" . }}{{ end }}
{{- with .values.affinity }}{{ $_ := set $s "affinity" . }}{{ end }}
{{- if $s }}{{ toYaml $s }}{{ end }}
{{- end }}

{{- define "warmscale.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Serving certificates: the controller's own CA (default) or cert-manager's. */}}
{{- define "warmscale.selfManagedCerts" -}}
{{- if not .Values.certManager.enabled }}true{{ end }}
{{- end }}

{{/*
KEDA is a prerequisite. When the chart is rendered against a cluster (install, upgrade, template
--validate) the API versions come from its discovery (they list kinds, e.g. v1/Namespace); offline
(helm template, helm lint) only the built-in group versions are known and the check is skipped.
*/}}
{{- define "warmscale.requireKeda" -}}
{{- $online := .Capabilities.APIVersions.Has "v1/Namespace" }}
{{- if and .Values.keda.requireCRDs $online (not (.Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject")) }}
{{- fail "KEDA's CRDs (keda.sh/v1alpha1 ScaledObject, ClusterTriggerAuthentication) are missing from the cluster: install KEDA first (https://keda.sh/docs/deploy/), then install warmscale. To render without them, set keda.requireCRDs=false." }}
{{- end }}
{{- if and .Values.certManager.enabled $online (not (.Capabilities.APIVersions.Has "cert-manager.io/v1/Certificate")) }}
{{- fail "certManager.enabled is true but cert-manager's CRDs (cert-manager.io/v1) are missing: install cert-manager, or leave certManager.enabled false (the controller's built-in CA)." }}
{{- end }}
{{- if and .Values.certManager.enabled (not .Values.tls.enabled) }}
{{- fail "certManager.enabled needs tls.enabled (the certificates are for the mutual TLS between KEDA and the scaler, and the webhook)." }}
{{- end }}
{{- end }}
