"""compute_pod_actions: Go's computePodActions, one row per behaviour."""

from __future__ import annotations

import pytest

from pykubelet.messages.pod import Container, ExecAction, ObjectMeta, Pod, PodSpec, Probe
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus, SandboxRuntimeStatus
from pykubelet.pods.actions import (
    ContainerToKill,
    PodActions,
    compute_pod_actions,
    kill_already_done,
    kill_grace_period,
    probe_kill,
    restart_count_for,
    sandbox_changed,
    should_pull_image,
)
from pykubelet.pods.labels import container_hash

IMAGE = "busybox:1"
T0 = 1_700_000_000.0


def make_pod(*names: str, init: tuple[str, ...] = (), sidecars: tuple[str, ...] = (), policy: str = "",
             deleted: bool = False) -> Pod:
    """App containers `names`; init containers `init`, of which `sidecars` restart Always."""
    return Pod(
        metadata=ObjectMeta(
            name="p", namespace="ns", uid="u1", deletion_timestamp="2026-01-01T00:00:00Z" if deleted else None
        ),
        spec=PodSpec(
            containers=[Container(name=n, image=IMAGE) for n in names],
            init_containers=[
                Container(name=n, image=IMAGE, restart_policy="Always" if n in sidecars else None) for n in init
            ],
            restart_policy=policy,
        ),
    )


def sandbox(state: str = "ready", attempt: int = 0, id: str = "s1", created: float = T0) -> SandboxRuntimeStatus:
    return SandboxRuntimeStatus(id=id, state=state, created_at=created, attempt=attempt)


def ctr(name: str, state: str, exit_code: int | None = None, *, id: str | None = None, image: str = IMAGE,
        restart_count: int = 0, reason: str = "", created: float = T0 + 1) -> ContainerRuntimeStatus:
    return ContainerRuntimeStatus(
        id=id or f"{name}-{restart_count}",
        name=name,
        state=state,
        created_at=created,
        exit_code=exit_code if state == "exited" else None,
        reason=reason,
        hash=container_hash(Container(name=name, image=image)),
        restart_count=restart_count,
    )


def runtime(*containers: ContainerRuntimeStatus, sandboxes=(sandbox(),)) -> PodRuntimeStatus:
    """Containers and sandboxes newest first, as the runtime port reads them."""
    return PodRuntimeStatus(
        uid="u1", name="p", namespace="ns", sandboxes=list(sandboxes), containers=list(containers)
    )


def kill(container_id: str, name: str, message: str) -> tuple[ContainerToKill, ...]:
    return (ContainerToKill(container_id, name, message),)


NO_SANDBOX = ()
DEAD = (sandbox(state="notready", attempt=2),)
CHANGED = "Container a definition changed, will be restarted"
UNKNOWN = 'is in "unknown" state, try killing it before restart'

