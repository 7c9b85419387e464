"""The API status of a pod, computed from its spec and what the runtime holds: the Go
kubelet's generateAPIPodStatus (container statuses, phase, conditions, IPs, QoS class).

Pure: the pod worker passes in what only it knows (why a container is waiting, probe
results, the time, whether the active deadline passed) and hands the result to the status
manager.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from pykubelet.messages.pod import (
    Container,
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    Pod,
    PodCondition,
    PodIP,
    PodStatus,
    ResourceRequirements,
)
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus

from .actions import has_any_regular_container_created, is_sidecar, restart_policy, sandbox_changed
from .active_deadline import DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE
from .conditions import (
    KUBELET_CONDITIONS,
    POD_READY_TO_START_CONTAINERS,
    POD_SCHEDULED,
    containers_ready_condition,
    initialized_condition,
    ready_condition,
)
from .phases import FAILED, PENDING, RUNNING, SUCCEEDED, TERMINAL_PHASES
from .resources import qos_class

# Waiting reasons (Go: kubelet_pods.go, kuberuntime and images error names).
CONTAINER_CREATING = "ContainerCreating"
POD_INITIALIZING = "PodInitializing"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL = "ErrImageNeverPull"
INVALID_IMAGE_NAME = "InvalidImageName"
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
CREATE_CONTAINER_ERROR = "CreateContainerError"
RUN_CONTAINER_ERROR = "RunContainerError"
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"


CONFIG_SOURCE_ANNOTATION = "kubernetes.io/config.source"


def rfc3339(seconds: float) -> str:
    """Unix seconds as the API's RFC 3339 UTC timestamp, to the second."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(seconds: float | None) -> str | None:
    return rfc3339(seconds) if seconds else None


# --- the pod status ---------------------------------------------------------------------


def compute_pod_status(
    pod: Pod,
    runtime: PodRuntimeStatus,
    *,
    waiting: Mapping[str, tuple[str, str]],
    runtime_name: str,
    now: str,
    host_ip: str,
    previous: PodStatus | None = None,
    ready: Mapping[str, bool] | None = None,
    started: Mapping[str, bool] | None = None,
    pod_is_terminal: bool = False,
    active_deadline_exceeded: bool = False,
    evicted: KubeletFailure | None = None,
    resize_pending: PodCondition | None = None,
) -> PodStatus:
    """The pod's API status.

    waiting: container name -> (reason, message) for containers the worker could not
        start (ContainerCreating, CrashLoopBackOff, ErrImagePull, ...); used for a
        container that is to be (re)started, as Go's reason cache.
    ready / started: container name -> readiness / startup probe result. Absent: a
        running container without that probe passes it; with the probe, it does not yet.
    previous: the last status computed for this pod (else pod.status is used): keeps
        restart counts, condition transition times, startTime and a terminal phase.
    pod_is_terminal: the worker decided the pod is done (Go's podIsTerminal): all
        stopped containers then make the pod Succeeded or Failed whatever the policy.
    active_deadline_exceeded: the pod is past its activeDeadlineSeconds (see
        active_deadline.past_active_deadline): phase Failed, reason DeadlineExceeded (Go:
        the active deadline handler's ShouldEvict).
    evicted: the eviction manager's verdict: phase Failed with its reason and message, and
        a DisruptionTarget condition when it carries one (Go: the status killPodFunc sets).
    resize_pending: the PodResizePending condition of a resize that does not fit the node.

    Conditions the kubelet does not own (readiness gates' and others') are kept as the
    API holds them in pod.status; Ready also waits for every readiness gate's condition.
    """
    old = previous if previous is not None else pod.status
    ctx = _Context(pod, runtime, waiting, runtime_name, ready or {}, started or {})
    init_statuses = ctx.container_statuses(
        pod.spec.init_containers, old.init_container_statuses, is_init=True
    )
    app_statuses = ctx.container_statuses(pod.spec.containers, old.container_statuses, is_init=False)
    all_statuses = init_statuses + app_statuses

    phase = pod_phase(
        pod,
        all_statuses,
        pod_has_initialized=_active_regular_container_exists(pod, runtime),
        pod_is_terminal=pod_is_terminal,
    )
    if phase not in TERMINAL_PHASES:
        # Terminal phases are final: never leave one once reported.
        if old.phase in TERMINAL_PHASES:
            phase = old.phase
        elif pod.status.phase in TERMINAL_PHASES:
            phase = pod.status.phase
    reason = message = ""
    if phase == old.phase:
        reason = old.reason or pod.status.reason
        message = old.message or pod.status.message
    if active_deadline_exceeded:
        phase, reason, message = FAILED, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE
    if evicted is not None:
        phase, reason, message = FAILED, evicted.reason, evicted.message
    if pod.status.phase in TERMINAL_PHASES and phase != pod.status.phase:
        phase = pod.status.phase  # the API's terminal phase is final (Go keeps the reason)

    kept = [c for c in pod.status.conditions if c.type not in KUBELET_CONDITIONS]
    if evicted is not None and evicted.condition is not None:
        kept = [c for c in kept if c.type != evicted.condition.type]
        kept.append(_with_transition_time(evicted.condition, old.conditions, now))
    ready_to_start = PodCondition(
        type=POD_READY_TO_START_CONTAINERS, status="False" if sandbox_changed(runtime)[0] else "True"
    )
    initialized = initialized_condition(pod, all_statuses, phase)
    generated = [
        ready_to_start,
        initialized,
        # Go looks the gates up in the conditions built so far: the kept ones, then these.
        ready_condition(pod, all_statuses, phase, [*kept, ready_to_start, initialized]),
        containers_ready_condition(pod, all_statuses, phase),
        PodCondition(type=POD_SCHEDULED, status="True"),
        *([resize_pending] if resize_pending is not None else []),
    ]
    conditions = kept + [_with_transition_time(c, old.conditions, now) for c in generated]

    pod_ip = runtime.ip if runtime.sandboxes and runtime.sandboxes[0].state == "ready" else ""
    if not pod_ip and pod.spec.host_network:
        pod_ip = host_ip
    pod_ips = [PodIP(ip=pod_ip)] if pod_ip else []
    if not pod_ip and old.pod_ip:
        pod_ip, pod_ips = old.pod_ip, list(old.pod_ips) or [PodIP(ip=old.pod_ip)]

    return PodStatus(
        phase=phase,
        conditions=conditions,
        reason=reason,
        message=message,
        host_ip=host_ip,
        pod_ip=pod_ip,
        pod_ips=pod_ips,
        start_time=old.start_time or pod.status.start_time or now,
        init_container_statuses=init_statuses,
        container_statuses=app_statuses,
        qos_class=qos_class(pod),
    )


