{{/*
Pieces of the NetworkPolicies (networkpolicy.yaml). Each bulkd.np.* template
renders egress rules (list items) or peers; docs/security.md
says what each allows and why.
*/}}

{{/* bulkd.np.egress: (dict "ctx" $ "rules" (list "dns" "redis" ...)): those bulkd.np.* rules, in order, empty ones left out. */}}
{{- define "bulkd.np.egress" -}}
{{- range .rules }}
{{- with include (printf "bulkd.np.%s" .) $.ctx | trim }}
{{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* The selector of the processor pods: the controller labels them so (controllers/job.go jobLabels). */}}
{{- define "bulkd.np.processorSelector" -}}
app.kubernetes.io/name: bulkd
app.kubernetes.io/component: processor
app.kubernetes.io/managed-by: bulkd-controller
{{- end }}

{{/* Every address but link-local (the cloud metadata service) as ipBlock peers: the fallback when a destination's address cannot be known at render time. */}}
{{- define "bulkd.np.anyButLinkLocal" -}}
- ipBlock:
    cidr: 0.0.0.0/0
    except: [169.254.0.0/16]
- ipBlock:
    cidr: ::/0
    except: ["fe80::/10"]
{{- end }}

{{/* CIDRs as ipBlock peers: (list "10.0.0.1/32" ...) */}}
{{- define "bulkd.np.cidrPeers" -}}
{{- range . }}
- ipBlock:
    cidr: {{ . | quote }}
{{- end }}
{{- end }}

{{/* TCP ports as NetworkPolicyPort items. */}}
{{- define "bulkd.np.tcpPorts" -}}
{{- range . }}
- protocol: TCP
  port: {{ . | int }}
{{- end }}
{{- end }}

{{/* DNS: the cluster DNS on UDP and TCP. */}}
{{- define "bulkd.np.dns" -}}
{{- $d := .Values.networkPolicy.dns }}
- to:
    {{- toYaml $d.to | trim | nindent 4 }}
  ports:
    {{- range $d.ports }}
    - {protocol: UDP, port: {{ . | int }}}
    - {protocol: TCP, port: {{ . | int }}}
    {{- end }}
{{- end }}

{{/* Redis' port(s): networkPolicy.redis.ports, else the chart's Redis port, else redis.url's port, else 6379. */}}
{{- define "bulkd.np.redisPorts" -}}
{{- $np := .Values.networkPolicy.redis }}
{{- if $np.ports }}
{{- toJson $np.ports }}
{{- else if .Values.redis.server.enabled }}
{{- toJson (list (int .Values.redis.server.port)) }}
{{- else }}
{{- $port := "" }}
{{- if and (not .Values.redis.existingSecret) .Values.redis.url }}
{{- $port = regexFind "[0-9]+$" (regexFind ":[0-9]+$" (urlParse .Values.redis.url).host) }}
{{- end }}
{{- toJson (list (int (default "6379" $port))) }}
{{- end }}
{{- end }}

