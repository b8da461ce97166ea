"""KWOK's part: the Stages that play what a kubelet would do to the simulated nodes and pods.

KWOK (sigs.k8s.io/kwok, pkg/apis/v1alpha1/stage_types.go at v0.8.0) moves an object through a Stage when the
Stage's selector matches it: it patches the status with the Stage's ``statusTemplate`` (a Go template over the
object, with KWOK's functions ``Now``, ``Quote``, ``NodeConditions``, ``NodeIP``, ``NodePort``, ``NodeIPsWith``,
``PodIPsWith``, ``YAML``), or deletes it. These Stages make:

- a Node Ready, with the capacity it was created with, its kubelet endpoint at KWOK's server, and kept Ready by a
  heartbeat every 10-15 s (without one the node lifecycle controller marks it NotReady after 50 s);
- a scheduled pod Running (sidecars running, other init containers completed), on the node's IP for hostNetwork,
  and Ready again 10 s after the node lifecycle controller marked it not Ready (a heartbeat came late), as a
  kubelet's status manager puts its own status back;
- a running pod end when it carries the annotation EXIT_CODE: every container terminated with that code (or only
  the container EXIT_CONTAINER names, the others with 0), phase Failed, or Succeeded for 0, as a kubelet reports
  a pod of restartPolicy Never whose containers ended;
- a deleted pod (deletionTimestamp set) that still runs end as a kubelet stops it: SIGTERM to each container's
  first process, SIGKILL once the grace period is over (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go
  ``killContainer``). Whether the SIGTERM ends a process is the kernel's to say: a container's first process that is
  PID 1 of its own PID namespace receives a signal from outside only when it has a handler for it
  (pid_namespaces(7)); in a pod with ``shareProcessNamespace: true`` the pause container is PID 1 and the others
  are ordinary processes. So a pod with ``shareProcessNamespace: true``, or whose program handles SIGTERM (the
  annotation ON_SIGTERM: the code it exits with), ends a second later with 143 (or that code); any other pod's
  processes, PID 1 without a handler, run until the grace period is over and end with 137 at the pod's
  deletionTimestamp (now plus the grace period: KWOK's ``durationFrom`` takes a timestamp's distance from now).
  The native sidecars end with them, after the regular containers as the kubelet orders them (KEP-753; their own
  SIGTERM comes only once the regular containers ended), with the code the same rule gives them. A pod deleted
  while still Pending ends a second later with 143 (its containers never ran; not modelled further). Then the
  pod goes away (KWOK deletes it; the Job controller's finalizer still holds it until it counted it).
"""

from __future__ import annotations

EXIT_CODE = "pwdeploy.test/exit-code"
EXIT_CONTAINER = "pwdeploy.test/exit-container"
ON_SIGTERM = "pwdeploy.test/on-sigterm"  # the pod's program handles SIGTERM and exits with this code

_NODE_READY = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      addresses:
      - type: InternalIP
        address: {{ NodeIP | Quote }}
      - type: Hostname
        address: {{ .metadata.name | Quote }}
      daemonEndpoints:
        kubeletEndpoint:
          Port: {{ NodePort }}
      allocatable:
      {{ YAML .status.allocatable 1 }}
      capacity:
      {{ YAML .status.capacity 1 }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
        containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
        kernelVersion: ""
        kubeProxyVersion: ""
        osImage: ""
        machineID: ""
        systemUUID: ""
        bootID: ""
      phase: Running
"""

# A kubelet posts its node's status every 10 s (nodeStatusUpdateFrequency) and the node lifecycle controller marks
# a node whose heartbeat is older than --node-monitor-grace-period (50 s) NotReady: its pods' Ready turns False
# and, 5 minutes on, the unreachable taint evicts them. KWOK repeats this Stage on every Ready node (the delay
# starts again after each pass), so a node stays Ready for as long as a test needs it.
_NODE_HEARTBEAT = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']
  delay:
    durationMilliseconds: 10000
    jitterDurationMilliseconds: 5000
  immediateNextStage: true
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
      {{ end }}
"""

_POD_RUNNING = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Pending]
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        restartCount: 0
        {{ if eq .restartPolicy "Always" }}
        ready: true
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
        {{ else }}
        ready: true
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
        {{ end }}
      {{ end }}
      {{ with NodeIPsWith .spec.nodeName }}
      hostIP: {{ index . 0 | Quote }}
      hostIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      {{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" )
        ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ index . 0 | Quote }}
      podIPs:
      {{ range . }}
      - ip: {{ . | Quote }}
      {{ end }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
"""

# A kubelet is the source of truth of its pods' status: when the API server holds another (the node lifecycle
# controller marked the pods of a node whose heartbeat came late not Ready: MarkPodsNotReady,
# pkg/controller/util/node/controller_utils.go), its status manager puts its own back at its next sync, every 10 s
# (pkg/kubelet/status/status_manager.go: syncBatch, needsReconcile). KWOK applies each Stage once, so without this
# a pod whose node was late once under load stays not Ready (and its Job, its JobSet not ready) for good; with it
# the pod is Ready again 10 s later, as a kubelet's would be. Only a pod whose containers are all ready (the
# ContainersReady condition) is Ready.
_POD_READY_AGAIN = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready-again
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['False']
    - key: '.status.conditions.[] | select( .type == "ContainersReady" ) | .status'
      operator: In
      values: ['True']
  delay:
    durationMilliseconds: 10000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      {{ if eq .type "Ready" }}
      - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
      {{ else }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        {{ with .reason }}reason: {{ . | Quote }}{{ end }}
        {{ with .message }}message: {{ . | Quote }}{{ end }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
      {{ end }}
      {{ end }}
"""

# The pod's containers end: the one EXIT_CONTAINER names (every one without it) with EXIT_CODE, the others with 0.
_POD_EXIT = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-exit
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Running]
    - key: '.metadata.annotations["EXIT_CODE"]'
      operator: Exists
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := index .metadata.annotations "EXIT_CODE" }}
      {{ $only := or (index .metadata.annotations "EXIT_CONTAINER") "" }}
      {{ $failed := false }}
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      {{ $mine := or (eq $only "") (eq $only .name) }}
      {{ $exit := "0" }}
      {{ if $mine }}{{ $exit = $code }}{{ end }}
      {{ if ne $exit "0" }}{{ $failed = true }}{{ end }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{ $exit }}
            reason: {{ if eq $exit "0" }}Completed{{ else }}Error{{ end }}
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
      phase: {{ if $failed }}Failed{{ else }}Succeeded{{ end }}