@dataclass(frozen=True)
class KubeletFailure:
    """A pod the kubelet ends Failed on its own (eviction): reason, message, and a condition
    to add (DisruptionTarget)."""

    reason: str
    message: str
    condition: PodCondition | None = None


def ran_before(pod: Pod) -> bool:
    """The API status names a container the runtime made (a kubelet before this one ran
    the pod). Its status is then not to be computed from a runtime that could not be read:
    the empty view would make every running container a lost one, and a restartPolicy
    Never pod Failed for good (Go computes no status until the PLEG has read the pod)."""
    return any(s.container_id for s in (*pod.status.init_container_statuses, *pod.status.container_statuses))


def _resources_of(spec: Container) -> tuple[dict[str, str] | None, ResourceRequirements | None]:
    """A running container's allocatedResources (its requests, a missing one its limit) and
    resources (what the kubelet applied: its spec's, resized in place when it changes)."""
    if spec.resources is None or not (spec.resources.requests or spec.resources.limits):
        return None, None
    requests = {**spec.resources.limits, **spec.resources.requests}
    applied = ResourceRequirements(requests=requests, limits=dict(spec.resources.limits))
    return requests or None, applied


def _with_transition_time(condition: PodCondition, old: list[PodCondition], now: str) -> PodCondition:
    for previous in old:
        same = previous.type == condition.type and previous.status == condition.status
        if same and previous.last_transition_time:
            return _replace(condition, last_transition_time=previous.last_transition_time)
    return _replace(condition, last_transition_time=now)


def _replace(condition: PodCondition, **changes: object) -> PodCondition:
    return msgspec.structs.replace(condition, **changes)


def _active_regular_container_exists(pod: Pod, runtime: PodRuntimeStatus) -> bool:
    """Go's HasAnyActiveRegularContainerStarted: an app container in the current sandbox
    (approximated as created no earlier than the current sandbox)."""
    names = {c.name for c in pod.spec.containers}
    since = runtime.sandboxes[0].created_at if runtime.sandboxes else float("-inf")
    return any(c.name in names and c.created_at >= since for c in runtime.containers)


