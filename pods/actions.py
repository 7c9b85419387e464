"""What to do with a pod, given its spec and what the runtime holds: the Go kubelet's
computePodActions, a pure function. The pod worker calls it on every sync and performs
the actions it returns (kill, create a sandbox, start init then app containers), each
kill with the grace period kill_grace_period gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pykubelet.messages.pod import Container, Pod, Probe
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus

from .labels import container_hash
from .manifest import default_image_pull_policy

DEFAULT_GRACE_PERIOD = 30  # the API server's default terminationGracePeriodSeconds
MINIMUM_GRACE_PERIOD = 2  # Go's minimumGracePeriodInSeconds: never less to stop


@dataclass(frozen=True)
class ContainerToKill:
    container_id: str
    name: str
    message: str
    grace_period_seconds: int | None = None  # None: the pod's grace period


@dataclass(frozen=True)
class PodActions:
    kill_pod: bool = False  # stop every container and the sandbox first
    create_sandbox: bool = False
    sandbox_id: str = ""  # the current sandbox when not creating one
    attempt: int = 0  # the new sandbox's attempt number
    init_containers_to_start: tuple[int, ...] = ()  # indexes into spec.init_containers, in order
    containers_to_start: tuple[int, ...] = ()  # indexes into spec.containers
    containers_to_kill: tuple[ContainerToKill, ...] = ()
    init_failed: bool = False  # an init container failed under restartPolicy Never

    @property
    def nothing_to_do(self) -> bool:
        return not (
            self.kill_pod
            or self.create_sandbox
            or self.init_containers_to_start
            or self.containers_to_start
            or self.containers_to_kill
        )


# --- small predicates, shared with the status computation ------------------------------


LIVE_STATES = ("running", "created", "unknown")  # a container in one of these may still run


def restart_policy(pod: Pod) -> str:
    """The pod's restartPolicy, defaulted to Always as the API server does."""
    return pod.spec.restart_policy or "Always"


def is_sidecar(container: Container) -> bool:
    """An init container with restartPolicy Always: started in order, never waited on."""
    return container.restart_policy == "Always"


def is_init_container_failed(status: ContainerRuntimeStatus) -> bool:
    """Go's isInitContainerFailed: exited non-zero, OOM-killed, or in an unknown state."""
    if status.reason == "OOMKilled":
        return True
    if status.state == "exited" and (status.exit_code or 0) != 0:
        return True
    return status.state == "unknown"


def should_container_be_restarted(container: Container, pod: Pod, status: PodRuntimeStatus) -> bool:
    """Go's ShouldContainerBeRestarted: start it if it never ran, is created or unknown,
    or exited and the restart policy says so. Never once the pod is being deleted."""
    if pod.metadata.deletion_timestamp is not None:
        return False
    latest = status.latest(container.name)
    if latest is None:
        return True
    if latest.state == "running":
        return False
    if latest.state in ("unknown", "created"):
        return True
    policy = restart_policy(pod)
    if policy == "Never":
        return False
    if policy == "OnFailure" and (latest.exit_code or 0) == 0:
        return False
    return True


def restart_count_for(status: PodRuntimeStatus, name: str) -> int:
    """The restart count the next container of this name gets: one more than the latest
    one's annotation, or 0 if none ran (Go: startContainer)."""
    latest = status.latest(name)
    return latest.restart_count + 1 if latest is not None else 0


def sandbox_changed(status: PodRuntimeStatus) -> tuple[bool, int, str]:
    """Go's PodSandboxChanged: (a new sandbox is needed, its attempt, the current id).

    A new one is needed when there is none, when more than one is ready, or when the
    newest is not ready. (Go also compares the network namespace mode and a missing pod
    IP; the runtime status here carries neither distinction, and host networking cannot
    change for a pod.)
    """
    if not status.sandboxes:
        return True, 0, ""
    current = status.sandboxes[0]
    ready = sum(1 for s in status.sandboxes if s.state == "ready")
    if ready > 1 or current.state != "ready":
        return True, current.attempt + 1, current.id
    return False, current.attempt, current.id


