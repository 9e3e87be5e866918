{{/* Names, labels and the pieces the instance templates share. */}}

{{- define "reactor.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's base name: the release name, with the chart name unless it already holds it. */}}
{{- define "reactor.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "reactor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "reactor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
reactor.dev/app: {{ .Values.app.name | quote }}
{{- end -}}

{{- define "reactor.instanceSelector" -}}
app.kubernetes.io/name: {{ include "reactor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: instance
{{- end -}}

{{- define "reactor.routerSelector" -}}
app.kubernetes.io/name: {{ include "reactor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: router
{{- end -}}

{{- define "reactor.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret that holds the token. */}}
{{- define "reactor.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-token" (include "reactor.fullname" .)) -}}
{{- end -}}

{{/* Checks across values that a JSON schema cannot express; each failure says how to fix it. */}}
{{- define "reactor.validate" -}}
{{- if and (not .Values.auth.existingSecret) (not .Values.auth.token) -}}
{{- fail "auth: set auth.existingSecret (a Secret holding the token under auth.secretKey) or auth.token (at least 16 characters): every instance binds 0.0.0.0 and refuses to start without a token" -}}
{{- end -}}
{{- if and .Values.auth.token (lt (len .Values.auth.token) 16) -}}
{{- fail (printf "auth.token is %d characters long: reactor run refuses a token under 16 characters; use a longer one (e.g. openssl rand -hex 24)" (len .Values.auth.token)) -}}
{{- end -}}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int .Values.sessionGraceSeconds) -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) is below sessionGraceSeconds (%d): Kubernetes would SIGKILL an instance before its session's grace period is over; raise terminationGracePeriodSeconds" (int .Values.terminationGracePeriodSeconds) (int .Values.sessionGraceSeconds)) -}}
{{- end -}}
{{- if and .Values.agones.enabled (eq (int .Values.app.port) 8080) -}}
{{- fail "app.port is 8080: in a GameServer pod the Agones SDK sidecar's health server listens on :8080 (Agones' probes hard-code it), so the two would clash; use another port (the default is 8000)" -}}
{{- end -}}
{{- if and .Values.agones.enabled (ge (int .Values.agones.drainSeconds) (int .Values.terminationGracePeriodSeconds)) -}}
{{- fail (printf "agones.drainSeconds (%d) is not below terminationGracePeriodSeconds (%d): Kubernetes would SIGKILL a draining instance before its session's deadline; lower drainSeconds or raise terminationGracePeriodSeconds" (int .Values.agones.drainSeconds) (int .Values.terminationGracePeriodSeconds)) -}}
{{- end -}}
{{- if and .Values.agones.enabled .Values.agones.autoscaler.enabled (gt (int .Values.agones.autoscaler.minReplicas) (int .Values.agones.autoscaler.maxReplicas)) -}}
{{- fail (printf "agones.autoscaler.minReplicas (%d) is above maxReplicas (%d)" (int .Values.agones.autoscaler.minReplicas) (int .Values.agones.autoscaler.maxReplicas)) -}}
{{- end -}}
{{- if and .Values.agones.enabled .Values.agones.autoscaler.enabled (kindIs "int64" .Values.agones.autoscaler.bufferSize) -}}
{{- if gt (int .Values.agones.autoscaler.bufferSize) (int .Values.agones.autoscaler.maxReplicas) -}}
{{- fail (printf "agones.autoscaler.bufferSize (%d) is above maxReplicas (%d): the buffer of warm instances could never be reached" (int .Values.agones.autoscaler.bufferSize) (int .Values.agones.autoscaler.maxReplicas)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The instance container: `reactor run` on 0.0.0.0:app.port with the token from the Secret,
probes on /health/live and /health/ready, /dev/shm as a memory-backed emptyDir.
Call with (dict "root" $ "agones" true|false).
*/}}
{{- define "reactor.instanceContainer" -}}
{{- $v := .root.Values -}}
image: {{ include "reactor.image" .root }}
imagePullPolicy: {{ $v.image.pullPolicy }}
args:
  - run
  {{- if .agones }}
  - --agones
  {{- end }}
  - --manifest
  - {{ $v.app.manifest | quote }}
  - --host
  - 0.0.0.0
  - --port
  - {{ $v.app.port | quote }}
  {{- range $v.auth.allowedOrigins }}
  - --allowed-origin
  - {{ . | quote }}
  {{- end }}
  {{- range $v.app.extraArgs }}
  - {{ . | quote }}
  {{- end }}
{{- if not .agones }}
{{- /* Under Agones the Fleet's ports[] declares the container port (Agones adds it to the container): not twice. */}}
ports:
  - name: http
    containerPort: {{ $v.app.port }}
    protocol: TCP
  {{- if $v.webrtc.enabled }}
  # WebRTC media, straight to this pod on the node's address.
  - name: webrtc
    containerPort: {{ $v.webrtc.port }}
    hostPort: {{ $v.webrtc.port }}
    protocol: UDP
  {{- end }}
{{- end }}
env:
  - name: REACTOR_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ include "reactor.secretName" .root }}
        key: {{ $v.auth.secretKey }}
  - name: NVIDIA_DRIVER_CAPABILITIES
    value: {{ $v.gpu.driverCapabilities | quote }}
  {{- if $v.gpu.slotHostPath }}
  # gpu.sessions_per_gpu: the slot folder every instance of this node shares (gpu.slotHostPath).
  - name: REACTOR_GPU_SLOT_DIR
    value: /var/run/reactor/gpu-slots
  {{- end }}
  {{- if .agones }}
  # The drain's deadline for a running session after SIGTERM (agones.drainSeconds).
  - name: REACTOR_DRAIN_TIMEOUT_MS
    value: {{ mul (int $v.agones.drainSeconds) 1000 | quote }}
  {{- end }}
  {{- if and $v.webrtc.enabled (not .agones) }}
  # WebRTC (plain variant): the hostPort above, advertised on the node's IP. werift refuses a
  # one-port range and binds a range's first port first: the advertised address gets the
  # hostPort, the pod's own address the next one (not forwarded).
  - name: REACTOR_WEBRTC_UDP_PORT_RANGE
    value: {{ printf "%d-%d" (int $v.webrtc.port) (add1 (int $v.webrtc.port)) | quote }}
  - name: REACTOR_WEBRTC_ADVERTISE_ADDRESS
    valueFrom:
      fieldRef:
        fieldPath: status.hostIP
  {{- end }}
  {{- with $v.webrtc.iceServers }}
  - name: REACTOR_WEBRTC_ICE_SERVERS
    value: {{ toJson . | quote }}
  {{- end }}
  {{- if ne $v.webrtc.iceTransportPolicy "all" }}
  - name: REACTOR_WEBRTC_ICE_TRANSPORT_POLICY
    value: {{ $v.webrtc.iceTransportPolicy | quote }}
  {{- end }}
  {{- with $v.app.env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- if not .agones }}
{{- /* Under Agones no liveness (nor startup) probe: Agones then injects its own /gshealthz probe and acts on missed Health() pings. */}}
startupProbe:
  httpGet:
    path: /health/live
    port: http
  periodSeconds: {{ $v.probes.startup.periodSeconds }}
  timeoutSeconds: {{ $v.probes.startup.timeoutSeconds }}
  failureThreshold: {{ $v.probes.startup.failureThreshold }}
livenessProbe:
  httpGet:
    path: /health/live
    port: http
  periodSeconds: {{ $v.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ $v.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ $v.probes.liveness.failureThreshold }}
{{- end }}
readinessProbe:
  httpGet:
    path: /health/ready
    port: {{ if .agones }}{{ $v.app.port }}{{ else }}http{{ end }}
  periodSeconds: {{ $v.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ $v.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ $v.probes.readiness.failureThreshold }}
resources:
  {{- $res := deepCopy $v.resources }}
  {{- if gt (int $v.gpu.count) 0 }}
  {{- $limits := $res.limits | default dict }}
  {{- /* A quantity: quoted, as Agones' schema of the pod template has it. */}}
  {{- $_ := set $limits $v.gpu.resourceName (printf "%d" (int $v.gpu.count)) }}
  {{- $_ := set $res "limits" $limits }}
  {{- $requests := $res.requests | default dict }}
  {{- $_ := set $requests $v.gpu.resourceName (printf "%d" (int $v.gpu.count)) }}
  {{- $_ := set $res "requests" $requests }}
  {{- end }}
  {{- toYaml $res | nindent 2 }}
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: [ALL]
volumeMounts:
  - name: shm
    mountPath: /dev/shm
  {{- if $v.gpu.slotHostPath }}
  - name: gpu-slots
    mountPath: /var/run/reactor/gpu-slots
  {{- end }}
{{- end -}}

{{/* The instance pod's spec fields besides its containers. Call with the root context. */}}
{{- define "reactor.instancePodFields" -}}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
volumes:
  - name: shm
    emptyDir:
      medium: Memory
      sizeLimit: {{ .Values.shm.sizeLimit }}
  {{- if .Values.gpu.slotHostPath }}
  - name: gpu-slots
    hostPath:
      path: {{ .Values.gpu.slotHostPath | quote }}
      type: DirectoryOrCreate
  {{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "reactor.podAnnotations" -}}
{{- $a := deepCopy .Values.podAnnotations -}}
{{- if .Values.gpu.type -}}
{{- $_ := set $a "reactor.dev/gpu-type" .Values.gpu.type -}}
{{- end -}}
{{- $_ := set $a "reactor.dev/gpu-count" (toString .Values.gpu.count) -}}
{{- toYaml $a -}}
{{- end -}}

{{/*
The FleetAutoscaler's minReplicas as rendered: agones.autoscaler.minReplicas, raised to a count
bufferSize (unless 0) and to 1 for a percentage bufferSize, since Agones' webhook
(ValidateBufferPolicy in pkg/apis/autoscaling/v1/fleetautoscaler.go) refuses less.
*/}}
{{- define "reactor.autoscalerMinReplicas" -}}
{{- $a := .Values.agones.autoscaler }}
{{- $min := int $a.minReplicas }}
{{- if kindIs "string" $a.bufferSize }}
{{- $min = max $min 1 | int }}
{{- else if and (ne $min 0) (lt $min (int $a.bufferSize)) }}
{{- $min = int $a.bufferSize }}
{{- end }}
{{- $min }}
{{- end }}
