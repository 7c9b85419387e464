"""compute_pod_status: container statuses, phase, conditions, IPs and QoS as Go reports them."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import (
    Container,
    ContainerState,
    ContainerStateRunning,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    ObjectMeta,
    Pod,
    PodCondition,
    PodIP,
    PodReadinessGate,
    PodSpec,
    PodStatus,
    Probe,
    ResourceRequirements,
)
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus, SandboxRuntimeStatus
from pykubelet.pods.labels import container_hash
from pykubelet.pods.resources import parse_quantity, qos_class
from pykubelet.pods.status import compute_pod_status, ran_before, rfc3339

IMAGE = "busybox:1"
T0 = 1_795_000_000.0  # 2026-11-18T11:06:40Z
NOW = "2026-11-22T22:07:06Z"
EARLIER = "2026-11-20T00:00:00Z"
PROBE = Probe(period_seconds=1)


def make_pod(*names: str, init: tuple[str, ...] = (), sidecars: tuple[str, ...] = (), policy: str = "",
             readiness: tuple[str, ...] = (), startup: tuple[str, ...] = (), host_network: bool = False,
             conditions: tuple[PodCondition, ...] = ()) -> Pod:
    def container(name: str, **kw) -> Container:
        return Container(name=name, image=IMAGE, readiness_probe=PROBE if name in readiness else None,
                         startup_probe=PROBE if name in startup else None, **kw)

    pod = Pod(
        metadata=ObjectMeta(name="p", namespace="ns", uid="u1"),
        spec=PodSpec(
            containers=[container(n) for n in names],
            init_containers=[container(n, restart_policy="Always" if n in sidecars else None) for n in init],
            restart_policy=policy,
            host_network=host_network,
        ),
    )
    pod.status.conditions = list(conditions)
    return pod


def sandbox(state: str = "ready", ip: str = "10.88.0.5", created: float = T0) -> SandboxRuntimeStatus:
    return SandboxRuntimeStatus(id="s1", state=state, created_at=created, ip=ip)


def ctr(name: str, state: str, exit_code: int | None = None, *, restart_count: int = 0, reason: str = "",
        created: float = T0 + 1) -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(
        id=f"{name}-{restart_count}",
        name=name,
        state=state,
        created_at=created,
        started_at=created + 1 if state != "created" else None,
        finished_at=created + 3 if state == "exited" else None,
        exit_code=exit_code if state == "exited" else None,
        reason=reason,
        image=IMAGE,
        image_ref="sha256:abc",
        hash=container_hash(Container(name=name, image=IMAGE)),
        restart_count=restart_count,
    )


def runtime(*containers: ContainerRuntimeStatus, sandboxes=(sandbox(),)) -> PodRuntimeStatus:
    return PodRuntimeStatus(
        uid="u1", name="p", namespace="ns", sandboxes=list(sandboxes), containers=list(containers)
    )


def status_of(pod: Pod, rt: PodRuntimeStatus, waiting=None, **kw) -> PodStatus:
    return compute_pod_status(pod, rt, waiting=waiting or {}, runtime_name="containerd", now=NOW,
                              host_ip="192.168.1.10", **kw)


def waiting(reason: str, message: str = "") -> ContainerState:
    return ContainerState(waiting=ContainerStateWaiting(reason=reason, message=message))


def terminated(c: ContainerRuntimeStatus, reason: str) -> ContainerState:
    return ContainerState(terminated=ContainerStateTerminated(
        exit_code=c.exit_code, reason=reason, started_at=rfc3339(c.started_at), finished_at=rfc3339(c.finished_at),
        container_id=f"containerd://{c.id}"))


# --- container statuses ---------------------------------------------------------------

A_RUNNING = ctr("a", "running", restart_count=1, created=T0 + 10)
A_FAILED = ctr("a", "exited", 1, restart_count=2)
A_DONE = ctr("a", "exited", 0)
A_OOM = ctr("a", "exited", 137, reason="OOMKilled")
BACKOFF = ("CrashLoopBackOff", "back-off 20s restarting failed container=a pod=p_ns(u1)")

CONTAINER_ROWS = [
    ("running container: startedAt, ready, started, containerd:// id, image and imageID",
     make_pod("a"), runtime(A_RUNNING), {}, {},
     ContainerStatus(name="a", ready=True, started=True, restart_count=1, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-1",
                     state=ContainerState(running=ContainerStateRunning(started_at=rfc3339(T0 + 11))))),
    ("never ran in a pod without init containers: ContainerCreating",
     make_pod("a"), runtime(), {}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=0, image=IMAGE,
                     state=waiting("ContainerCreating"))),
    ("never ran in a pod with init containers: PodInitializing",
     make_pod("a", init=("i",)), runtime(), {}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=0, image=IMAGE,
                     state=waiting("PodInitializing"))),
    ("image pull failure the runtime cannot show: the worker's reason",
     make_pod("a"), runtime(), {"a": ("ErrImagePull", "pull failed")}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=0, image=IMAGE,
                     state=waiting("ErrImagePull", "pull failed"))),
    ("crash loop: waiting CrashLoopBackOff, last state the failed run",
     make_pod("a"), runtime(A_FAILED), {"a": BACKOFF}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=2, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-2", state=waiting(*BACKOFF),
                     last_state=terminated(A_FAILED, "Error"))),
    ("a worker reason never hides a running container",
     make_pod("a"), runtime(A_RUNNING), {"a": BACKOFF}, {},
     ContainerStatus(name="a", ready=True, started=True, restart_count=1, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-1",
                     state=ContainerState(running=ContainerStateRunning(started_at=rfc3339(T0 + 11))))),
    ("a worker reason does not hide a container that will not run again",
     make_pod("a", policy="OnFailure"), runtime(A_DONE), {"a": BACKOFF}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=0, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-0", state=terminated(A_DONE, "Completed"))),
    ("exited with the runtime's own reason",
     make_pod("a", policy="Never"), runtime(A_OOM), {}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=0, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-0", state=terminated(A_OOM, "OOMKilled"))),
    ("restarted: last state from the previous attempt, restart count from the latest",
     make_pod("a"), runtime(A_RUNNING, A_FAILED), {}, {},
     ContainerStatus(name="a", ready=True, started=True, restart_count=1, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-1",
                     state=ContainerState(running=ContainerStateRunning(started_at=rfc3339(T0 + 11))),
                     last_state=terminated(A_FAILED, "Error"))),
    ("created, not started: ContainerCreating",
     make_pod("a"), runtime(ctr("a", "created")), {}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=0, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-0", state=waiting("ContainerCreating"))),
    ("readiness probe without a result yet: not ready",
     make_pod("a", readiness=("a",)), runtime(A_RUNNING), {}, {},
     ContainerStatus(name="a", ready=False, started=True, restart_count=1, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-1",
                     state=ContainerState(running=ContainerStateRunning(started_at=rfc3339(T0 + 11))))),
    ("readiness probe passed: ready",
     make_pod("a", readiness=("a",)), runtime(A_RUNNING), {}, {"a": True},
     ContainerStatus(name="a", ready=True, started=True, restart_count=1, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-1",
                     state=ContainerState(running=ContainerStateRunning(started_at=rfc3339(T0 + 11))))),
    ("startup probe without a result: not started, so not ready",
     make_pod("a", startup=("a",)), runtime(A_RUNNING), {}, {},
     ContainerStatus(name="a", ready=False, started=False, restart_count=1, image=IMAGE, image_id="sha256:abc",
                     container_id="containerd://a-1",
                     state=ContainerState(running=ContainerStateRunning(started_at=rfc3339(T0 + 11))))),
]


@pytest.mark.parametrize("behaviour, pod, rt, worker_waiting, ready, expected", CONTAINER_ROWS,
                         ids=[r[0] for r in CONTAINER_ROWS])
def test_container_status(behaviour, pod, rt, worker_waiting, ready, expected):
    assert status_of(pod, rt, worker_waiting, ready=ready).container_statuses == [expected]


def test_init_container_statuses_in_spec_order_and_app_statuses_by_name_as_go():
    status = status_of(make_pod("b", "a", init=("i2", "i1")), runtime(ctr("i2", "exited", 0)))
    assert [s.name for s in status.init_container_statuses] == ["i2", "i1"]
    assert [s.name for s in status.container_statuses] == ["a", "b"]


def test_completed_regular_init_container_is_ready_and_not_started():
    i = ctr("i", "exited", 0)
    [status] = status_of(make_pod("a", init=("i",)), runtime(i)).init_container_statuses
    assert status.ready and status.started is False and status.state == terminated(i, "Completed")


def test_init_container_gone_from_the_runtime_after_initialization_counts_as_completed():
    [status] = status_of(make_pod("a", init=("i",)), runtime(A_RUNNING)).init_container_statuses
    assert status.state.terminated.reason == "Completed" and status.state.terminated.exit_code == 0
    assert status.ready


def test_previous_terminated_status_survives_the_runtime_losing_the_container():
    old = ContainerStatus(name="a", ready=False, restart_count=3, image=IMAGE,
                          state=ContainerState(terminated=ContainerStateTerminated(exit_code=1, reason="Error")))
    status = status_of(make_pod("a", policy="Never"), runtime(), previous=PodStatus(container_statuses=[old]))
    assert status.container_statuses[0].state == old.state and status.container_statuses[0].restart_count == 3


def test_container_that_was_running_and_vanished_is_shown_as_stopped_not_pending():
    old = ContainerStatus(name="a", ready=True, restart_count=1, image=IMAGE,
                          state=ContainerState(running=ContainerStateRunning(started_at=EARLIER)))
    status = status_of(make_pod("a"), runtime(), previous=PodStatus(phase="Running", container_statuses=[old]))
    [a] = status.container_statuses
    assert a.last_state.terminated.reason == "ContainerStatusUnknown" and a.last_state.terminated.exit_code == 137
    assert a.restart_count == 2 and status.phase == "Running"


def test_a_pod_ran_before_when_its_api_status_names_a_container_the_runtime_made():
    """Such a pod gets no status from a runtime that could not be read (BUG 7)."""
    pod = make_pod("a", "b", policy="Never")
    assert not ran_before(pod)
    pod.status = PodStatus(phase="Pending", container_statuses=[
        ContainerStatus(name="a", ready=False, restart_count=0, image=IMAGE, state=waiting("ContainerCreating"))])
    assert not ran_before(pod)
    pod.status.container_statuses.append(ContainerStatus(
        name="b", ready=True, restart_count=0, image=IMAGE, container_id="containerd://b-1",
        state=ContainerState(running=ContainerStateRunning(started_at=EARLIER))))
    assert ran_before(pod)


# --- phase ------------------------------------------------------------------------------

PHASE_ROWS = [
    ("nothing ran yet: Pending", make_pod("a"), runtime(), "Pending"),
    ("all running: Running", make_pod("a", "b"), runtime(ctr("a", "running"), ctr("b", "running")), "Running"),
    ("one running, one not started: Pending", make_pod("a", "b"), runtime(ctr("a", "running")), "Pending"),
    ("init container running: Pending", make_pod("a", init=("i",)), runtime(ctr("i", "running")), "Pending"),
    ("init failure under Never fails the pod", make_pod("a", init=("i",), policy="Never"),
     runtime(ctr("i", "exited", 1)), "Failed"),
    ("init failure under OnFailure: Pending while it restarts", make_pod("a", init=("i",), policy="OnFailure"),
     runtime(ctr("i", "exited", 1)), "Pending"),
    ("all exited 0 under Never: Succeeded", make_pod("a", "b", policy="Never"),
     runtime(ctr("a", "exited", 0), ctr("b", "exited", 0)), "Succeeded"),
    ("one failed under Never, all stopped: Failed", make_pod("a", "b", policy="Never"),
     runtime(ctr("a", "exited", 0), ctr("b", "exited", 1)), "Failed"),
    ("one failed under Never, another running: Running", make_pod("a", "b", policy="Never"),
     runtime(ctr("a", "running"), ctr("b", "exited", 1)), "Running"),
    ("all exited 0 under OnFailure: Succeeded", make_pod("a", policy="OnFailure"), runtime(ctr("a", "exited", 0)),
     "Succeeded"),
    ("exited 1 under OnFailure: Running (restarting)", make_pod("a", policy="OnFailure"),
     runtime(ctr("a", "exited", 1)), "Running"),
    ("all exited 0 under Always: Running (restarting)", make_pod("a"), runtime(ctr("a", "exited", 0)), "Running"),
    ("sidecar and app running: Running", make_pod("a", init=("s",), sidecars=("s",)),
     runtime(ctr("s", "running"), ctr("a", "running")), "Running"),
    ("sidecar running but not started yet: Pending", make_pod("a", init=("s",), sidecars=("s",), startup=("s",)),
     runtime(ctr("s", "running")), "Pending"),
    ("app done, sidecar stopped, under Never: Succeeded", make_pod("a", init=("s",), sidecars=("s",), policy="Never"),
     runtime(ctr("a", "exited", 0, created=T0 + 5), ctr("s", "exited", 137)), "Succeeded"),
]


@pytest.mark.parametrize("behaviour, pod, rt, phase", PHASE_ROWS, ids=[r[0] for r in PHASE_ROWS])
def test_phase(behaviour, pod, rt, phase):
    assert status_of(pod, rt).phase == phase


def test_a_terminal_phase_is_never_left():
    previous = PodStatus(phase="Failed", reason="Evicted")
    status = status_of(make_pod("a", policy="Never"), runtime(), previous=previous)
    assert status.phase == "Failed" and status.reason == "Evicted"


def test_pod_is_terminal_turns_stopped_containers_into_a_terminal_phase():
    rt = runtime(ctr("a", "exited", 0))
    assert status_of(make_pod("a"), rt).phase == "Running"
    assert status_of(make_pod("a"), rt, pod_is_terminal=True).phase == "Succeeded"


# --- conditions -------------------------------------------------------------------------


def conditions(status: PodStatus) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in status.conditions}


CONDITION_ROWS = [
    ("all ready",
     make_pod("a"), runtime(ctr("a", "running")),
     {"PodReadyToStartContainers": ("True", "", ""), "Initialized": ("True", "", ""), "Ready": ("True", "", ""),
      "ContainersReady": ("True", "", ""), "PodScheduled": ("True", "", "")}),
    ("unready containers are named",
     make_pod("a", "b"), runtime(),
     {"PodReadyToStartContainers": ("True", "", ""), "Initialized": ("True", "", ""),
      "Ready": ("False", "ContainersNotReady", "containers with unready status: [a b]"),
      "ContainersReady": ("False", "ContainersNotReady", "containers with unready status: [a b]"),
      "PodScheduled": ("True", "", "")}),
    ("init containers incomplete",
     make_pod("a", init=("i1", "i2")), runtime(ctr("i1", "exited", 0)),
     {"PodReadyToStartContainers": ("True", "", ""),
      "Initialized": ("False", "ContainersNotInitialized", "containers with incomplete status: [i2]"),
      "Ready": ("False", "ContainersNotReady", "containers with unready status: [a]"),
      "ContainersReady": ("False", "ContainersNotReady", "containers with unready status: [a]"),
      "PodScheduled": ("True", "", "")}),
    ("succeeded pod: PodCompleted, sandbox gone",
     make_pod("a", policy="Never"), runtime(ctr("a", "exited", 0), sandboxes=(sandbox(state="notready"),)),
     {"PodReadyToStartContainers": ("False", "", ""), "Initialized": ("True", "PodCompleted", ""),
      "Ready": ("False", "PodCompleted", ""), "ContainersReady": ("False", "PodCompleted", ""),
      "PodScheduled": ("True", "", "")}),
    ("failed pod: PodFailed",
     make_pod("a", policy="Never"), runtime(ctr("a", "exited", 2)),
     {"PodReadyToStartContainers": ("True", "", ""), "Initialized": ("True", "", ""),
      "Ready": ("False", "PodFailed", ""), "ContainersReady": ("False", "PodFailed", ""),
      "PodScheduled": ("True", "", "")}),
]


@pytest.mark.parametrize("behaviour, pod, rt, expected", CONDITION_ROWS, ids=[r[0] for r in CONDITION_ROWS])
def test_conditions(behaviour, pod, rt, expected):
    status = status_of(pod, rt)
    assert conditions(status) == expected
    assert [c.type for c in status.conditions] == list(expected)  # Go's order


def test_transition_time_kept_while_a_condition_holds_and_now_when_it_flips():
    previous = PodStatus(conditions=[
        PodCondition(type="PodScheduled", status="True", last_transition_time=EARLIER),
        PodCondition(type="Ready", status="False", last_transition_time=EARLIER),
    ])
    status = status_of(make_pod("a"), runtime(ctr("a", "running")), previous=previous)
    times = {c.type: c.last_transition_time for c in status.conditions}
    assert times["PodScheduled"] == EARLIER and times["Ready"] == NOW and times["ContainersReady"] == NOW


def test_conditions_the_kubelet_does_not_own_are_kept():
    gate = PodCondition(type="example.com/Gate", status="True")
    status = status_of(make_pod("a", conditions=(gate,)), runtime(ctr("a", "running")))
    assert status.conditions[0] == gate


def gated(pod: Pod, *gates: str) -> Pod:
    return msgspec.structs.replace(
        pod, spec=msgspec.structs.replace(pod.spec, readiness_gates=[PodReadinessGate(condition_type=g) for g in gates])
    )


GATE_A, GATE_B = "example.com/feature-a", "example.com/feature-b"
MISSING_A = f'corresponding condition of pod readiness gate "{GATE_A}" does not exist.'

GATE_ROWS = [
    ("no gates: Ready follows ContainersReady",
     make_pod("a"), ("True", "", "")),
    ("containers not ready: ContainersReady's reason, whatever the gates",
     gated(make_pod("a", readiness=("a",)), GATE_A),
     ("False", "ContainersNotReady", "containers with unready status: [a]")),
    ("gate's condition missing",
     gated(make_pod("a"), GATE_A),
     ("False", "ReadinessGatesNotReady", MISSING_A)),
    ("gate's condition False",
     gated(make_pod("a", conditions=(PodCondition(type=GATE_A, status="False"),)), GATE_A),
     ("False", "ReadinessGatesNotReady", f'the status of pod readiness gate "{GATE_A}" is not "True", but False')),
    ("gate's condition Unknown",
     gated(make_pod("a", conditions=(PodCondition(type=GATE_A, status="Unknown"),)), GATE_A),
     ("False", "ReadinessGatesNotReady", f'the status of pod readiness gate "{GATE_A}" is not "True", but Unknown')),
    ("gate's condition True: Ready",
     gated(make_pod("a", conditions=(PodCondition(type=GATE_A, status="True"),)), GATE_A),
     ("True", "", "")),
    ("every gate must be True: one True, one missing",
     gated(make_pod("a", conditions=(PodCondition(type=GATE_B, status="True"),)), GATE_A, GATE_B),
     ("False", "ReadinessGatesNotReady", MISSING_A)),
    ("each unready gate is named, in spec order",
     gated(make_pod("a", conditions=(PodCondition(type=GATE_B, status="False"),)), GATE_A, GATE_B),
     ("False", "ReadinessGatesNotReady",
      f'{MISSING_A}, the status of pod readiness gate "{GATE_B}" is not "True", but False')),
    ("a gate on a condition the kubelet sets is read from the kubelet's",
     gated(make_pod("a"), "Initialized"), ("True", "", "")),
]


@pytest.mark.parametrize("behaviour, pod, ready", GATE_ROWS, ids=[r[0] for r in GATE_ROWS])
def test_readiness_gates(behaviour, pod, ready):
    status = status_of(pod, runtime(ctr("a", "running")))
    assert conditions(status)["Ready"] == ready
    assert conditions(status)["ContainersReady"][0] == ("False" if pod.spec.containers[0].readiness_probe else "True")


def test_readiness_gate_conditions_from_the_api_are_reported_untouched_before_the_kubelets():
    gate = PodCondition(type=GATE_A, status="True", last_transition_time=EARLIER, reason="LoadBalancerReady")
    # The kubelet's previous status had the gate False: the API's pod.status wins.
    previous = PodStatus(conditions=[PodCondition(type=GATE_A, status="False")])
    status = status_of(gated(make_pod("a", conditions=(gate,)), GATE_A), runtime(ctr("a", "running")),
                       previous=previous)
    assert status.conditions[0] == gate
    assert [c.type for c in status.conditions] == [
        GATE_A, "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    assert conditions(status)["Ready"] == ("True", "", "")


# --- activeDeadlineSeconds --------------------------------------------------------------

DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def failed_by_deadline(status: PodStatus) -> bool:
    return (status.phase, status.reason, status.message) == ("Failed", "DeadlineExceeded", DEADLINE_MESSAGE)


DEADLINE_ROWS = [
    ("running pod", make_pod("a"), runtime(ctr("a", "running")), None),
    ("pending pod", make_pod("a", init=("i",)), runtime(ctr("i", "running")), None),
    ("containers already stopped", make_pod("a"), runtime(ctr("a", "exited", 0), sandboxes=()), None),
    ("reported Running before, with another reason", make_pod("a"), runtime(ctr("a", "running")),
     PodStatus(phase="Running", reason="Something", message="else")),
    ("reported Failed by the deadline before", make_pod("a"), runtime(), PodStatus(
        phase="Failed", reason="DeadlineExceeded", message=DEADLINE_MESSAGE)),
]


@pytest.mark.parametrize("behaviour, pod, rt, previous", DEADLINE_ROWS, ids=[r[0] for r in DEADLINE_ROWS])
def test_past_the_active_deadline_the_pod_is_failed_deadline_exceeded(behaviour, pod, rt, previous):
    status = status_of(pod, rt, previous=previous, active_deadline_exceeded=True)
    assert failed_by_deadline(status)
    assert conditions(status)["Ready"] == ("False", "PodFailed", "")
    assert conditions(status)["ContainersReady"] == ("False", "PodFailed", "")


def test_failed_by_the_deadline_stays_failed_with_its_reason():
    first = status_of(make_pod("a"), runtime(ctr("a", "running")), active_deadline_exceeded=True)
    # Later syncs: the containers are gone; the worker would still pass True, but even
    # without it the phase is final and keeps its reason.
    later = status_of(make_pod("a"), runtime(ctr("a", "exited", 137)), previous=first)
    assert failed_by_deadline(later)


def test_before_the_active_deadline_the_phase_is_the_containers():
    status = status_of(make_pod("a"), runtime(ctr("a", "running")), active_deadline_exceeded=False)
    assert (status.phase, status.reason, status.message) == ("Running", "", "")


def test_the_apis_terminal_phase_is_never_changed():
    pod = make_pod("a", policy="Never")
    pod.status.phase = "Succeeded"
    status = status_of(pod, runtime(ctr("a", "exited", 0)), active_deadline_exceeded=True)
    assert status.phase == "Succeeded"  # Go forces the API's phase back, keeping the reason
    pod.status.phase = "Failed"
    assert status_of(pod, runtime(ctr("a", "exited", 0))).phase == "Failed"


# --- addresses, start time --------------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour, pod, rt, previous, pod_ip",
    [
        ("pod IP from the ready sandbox", make_pod("a"), runtime(), None, "10.88.0.5"),
        ("host network: the node's IP", make_pod("a", host_network=True), runtime(sandboxes=(sandbox(ip=""),)), None,
         "192.168.1.10"),
        ("sandbox gone: keep the IP reported before", make_pod("a"), runtime(sandboxes=()),
         PodStatus(pod_ip="10.88.0.4", pod_ips=[PodIP(ip="10.88.0.4")]), "10.88.0.4"),
        ("no sandbox yet: no IP", make_pod("a"), runtime(sandboxes=()), None, ""),
    ],
)
def test_pod_ip(behaviour, pod, rt, previous, pod_ip):
    status = status_of(pod, rt, previous=previous)
    assert status.host_ip == "192.168.1.10"
    assert status.pod_ip == pod_ip
    assert status.pod_ips == ([PodIP(ip=pod_ip)] if pod_ip else [])


def test_start_time_is_set_once():
    assert status_of(make_pod("a"), runtime()).start_time == NOW
    assert status_of(make_pod("a"), runtime(), previous=PodStatus(start_time=EARLIER)).start_time == EARLIER


def test_rfc3339():
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_700_000_000.7) == "2023-11-14T22:13:20Z"  # truncated to the second


# --- QoS --------------------------------------------------------------------------------


def res(requests=None, limits=None) -> ResourceRequirements:
    return ResourceRequirements(requests=requests or {}, limits=limits or {})


def qos_pod(*resources, init=()) -> Pod:
    return Pod(spec=PodSpec(
        containers=[Container(name=f"c{i}", resources=r) for i, r in enumerate(resources)],
        init_containers=[Container(name=f"i{i}", resources=r) for i, r in enumerate(init)],
    ))


FULL = {"cpu": "500m", "memory": "128Mi"}


@pytest.mark.parametrize(
    "behaviour, pod, expected",
    [
        ("nothing requested: BestEffort", qos_pod(None, res()), "BestEffort"),
        ("zero quantities count as nothing: BestEffort", qos_pod(res(requests={"cpu": "0"})), "BestEffort"),
        ("other resources do not count: BestEffort", qos_pod(res(limits={"ephemeral-storage": "1Gi"})), "BestEffort"),
        ("requests only: Burstable", qos_pod(res(requests={"cpu": "100m"})), "Burstable"),
        ("limits equal requests for cpu and memory: Guaranteed", qos_pod(res(requests=FULL, limits=FULL)), "Guaranteed"),
        ("limits only, requests default to them: Guaranteed", qos_pod(res(limits=FULL)), "Guaranteed"),
        ("equal quantities written differently: Guaranteed",
         qos_pod(res(requests={"cpu": "0.5", "memory": "134217728"}, limits=FULL)), "Guaranteed"),
        ("limits above requests: Burstable", qos_pod(res(requests=FULL, limits={"cpu": "1", "memory": "128Mi"})),
         "Burstable"),
        ("cpu limit only: Burstable", qos_pod(res(limits={"cpu": "1"})), "Burstable"),
        ("one container without limits: Burstable", qos_pod(res(limits=FULL), res()), "Burstable"),
        ("init containers count: Burstable", qos_pod(res(limits=FULL), init=(res(requests={"cpu": "1"}),)), "Burstable"),
    ],
)
def test_qos_class(behaviour, pod, expected):
    assert qos_class(pod) == expected


def test_qos_class_in_the_status():
    assert status_of(make_pod("a"), runtime()).qos_class == "BestEffort"


@pytest.mark.parametrize("text, value", [("100m", "0.1"), ("1", "1"), ("1Gi", "1073741824"), ("2k", "2000"),
                                         ("1e3", "1000"), ("1.5", "1.5")])
def test_parse_quantity(text, value):
    from decimal import Decimal

    assert parse_quantity(text) == Decimal(value)
