{{- define "switchboard.name" -}}{{ .Release.Name }}-switchboard{{- end -}}
{{- define "switchboard.container" -}}
- name: switchboard
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run", "-c", "/etc/switchboard/config.yaml"]
  {{- if .Values.secretName }}
  envFrom:
    - secretRef: {name: {{ .Values.secretName }}}
  {{- end }}
  ports:
    - {name: http, containerPort: {{ .Values.config.listen.port | default 8787 }}}
  livenessProbe:
    httpGet: {path: /healthz, port: http}
  readinessProbe:
    httpGet: {path: /readyz, port: http}
  resources: {{- toYaml .Values.resources | nindent 4 }}
  volumeMounts:
    - {name: switchboard-config, mountPath: /etc/switchboard, readOnly: true}
{{- end -}}