{{/*
bulkd.np.redisPeers: the peers Redis is reached at, as YAML (empty: not
known, and Redis' egress stays closed; NOTES.txt warns). In order: the
chart's Redis pods; redis.networkPolicyCIDRs (and networkPolicy.redis.cidrs,
its older name); redis.url's host when it is an IP address; the Service
redis.url names in the cluster ("name", "name.namespace", "name.namespace.svc..."),
looked up at install: its pods (the Service's selector) and its cluster IPs.
Never "any address": issue 26 found Redis' port open to every address.
*/}}
{{- define "bulkd.np.redisPeers" -}}
{{- $cidrs := concat (default list .Values.redis.networkPolicyCIDRs) (default list .Values.networkPolicy.redis.cidrs) }}
{{- if .Values.redis.server.enabled }}
- podSelector:
    matchLabels:
      {{- include "bulkd.selectorLabels" (dict "ctx" . "component" "redis") | nindent 6 }}
{{- else if $cidrs }}
{{- include "bulkd.np.cidrPeers" $cidrs }}
{{- else if and (not .Values.redis.existingSecret) .Values.redis.url }}
{{- $host := (urlParse .Values.redis.url).host | replace "[" "" | replace "]" "" }}
{{- $host = regexReplaceAll ":[0-9]+$" $host "" }}
{{- if regexMatch "^[0-9.]+$|:" $host }}
{{- include "bulkd.np.cidrPeers" (list (ternary (printf "%s/128" $host) (printf "%s/32" $host) (contains ":" $host))) }}
{{- else }}
{{- $parts := splitList "." $host }}
{{- $ns := .Release.Namespace }}
{{- if gt (len $parts) 1 }}{{ $ns = index $parts 1 }}{{ end }}
{{- $svc := lookup "v1" "Service" $ns (first $parts) }}
{{- with (dig "spec" "selector" dict $svc) }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ $ns }}
  podSelector:
    matchLabels:
      {{- toYaml . | nindent 6 }}
{{- end }}
{{- range (dig "spec" "clusterIPs" list $svc) }}
{{- if ne . "None" }}
- ipBlock:
    cidr: {{ ternary (printf "%s/128" .) (printf "%s/32" .) (contains ":" .) | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Redis: bulkd.np.redisPeers on Redis' port; no rule when they are not known. */}}
{{- define "bulkd.np.redis" -}}
{{- with include "bulkd.np.redisPeers" . | trim }}
- to:
    {{- . | nindent 4 }}
  ports:
    {{- include "bulkd.np.tcpPorts" (include "bulkd.np.redisPorts" $ | fromJsonArray) | trim | nindent 4 }}
{{- end }}
{{- end }}

{{/* spamd (the API only): the chart's spamd pods, or spamd.address on networkPolicy.spamd.cidrs or any address but link-local; nothing without a spamd. */}}
{{- define "bulkd.np.spamd" -}}
{{- $s := .Values.spamd }}
{{- if $s.server.image.repository }}
- to:
    - podSelector:
        matchLabels:
          {{- include "bulkd.selectorLabels" (dict "ctx" . "component" "spamd") | nindent 10 }}
  ports:
    - {protocol: TCP, port: {{ $s.server.port | int }}}
{{- else if $s.address }}
- to:
    {{- if .Values.networkPolicy.spamd.cidrs }}
    {{- include "bulkd.np.cidrPeers" .Values.networkPolicy.spamd.cidrs | trim | nindent 4 }}
    {{- else }}
    {{- include "bulkd.np.anyButLinkLocal" . | trim | nindent 4 }}
    {{- end }}
  ports:
    - {protocol: TCP, port: {{ regexFind "[0-9]+$" $s.address | int }}}
{{- end }}
{{- end }}

{{/*
The Kubernetes API (the API creates BulkJobs, the controller runs them):
networkPolicy.kubeAPI.cidrs, else the addresses and ports of the
EndpointSlice default/kubernetes and the Service's cluster IP, looked up at
install (a policy may be applied before or after the Service's address
translation, depending on the network plugin), else (helm template, Argo
CD: no lookup) no rule: the API stays closed until networkPolicy.kubeAPI.cidrs
is set (NOTES.txt says so). Issue 26: the old fallback opened every
private address on 443 and 6443.
*/}}
{{- define "bulkd.np.kubeAPI" -}}
{{- $k := .Values.networkPolicy.kubeAPI }}
{{- $cidrs := $k.cidrs }}
{{- $ports := $k.ports }}
{{- if not $cidrs }}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" }}
{{- range (dig "endpoints" list $slice) }}
{{- range .addresses }}
{{- $cidrs = append $cidrs (ternary (printf "%s/128" .) (printf "%s/32" .) (contains ":" .)) }}
{{- end }}
{{- end }}
{{- if and $cidrs (not $ports) }}
{{- range (dig "ports" list $slice) }}
{{- $ports = append $ports (int .port) }}
{{- end }}
{{- $svc := lookup "v1" "Service" "default" "kubernetes" }}
{{- range (dig "spec" "clusterIPs" list $svc) }}
{{- $cidrs = append $cidrs (ternary (printf "%s/128" .) (printf "%s/32" .) (contains ":" .)) }}
{{- end }}
{{- range (dig "spec" "ports" list $svc) }}
{{- $ports = append $ports (int .port) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $cidrs }}
- to:
    {{- include "bulkd.np.cidrPeers" (uniq $cidrs) | trim | nindent 4 }}
  ports:
    {{- include "bulkd.np.tcpPorts" (uniq (default (list 443 6443) $ports)) | trim | nindent 4 }}
{{- end }}
{{- end }}

{{/* Public addresses on networkPolicy.publicPorts: everything but networkPolicy.nonPublicCIDRs, IPv4 and IPv6. */}}
{{- define "bulkd.np.public" -}}
{{- $np := .Values.networkPolicy }}
{{- $v4 := list }}
{{- $v6 := list }}
{{- range $np.nonPublicCIDRs }}
{{- if contains ":" . }}{{ $v6 = append $v6 . }}{{ else }}{{ $v4 = append $v4 . }}{{ end }}
{{- end }}
{{- if $np.publicPorts }}
- to:
    - ipBlock:
        cidr: 0.0.0.0/0
        {{- with $v4 }}
        except:
          {{- toYaml . | nindent 10 }}
        {{- end }}
    - ipBlock:
        cidr: ::/0
        {{- with $v6 }}
        except:
          {{- toYaml . | nindent 10 }}
        {{- end }}
  ports:
    {{- include "bulkd.np.tcpPorts" $np.publicPorts | trim | nindent 4 }}
{{- end }}
{{- end }}

{{/* The operator's allowances: networkPolicy.allowEgress, each {cidrs, ports} (no ports: every port). */}}
{{- define "bulkd.np.allow" -}}
{{- range .Values.networkPolicy.allowEgress }}
- to:
    {{- include "bulkd.np.cidrPeers" .cidrs | trim | nindent 4 }}
  {{- with .ports }}
  ports:
    {{- include "bulkd.np.tcpPorts" . | trim | nindent 4 }}
  {{- end }}
{{- end }}
{{- end }}