ROWS = [
    # --- sandbox ---
    ("new pod: create sandbox attempt 0 and start every app container",
     make_pod("a", "b"), runtime(sandboxes=NO_SANDBOX),
     PodActions(kill_pod=True, create_sandbox=True, containers_to_start=(0, 1))),
    ("new pod with init containers: start only the first init container",
     make_pod("a", init=("i1", "i2")), runtime(sandboxes=NO_SANDBOX),
     PodActions(kill_pod=True, create_sandbox=True, init_containers_to_start=(0,))),
    ("sandbox not ready: kill the pod, new sandbox with attempt + 1",
     make_pod("a"), runtime(ctr("a", "exited", 0), sandboxes=DEAD),
     PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=3, containers_to_start=(0,))),
    ("two ready sandboxes: reconcile with a new one",
     make_pod("a"), runtime(ctr("a", "running"), sandboxes=(sandbox(id="s2", attempt=1), sandbox(id="s1"))),
     PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s2", attempt=2, containers_to_start=(0,))),
    ("Never pod whose containers already ran gets no new sandbox",
     make_pod("a", policy="Never"), runtime(ctr("a", "exited", 1), sandboxes=DEAD),
     PodActions(kill_pod=True, sandbox_id="s1", attempt=3)),
    ("Never pod whose init container failed: no new sandbox, init failed",
     make_pod("a", init=("i",), policy="Never"), runtime(ctr("i", "exited", 2), sandboxes=DEAD),
     PodActions(kill_pod=True, sandbox_id="s1", attempt=3, init_failed=True)),
    ("Never pod whose sandbox died before any container: retry the sandbox",
     make_pod("a", policy="Never"), runtime(sandboxes=DEAD),
     PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=3, containers_to_start=(0,))),
    ("OnFailure pod all succeeded and sandbox gone: no new sandbox",
     make_pod("a", "b", policy="OnFailure"), runtime(ctr("a", "exited", 0), ctr("b", "exited", 0), sandboxes=DEAD),
     PodActions(kill_pod=True, sandbox_id="s1", attempt=3)),
    ("OnFailure pod on a new sandbox restarts only the failed container",
     make_pod("a", "b", policy="OnFailure"), runtime(ctr("a", "exited", 0), ctr("b", "exited", 1), sandboxes=DEAD),
     PodActions(kill_pod=True, create_sandbox=True, sandbox_id="s1", attempt=3, containers_to_start=(1,))),
    # --- app containers ---
    ("running container with its spec hash: nothing to do",
     make_pod("a"), runtime(ctr("a", "running")),
     PodActions(sandbox_id="s1")),
    ("container that never ran is started",
     make_pod("a", "b"), runtime(ctr("a", "running")),
     PodActions(sandbox_id="s1", containers_to_start=(1,))),
    ("exited 1 under OnFailure is restarted",
     make_pod("a", policy="OnFailure"), runtime(ctr("a", "exited", 1)),
     PodActions(sandbox_id="s1", containers_to_start=(0,))),
    ("exited 0 under OnFailure is not restarted",
     make_pod("a", "b", policy="OnFailure"), runtime(ctr("a", "exited", 0), ctr("b", "running")),
     PodActions(sandbox_id="s1")),
    ("exited 0 under Always is restarted",
     make_pod("a"), runtime(ctr("a", "exited", 0)),
     PodActions(sandbox_id="s1", containers_to_start=(0,))),
    ("exited 1 under Never is not restarted",
     make_pod("a", "b", policy="Never"), runtime(ctr("a", "exited", 1), ctr("b", "running")),
     PodActions(sandbox_id="s1")),
    ("created but never started: start it again",
     make_pod("a"), runtime(ctr("a", "created")),
     PodActions(sandbox_id="s1", containers_to_start=(0,))),
    ("unknown state: kill it, then start it",
     make_pod("a"), runtime(ctr("a", "unknown", id="c9")),
     PodActions(sandbox_id="s1", containers_to_start=(0,),
                containers_to_kill=kill("c9", "a", f"Container {UNKNOWN}"))),
    ("changed hash kills and restarts only that container",
     make_pod("a", "b"), runtime(ctr("a", "running", id="c1", image="busybox:0"), ctr("b", "running")),
     PodActions(sandbox_id="s1", containers_to_start=(0,), containers_to_kill=kill("c1", "a", CHANGED))),
    ("changed hash restarts even under Never",
     make_pod("a", policy="Never"), runtime(ctr("a", "running", id="c1", image="busybox:0")),
     PodActions(sandbox_id="s1", containers_to_start=(0,), containers_to_kill=kill("c1", "a", CHANGED))),
    ("running container not in the spec is killed",
     make_pod("a"), runtime(ctr("a", "running"), ctr("gone", "running", id="c7")),
     PodActions(sandbox_id="s1", containers_to_kill=kill("c7", "gone", "Container gone is not in the pod spec"))),
    ("everything done under Never: stop the sandbox, start nothing",
     make_pod("a", "b", policy="Never"), runtime(ctr("a", "exited", 0), ctr("b", "exited", 1)),
     PodActions(kill_pod=True, sandbox_id="s1")),
    ("everything succeeded under OnFailure: stop the sandbox",
     make_pod("a", policy="OnFailure"), runtime(ctr("a", "exited", 0)),
     PodActions(kill_pod=True, sandbox_id="s1")),
    ("deleted pod restarts nothing and stops the sandbox",
     make_pod("a", deleted=True), runtime(ctr("a", "exited", 1)),
     PodActions(kill_pod=True, sandbox_id="s1")),
    # --- init containers ---
    ("first init container running: wait for it",
     make_pod("a", init=("i1", "i2")), runtime(ctr("i1", "running")),
     PodActions(sandbox_id="s1")),
    ("init containers run one at a time in order",
     make_pod("a", init=("i1", "i2")), runtime(ctr("i1", "exited", 0)),
     PodActions(sandbox_id="s1", init_containers_to_start=(1,))),
    ("last init container succeeded: start app containers",
     make_pod("a", "b", init=("i1", "i2")), runtime(ctr("i2", "exited", 0), ctr("i1", "exited", 0)),
     PodActions(sandbox_id="s1", containers_to_start=(0, 1))),
    ("failed init container is restarted under Always",
     make_pod("a", init=("i1", "i2")), runtime(ctr("i2", "exited", 1), ctr("i1", "exited", 0)),
     PodActions(sandbox_id="s1", init_containers_to_start=(1,))),
    ("OOM-killed init container counts as failed",
     make_pod("a", init=("i1",), policy="OnFailure"), runtime(ctr("i1", "exited", 0, reason="OOMKilled")),
     PodActions(sandbox_id="s1", init_containers_to_start=(0,))),
    ("init failure under Never fails the pod",
     make_pod("a", init=("i1", "i2"), policy="Never"), runtime(ctr("i2", "exited", 1), ctr("i1", "exited", 0)),
     PodActions(kill_pod=True, sandbox_id="s1", init_failed=True)),
    ("init containers are not rerun once app containers run",
     make_pod("a", init=("i1",)), runtime(ctr("a", "running")),
     PodActions(sandbox_id="s1")),
    ("first init container in unknown state: kill and restart it",
     make_pod("a", init=("i1",)), runtime(ctr("i1", "unknown", id="c3")),
     PodActions(sandbox_id="s1", init_containers_to_start=(0,),
                containers_to_kill=kill("c3", "i1", f"Init container {UNKNOWN}"))),
    # --- sidecars ---
    ("sidecar started then app containers",
     make_pod("a", init=("side",), sidecars=("side",)), runtime(ctr("side", "running")),
     PodActions(sandbox_id="s1", containers_to_start=(0,))),
    ("sidecar started: the next init container starts without waiting for it to exit",
     make_pod("a", init=("side", "i"), sidecars=("side",)), runtime(ctr("side", "running")),
     PodActions(sandbox_id="s1", init_containers_to_start=(1,))),
    ("exited sidecar is restarted while app containers keep running",
     make_pod("a", init=("side",), sidecars=("side",)), runtime(ctr("side", "exited", 0), ctr("a", "running")),
     PodActions(sandbox_id="s1", init_containers_to_start=(0,))),
    ("exited sidecar is restarted even under Never",
     make_pod("a", init=("side",), sidecars=("side",), policy="Never"),
     runtime(ctr("side", "exited", 1), ctr("a", "running")),
     PodActions(sandbox_id="s1", init_containers_to_start=(0,))),
    ("sidecar with a changed hash is killed and restarted",
     make_pod("a", init=("side",), sidecars=("side",)),
     runtime(ctr("side", "running", id="c5", image="busybox:0"), ctr("a", "running")),
     PodActions(sandbox_id="s1", init_containers_to_start=(0,),
                containers_to_kill=kill("c5", "side", "Init container side definition changed"))),
    ("app containers done: sidecars do not keep the pod alive",
     make_pod("a", init=("side",), sidecars=("side",), policy="Never"),
     runtime(ctr("a", "exited", 0), ctr("side", "exited", 0)),
     PodActions(kill_pod=True, sandbox_id="s1")),
]


