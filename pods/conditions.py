"""The pod conditions the kubelet owns and how it computes Ready, ContainersReady and
Initialized (Go: status/generate.go). Pure; pods/status.py assembles the status."""

from __future__ import annotations

from collections.abc import Sequence

from pykubelet.messages.pod import ContainerStatus, Pod, PodCondition

from .actions import is_sidecar
from .phases import FAILED, SUCCEEDED

# Condition types the kubelet owns, and their reasons (Go: status/generate.go).
POD_SCHEDULED = "PodScheduled"
POD_READY_TO_START_CONTAINERS = "PodReadyToStartContainers"
INITIALIZED = "Initialized"
CONTAINERS_READY = "ContainersReady"
READY = "Ready"
KUBELET_CONDITIONS = frozenset(
    {POD_SCHEDULED, POD_READY_TO_START_CONTAINERS, INITIALIZED, CONTAINERS_READY, READY, "PodResizePending"}
)
# Conditions others set too, which the kubelet sets when it evicts (Go: PodConditionSharedByKubelet).
SHARED_CONDITIONS = frozenset({"DisruptionTarget"})
CONTAINERS_NOT_READY = "ContainersNotReady"
CONTAINERS_NOT_INITIALIZED = "ContainersNotInitialized"
POD_COMPLETED = "PodCompleted"
POD_FAILED = "PodFailed"
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"


def _names(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"  # Go's %s of a []string


def containers_ready_condition(pod: Pod, statuses: list[ContainerStatus], phase: str) -> PodCondition:
    by_name = {s.name: s for s in statuses}
    unknown: list[str] = []
    unready: list[str] = []
    for container in [c for c in pod.spec.init_containers if is_sidecar(c)] + list(pod.spec.containers):
        s = by_name.get(container.name)
        if s is None:
            unknown.append(container.name)
        elif not s.ready:
            unready.append(container.name)
    if phase == SUCCEEDED and not unknown:
        return PodCondition(type=CONTAINERS_READY, status="False", reason=POD_COMPLETED)
    if phase == FAILED:
        return PodCondition(type=CONTAINERS_READY, status="False", reason=POD_FAILED)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_names(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {_names(unready)}")
    if messages:
        return PodCondition(
            type=CONTAINERS_READY, status="False", reason=CONTAINERS_NOT_READY, message=", ".join(messages)
        )
    return PodCondition(type=CONTAINERS_READY, status="True")


def ready_condition(
    pod: Pod, statuses: list[ContainerStatus], phase: str, conditions: Sequence[PodCondition] = ()
) -> PodCondition:
    """Go's GeneratePodReadyCondition: ContainersReady's status, reason and message while
    it is not True; then True only if each readiness gate's condition is in `conditions`
    with status True."""
    ready = containers_ready_condition(pod, statuses, phase)
    if ready.status != "True":
        return PodCondition(type=READY, status=ready.status, reason=ready.reason, message=ready.message)
    unready = []
    for gate in pod.spec.readiness_gates:
        found = next((c for c in conditions if c.type == gate.condition_type), None)
        if found is None:
            unready.append(f'corresponding condition of pod readiness gate "{gate.condition_type}" does not exist.')
        elif found.status != "True":
            unready.append(
                f'the status of pod readiness gate "{gate.condition_type}" is not "True", but {found.status}'
            )
    if unready:
        return PodCondition(
            type=READY, status="False", reason=READINESS_GATES_NOT_READY, message=", ".join(unready)
        )
    return PodCondition(type=READY, status="True")


def initialized_condition(pod: Pod, statuses: list[ContainerStatus], phase: str) -> PodCondition:
    by_name = {s.name: s for s in statuses}
    unknown: list[str] = []
    incomplete: list[str] = []
    for container in pod.spec.init_containers:
        s = by_name.get(container.name)
        if s is None:
            unknown.append(container.name)
        elif not (s.started if is_sidecar(container) else s.ready):
            incomplete.append(container.name)
    if phase == SUCCEEDED and not unknown:
        return PodCondition(type=INITIALIZED, status="True", reason=POD_COMPLETED)
    app_names = {c.name for c in pod.spec.containers}
    if any(s.name in app_names and (s.state.running or s.state.terminated) for s in statuses):
        return PodCondition(type=INITIALIZED, status="True")  # app containers ran: initialized before
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_names(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {_names(incomplete)}")
    if messages:
        return PodCondition(
            type=INITIALIZED, status="False", reason=CONTAINERS_NOT_INITIALIZED, message=", ".join(messages)
        )
    return PodCondition(type=INITIALIZED, status="True")