def container_succeeded(container: Container, status: PodRuntimeStatus) -> bool:
    latest = status.latest(container.name)
    return latest is not None and latest.state == "exited" and latest.exit_code == 0


def has_any_regular_container_created(pod: Pod, status: PodRuntimeStatus) -> bool:
    """Any app container exists in the runtime: the init containers all ran before."""
    for container in pod.spec.containers:
        latest = status.latest(container.name)
        if latest is not None and latest.state in ("created", "running", "exited"):
            return True
    return False


# --- image pull policy ------------------------------------------------------------------


def should_pull_image(container: Container, present: bool) -> bool:
    """Go's shouldPullImage: Never never pulls, IfNotPresent pulls a missing image,
    Always always pulls. A policy left empty is defaulted as the API server does (the
    manifest decoder defaults static pods' already)."""
    policy = container.image_pull_policy or default_image_pull_policy(container.image)
    if policy == "Never":
        return False
    if policy == "Always":
        return True
    return not present


# --- grace periods ----------------------------------------------------------------------


def kill_grace_period(pod: Pod, container_name: str, probe_kind: str | None) -> int:
    """Seconds the container gets to stop (Go: setTerminationGracePeriod, then
    killContainer's floor of MINIMUM_GRACE_PERIOD).

    A deleted pod's deletionGracePeriodSeconds comes first. Else a container killed because
    its liveness or startup probe failed (probe_kind "liveness" / "startup") gets that
    probe's terminationGracePeriodSeconds when set, and any other kill the pod's
    terminationGracePeriodSeconds (30 when omitted, as the API server defaults it).
    """
    if pod.metadata.deletion_grace_period_seconds is not None:
        return max(pod.metadata.deletion_grace_period_seconds, MINIMUM_GRACE_PERIOD)
    grace = pod.spec.termination_grace_period_seconds
    if grace is None:
        grace = DEFAULT_GRACE_PERIOD
    probe = _probe_of(pod, container_name, probe_kind)
    if probe is not None and probe.termination_grace_period_seconds is not None:
        grace = probe.termination_grace_period_seconds
    return max(grace, MINIMUM_GRACE_PERIOD)


def probe_kill(pod: Pod, container_id: str, container_name: str, probe_kind: str) -> ContainerToKill:
    """The kill of a running container whose liveness or startup probe failed, worded as
    Go's computePodActions words it, with the probe's grace period."""
    sidecar = any(c.name == container_name for c in pod.spec.init_containers)
    if sidecar:
        message = f"Init container {container_name} failed {probe_kind} probe"
    else:
        message = f"Container {container_name} failed {probe_kind} probe"
        if restart_policy(pod) != "Never":
            message += ", will be restarted"
    return ContainerToKill(
        container_id, container_name, message, kill_grace_period(pod, container_name, probe_kind)
    )


def _probe_of(pod: Pod, container_name: str, probe_kind: str | None) -> Probe | None:
    attr = {"liveness": "liveness_probe", "startup": "startup_probe"}.get(probe_kind or "")
    if attr is None:
        return None  # readiness never kills; no probe: the pod's grace period
    for container in [*pod.spec.containers, *pod.spec.init_containers]:
        if container.name == container_name:
            return getattr(container, attr)
    return None


# --- computePodActions ------------------------------------------------------------------