# --- container statuses -----------------------------------------------------------------


class _Context:
    def __init__(
        self,
        pod: Pod,
        runtime: PodRuntimeStatus,
        waiting: Mapping[str, tuple[str, str]],
        runtime_name: str,
        ready: Mapping[str, bool],
        started: Mapping[str, bool],
    ) -> None:
        self.pod = pod
        self.runtime = runtime
        self.waiting = waiting
        self.runtime_name = runtime_name
        self.ready = ready
        self.started = started

    def container_statuses(
        self, containers: list[Container], previous: list[ContainerStatus], *, is_init: bool
    ) -> list[ContainerStatus]:
        """Go's convertToAPIContainerStatuses for one container list."""
        old = {s.name: s for s in previous}
        has_init = bool(self.pod.spec.init_containers)
        out = []
        for container in containers:
            status = self._container_status(container, old.get(container.name), has_init, is_init)
            out.append(self._with_probes(container, status, is_init))
        if not is_init:
            out.sort(key=lambda s: s.name)  # Go: SortedContainerStatuses
        return out

    def _container_status(
        self, container: Container, old: ContainerStatus | None, has_init: bool, is_init: bool
    ) -> ContainerStatus:
        default_reason = POD_INITIALIZING if has_init else CONTAINER_CREATING
        default = ContainerState(waiting=ContainerStateWaiting(reason=default_reason))
        status = ContainerStatus(
            name=container.name, ready=False, restart_count=0, image=container.image, state=default
        )
        if old is not None:
            if old.state.terminated is not None:
                status = _copy(old)
            else:
                status.restart_count = old.restart_count
                status.last_state = old.last_state

        ran = [c for c in self.runtime.containers if c.name == container.name]  # newest first
        if not ran and old is not None and old.state.running is not None and old.state.terminated is None:
            # It ran, and the runtime lost it: say it stopped, or the pod would go Pending.
            if status.state.waiting is not None and status.state.waiting.reason == default.waiting.reason \
                    and status.last_state.terminated is None:
                status.last_state = ContainerState(terminated=ContainerStateTerminated(
                    exit_code=137,
                    reason=CONTAINER_STATUS_UNKNOWN,
                    message="The container could not be located when the pod was deleted.  "
                    "The container used to be Running",
                ))
                if self.pod.metadata.deletion_timestamp is None:
                    status.restart_count += 1

        for seen, runtime_container in enumerate(ran[:2]):
            converted = self._convert(container, runtime_container, old)
            if seen == 0:
                status = converted
            else:
                status.last_state = converted.state

        latest = ran[0] if ran else None
        if is_init:
            if latest is not None and latest.state == "exited" and latest.exit_code == 0:
                return status
            if latest is None and not is_sidecar(container) and status.state.waiting is not None \
                    and has_any_regular_container_created(self.pod, self.runtime):
                # Removed from the runtime after the pod initialized: it completed.
                status.state = ContainerState(terminated=ContainerStateTerminated(
                    exit_code=0,
                    reason="Completed",
                    message="Unable to get init container status from container runtime and pod has "
                    "been initialized, treat it as exited normally",
                ))
                return status
        if container.name in self.waiting and _will_start(container, self.pod, latest):
            reason, message = self.waiting[container.name]
            if status.state.terminated is not None:
                status.last_state = status.state
            status.state = ContainerState(waiting=ContainerStateWaiting(reason=reason, message=message))
        return status

    def _convert(
        self, spec: Container, c: ContainerRuntimeStatus, old: ContainerStatus | None
    ) -> ContainerStatus:
        container_id = f"{self.runtime_name}://{c.id}"
        status = ContainerStatus(
            name=c.name,
            ready=False,
            restart_count=c.restart_count,
            image=spec.image or c.image,
            image_id=c.image_ref,
            container_id=container_id,
        )
        if c.state == "running":
            status.state = ContainerState(running=ContainerStateRunning(started_at=_time(c.started_at)))
            status.allocated_resources, status.resources = _resources_of(spec)
        elif c.state == "created":
            status.state = ContainerState(waiting=ContainerStateWaiting(reason=CONTAINER_CREATING))
        elif c.state == "exited":
            exit_code = c.exit_code or 0
            status.state = ContainerState(terminated=ContainerStateTerminated(
                exit_code=exit_code,
                reason=c.reason or ("Completed" if exit_code == 0 else "Error"),
                message=c.message,
                started_at=_time(c.started_at),
                finished_at=_time(c.finished_at),
                container_id=container_id,
            ))
        elif old is not None and old.state.running is not None:
            # Unknown now, running before: it ran and we lost it; do not pretend it never ran.
            status.state = ContainerState(terminated=ContainerStateTerminated(
                exit_code=137,
                reason=CONTAINER_STATUS_UNKNOWN,
                message="The container could not be located when the pod was terminated",
            ))
            status.restart_count = old.restart_count + 1
        else:
            status.state = ContainerState(waiting=ContainerStateWaiting())
        return status

    def _with_probes(self, container: Container, status: ContainerStatus, is_init: bool) -> ContainerStatus:
        """started and ready, as Go's prober manager fills them in."""
        running = status.state.running is not None
        started = running and self.started.get(container.name, container.startup_probe is None)
        status.started = started
        if is_init and not is_sidecar(container):
            terminated = status.state.terminated
            status.ready = terminated is not None and terminated.exit_code == 0
        else:
            status.ready = started and self.ready.get(container.name, container.readiness_probe is None)
        return status


