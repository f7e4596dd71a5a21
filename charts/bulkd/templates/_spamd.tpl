{{/*
The spamd the API uses for POST /v1/content-spam-check: the chart's own
(<fullname>-spamd, when spamd.server.image.repository is set), else
spamd.address, else none (the endpoint answers 503 engine_unavailable).
*/}}
{{- define "bulkd.spamdAddress" -}}
{{- if .Values.spamd.server.image.repository }}
{{- printf "%s:%d" (include "bulkd.componentName" (dict "ctx" . "component" "spamd")) (int .Values.spamd.server.port) }}
{{- else }}
{{- .Values.spamd.address }}
{{- end }}
{{- end }}

{{/* The apiserver's spam check settings (container env entries). */}}
{{- define "bulkd.spamdEnv" -}}
{{- with include "bulkd.spamdAddress" . }}
- name: BULKD_SPAMD_ADDR
  value: {{ . | quote }}
{{- end }}
- name: BULKD_SPAMD_TIMEOUT
  value: {{ .Values.spamd.timeout | quote }}
- name: BULKD_SPAMD_MAX_CONNS
  value: {{ .Values.spamd.maxConns | toString | quote }}
{{- with .Values.spamd.allowances }}
- name: BULKD_SPAM_CHECK_ALLOWANCES
  value: {{ . | quote }}
{{- end }}
{{- end }}