def compute_pod_actions(
    pod: Pod, status: PodRuntimeStatus, *, active_deadline_exceeded: bool = False
) -> PodActions:
    """Everything to do to bring the runtime to the pod's spec, as one value.

    active_deadline_exceeded: the pod is past its activeDeadlineSeconds (see
    active_deadline.past_active_deadline): stop every container and the sandbox, start
    nothing. Go gets there as the status turns Failed and the pod worker terminates it.
    """
    create, attempt, sandbox_id = sandbox_changed(status)
    if active_deadline_exceeded:
        return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
    if create:
        return _actions_for_new_sandbox(pod, status, attempt, sandbox_id)

    kills = _unknown_containers_to_kill(pod, status)
    plan = _Plan(sandbox_id=sandbox_id, attempt=attempt, kills=kills)

    if _all_app_containers_done(pod, status):
        # The pod's work is over (Succeeded or Failed): stop it, restart no sidecar. Go
        # gets here through its pod worker, which stops syncing a terminal pod.
        plan.kill_pod = True
        return plan.freeze()

    initialized = _compute_init_container_actions(pod, status, plan)
    if plan.kill_pod or not initialized:
        return plan.freeze()

    keep = 0
    for index, container in enumerate(pod.spec.containers):
        latest = status.latest(container.name)
        if latest is None or latest.state != "running":
            if should_container_be_restarted(container, pod, status):
                plan.start.append(index)
                if latest is not None and latest.state == "unknown":
                    # It may still run: kill it first so two never run at once.
                    plan.kill(latest, _unknown_state_message("Container", latest))
            continue
        if latest.hash != container_hash(container):
            plan.kill(latest, f"Container {container.name} definition changed, will be restarted")
            plan.start.append(index)
            continue
        keep += 1

    if keep == 0 and not plan.start:
        # Nothing runs and nothing will: stop the sandbox too (Go does the same), and do
        # not let sidecars keep the pod alive.
        plan.kill_pod = True
        plan.init_start = []
    return plan.freeze()


def kill_already_done(actions: PodActions, status: PodRuntimeStatus, stopped_sandboxes: frozenset[str]) -> bool:
    """The plan only stops the pod, and nothing of it is left to stop: no container may still
    run, and every sandbox is not ready and already stopped by this worker (a sandbox whose
    pause process merely exited still needs its StopPodSandbox, which tears down its network).
    Go stops a finished pod once and then no longer syncs it; a kill of it again would make
    a StopPodSandbox and a fresh read at every resync."""
    if not actions.kill_pod or actions.create_sandbox or actions.init_containers_to_start:
        return False
    if actions.containers_to_start or actions.containers_to_kill:
        return False
    if any(c.state in LIVE_STATES for c in status.containers):
        return False
    return all(s.state != "ready" and s.id in stopped_sandboxes for s in status.sandboxes)


def _actions_for_new_sandbox(pod: Pod, status: PodRuntimeStatus, attempt: int, sandbox_id: str) -> PodActions:
    stop = PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
    if restart_policy(pod) == "Never" and attempt != 0 and status.containers:
        # Everything already ran once and must not run again: no new sandbox.
        return PodActions(
            kill_pod=True,
            sandbox_id=sandbox_id,
            attempt=attempt,
            init_failed=_any_init_container_failed(pod, status),
        )
    to_start = tuple(
        index
        for index, container in enumerate(pod.spec.containers)
        if not (restart_policy(pod) == "OnFailure" and container_succeeded(container, status))
    )
    if not to_start and has_any_regular_container_created(pod, status):
        return stop  # initialized before and nothing left to run
    if pod.spec.init_containers:
        return replace(stop, create_sandbox=True, init_containers_to_start=(0,))
    return replace(stop, create_sandbox=True, containers_to_start=to_start)


def _all_app_containers_done(pod: Pod, status: PodRuntimeStatus) -> bool:
    """Every app container exited and none is to run again."""
    for container in pod.spec.containers:
        latest = status.latest(container.name)
        if latest is None or latest.state != "exited":
            return False
        if should_container_be_restarted(container, pod, status):
            return False
    return bool(pod.spec.containers)


def _any_init_container_failed(pod: Pod, status: PodRuntimeStatus) -> bool:
    for container in pod.spec.init_containers:
        latest = status.latest(container.name)
        if not is_sidecar(container) and latest is not None and is_init_container_failed(latest):
            return True
    return False


def _unknown_state_message(kind: str, container: ContainerRuntimeStatus) -> str:
    return f'{kind} is in "{container.state}" state, try killing it before restart'