@pytest.mark.parametrize("behaviour, pod, status, expected", ROWS, ids=[row[0] for row in ROWS])
def test_compute_pod_actions(behaviour, pod, status, expected):
    assert compute_pod_actions(pod, status) == expected


def test_nothing_to_do_only_when_there_is_nothing_to_do():
    assert PodActions(sandbox_id="s1").nothing_to_do
    assert not PodActions(containers_to_start=(0,)).nothing_to_do
    assert not PodActions(kill_pod=True).nothing_to_do
    assert not PodActions(containers_to_kill=(ContainerToKill("c", "a", "m"),)).nothing_to_do


@pytest.mark.parametrize(
    "behaviour, status, expected",
    [
        ("never ran: 0", runtime(), 0),
        ("one more than the latest attempt's annotation",
         runtime(ctr("a", "exited", 1, restart_count=4, created=T0 + 5), ctr("a", "exited", 1, restart_count=3)),
         5),
    ],
)
def test_restart_count_for(behaviour, status, expected):
    assert restart_count_for(status, "a") == expected


@pytest.mark.parametrize(
    "behaviour, status, expected",
    [
        ("no sandbox", runtime(sandboxes=NO_SANDBOX), (True, 0, "")),
        ("newest ready", runtime(), (False, 0, "s1")),
        ("newest not ready", runtime(sandboxes=DEAD), (True, 3, "s1")),
    ],
)
def test_sandbox_changed(behaviour, status, expected):
    assert sandbox_changed(status) == expected


