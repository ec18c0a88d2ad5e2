{{/*
Names, labels, the gateway config (with the Redis bus wired in) and the gateway container, shared by
the gateway Deployment and the sidecar snippet so both modes run the same container.
*/}}

{{- define "switchboard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchboard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "switchboard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchboard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The gateway's pods (the in-chart Redis has the same two labels with component: redis). */}}
{{- define "switchboard.gatewaySelectorLabels" -}}
{{ include "switchboard.selectorLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "switchboard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchboard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "switchboard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "switchboard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when the gateway runs as more than one replica (then it needs the Redis bus). */}}
{{- define "switchboard.multiReplica" -}}
{{- if and (eq .Values.mode "gateway") (or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the config needs the Redis bus: several replicas, or several worker processes per pod. */}}
{{- define "switchboard.needsBus" -}}
{{- if or (include "switchboard.multiReplica" .) (ne (toString .Values.workers) "1") -}}true{{- end -}}
{{- end -}}

{{/* The Secret whose keys become the gateway's environment: the operator's, or the chart's own. */}}
{{- define "switchboard.secretName" -}}
{{- if .Values.secret.existingSecret -}}
{{- .Values.secret.existingSecret -}}
{{- else if .Values.secret.env -}}
{{- include "switchboard.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "switchboard.listenHost" -}}
{{- dig "listen" "host" "127.0.0.1" (.Values.config | default dict) -}}
{{- end -}}

{{- define "switchboard.port" -}}
{{- dig "listen" "port" 8787 (.Values.config | default dict) | int -}}
{{- end -}}

{{/* "true" when the gateway binds a loopback address: the kubelet's probes cannot reach it. */}}
{{- define "switchboard.loopback" -}}
{{- $host := include "switchboard.listenHost" . | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (eq $host "localhost") (eq $host "::1") (hasPrefix "127." $host) -}}true{{- end -}}
{{- end -}}

{{/* The Redis URL of the bus ("" when there is none). */}}
{{- define "switchboard.redisUrl" -}}
{{- if .Values.redis.deploy -}}
{{- printf "redis://%s-redis.%s.svc:6379/0" (include "switchboard.fullname" .) .Release.Namespace -}}
{{- else if .Values.redis.url -}}
{{- .Values.redis.url -}}
{{- end -}}
{{- end -}}

{{/*
Where the gateway reads the Redis password: a file of the Secret redis.password.existingSecret,
mounted read-only (bus.password_file; the gateway reads it on every new connection, so a rotated
password is picked up without a restart, and it never appears in the ConfigMap or the URL).
*/}}
{{- define "switchboard.redisPasswordDir" -}}/etc/switchboard-redis{{- end -}}
{{- define "switchboard.redisPasswordFile" -}}
{{- if and (include "switchboard.redisUrl" .) .Values.redis.password.existingSecret -}}
{{- printf "%s/password" (include "switchboard.redisPasswordDir" .) -}}
{{- end -}}
{{- end -}}

{{/* The gateway config as rendered into the ConfigMap: .Values.config plus the Redis bus. */}}
{{- define "switchboard.config" -}}
{{- $config := deepCopy (.Values.config | default dict) -}}
{{- $url := include "switchboard.redisUrl" . -}}
{{- if $url -}}
{{- $bus := deepCopy (get $config "bus" | default dict) -}}
{{- $_ := set $bus "kind" "redis" -}}
{{- $_ := set $bus "url" $url -}}
{{- with include "switchboard.redisPasswordFile" . -}}
{{- $_ := set $bus "password_file" . -}}
{{- end -}}
{{- $_ := set $config "bus" $bus -}}
{{- else if and (include "switchboard.needsBus" .) (ne (dig "bus" "kind" "memory" $config) "redis") -}}
{{- fail "replicaCount > 1, autoscaling or workers other than 1 need the Redis bus: set redis.deploy=true for a Redis in the release, or redis.url for your own (or config.bus yourself)" -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/*
The Host header the probes send: "" (the default one) unless config.security.allowed_hosts limits
the Host the gateway accepts (its DNS-rebinding guard), then its first entry ("NAME:*" as NAME:port).
*/}}
{{- define "switchboard.probeHost" -}}
{{- $allowed := dig "security" "allowed_hosts" list (.Values.config | default dict) -}}
{{- if $allowed -}}
{{- $first := first $allowed | toString -}}
{{- if hasSuffix ":*" $first -}}
{{- printf "%s:%s" (trimSuffix ":*" $first) (include "switchboard.port" .) -}}
{{- else if ne $first "*" -}}
{{- $first -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A probe on PATH: an HTTP GET by the kubelet, or (loopback) a request made inside the container. */}}
{{- define "switchboard.probe" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $probe := deepCopy (index . 2) -}}
{{- $host := include "switchboard.probeHost" $root -}}
{{- if include "switchboard.loopback" $root -}}
{{- $bound := include "switchboard.listenHost" $root | trimPrefix "[" | trimSuffix "]" -}}
{{- $target := ternary "[::1]" (ternary "127.0.0.1" $bound (eq $bound "localhost")) (eq $bound "::1") -}}
{{- $url := printf "http://%s:%s%s" $target (include "switchboard.port" $root) $path -}}
{{- $headers := ternary (printf "{'Host': '%s'}" $host) "{}" (ne $host "") -}}
{{- $get := printf "import urllib.request as u; u.urlopen(u.Request('%s', headers=%s), timeout=%d)" $url $headers (int $probe.timeoutSeconds) -}}
{{- $_ := set $probe "exec" (dict "command" (list "python" "-c" $get)) -}}
{{- else -}}
{{- $get := dict "path" $path "port" "http" -}}
{{- if $host -}}
{{- $_ := set $get "httpHeaders" (list (dict "name" "Host" "value" $host)) -}}
{{- end -}}
{{- $_ := set $probe "httpGet" $get -}}
{{- end -}}
{{- toYaml $probe -}}
{{- end -}}

{{/* The gateway container (one list item), used by the Deployment and by the sidecar snippet. */}}
{{- define "switchboard.container" -}}
- name: switchboard
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - run
    - -c
    - /etc/switchboard/config.yaml
    {{- if ne (toString .Values.workers) "1" }}
    - --workers
    - {{ .Values.workers | toString | quote }}
    {{- end }}
    {{- range .Values.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - {name: http, containerPort: {{ include "switchboard.port" . }}, protocol: TCP}
  {{- $secret := include "switchboard.secretName" . }}
  {{- if $secret }}
  envFrom:
    - secretRef: {name: {{ $secret }}}
  {{- end }}
  env:
    - {name: TMPDIR, value: /tmp}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  startupProbe: {{- include "switchboard.probe" (list . "/healthz" .Values.probes.startup) | nindent 4 }}
  livenessProbe: {{- include "switchboard.probe" (list . "/healthz" .Values.probes.liveness) | nindent 4 }}
  readinessProbe: {{- include "switchboard.probe" (list . "/readyz" .Values.probes.readiness) | nindent 4 }}
  lifecycle:
    preStop:
      # Keep serving while the endpoints controllers take the pod out of the Services; only then
      # does SIGTERM start the gateway's own drain (see values.yaml "drain").
      exec: {command: ["sleep", "{{ int .Values.drain.preStopSleepSeconds }}"]}
  resources: {{- toYaml .Values.resources | nindent 4 }}
  securityContext: {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - {name: switchboard-config, mountPath: /etc/switchboard, readOnly: true}
    - {name: switchboard-tmp, mountPath: /tmp}
    {{- if include "switchboard.redisPasswordFile" . }}
    - {name: switchboard-redis-password, mountPath: {{ include "switchboard.redisPasswordDir" . }}, readOnly: true}
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{- define "switchboard.volumes" -}}
- name: switchboard-config
  configMap: {name: {{ include "switchboard.fullname" . }}}
- name: switchboard-tmp
  emptyDir: {sizeLimit: {{ .Values.tmpSizeLimit }}}
{{- if include "switchboard.redisPasswordFile" . }}
- name: switchboard-redis-password
  secret:
    secretName: {{ .Values.redis.password.existingSecret }}
    items: [{key: {{ .Values.redis.password.key }}, path: password}]
    # readable by the gateway's uid also in a sidecar's pod, which may set no fsGroup
    defaultMode: 0444
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "switchboard.terminationGracePeriodSeconds" -}}
{{- add .Values.drain.preStopSleepSeconds .Values.drain.gatewayDrainSeconds .Values.drain.marginSeconds | int -}}
{{- end -}}
