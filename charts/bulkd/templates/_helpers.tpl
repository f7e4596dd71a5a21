{{/*
Names. Every object is <fullname>-<component>; fullname is the release name
when it contains the chart name, <release>-bulkd otherwise.
*/}}
{{- define "bulkd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "bulkd.fullname" -}}
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

{{/* bulkd.componentName: (dict "ctx" $ "component" "apiserver") -> <fullname>-apiserver */}}
{{- define "bulkd.componentName" -}}
{{- printf "%s-%s" (include "bulkd.fullname" .ctx | trunc 52 | trimSuffix "-") .component }}
{{- end }}

{{- define "bulkd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "bulkd.labels" -}}
helm.sh/chart: {{ include "bulkd.chart" . }}
app.kubernetes.io/name: {{ include "bulkd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: bulkd
{{- end }}

{{/* bulkd.selectorLabels: (dict "ctx" $ "component" "apiserver") */}}
{{- define "bulkd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bulkd.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* bulkd.componentLabels: (dict "ctx" $ "component" "apiserver") */}}
{{- define "bulkd.componentLabels" -}}
{{ include "bulkd.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image every component runs; the controller gives it to processor Jobs. */}}
{{- define "bulkd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{/* bulkd.serviceAccountName: (dict "ctx" $ "component" "apiserver") */}}
{{- define "bulkd.serviceAccountName" -}}
{{- $sa := index .ctx.Values .component "serviceAccount" }}
{{- if $sa.create }}
{{- default (include "bulkd.componentName" .) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{- define "bulkd.configMapName" -}}
{{- include "bulkd.componentName" (dict "ctx" . "component" "config") }}
{{- end }}

{{/* The Secret and key holding the Redis URL. */}}
{{- define "bulkd.redisSecretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else }}
{{- include "bulkd.componentName" (dict "ctx" . "component" "redis") }}
{{- end }}
{{- end }}

{{- define "bulkd.redisSecretKey" -}}
{{- required "redis.secretKey is required" .Values.redis.secretKey }}
{{- end }}

{{/*
The password of the chart's own Redis (redis.server.enabled): the value
given, else the one the release's Secret already holds (so an upgrade keeps
it), else a new random one. helm template cannot look the Secret up: set
redis.server.password there, or every render makes a new password.
*/}}
{{- define "bulkd.redisPassword" -}}
{{- if .Values.redis.server.password }}
{{- .Values.redis.server.password }}
{{- else }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "bulkd.redisSecretName" .) }}
{{- if and $old $old.data (index $old.data "redis-password") }}
{{- index $old.data "redis-password" | b64dec }}
{{- else }}
{{- randAlphaNum 32 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret holding BULKD_PRIVACY_SECRET: privacy.existingSecret or
the chart's own <fullname>-privacy. */}}
{{- define "bulkd.privacySecretName" -}}
{{- .Values.privacy.existingSecret | default (include "bulkd.componentName" (dict "ctx" . "component" "privacy")) }}
{{- end }}

{{/* The privacy secret's value in the chart's own Secret: privacy.secret,
else the value of the release's Secret (lookup: helm install and upgrade),
else a new random one (48 characters). */}}
{{- define "bulkd.privacySecret" -}}
{{- if .Values.privacy.secret }}
{{- .Values.privacy.secret }}
{{- else }}
{{- $old := lookup "v1" "Secret" .Release.Namespace (include "bulkd.privacySecretName" .) }}
{{- if and $old $old.data (index $old.data .Values.privacy.secretKey) }}
{{- index $old.data .Values.privacy.secretKey | b64dec }}
{{- else }}
{{- randAlphaNum 48 }}
{{- end }}
{{- end }}
{{- end }}

{{- define "bulkd.validate" -}}
{{- if and .Values.redis.server.enabled .Values.redis.existingSecret }}
{{- fail "redis.server.enabled: the chart's Redis gets its URL and password from the chart's own Secret; unset redis.existingSecret" }}
{{- end }}
{{- if and (not .Values.redis.existingSecret) (not .Values.redis.url) (not .Values.redis.server.enabled) }}
{{- fail "set redis.existingSecret (a Secret holding the Redis URL) or redis.url" }}
{{- end }}
{{- range $k, $v := .Values.config }}
{{- if not (hasPrefix "BULKD_" $k) }}
{{- fail (printf "config.%s: only BULKD_* settings belong in config" $k) }}
{{- end }}
{{- if eq $k "BULKD_REDIS_URL" }}
{{- fail "config.BULKD_REDIS_URL: the Redis URL is a secret; use redis.existingSecret or redis.url" }}
{{- end }}
{{- if and (eq $k "BULKD_OUTBOUND_ALLOW_CIDRS") $.Values.outbound.allowCIDRs }}
{{- fail "config.BULKD_OUTBOUND_ALLOW_CIDRS: set outbound.allowCIDRs only" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Pod-level scheduling: the component's own settings, else the chart-wide ones. */}}
{{- define "bulkd.scheduling" -}}
{{- $c := index .ctx.Values .component }}
{{- with ($c.nodeSelector | default .ctx.Values.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.tolerations | default .ctx.Values.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with ($c.affinity | default .ctx.Values.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Environment every component gets: the Redis URL from its Secret, and the namespace. */}}
{{- define "bulkd.commonEnv" -}}
- name: BULKD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: BULKD_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "bulkd.redisSecretName" . }}
      key: {{ include "bulkd.redisSecretKey" . }}
{{- end }}

{{/* Pod annotations that roll the pods when the settings change. */}}
{{- define "bulkd.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if not .Values.redis.existingSecret }}
checksum/redis: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- if not .Values.privacy.existingSecret }}
checksum/privacy: {{ include (print .Template.BasePath "/privacy-secret.yaml") . | sha256sum }}
{{- end }}
{{- if not .Values.smtpEgress.existingSecret }}
checksum/smtp-egress: {{ include (print .Template.BasePath "/smtp-egress-secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/* The Secret holding BULKD_SMTP_EGRESS: smtpEgress.existingSecret, or the
chart's own when smtpEgress.egresses is set; empty: none. */}}
{{- define "bulkd.smtpEgressSecretName" -}}
{{- if .Values.smtpEgress.existingSecret -}}
{{- .Values.smtpEgress.existingSecret -}}
{{- else if .Values.smtpEgress.egresses -}}
{{- printf "%s-smtp-egress" (include "bulkd.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end }}

{{/* smtpEgress.egresses in the --smtp-egress form:
name=a,helo=h,source=ip;name=b,proxy=socks5://...,public_ip=ip */}}
{{- define "bulkd.smtpEgressSpec" -}}
{{- $parts := list -}}
{{- range .Values.smtpEgress.egresses -}}
{{- $kv := list (printf "name=%s" .name) -}}
{{- with .helo }}{{ $kv = append $kv (printf "helo=%s" .) }}{{ end -}}
{{- with .source }}{{ $kv = append $kv (printf "source=%s" .) }}{{ end -}}
{{- with .proxy }}{{ $kv = append $kv (printf "proxy=%s" .) }}{{ end -}}
{{- with .publicIP }}{{ $kv = append $kv (printf "public_ip=%s" .) }}{{ end -}}
{{- with .mailFrom }}{{ $kv = append $kv (printf "mail_from=%s" .) }}{{ end -}}
{{- $parts = append $parts (join "," $kv) -}}
{{- end -}}
{{- join ";" $parts -}}
{{- end }}