@pytest.mark.parametrize(
    "behaviour, container, present, pull",
    [
        ("untagged image defaults to Always", Container(image="busybox"), True, True),
        (":latest defaults to Always", Container(image="127.0.0.1:5000/busybox:latest"), True, True),
        ("a tag defaults to IfNotPresent, present", Container(image="127.0.0.1:5000/busybox:1"), True, False),
        ("a tag defaults to IfNotPresent, missing", Container(image="busybox:1"), False, True),
        ("a digest defaults to IfNotPresent", Container(image="busybox@sha256:abc"), True, False),
        ("Never never pulls", Container(image="busybox", image_pull_policy="Never"), False, False),
    ],
)
def test_should_pull_image(behaviour, container, present, pull):
    assert should_pull_image(container, present) is pull


def test_registry_port_is_not_a_tag():
    assert should_pull_image(Container(image="127.0.0.1:5000/busybox"), present=True)  # untagged: Always


# --- activeDeadlineSeconds --------------------------------------------------------------

DEADLINE_ROWS = [
    ("running pod past its deadline: kill it, start nothing",
     make_pod("a", "b"), runtime(ctr("a", "running"), ctr("b", "exited", 1)),
     PodActions(kill_pod=True, sandbox_id="s1")),
    ("a container that never ran is not started",
     make_pod("a", "b"), runtime(ctr("a", "running")),
     PodActions(kill_pod=True, sandbox_id="s1")),
    ("init containers are not started either",
     make_pod("a", init=("i1", "i2")), runtime(ctr("i1", "exited", 0)),
     PodActions(kill_pod=True, sandbox_id="s1")),
    ("dead sandbox: no new one",
     make_pod("a"), runtime(ctr("a", "exited", 0), sandboxes=DEAD),
     PodActions(kill_pod=True, sandbox_id="s1", attempt=3)),
    ("no sandbox at all: none is created",
     make_pod("a"), runtime(sandboxes=NO_SANDBOX),
     PodActions(kill_pod=True)),
    ("a changed spec restarts nothing",
     make_pod("a"), runtime(ctr("a", "running", id="c1", image="busybox:0")),
     PodActions(kill_pod=True, sandbox_id="s1")),
]


@pytest.mark.parametrize("behaviour, pod, status, expected", DEADLINE_ROWS, ids=[row[0] for row in DEADLINE_ROWS])
def test_past_the_active_deadline_the_pod_is_killed_and_nothing_starts(behaviour, pod, status, expected):
    assert compute_pod_actions(pod, status, active_deadline_exceeded=True) == expected


def test_before_the_active_deadline_the_pod_runs_as_usual():
    pod, status = make_pod("a", "b"), runtime(ctr("a", "running"))
    assert compute_pod_actions(pod, status, active_deadline_exceeded=False) == compute_pod_actions(pod, status)
    assert compute_pod_actions(pod, status).containers_to_start == (1,)


# --- grace periods ----------------------------------------------------------------------

EXEC = ExecAction(command=["true"])


def grace_pod(pod_grace: int | None = None, *, liveness: int | None = None, startup: int | None = None,
              deletion: int | None = None, policy: str = "", sidecar: bool = False) -> Pod:
    """Container "a" (an app container, or a sidecar) with liveness and startup probes
    whose terminationGracePeriodSeconds are `liveness` and `startup`."""
    a = Container(
        name="a", image=IMAGE, restart_policy="Always" if sidecar else None,
        liveness_probe=Probe(exec=EXEC, termination_grace_period_seconds=liveness),
        startup_probe=Probe(exec=EXEC, termination_grace_period_seconds=startup),
    )
    return Pod(
        metadata=ObjectMeta(name="p", namespace="ns", uid="u1", deletion_grace_period_seconds=deletion),
        spec=PodSpec(
            containers=[Container(name="main", image=IMAGE)] if sidecar else [a],
            init_containers=[a] if sidecar else [],
            termination_grace_period_seconds=pod_grace,
            restart_policy=policy,
        ),
    )


