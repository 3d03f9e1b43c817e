{{/* Names and labels. */}}
{{- define "outbox-relay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "outbox-relay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "outbox-relay.labels" -}}
{{ include "outbox-relay.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "outbox-relay.secretName" -}}
{{- .Values.secret.existingSecret | default (include "outbox-relay.fullname" .) -}}
{{- end -}}

{{- define "outbox-relay.hasSecret" -}}
{{- if or .Values.secret.existingSecret .Values.secret.stringData -}}true{{- end -}}
{{- end -}}

{{/* The checkpoint store kind (`file` when the config does not say; `none` in poll mode,
which keeps each event's state in the outbox table). */}}
{{- define "outbox-relay.checkpointStore" -}}
{{- if eq ((.Values.config.source | default dict).mode | default "binlog") "poll" -}}
none
{{- else -}}
{{- (.Values.config.checkpoint | default dict).store | default "file" -}}
{{- end -}}
{{- end -}}

{{/* The file store's path (on the chart's volume unless config.checkpoint.path says). */}}
{{- define "outbox-relay.checkpointPath" -}}
{{- (.Values.config.checkpoint | default dict).path | default "/var/lib/outbox-relay/checkpoint.json" -}}
{{- end -}}

{{/* The port of config.metrics.listen (required: the probes and the Service use it). */}}
{{- define "outbox-relay.metricsPort" -}}
{{- $listen := (.Values.config.metrics | default dict).listen | default "" -}}
{{- if not (contains ":" $listen) -}}
{{- fail "config.metrics.listen is needed (e.g. \"0.0.0.0:9187\"): the liveness and readiness probes and the Service use its port" -}}
{{- end -}}
{{- $parts := splitList ":" $listen -}}
{{- last $parts -}}
{{- end -}}

{{/* The grace period: longer than pipeline.shutdown_timeout_ms. */}}
{{- define "outbox-relay.shutdownTimeoutSeconds" -}}
{{- $ms := (.Values.config.pipeline | default dict).shutdown_timeout_ms | default 30000 -}}
{{- div (add (int64 $ms) 999) 1000 -}}
{{- end -}}

{{- define "outbox-relay.terminationGracePeriodSeconds" -}}
{{- $shutdown := include "outbox-relay.shutdownTimeoutSeconds" . | int64 -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- .Values.terminationGracePeriodSeconds | int64 -}}
{{- else -}}
{{- add $shutdown 15 -}}
{{- end -}}
{{- end -}}

{{/*
Refuses value sets that cannot work, naming the value and the fix (rendered by every
manifest that depends on them: the workload).
*/}}
{{- define "outbox-relay.validate" -}}
{{- $ha := (.Values.config.ha | default dict).enabled | default false -}}
{{- $store := include "outbox-relay.checkpointStore" . -}}
{{- if and (gt (int .Values.replicas) 1) (ne $store "none") -}}
{{- if not $ha -}}
{{- fail (printf "replicas = %d needs config.ha.enabled = true: without [ha] every replica would publish every event (duplicates) and fight over one checkpoint; set replicas: 1 or turn [ha] on" (int .Values.replicas)) -}}
{{- end -}}
{{- if eq $store "file" -}}
{{- fail "replicas > 1 needs a shared checkpoint store: config.checkpoint.store = \"file\" gives each pod its own file, so a new leader would resume from a stale position; choose store = \"mysql\" or \"kafka\"" -}}
{{- end -}}
{{- end -}}
{{- $grace := include "outbox-relay.terminationGracePeriodSeconds" . | int64 -}}
{{- $shutdown := include "outbox-relay.shutdownTimeoutSeconds" . | int64 -}}
{{- if le $grace $shutdown -}}
{{- fail (printf "terminationGracePeriodSeconds = %d is not longer than config.pipeline.shutdown_timeout_ms (%d s): the kubelet would SIGKILL the relay mid-shutdown; raise it or leave it 0 (= shutdown timeout + 15 s)" $grace $shutdown) -}}
{{- end -}}
{{- if and .Values.secret.existingSecret .Values.secret.stringData -}}
{{- fail "set secret.existingSecret or secret.stringData, not both" -}}
{{- end -}}
{{- if and (or .Values.secret.env .Values.secret.mountPath) (not (include "outbox-relay.hasSecret" .)) -}}
{{- fail "secret.env / secret.mountPath need a Secret: set secret.existingSecret or secret.stringData" -}}
{{- end -}}
{{- end -}}

{{/*
The `config` value as TOML. Helm reads every number of a values file as a float; sprig's
toToml would write `6.0` where the relay wants an integer, so the chart writes TOML itself:
whole numbers as integers, strings JSON-escaped (valid TOML basic strings), maps as tables,
lists of maps as arrays of tables. A null value is refused (leave the key out instead).
*/}}
{{- define "outbox-relay.toml" -}}
{{- include "outbox-relay.tomlTable" (list "" .) -}}
{{- end -}}

{{- define "outbox-relay.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{- . -}}{{- else -}}{{- toJson . -}}{{- end -}}
{{- end -}}

{{- define "outbox-relay.isTableArray" -}}
{{- if and (kindIs "slice" .) (gt (len .) 0) -}}
{{- $all := true -}}
{{- range . -}}{{- if not (kindIs "map" .) -}}{{- $all = false -}}{{- end -}}{{- end -}}
{{- if $all -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{- define "outbox-relay.tomlValue" -}}
{{- $kind := kindOf . -}}
{{- if eq $kind "string" -}}{{- toJson . -}}
{{- else if eq $kind "bool" -}}{{- . -}}
{{- else if or (eq $kind "float64") (eq $kind "float32") -}}
{{- if eq (floor .) (float64 .) -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else if hasPrefix "int" $kind -}}{{- . -}}
{{- else if hasPrefix "uint" $kind -}}{{- . -}}
{{- else if eq $kind "slice" -}}
[{{- range $index, $element := . -}}{{- if $index -}}, {{ end -}}{{- include "outbox-relay.tomlValue" $element -}}{{- end -}}]
{{- else if eq $kind "map" -}}
{{- $map := . -}}
{ {{- range $index, $key := keys $map | sortAlpha -}}{{- if $index -}}, {{ end -}}{{- include "outbox-relay.tomlKey" $key }} = {{ include "outbox-relay.tomlValue" (get $map $key) -}}{{- end -}} }
{{- else -}}
{{- fail (printf "config: a %s value cannot be written to TOML (a null? leave the key out instead)" $kind) -}}
{{- end -}}
{{- end -}}

{{- define "outbox-relay.tomlTable" -}}
{{- $path := index . 0 -}}
{{- $table := index . 1 -}}
{{- range $key := keys $table | sortAlpha -}}
{{- $value := get $table $key -}}
{{- if not (or (kindIs "map" $value) (include "outbox-relay.isTableArray" $value)) -}}
{{- printf "%s = %s\n" (include "outbox-relay.tomlKey" $key) (include "outbox-relay.tomlValue" $value) -}}
{{- end -}}
{{- end -}}
{{- range $key := keys $table | sortAlpha -}}
{{- $value := get $table $key -}}
{{- $name := include "outbox-relay.tomlKey" $key -}}
{{- $full := ternary $name (printf "%s.%s" $path $name) (eq $path "") -}}
{{- if kindIs "map" $value -}}
{{- printf "\n[%s]\n" $full -}}
{{- include "outbox-relay.tomlTable" (list $full $value) -}}
{{- else if include "outbox-relay.isTableArray" $value -}}
{{- range $element := $value -}}
{{- printf "\n[[%s]]\n" $full -}}
{{- include "outbox-relay.tomlTable" (list $full $element) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
