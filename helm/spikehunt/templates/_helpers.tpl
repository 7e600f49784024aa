{{/*
Names and labels.
*/}}
{{- define "spikehunt.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's object name prefix, short enough for "-otel-gateway" and a 63-character limit. */}}
{{- define "spikehunt.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "spikehunt.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object; call with (dict "ctx" $ "component" "agent"). */}}
{{- define "spikehunt.labels" -}}
helm.sh/chart: {{ include "spikehunt.chart" .ctx }}
{{ include "spikehunt.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: spikehunt
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "spikehunt.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spikehunt.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end -}}

{{/*
An image reference: <registry>/<repository>@<digest> when a digest is
given (the tag is then ignored: a digest names one image, a tag can move),
else <registry>/<repository>:<tag>. The registry is global.imageRegistry
(a mirror for every image of the chart), else the image's own, else
defaultRegistry. Call with (dict "ctx" $ "image" .Values.x.image
"defaultRegistry" "docker.io" "defaultTag" "1.0").
*/}}
{{- define "spikehunt.imageRef" -}}
{{- $global := .ctx.Values.global | default dict -}}
{{- $registry := $global.imageRegistry | default .image.registry | default .defaultRegistry -}}
{{- $ref := printf "%s/%s" $registry .image.repository -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $ref .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (.image.tag | default .defaultTag) -}}
{{- end -}}
{{- end -}}

{{/* A spikehunt image (image.registry, image.tag, the chart's appVersion as defaults); call with (dict "ctx" $ "image" .Values.agent.image). */}}
{{- define "spikehunt.image" -}}
{{- include "spikehunt.imageRef" (dict "ctx" .ctx "image" .image "defaultRegistry" .ctx.Values.image.registry "defaultTag" (.ctx.Values.image.tag | default .ctx.Chart.AppVersion)) -}}
{{- end -}}

{{/*
A pod template's metadata: the chart's labels (which win over the
component's podLabels, so that selectors keep matching) and the
component's podAnnotations under the chart's own annotations (checksums).
Call with (dict "ctx" $ "component" "ingest" "values" .Values.ingest
"annotations" (dict "checksum/config" "…")).
*/}}
{{- define "spikehunt.podMetadata" -}}
{{- $labels := include "spikehunt.labels" (dict "ctx" .ctx "component" .component) | fromYaml -}}
{{- $labels = merge $labels (.values.podLabels | default dict) -}}
{{- $annotations := merge (.annotations | default dict) (.values.podAnnotations | default dict) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A component's ServiceAccount with its serviceAccount.annotations (IRSA's
eks.amazonaws.com/role-arn, GKE's iam.gke.io/gcp-service-account, …).
Call with (dict "ctx" $ "component" "ingest" "values" .Values.ingest
"automount" false "hook" false).
*/}}
{{- define "spikehunt.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "spikehunt.fullname" .ctx }}-{{ .component }}
  labels:
    {{- include "spikehunt.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
  {{- $annotations := deepCopy (.values.serviceAccount.annotations | default dict) }}
  {{- if .hook }}
  {{- $annotations = merge $annotations (dict "helm.sh/hook" "pre-install,pre-upgrade" "helm.sh/hook-weight" "-10" "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded") }}
  {{- end }}
  {{- with $annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- if not .automount }}
# No API access: the pods do not mount a token for it.
automountServiceAccountToken: false
{{- end }}
{{- end -}}

{{/*
A PodMonitor (monitoring.coreos.com/v1, the Prometheus Operator's) for a
component's /metrics; call with (dict "ctx" $ "component" "ingest"
"values" .Values.ingest "port" "metrics").
*/}}
{{- define "spikehunt.podMonitor" -}}
{{- $pm := .values.podMonitor -}}
{{- if $pm.enabled }}
---
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: {{ include "spikehunt.fullname" .ctx }}-{{ .component }}
  labels:
    {{- include "spikehunt.labels" (dict "ctx" .ctx "component" .component) | nindent 4 }}
    {{- with $pm.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "spikehunt.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
  podMetricsEndpoints:
    - port: {{ .port }}
      path: /metrics
      scheme: http
      interval: {{ $pm.interval }}
      {{- with $pm.scrapeTimeout }}
      scrapeTimeout: {{ . }}
      {{- end }}
{{- end }}
{{- end -}}

{{- define "spikehunt.pullPolicy" -}}
{{- .image.pullPolicy | default .ctx.Values.image.pullPolicy -}}
{{- end -}}

{{- define "spikehunt.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/*
The restricted Pod Security Standard, for every pod but the agent's.
*/}}
{{- define "spikehunt.restrictedPodSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
fsGroup: {{ . }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "spikehunt.restrictedContainerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
{{- end -}}

{{/*
Kafka.
*/}}
{{- define "spikehunt.kafka.brokers" -}}
{{- join "," .Values.kafka.brokers -}}
{{- end -}}

{{- define "spikehunt.kafka.saslSecretName" -}}
{{- .Values.kafka.sasl.existingSecret | default (printf "%s-kafka" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{/*
Kafka security (kafkasec/ARCHITECTURE.md): the same TLS and SASL for the
agent, ingest, detect and the operator, from files the pods mount: the CA,
the client certificate and the SASL password (and user, when it comes from
the Secret). Nothing secret is an argument.
*/}}
{{- define "spikehunt.kafka.dir" -}}/etc/spikehunt/kafka{{- end -}}

{{/*
"true" when the user is read from the SASL Secret: always from the chart's
own, and from existingSecret unless kafka.sasl.username names it (a Strimzi
KafkaUser's Secret has no user key).
*/}}
{{- define "spikehunt.kafka.saslUserFromSecret" -}}
{{- $s := .Values.kafka.sasl -}}
{{- if and $s.enabled (or (not $s.existingSecret) (not $s.username)) -}}true{{- end -}}
{{- end -}}

{{/* "true" when a pod of a Kafka client mounts Kafka files. */}}
{{- define "spikehunt.kafka.hasFiles" -}}
{{- $t := .Values.kafka.tls -}}
{{- if or .Values.kafka.sasl.enabled (and $t.enabled (or $t.caSecret.name $t.clientCertSecret.name)) -}}true{{- end -}}
{{- end -}}

{{/* The kafkasec.Config as the agent's YAML (keys tls and sasl of kafka). */}}
{{- define "spikehunt.kafka.agentSecurity" -}}
{{- $t := .Values.kafka.tls -}}
{{- $s := .Values.kafka.sasl -}}
{{- $dir := include "spikehunt.kafka.dir" . -}}
{{- $out := dict -}}
{{- if $t.enabled -}}
{{- $tls := dict "enabled" true -}}
{{- if $t.caSecret.name }}{{ $_ := set $tls "ca_file" (printf "%s/ca/ca.crt" $dir) }}{{ end -}}
{{- if $t.clientCertSecret.name }}{{ $_ := set $tls "cert_file" (printf "%s/client/tls.crt" $dir) }}{{ $_ := set $tls "key_file" (printf "%s/client/tls.key" $dir) }}{{ end -}}
{{- with $t.serverName }}{{ $_ := set $tls "server_name" . }}{{ end -}}
{{- if $t.dangerousSkipVerify }}{{ $_ := set $tls "dangerous_skip_verify" true }}{{ end -}}
{{- $_ := set $out "tls" $tls -}}
{{- end -}}
{{- if $s.enabled -}}
{{- $sasl := dict "mechanism" $s.mechanism "password_file" (printf "%s/sasl/password" $dir) -}}
{{- if include "spikehunt.kafka.saslUserFromSecret" . -}}
{{- $_ := set $sasl "username_file" (printf "%s/sasl/username" $dir) -}}
{{- else -}}
{{- $_ := set $sasl "username" $s.username -}}
{{- end -}}
{{- $_ := set $out "sasl" $sasl -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The same as flags; call with (dict "ctx" $ "prefix" "kafka."). */}}
{{- define "spikehunt.kafka.securityArgs" -}}
{{- $sec := include "spikehunt.kafka.agentSecurity" .ctx | fromYaml -}}
{{- $p := .prefix -}}
{{- with $sec.tls }}
- --{{ $p }}tls.enabled
{{- with .ca_file }}
- --{{ $p }}tls.ca-file={{ . }}
{{- end }}
{{- with .cert_file }}
- --{{ $p }}tls.cert-file={{ . }}
- --{{ $p }}tls.key-file={{ $sec.tls.key_file }}
{{- end }}
{{- with .server_name }}
- --{{ $p }}tls.server-name={{ . }}
{{- end }}
{{- if .dangerous_skip_verify }}
- --{{ $p }}tls.dangerous-skip-verify
{{- end }}
{{- end }}
{{- with $sec.sasl }}
- --{{ $p }}sasl.mechanism={{ .mechanism }}
{{- with .username }}
- --{{ $p }}sasl.username={{ . }}
{{- end }}
{{- with .username_file }}
- --{{ $p }}sasl.username-file={{ . }}
{{- end }}
- --{{ $p }}sasl.password-file={{ .password_file }}
{{- end }}
{{- end -}}

{{- define "spikehunt.kafka.volumeMounts" -}}
{{- $t := .Values.kafka.tls -}}
{{- $dir := include "spikehunt.kafka.dir" . -}}
{{- if and $t.enabled $t.caSecret.name }}
- name: kafka-ca
  mountPath: {{ $dir }}/ca
  readOnly: true
{{- end }}
{{- if and $t.enabled $t.clientCertSecret.name }}
- name: kafka-client-cert
  mountPath: {{ $dir }}/client
  readOnly: true
{{- end }}
{{- if .Values.kafka.sasl.enabled }}
- name: kafka-sasl
  mountPath: {{ $dir }}/sasl
  readOnly: true
{{- end }}
{{- end -}}

{{/* The CA and client certificate volumes (the gateway takes SASL from its environment). */}}
{{- define "spikehunt.kafka.tlsVolumes" -}}
{{- $t := .Values.kafka.tls -}}
{{- if and $t.enabled $t.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ $t.caSecret.name }}
    items:
      - key: {{ $t.caSecret.key }}
        path: ca.crt
{{- end }}
{{- if and $t.enabled $t.clientCertSecret.name }}
- name: kafka-client-cert
  secret:
    secretName: {{ $t.clientCertSecret.name }}
    items:
      - key: {{ $t.clientCertSecret.certKey }}
        path: tls.crt
      - key: {{ $t.clientCertSecret.keyKey }}
        path: tls.key
{{- end }}
{{- end -}}

{{- define "spikehunt.kafka.volumes" -}}
{{- $s := .Values.kafka.sasl -}}
{{ include "spikehunt.kafka.tlsVolumes" . }}
{{- if $s.enabled }}
- name: kafka-sasl
  secret:
    secretName: {{ include "spikehunt.kafka.saslSecretName" . }}
    items:
      - key: {{ ternary $s.existingSecretKeys.password "password" (ne $s.existingSecret "") }}
        path: password
      {{- if include "spikehunt.kafka.saslUserFromSecret" . }}
      - key: {{ ternary $s.existingSecretKeys.username "username" (ne $s.existingSecret "") }}
        path: username
      {{- end }}
{{- end }}
{{- end -}}

{{/*
ClickHouse: the DSN of README.md "Stores".
*/}}
{{/*
"true" when the chart runs the embedded store (clickhouse.embedded): no
server is named, neither by clickhouse.host nor by a Secret of the user's
(whose dsn key names one).
*/}}
{{- define "spikehunt.clickhouse.embedded" -}}
{{- if and (not .Values.clickhouse.host) (not .Values.clickhouse.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The embedded store's StatefulSet and Service. */}}
{{- define "spikehunt.clickhouse.embeddedName" -}}
{{- printf "%s-clickhouse" (include "spikehunt.fullname" .) -}}
{{- end -}}

{{/* The ClickHouse host the clients dial. */}}
{{- define "spikehunt.clickhouse.host" -}}
{{- if include "spikehunt.clickhouse.embedded" . -}}
{{- include "spikehunt.clickhouse.embeddedName" . -}}
{{- else -}}
{{- .Values.clickhouse.host -}}
{{- end -}}
{{- end -}}

{{/*
The Secret with the read-write user's credentials: the user's own
(clickhouse.existingSecret, or clickhouse.embedded.existingSecret for the
embedded store), else the chart's.
*/}}
{{- define "spikehunt.clickhouse.secretName" -}}
{{- $c := .Values.clickhouse -}}
{{- $own := ternary $c.embedded.existingSecret $c.existingSecret (eq (include "spikehunt.clickhouse.embedded" .) "true") -}}
{{- $own | default (printf "%s-clickhouse" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{/*
The embedded store's generated passwords: the value given, else the one
the Secret already holds (an upgrade keeps it: serve-clickhouse and its
clients must agree), else a new one. Call with (dict "ctx" $ "secret"
name "key" "password" "value" .Values.x.password).
*/}}
{{- define "spikehunt.generatedPassword" -}}
{{- if .value -}}
{{- .value -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .ctx.Release.Namespace .secret -}}
{{- if and $old $old.data (index $old.data .key) -}}
{{- index $old.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Grafana's read-only ClickHouse credentials. */ -}}
{{/*
The chart's Grafana's GF_PLUGINS_PREINSTALL: the ClickHouse data source at
its pinned version (id@version, or id@version@url to fetch the zip from a
mirror), then grafana.plugins.
*/}}
{{- define "spikehunt.grafana.plugins" -}}
{{- $gr := .Values.grafana -}}
{{- $list := list -}}
{{- with $gr.clickhousePlugin -}}
{{- if .install -}}
{{- $p := printf "grafana-clickhouse-datasource@%s" .version -}}
{{- if .url }}{{ $p = printf "%s@%s" $p .url }}{{ end -}}
{{- $list = append $list $p -}}
{{- end -}}
{{- end -}}
{{- join "," (concat $list $gr.plugins) -}}
{{- end -}}

{{- define "spikehunt.grafana.clickhouseSecretName" -}}
{{- .Values.grafana.datasource.existingSecret | default (printf "%s-grafana-clickhouse" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{- define "spikehunt.clickhouse.migrateSecretName" -}}
{{- printf "%s-migrate" (include "spikehunt.fullname" .) -}}
{{- end -}}

{{- define "spikehunt.clickhouse.port" -}}
{{- $c := .Values.clickhouse -}}
{{- if include "spikehunt.clickhouse.embedded" . -}}
{{- $c.embedded.port -}}
{{- else if $c.port -}}
{{- $c.port -}}
{{- else if eq $c.protocol "http" -}}
{{- ternary 8443 8123 $c.secure -}}
{{- else -}}
{{- ternary 9440 9000 $c.secure -}}
{{- end -}}
{{- end -}}

{{- define "spikehunt.clickhouse.scheme" -}}
{{- if include "spikehunt.clickhouse.embedded" . -}}
http
{{- else if eq .Values.clickhouse.protocol "http" -}}
{{- ternary "https" "http" .Values.clickhouse.secure -}}
{{- else -}}
clickhouse
{{- end -}}
{{- end -}}

{{- define "spikehunt.clickhouse.caDir" -}}/etc/spikehunt/clickhouse-ca{{- end -}}

{{/* "?k=v&…" from clickhouse.params, secure and the CA; "" without any. */}}
{{- define "spikehunt.clickhouse.query" -}}
{{- $c := .Values.clickhouse -}}
{{- if not (include "spikehunt.clickhouse.embedded" .) -}}
{{- $p := deepCopy $c.params -}}
{{- if and $c.secure (ne $c.protocol "http") -}}
{{- $_ := set $p "secure" "true" -}}
{{- end -}}
{{- if $c.caSecret.name -}}
{{- $_ := set $p "ca" (printf "%s/%s" (include "spikehunt.clickhouse.caDir" .) $c.caSecret.key) -}}
{{- end -}}
{{- $pairs := list -}}
{{- range $k := keys $p | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%s" (urlquery $k) (urlquery (toString (get $p $k)))) -}}
{{- end -}}
{{- if $pairs -}}?{{ join "&" $pairs }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* One URL userinfo part: url.QueryEscape, with spaces as %20 (a '+' would stay a '+'). */}}
{{- define "spikehunt.userinfoEscape" -}}
{{- urlquery . | replace "+" "%20" -}}
{{- end -}}

{{/*
A DSN; call with (dict "ctx" $ "userinfo" "user:pass" "database" "db").
userinfo is used as given (escaped, or $(VAR) references).
*/}}
{{- define "spikehunt.clickhouse.dsn" -}}
{{- $ctx := .ctx -}}
{{- printf "%s://%s@%s:%s" (include "spikehunt.clickhouse.scheme" $ctx) .userinfo (include "spikehunt.clickhouse.host" $ctx) (include "spikehunt.clickhouse.port" $ctx) -}}
{{- if .database }}/{{ .database }}{{ end -}}
{{- include "spikehunt.clickhouse.query" $ctx -}}
{{- end -}}

{{/* The DSN of the chart's own Secret: escaped credentials from the values (password: the generated one, for the embedded store). */}}
{{- define "spikehunt.clickhouse.valuesDSN" -}}
{{- $c := .ctx.Values.clickhouse -}}
{{- $userinfo := printf "%s:%s" (include "spikehunt.userinfoEscape" $c.username) (include "spikehunt.userinfoEscape" (.password | default $c.password)) -}}
{{- include "spikehunt.clickhouse.dsn" (dict "ctx" .ctx "userinfo" $userinfo "database" .database) -}}
{{- end -}}

{{/*
The environment of a container that opens the store: SPIKEHUNT_DSN (which
the spikehunt commands read, and the operator gets as --dsn=$(SPIKEHUNT_DSN)).
Call with (dict "ctx" $ "migrate" true|false): the migration connects
without a database and creates it (--database).
*/}}
{{- define "spikehunt.clickhouse.env" -}}
{{- $c := .ctx.Values.clickhouse -}}
{{- $embedded := include "spikehunt.clickhouse.embedded" .ctx -}}
{{- if and $embedded $c.embedded.existingSecret -}}
{{- /* The user's Secret has the credentials; the DSN is composed here. */}}
- name: SPIKEHUNT_CLICKHOUSE_USER
  valueFrom:
    secretKeyRef:
      name: {{ $c.embedded.existingSecret }}
      key: {{ $c.embedded.existingSecretKeys.username }}
- name: SPIKEHUNT_CLICKHOUSE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $c.embedded.existingSecret }}
      key: {{ $c.embedded.existingSecretKeys.password }}
- name: SPIKEHUNT_DSN
  value: {{ include "spikehunt.clickhouse.dsn" (dict "ctx" .ctx "userinfo" "$(SPIKEHUNT_CLICKHOUSE_USER):$(SPIKEHUNT_CLICKHOUSE_PASSWORD)" "database" (ternary "" $c.database .migrate)) | quote }}
{{- else if not $c.existingSecret -}}
- name: SPIKEHUNT_DSN
  valueFrom:
    secretKeyRef:
      name: {{ ternary (include "spikehunt.clickhouse.migrateSecretName" .ctx) (include "spikehunt.clickhouse.secretName" .ctx) (and .migrate (not $embedded)) }}
      key: dsn
{{- else if $c.existingSecretKeys.dsn -}}
- name: SPIKEHUNT_DSN
  valueFrom:
    secretKeyRef:
      name: {{ $c.existingSecret }}
      key: {{ $c.existingSecretKeys.dsn }}
{{- else -}}
- name: SPIKEHUNT_CLICKHOUSE_USER
  valueFrom:
    secretKeyRef:
      name: {{ $c.existingSecret }}
      key: {{ $c.existingSecretKeys.username }}
- name: SPIKEHUNT_CLICKHOUSE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $c.existingSecret }}
      key: {{ $c.existingSecretKeys.password }}
- name: SPIKEHUNT_DSN
  value: {{ include "spikehunt.clickhouse.dsn" (dict "ctx" .ctx "userinfo" "$(SPIKEHUNT_CLICKHOUSE_USER):$(SPIKEHUNT_CLICKHOUSE_PASSWORD)" "database" (ternary "" $c.database .migrate)) | quote }}
{{- end }}
{{- end -}}

{{- define "spikehunt.clickhouse.caVolumeMount" -}}
{{- if .Values.clickhouse.caSecret.name -}}
- name: clickhouse-ca
  mountPath: {{ include "spikehunt.clickhouse.caDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "spikehunt.clickhouse.caVolume" -}}
{{- if .Values.clickhouse.caSecret.name -}}
- name: clickhouse-ca
  secret:
    secretName: {{ .Values.clickhouse.caSecret.name }}
    items:
      - key: {{ .Values.clickhouse.caSecret.key }}
        path: {{ .Values.clickhouse.caSecret.key }}
{{- end }}
{{- end -}}

{{/*
S3: the capture artifact store (internal/capture/artifact StoreConfig). With
s3.credentials keys the keys come from environment variables, so the store's
YAML can live in a ConfigMap; with ambient there are none (the pods' AWS
identity).
*/}}
{{- define "spikehunt.s3.enabled" -}}
{{- if .Values.s3.bucket -}}true{{- end -}}
{{- end -}}

{{/* Whether the agent and the operator read S3 keys from a Secret. */}}
{{- define "spikehunt.s3.keys" -}}
{{- if and (include "spikehunt.s3.enabled" .) (ne (.Values.s3.credentials | default "keys") "ambient") -}}true{{- end -}}
{{- end -}}

{{- /*
The agent's intake token: on unless agent.intake.auth.allowUnauthenticated,
in the generated Secret or agent.intake.auth.existingSecret (key token).
*/ -}}
{{- define "spikehunt.agent.tokenOn" -}}
{{- if and .Values.agent.enabled (not .Values.agent.intake.auth.allowUnauthenticated) -}}true{{- end -}}
{{- end -}}

{{- define "spikehunt.agent.tokenSecretName" -}}
{{- .Values.agent.intake.auth.existingSecret | default (printf "%s-intake-token" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{- define "spikehunt.s3.secretName" -}}
{{- .Values.s3.existingSecret | default (printf "%s-s3" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{- define "spikehunt.s3.storeConfig" -}}
{{- $s := .Values.s3 -}}
{{- $cfg := dict "endpoint" $s.endpoint "bucket" $s.bucket -}}
{{- if include "spikehunt.s3.keys" . -}}
{{- $_ := set $cfg "access_key_env" "SPIKEHUNT_S3_ACCESS_KEY_ID" -}}
{{- $_ := set $cfg "secret_key_env" "SPIKEHUNT_S3_SECRET_ACCESS_KEY" -}}
{{- else -}}
{{- $_ := set $cfg "credentials" "ambient" -}}
{{- end -}}
{{- with $s.region }}{{ $_ := set $cfg "region" . }}{{ end -}}
{{- with $s.prefix }}{{ $_ := set $cfg "prefix" . }}{{ end -}}
{{- if $s.insecure }}{{ $_ := set $cfg "insecure" true }}{{ end -}}
{{- toYaml (dict "s3" $cfg) -}}
{{- end -}}

{{- define "spikehunt.s3.env" -}}
{{- if include "spikehunt.s3.keys" . -}}
- name: SPIKEHUNT_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "spikehunt.s3.secretName" . }}
      key: {{ ternary .Values.s3.existingSecretKeys.accessKeyId "access-key-id" (ne .Values.s3.existingSecret "") }}
- name: SPIKEHUNT_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "spikehunt.s3.secretName" . }}
      key: {{ ternary .Values.s3.existingSecretKeys.secretAccessKey "secret-access-key" (ne .Values.s3.existingSecret "") }}
{{- end }}
{{- end -}}

{{/*
The agent's capabilities, computed from the enabled backends (values.yaml
has the table and the reasons); a JSON list, sorted.
*/}}
{{- define "spikehunt.agent.capabilities" -}}
{{- $a := .Values.agent -}}
{{- $caps := list -}}
{{- if $a.capture.enabled -}}
{{- if $a.capture.backends.perf -}}
{{- $caps = concat $caps (list "PERFMON" "SYS_PTRACE" "SYSLOG" "IPC_LOCK") -}}
{{- end -}}
{{- if $a.capture.backends.bpftrace -}}
{{- $caps = concat $caps (list "BPF" "PERFMON" "IPC_LOCK") -}}
{{- end -}}
{{- end -}}
{{- if and $a.legacyKernelCapabilities (or (has "PERFMON" $caps) (has "BPF" $caps)) -}}
{{- $caps = append (without $caps "PERFMON" "BPF") "SYS_ADMIN" -}}
{{- end -}}
{{- $caps = concat $caps $a.extraCapabilities -}}
{{- $caps | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* Whether the agent runs a backend that reads other processes through /proc (hostPID). */}}
{{- define "spikehunt.agent.hostPID" -}}
{{- $c := .Values.agent.capture -}}
{{- if and $c.enabled (or $c.backends.perf $c.backends.bpftrace) -}}true{{- end -}}
{{- end -}}

{{/* Whether the agent GETs its Node for the hardware class label. */}}
{{- define "spikehunt.agent.readsNode" -}}
{{- if and .Values.agent.hwClass.nodeLabel (not .Values.agent.hwClass.value) -}}true{{- end -}}
{{- end -}}

{{/* Checks that span several values; called once from secrets.yaml. */}}
{{- define "spikehunt.validate" -}}
{{- $ds := .Values.grafana.datasource -}}
{{- if and $ds.enabled (not $ds.existingSecret) (not .Values.clickhouse.existingSecret) (eq $ds.username .Values.clickhouse.username) -}}
{{- fail "grafana.datasource.username is the ingest's ClickHouse user (clickhouse.username): give Grafana a read-only user of its own (values.yaml, grafana.datasource)" -}}
{{- end -}}
{{- if and (include "spikehunt.s3.enabled" .) (not .Values.s3.endpoint) -}}
{{- fail "s3.bucket is set but s3.endpoint is empty: give the S3 server as host or host:port" -}}
{{- end -}}
{{- if and (include "spikehunt.s3.keys" .) (not .Values.s3.existingSecret) (or (not .Values.s3.accessKeyId) (not .Values.s3.secretAccessKey)) -}}
{{- fail "s3.bucket is set: give s3.accessKeyId and s3.secretAccessKey, or s3.existingSecret, or s3.credentials: ambient (the pods' AWS identity: IRSA or EKS Pod Identity)" -}}
{{- end -}}
{{- if eq (.Values.s3.credentials | default "keys") "ambient" -}}
{{- $set := list -}}
{{- range $k := list "accessKeyId" "secretAccessKey" "existingSecret" -}}
{{- if index $.Values.s3 $k -}}{{- $set = append $set (printf "s3.%s" $k) -}}{{- end -}}
{{- end -}}
{{- with $set -}}
{{- fail (printf "s3.credentials is ambient (the pods' AWS identity), which takes no keys: remove %s, or set s3.credentials: keys" (join ", " .)) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.kafka.sasl.enabled (not .Values.kafka.sasl.existingSecret) (or (not .Values.kafka.sasl.username) (not .Values.kafka.sasl.password)) -}}
{{- fail "kafka.sasl.enabled: give kafka.sasl.username and kafka.sasl.password, or kafka.sasl.existingSecret" -}}
{{- end -}}
{{- if and .Values.kafka.tls.clientCertSecret.name (not .Values.kafka.tls.enabled) -}}
{{- fail "kafka.tls.clientCertSecret is set but kafka.tls.enabled is false" -}}
{{- end -}}
{{- if and .Values.kafka.tls.dangerousSkipVerify .Values.kafka.tls.caSecret.name -}}
{{- fail "kafka.tls.dangerousSkipVerify ignores kafka.tls.caSecret: drop one or the other" -}}
{{- end -}}
{{- $in := .Values.agent.intake -}}
{{- if and .Values.agent.enabled (not (or $in.otlpGrpc.enabled $in.otlpHttp.enabled $in.lineUdp.enabled $in.lineUnix.enabled)) -}}
{{- fail "agent.intake: enable at least one of otlpGrpc, otlpHttp, lineUdp, lineUnix (the agent refuses to start without a receiver)" -}}
{{- end -}}
{{- if and .Values.agent.enabled $in.lineUdp.enabled (not $in.auth.allowUnauthenticated) -}}
{{- fail "agent.intake.lineUdp listens on the node's IP, and a UDP datagram carries no credential: use the unix socket (agent.intake.lineUnix) from the apps' pods, or set agent.intake.auth.allowUnauthenticated: true for a network you trust" -}}
{{- end -}}
{{- if and .Values.agent.enabled $in.auth.existingSecret $in.auth.allowUnauthenticated -}}
{{- fail "agent.intake.auth.existingSecret names a token, but agent.intake.auth.allowUnauthenticated turns tokens off: drop one or the other" -}}
{{- end -}}
{{- if and .Values.agent.enabled (eq .Values.agent.sink "otlp") (not .Values.otelGateway.enabled) -}}
{{- fail "agent.sink: otlp exports through the gateway: set otelGateway.enabled: true (or agent.sink: kafka)" -}}
{{- end -}}
{{- if and .Values.operator.enabled .Values.operator.webhook.enabled (not .Values.operator.webhook.tlsSecretName) -}}
{{- fail "operator.webhook.enabled: the webhook is HTTPS only; give operator.webhook.tlsSecretName (a kubernetes.io/tls Secret, e.g. from a cert-manager Certificate)" -}}
{{- end -}}
{{- $wh := .Values.operator.webhook -}}
{{- if and .Values.operator.enabled $wh.enabled (not $wh.grafana.enabled) (not $wh.alertmanager.enabled) -}}
{{- fail "operator.webhook.enabled: enable operator.webhook.grafana or operator.webhook.alertmanager" -}}
{{- end -}}
{{- if and .Values.operator.enabled $wh.enabled (not $wh.existingSecret) -}}
{{- if and $wh.grafana.enabled (not $wh.grafana.hmacSecret) -}}
{{- fail "operator.webhook.grafana.enabled: give operator.webhook.grafana.hmacSecret (the contact point's HMAC secret) or operator.webhook.existingSecret" -}}
{{- end -}}
{{- if and $wh.alertmanager.enabled (not $wh.alertmanager.token) -}}
{{- fail "operator.webhook.alertmanager.enabled: give operator.webhook.alertmanager.token or operator.webhook.existingSecret" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.operator.enabled (gt (int .Values.operator.replicas) 1) (not .Values.operator.leaderElection) -}}
{{- fail "operator.replicas > 1 needs operator.leaderElection: replicas without it would all act on the same policies" -}}
{{- end -}}
{{- $sig := .Values.alertSigning -}}
{{- if and (include "spikehunt.alertSigning.enabled" .) (not $sig.existingSecret) (not (has $sig.currentKeyId $sig.keyIds)) -}}
{{- fail (printf "alertSigning.currentKeyId %q is not one of alertSigning.keyIds %v: add it there first (the operator must hold a key before the detector signs with it)" $sig.currentKeyId $sig.keyIds) -}}
{{- end -}}
{{- if and (include "spikehunt.alertSigning.enabled" .) (not $sig.currentKeyId) -}}
{{- fail "alertSigning.currentKeyId is empty: name the key the detector signs with" -}}
{{- end -}}
{{- $c := .Values.clickhouse -}}
{{- if and (include "spikehunt.clickhouse.embedded" .) $c.cluster -}}
{{- fail "clickhouse.cluster names a ClickHouse cluster: give clickhouse.host (one of its servers, or the cluster's Service); the embedded store is one server" -}}
{{- end -}}
{{- if and (not $c.host) $c.existingSecret (not $c.existingSecretKeys.dsn) -}}
{{- fail "clickhouse.existingSecret without a dsn key (existingSecretKeys.dsn empty) needs clickhouse.host: the DSN is composed from it" -}}
{{- end -}}
{{- if and .Values.clickhouse.cluster (not .Values.clickhouse.database) -}}
{{- fail "clickhouse.cluster needs clickhouse.database: Distributed tables name their database" -}}
{{- end -}}
{{- end -}}

{{/*
Alert signing (values alertSigning): "true" when a component that sends or
reads the alerts topic runs and unsigned alerts are not allowed.
*/}}
{{- define "spikehunt.alertSigning.enabled" -}}
{{- $v := .Values -}}
{{- if and (not $v.alertSigning.allowUnsigned) (or (and $v.detect.enabled $v.detect.alerts) (and $v.operator.enabled $v.operator.alerts.kafka.enabled)) -}}
true
{{- end -}}
{{- end -}}

{{- define "spikehunt.alertSigning.secretName" -}}
{{- .Values.alertSigning.existingSecret | default (printf "%s-alert-signing" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{/*
A checksum of what selects the keys, for the pods that read them at start:
a rotation in values rolls them. The keys themselves are not in the
values.
*/}}
{{- define "spikehunt.alertSigning.checksum" -}}
{{- $s := .Values.alertSigning -}}
{{- printf "%s|%s|%s|%v" $s.existingSecret (join "," $s.keyIds) $s.currentKeyId $s.allowUnsigned | sha256sum -}}
{{- end -}}

{{/*
The operator's capture report server (operator.reportServer): on when
enabled, with the bucket to read the artifacts from and users to let in;
the server itself refuses to start without users.
*/}}
{{- define "spikehunt.operator.reportServer" -}}
{{- $r := .Values.operator.reportServer -}}
{{- if and .Values.operator.enabled $r.enabled (include "spikehunt.s3.enabled" .) (or $r.usersSecret $r.users) -}}true{{- end -}}
{{- end -}}

{{- define "spikehunt.operator.reportUsersSecret" -}}
{{- .Values.operator.reportServer.usersSecret | default (printf "%s-report-users" (include "spikehunt.fullname" .)) -}}
{{- end -}}

{{/* The users file the chart writes from operator.reportServer.users. */}}
{{- define "spikehunt.operator.reportUsersFile" -}}
{{- $users := list -}}
{{- range .Values.operator.reportServer.users -}}
{{- $users = append $users (dict "name" .name "password_hash" .passwordHash "namespaces" .namespaces) -}}
{{- end -}}
{{- toYaml (dict "users" $users) -}}
{{- end -}}