GRACE_ROWS = [
    ("no grace period anywhere: the API default, 30", grace_pod(), "liveness", 30),
    ("the pod's for a kill that is not a probe's", grace_pod(45, liveness=5), None, 45),
    ("liveness failure: the liveness probe's", grace_pod(45, liveness=5, startup=7), "liveness", 5),
    ("startup failure: the startup probe's", grace_pod(45, liveness=5, startup=7), "startup", 7),
    ("liveness failure, probe without one: the pod's", grace_pod(45, startup=7), "liveness", 45),
    ("the probe's may exceed the pod's", grace_pod(10, liveness=120), "liveness", 120),
    ("probe's over the API default when the pod sets none", grace_pod(liveness=60), "liveness", 60),
    ("readiness never kills: the pod's", grace_pod(45, liveness=5), "readiness", 45),
    ("a sidecar's probe counts too", grace_pod(45, liveness=5, sidecar=True), "liveness", 5),
    ("a container not in the spec: the pod's", grace_pod(45, liveness=5), "liveness", 45),
    ("a deleted pod's deletion grace period comes first", grace_pod(45, liveness=5, deletion=3), "liveness", 3),
    ("never less than 2 seconds: the pod's", grace_pod(0), None, 2),
    ("never less than 2 seconds: the probe's", grace_pod(45, liveness=1), "liveness", 2),
    ("never less than 2 seconds: the deletion's", grace_pod(45, deletion=0), None, 2),
]


@pytest.mark.parametrize("behaviour, pod, probe_kind, expected", GRACE_ROWS, ids=[r[0] for r in GRACE_ROWS])
def test_kill_grace_period(behaviour, pod, probe_kind, expected):
    name = "gone" if "not in the spec" in behaviour else "a"
    assert kill_grace_period(pod, name, probe_kind) == expected


PROBE_KILL_ROWS = [
    ("liveness failure under Always: will be restarted, the probe's grace period",
     grace_pod(45, liveness=5), "liveness",
     ContainerToKill("c1", "a", "Container a failed liveness probe, will be restarted", 5)),
    ("startup failure under OnFailure: will be restarted",
     grace_pod(45, startup=7, policy="OnFailure"), "startup",
     ContainerToKill("c1", "a", "Container a failed startup probe, will be restarted", 7)),
    ("liveness failure under Never: killed, not restarted, the pod's grace period",
     grace_pod(45, policy="Never"), "liveness",
     ContainerToKill("c1", "a", "Container a failed liveness probe", 45)),
    ("a sidecar's: named an init container",
     grace_pod(45, liveness=5, sidecar=True, policy="Never"), "liveness",
     ContainerToKill("c1", "a", "Init container a failed liveness probe", 5)),
]


@pytest.mark.parametrize("behaviour, pod, probe_kind, expected", PROBE_KILL_ROWS, ids=[r[0] for r in PROBE_KILL_ROWS])
def test_probe_kill(behaviour, pod, probe_kind, expected):
    assert probe_kill(pod, "c1", "a", probe_kind) == expected


def test_a_kill_without_a_grace_period_takes_the_pods():
    assert ContainerToKill("c", "a", "m").grace_period_seconds is None


@pytest.mark.parametrize(
    "containers, sandboxes, stopped, done",
    [
        ((ctr("a", "exited", 0),), (sandbox(state="notready"),), {"s1"}, True),
        # A sandbox whose pause process exited on its own still needs its stop (network).
        ((ctr("a", "exited", 0),), (sandbox(state="notready"),), set(), False),
        ((ctr("a", "exited", 0),), (sandbox(state="ready"),), {"s1"}, False),
        ((ctr("a", "exited", 0), ctr("gone", "running")), (sandbox(state="notready"),), {"s1"}, False),
        ((ctr("a", "unknown"),), (sandbox(state="notready"),), {"s1"}, False),
        ((ctr("a", "exited", 0),), (sandbox(state="notready"), sandbox(state="notready", id="s0")), {"s1"}, False),
    ],
)
def test_a_finished_pod_is_stopped_once(containers, sandboxes, stopped, done):
    pod, status = make_pod("a", policy="Never"), runtime(*containers, sandboxes=sandboxes)
    actions = compute_pod_actions(pod, status)
    assert actions.kill_pod
    assert kill_already_done(actions, status, frozenset(stopped)) is done


def test_a_kill_with_something_to_start_is_never_already_done():
    pod = make_pod("a")  # restartPolicy Always: the exited container starts again in a new sandbox
    status = runtime(ctr("a", "exited", 1), sandboxes=(sandbox(state="notready"),))
    actions = compute_pod_actions(pod, status)
    assert actions.create_sandbox and not kill_already_done(actions, status, frozenset({"s1"}))