""".replace("EXIT_CODE", EXIT_CODE).replace("EXIT_CONTAINER", EXIT_CONTAINER)

# Whether SIGTERM ends the pod's processes (jq: a bool the selector compares as "true"): they are not PID 1 of their
# containers (the pod shares its process namespace), or the program handles SIGTERM.
_SIGTERM_ENDS = '(.spec.shareProcessNamespace == true) or (.metadata.annotations["ON_SIGTERM"] != null)'

# A container that ended: its status in a stopped pod (name and image from the spec, the code from the caller).
_ENDED = """\
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: {{ $code }}
            reason: Error
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
"""

_STOPPED_STATUS = """\
      {{ $now := Now }}
      {{ $code := CODE }}
      conditions:
      - {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
ENDED      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      {{ if eq .restartPolicy "Always" }}
ENDED      {{ else }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        ready: true
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            startedAt: {{ $now | Quote }}
            finishedAt: {{ $now | Quote }}
      {{ end }}
      {{ end }}
      phase: Failed
""".replace("ENDED", _ENDED)


def _stopped(name: str, phase: str, operator: str | None, delay: str, code: str) -> str:
    """A Stage ending a deleted pod of ``phase`` (``operator``: In or NotIn whether SIGTERM ends its processes)."""
    sigterm = (
        f"""
    - key: '{_SIGTERM_ENDS}'
      operator: {operator}
      values: ['true']"""
        if operator
        else ""
    )
    status = _STOPPED_STATUS.replace("CODE", code)
    return f"""\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: {name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
    - key: .status.phase
      operator: In
      values: [{phase}]{sigterm}
  delay:
{delay}
  next:
    statusTemplate: |
{status}""".replace("ON_SIGTERM", ON_SIGTERM)


_SECOND = "    durationMilliseconds: 1000"
# The kubelet's SIGKILL: at the pod's deletionTimestamp (the delete's time plus its grace period).
_AT_DELETION = "    durationMilliseconds: 0\n    durationFrom:\n      expressionFrom: .metadata.deletionTimestamp"
# The program's own code when it handles SIGTERM, else 143 (a pod may have no annotations at all: index would fail).
_HANDLED = (
    f'"143" }}}}{{{{ with .metadata.annotations }}}}{{{{ with index . "{ON_SIGTERM}" }}}}{{{{ $code = . }}}}'
    "{{ end }}{{ end"
)
_POD_STOPPED_BY_SIGTERM = _stopped("pod-stopped-by-sigterm", "Running", "In", _SECOND, _HANDLED)
_POD_KILLED_AFTER_GRACE = _stopped("pod-killed-after-grace", "Running", "NotIn", _AT_DELETION, '"137"')
_POD_STOPPED_PENDING = _stopped("pod-stopped-pending", "Pending", None, _SECOND, '"143"')

_POD_GONE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-gone
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: Exists
    - key: .status.phase
      operator: In
      values: [Succeeded, Failed]
  next:
    delete: true
"""

STAGES = (
    _NODE_READY,
    _NODE_HEARTBEAT,
    _POD_RUNNING,
    _POD_READY_AGAIN,
    _POD_EXIT,
    _POD_STOPPED_BY_SIGTERM,
    _POD_KILLED_AFTER_GRACE,
    _POD_STOPPED_PENDING,
    _POD_GONE,
)


def config() -> str:
    """KWOK's --config: its Stages, one YAML document each."""
    return "---\n".join(STAGES)