def _copy(status: ContainerStatus) -> ContainerStatus:
    return msgspec.structs.replace(status)


def _will_start(container: Container, pod: Pod, latest: ContainerRuntimeStatus | None) -> bool:
    """ShouldContainerBeRestarted for one container; a sidecar restarts whatever the
    pod's policy."""
    if pod.metadata.deletion_timestamp is not None:
        return False
    if latest is None or latest.state in ("unknown", "created"):
        return True
    if latest.state == "running":
        return False
    policy = "Always" if is_sidecar(container) else restart_policy(pod)
    if policy == "Never":
        return False
    return not (policy == "OnFailure" and (latest.exit_code or 0) == 0)


# --- phase ------------------------------------------------------------------------------


def is_static_pod(pod: Pod) -> bool:
    source = pod.metadata.annotations.get(CONFIG_SOURCE_ANNOTATION, "")
    return source not in ("", "api")


def pod_phase(
    pod: Pod, statuses: list[ContainerStatus], *, pod_has_initialized: bool, pod_is_terminal: bool = False
) -> str:
    """Go's getPhase, from the API container statuses (init and app containers)."""
    by_name = {s.name: s for s in statuses}
    policy = restart_policy(pod)

    pending_init = failed_init = pending_sidecars = 0
    for container in pod.spec.init_containers:
        if is_sidecar(container):
            continue
        s = by_name.get(container.name)
        if s is None or s.state.running is not None:
            pending_init += 1
        elif s.state.terminated is not None:
            failed_init += s.state.terminated.exit_code != 0
        elif s.state.waiting is not None and s.last_state.terminated is not None:
            failed_init += s.last_state.terminated.exit_code != 0
        else:
            pending_init += 1

    unknown = running = waiting = stopped = succeeded = 0
    for container in pod.spec.init_containers:
        if not is_sidecar(container):
            continue
        s = by_name.get(container.name)
        if s is None:
            unknown += 1
        elif s.state.running is not None:
            if not s.started:
                pending_sidecars += 1
            running += 1
        elif s.state.terminated is not None:
            pass  # a stopped sidecar does not count for the phase
        elif s.state.waiting is not None:
            if s.last_state.terminated is None:
                pending_sidecars += 1
                waiting += 1
        else:
            pending_sidecars += 1
            unknown += 1

    for container in pod.spec.containers:
        s = by_name.get(container.name)
        if s is None:
            unknown += 1
        elif s.state.running is not None:
            running += 1
        elif s.state.terminated is not None:
            stopped += 1
            succeeded += s.state.terminated.exit_code == 0
        elif s.state.waiting is not None:
            if s.last_state.terminated is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1

    if failed_init and policy == "Never":
        return FAILED
    if pending_init or (pending_sidecars and not pod_has_initialized) or waiting:
        return PENDING
    if running and not unknown:
        return RUNNING
    if not running and stopped and not unknown:
        if pod_is_terminal and not is_static_pod(pod):
            return SUCCEEDED if stopped == succeeded else FAILED
        if policy == "Always":
            return RUNNING  # all restarting
        if stopped == succeeded:
            return SUCCEEDED
        if policy == "Never":
            return FAILED
        return RUNNING  # OnFailure: the failed ones restart
    return PENDING