def _unknown_containers_to_kill(pod: Pod, status: PodRuntimeStatus) -> list[ContainerToKill]:
    """Running containers whose name is in neither container list of the spec."""
    names = {c.name for c in pod.spec.containers} | {c.name for c in pod.spec.init_containers}
    return [
        ContainerToKill(c.id, c.name, f"Container {c.name} is not in the pod spec")
        for c in status.containers
        if c.name not in names and c.state in ("running", "unknown")
    ]


@dataclass
class _Plan:
    """The mutable draft of a PodActions while computing it."""

    sandbox_id: str
    attempt: int
    kills: list[ContainerToKill]
    kill_pod: bool = False
    init_failed: bool = False

    def __post_init__(self) -> None:
        self.init_start: list[int] = []
        self.start: list[int] = []

    def kill(self, container: ContainerRuntimeStatus, message: str) -> None:
        if all(k.container_id != container.id for k in self.kills):
            self.kills.append(ContainerToKill(container.id, container.name, message))

    def freeze(self) -> PodActions:
        return PodActions(
            kill_pod=self.kill_pod,
            sandbox_id=self.sandbox_id,
            attempt=self.attempt,
            init_containers_to_start=tuple(dict.fromkeys(self.init_start)),
            containers_to_start=tuple(dict.fromkeys(self.start)),
            containers_to_kill=tuple(self.kills),
            init_failed=self.init_failed,
        )


def _compute_init_container_actions(pod: Pod, status: PodRuntimeStatus, plan: _Plan) -> bool:
    """Go's computeInitContainerActions (the sidecar-aware one): fill in the init
    containers to start or kill; True once the pod is initialized.

    Walks the init containers from the last one back, because the runtime may have
    removed completed ones: the latest one that ran says how far initialization got.
    """
    inits = pod.spec.init_containers
    if not inits:
        return True

    # An app container that was created or runs means init completed at some point
    # (exited ones do not count: after a reboot everything has exited).
    initialized = any(
        (latest := status.latest(c.name)) is not None and latest.state in ("created", "running")
        for c in pod.spec.containers
    )
    previously_initialized = initialized
    restart_on_failure = restart_policy(pod) != "Never"
    found: list[int] = []  # in reverse order, as Go appends them

    for i in range(len(inits) - 1, -1, -1):
        container = inits[i]
        sidecar = is_sidecar(container)
        latest = status.latest(container.name)
        if latest is None:
            if previously_initialized and sidecar:
                found.append(i)  # a sidecar that vanished after initialization
            continue
        if previously_initialized and not sidecar:
            continue  # after initialization only sidecars are kept running

        if latest.state == "created":
            found.append(i)  # the runtime failed to start it: start it again
        elif latest.state == "running":
            if sidecar:
                if i == len(inits) - 1:
                    initialized = True
                elif not previously_initialized:
                    found.append(i + 1)  # started for the first time: on to the next
                if latest.hash != container_hash(container):
                    plan.kill(latest, f"Init container {container.name} definition changed")
                    found.append(i)
            # a regular init container that runs: wait for it to finish
        elif latest.state == "exited":
            if sidecar:
                found.append(i)
            elif is_init_container_failed(latest):
                if not restart_on_failure:
                    plan.kill_pod = True
                    plan.init_failed = True
                    plan.init_start = []
                    return False
                found.append(i)
            elif i == len(inits) - 1:
                initialized = True
            else:
                found.append(i + 1)
        else:  # unknown: may still run, kill before restarting
            if not sidecar and not restart_on_failure:
                plan.kill_pod = True
                plan.init_failed = True
                plan.init_start = []
                return False
            plan.kill(latest, _unknown_state_message("Init container", latest))
            found.append(i)

        previously_initialized = True

    if not previously_initialized:
        found.append(0)  # nothing ran yet: start with the first one
    plan.init_start = list(reversed(found))
    return initialized
