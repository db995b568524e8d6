{{/*
Names. Every object name derives from tiercache.fullname, and the operator's
flags (--webhook-service, --cert-secret, the webhook configuration names)
are rendered from the same helpers, so they cannot drift apart.
*/}}

{{- define "tiercache.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Base name: the release name if it already contains the chart name. */}}
{{- define "tiercache.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tiercache.operatorName" -}}{{ include "tiercache.fullname" . }}-operator{{- end }}
{{- define "tiercache.webhookService" -}}{{ include "tiercache.fullname" . }}-webhook{{- end }}
{{- define "tiercache.xdsService" -}}{{ include "tiercache.fullname" . }}-xds{{- end }}
{{- define "tiercache.metricsService" -}}{{ include "tiercache.fullname" . }}-metrics{{- end }}
{{- define "tiercache.certSecret" -}}{{ include "tiercache.fullname" . }}-webhook-cert{{- end }}
{{- define "tiercache.certificate" -}}{{ include "tiercache.fullname" . }}-webhook{{- end }}
{{- define "tiercache.issuer" -}}{{ include "tiercache.fullname" . }}-selfsigned{{- end }}
{{- define "tiercache.mutatingWebhook" -}}{{ include "tiercache.fullname" . }}-inject{{- end }}
{{- define "tiercache.validatingWebhook" -}}{{ include "tiercache.fullname" . }}-validate{{- end }}
{{- define "tiercache.redisName" -}}{{ include "tiercache.fullname" . }}-redis{{- end }}

{{- define "tiercache.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tiercache.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tiercache.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; the component label is added per object. */}}
{{- define "tiercache.labels" -}}
helm.sh/chart: {{ include "tiercache.chart" . }}
app.kubernetes.io/name: {{ include "tiercache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tiercache
{{- end }}

{{/* Selector labels of the operator pods. */}}
{{- define "tiercache.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tiercache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Selector labels of the bundled Redis pod. */}}
{{- define "tiercache.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tiercache.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end }}

{{/* The chart's image reference: repository then @digest or :tag. */}}
{{- define "tiercache.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "tiercache.sidecarImage" -}}
{{- default (include "tiercache.image" .) .Values.sidecar.image }}
{{- end }}

{{/* The xDS address injected sidecars dial. */}}
{{- define "tiercache.controlPlaneAddress" -}}
{{- if .Values.controlPlane.address }}
{{- .Values.controlPlane.address }}
{{- else }}
{{- printf "%s.%s.svc:%d" (include "tiercache.xdsService" .) .Release.Namespace (int .Values.controlPlane.port) }}
{{- end }}
{{- end }}

{{/*
Namespaces never injected: injection.excludedNamespaces plus the release
namespace (the operator's own pods must start without the webhook), as a
JSON list without duplicates.
*/}}
{{- define "tiercache.excludedNamespaces" -}}
{{- append (without (uniq .Values.injection.excludedNamespaces) .Release.Namespace) .Release.Namespace | toJson }}
{{- end }}

{{/*
The labels block of one alert: (list .Values.prometheusRule severity).
prometheusRule.alertLabels are added; severity wins over one of them.
*/}}
{{- define "tiercache.alertLabels" -}}
{{- $pr := index . 0 -}}
labels:
  {{- with omit $pr.alertLabels "severity" }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  severity: {{ index . 1 }}
{{- end }}
