"""Probe workers on MockClock with a scripted handler (thresholds over time, initial delay,
startup gating, hold after a liveness failure, resuming after a crash), the manager with
recording workers, and the whole probes subtree."""

from __future__ import annotations

import time

import msgspec
import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.probes import (
    MANAGER_MAILBOX,
    ProbeMetrics,
    ProbeResults,
    ProbeTarget,
    probe_manager_actor,
    probe_worker_actor,
    probes_supervisor_spec,
)
from pykubelet.actors.probes.worker import PROBE_TIMER_SLACK, coalesced
from pykubelet.messages.pod import Pod
from pykubelet.messages.probes import ProbeResult, ProbeTargets
from pykubelet.supervisor import ChildSpec, Supervisor
from tests.support.actors import Inbox, running

UID = "u1"
EXEC = {"exec": {"command": ["true"]}}


def find(tree: Supervisor, path: str):
    return next(actor for actor in tree.snapshot().walk() if actor.path == path)


def make_pod(uid: str = UID, containers: list[dict] | None = None, init: list[dict] | None = None) -> Pod:
    return msgspec.convert(
        {"metadata": {"name": f"pod-{uid}", "namespace": "default", "uid": uid},
         "spec": {"containers": containers or [{"name": "c"}], "initContainers": init or []}},
        Pod,
    )


def probe(period: int = 10, **fields) -> dict:
    return {**EXEC, "periodSeconds": period, **fields}


class Script:
    """A fake probe handler: answers the scripted outcomes in turn, then `then`; an
    exception in the script is raised instead. Records the trio time of every call."""

    def __init__(self, *outcomes, then: str = "success") -> None:
        self.outcomes = list(outcomes)
        self.then = then
        self.calls: list[float] = []

    async def __call__(self, probe, container, container_id, host):
        self.calls.append(trio.current_time())
        outcome = self.outcomes.pop(0) if self.outcomes else self.then
        if isinstance(outcome, Exception):
            raise outcome
        return outcome, f"scripted {outcome}"

    def relative_calls(self, start: float) -> list[float]:
        return [round(t - start, 3) for t in self.calls]


class Probes:
    """A tree with a recording sync loop and an empty probes supervisor to put workers in."""

    def __init__(self) -> None:
        self.results = ProbeResults()
        self.registry = CollectorRegistry()
        self.metrics = ProbeMetrics(self.registry)
        self.inbox = Inbox()

    def specs(self) -> list[ChildSpec]:
        return [self.inbox.spec("sync-loop"), Supervisor.child_spec("probes", [])]

    async def start_worker(self, tree: Supervisor, pod: Pod, kind: str, handler: Script, *,
                           container: str = "c", container_id: str = "cid-1", age: float = 0.0,
                           jitter: float = 0.0, host_ip: str = "127.0.0.1") -> None:
        actor = probe_worker_actor(
            pod, container, container_id, kind, time.time() - age,
            results=self.results, metrics=self.metrics, runtime=None, host_ip=host_ip,
            jitter=jitter, handler=handler,
        )
        await tree.find_supervisor("root/probes").start_child(
            ChildSpec(f"{pod.metadata.uid}.{container}.{kind}", actor, restart="transient"))

    def published(self) -> list[tuple[str, str, str, float]]:
        """(kind, container, result, time) of every ProbeResult the sync loop got."""
        return [(m.probe, m.container_name, m.result, round(t, 3))
                for m, t in zip(self.inbox.messages, self.inbox.times) if isinstance(m, ProbeResult)]


@pytest.fixture
def probes() -> Probes:
    return Probes()


# -- one worker --------------------------------------------------------------------------------


async def test_readiness_starts_not_ready_then_one_success_makes_it_ready(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": probe()}])
    handler = Script()
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "readiness", handler)
        await trio.sleep(25)
    assert handler.relative_calls(t0) == [0, 10, 20]
    assert probes.published() == [("readiness", "c", "failure", t0), ("readiness", "c", "success", t0)]
    assert probes.results.ready(UID) == {"c": True}
    assert probes.results.ready(UID, running={"c": "cid-2"}) == {}  # about another container


async def test_readiness_failure_threshold_counts_consecutive_failures(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": probe(failureThreshold=3)}])
    handler = Script("success", "failure", "failure", "success", "failure", "failure", "failure")
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "readiness", handler)
        await trio.sleep(65)
    assert [(r, round(t - t0)) for _, _, r, t in probes.published()] == [("failure", 0), ("success", 0), ("failure", 60)]
    assert probes.results.ready(UID) == {"c": False}


async def test_success_threshold_needs_that_many_successes_in_a_row(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": probe(successThreshold=2)}])
    handler = Script("success", "failure", "success", "success")
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "readiness", handler)
        await trio.sleep(35)
    assert [(r, round(t - t0)) for _, _, r, t in probes.published()] == [("failure", 0), ("success", 30)]


async def test_first_probe_waits_for_the_initial_delay_from_the_container_start(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": probe(initialDelaySeconds=30)}])
    handler = Script()
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "readiness", handler, age=12)  # started 12 s ago
        await trio.sleep(40)
    assert [round(t) for t in handler.relative_calls(t0)] == [18, 28, 38]


async def test_jitter_delays_only_the_first_probe(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": probe()}])
    handler = Script()
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "readiness", handler, jitter=3.5)
        await trio.sleep(25)
    assert handler.relative_calls(t0) == [3.5, 13.5, 23.5]


async def test_probes_due_within_the_timer_slack_run_together_on_an_unchanged_schedule(autojump_clock, probes):
    # Due at 1.01 + k and 1.03 + k: both run at 1.05 + k, never more than the slack late.
    pods = [make_pod(uid=f"u{i}", containers=[{"name": "c", "readinessProbe": probe(period=1)}]) for i in (1, 2)]
    handlers = [Script(), Script()]
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        assert t0 == coalesced(t0, PROBE_TIMER_SLACK)
        for pod, handler, jitter in zip(pods, handlers, (1.01, 1.03)):
            await probes.start_worker(tree, pod, "readiness", handler, jitter=jitter)
        await trio.sleep(10.5)
    expected = [round(1.05 + k, 3) for k in range(10)]
    assert handlers[0].relative_calls(t0) == expected
    assert handlers[1].relative_calls(t0) == expected


def test_coalesced_rounds_up_to_the_next_multiple_of_the_slack():
    assert coalesced(1.01, 0.05) == pytest.approx(1.05)
    assert coalesced(1.05, 0.05) == pytest.approx(1.05)  # already on the grid: not a slot later
    assert coalesced(0.35, 0.05) == pytest.approx(0.35)
    assert coalesced(12.3456, 0.05) == pytest.approx(12.35)
    assert all(coalesced(k * 0.05, 0.05) == pytest.approx(k * 0.05) for k in range(2000))


async def test_liveness_failure_is_published_at_the_threshold_then_the_worker_holds(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "livenessProbe": probe(failureThreshold=3)}])
    handler = Script(then="failure")
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "liveness", handler)
        await trio.sleep(300)
    assert handler.relative_calls(t0) == [0, 10, 20]  # then no more probing of this container
    assert [(r, round(t - t0)) for _, _, r, t in probes.published()] == [("success", 0), ("failure", 20)]
    assert probes.results.failed_liveness(UID) == {"c": "scripted failure"}
    assert probes.results.failed_liveness(UID, running={"c": "cid-2"}) == {}


async def test_unknown_outcomes_are_retried_then_thrown_away(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "livenessProbe": probe(failureThreshold=1)}])
    handler = Script("unknown", "unknown", "unknown", "unknown", "success")
    async with running(*probes.specs()) as tree:
        await probes.start_worker(tree, pod, "liveness", handler)
        await trio.sleep(15)
        labels = {"probe_type": "Liveness", "container": "c", "pod": "pod-u1", "namespace": "default", "pod_uid": UID}
        assert probes.registry.get_sample_value("prober_probe_total", {**labels, "result": "unknown"}) == 1
        assert probes.registry.get_sample_value("prober_probe_total", {**labels, "result": "successful"}) == 1
        await tree.find_supervisor("root/probes").stop_child("u1.c.liveness")
        # A stopped worker's series go, as in Go.
        assert probes.registry.get_sample_value("prober_probe_total", {**labels, "result": "successful"}) is None
    assert len(handler.calls) == 5  # 3 tries at 0 s, then 2 at 10 s
    assert [r for _, _, r, _ in probes.published()] == ["success"]


async def test_startup_probe_gates_liveness_and_readiness_until_it_succeeds(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "startupProbe": probe(failureThreshold=30),
                                "livenessProbe": probe(), "readinessProbe": probe()}])
    startup, liveness, readiness = Script("failure", "failure", "success"), Script(), Script()
    async with running(*probes.specs()) as tree:
        t0 = trio.current_time()
        await probes.start_worker(tree, pod, "startup", startup)
        await probes.start_worker(tree, pod, "liveness", liveness, jitter=1)
        await probes.start_worker(tree, pod, "readiness", readiness, jitter=1)
        await trio.sleep(45)
        assert probes.results.started(UID) == {"c": True}
    assert startup.relative_calls(t0) == [0, 10, 20]  # not probed again once it succeeded
    assert liveness.relative_calls(t0) == [21, 31, 41]
    assert readiness.relative_calls(t0) == [21, 31, 41]
    results = [(kind, result) for kind, _, result, _ in probes.published()]
    assert results == [("startup", "unknown"), ("liveness", "success"), ("readiness", "failure"),
                       ("startup", "success"), ("readiness", "success")]


async def test_failed_startup_probe_holds_and_liveness_never_runs(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "startupProbe": probe(failureThreshold=2), "livenessProbe": probe()}])
    startup, liveness = Script(then="failure"), Script()
    async with running(*probes.specs()) as tree:
        await probes.start_worker(tree, pod, "startup", startup)
        await probes.start_worker(tree, pod, "liveness", liveness)
        await trio.sleep(100)
    assert len(startup.calls) == 2 and liveness.calls == []
    assert probes.results.failed_startup(UID) == {"c": "scripted failure"}


async def test_a_crashed_worker_resumes_from_the_published_result(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": probe()}])
    handler = Script("success", RuntimeError("handler bug"), "success")
    async with running(*probes.specs()) as tree:
        await probes.start_worker(tree, pod, "readiness", handler)
        await trio.sleep(25)
        child = find(tree, "root/probes/u1.c.readiness")
        assert child.restarts == 1 and "handler bug" in child.last_error.message
    # No "failure" re-published by the new incarnation: readiness did not flap.
    assert [r for _, _, r, _ in probes.published()] == ["failure", "success"]
    assert probes.results.ready(UID) == {"c": True}


async def test_a_probe_that_cannot_run_keeps_its_initial_result_and_says_why(autojump_clock, probes):
    pod = make_pod(containers=[{"name": "c", "readinessProbe": {"httpGet": {"port": "http"}}}])
    handler = Script()
    async with running(*probes.specs()) as tree:
        await probes.start_worker(tree, pod, "readiness", handler)
        await trio.sleep(30)
    assert handler.calls == []
    [message] = [m for m in probes.inbox.messages if isinstance(m, ProbeResult)]
    assert message.result == "failure"
    assert message.message == ('spec.containers[0].readinessProbe.httpGet.port: no port named "http" '
                               'in container "c" (named ports: none)')


async def test_the_probe_targets_the_pod_ip_or_else_the_host_ip(autojump_clock, probes):
    seen = []

    async def handler(probe, container, container_id, host):
        seen.append((container_id, host))
        return "success", ""

    with_ip = make_pod(containers=[{"name": "c", "readinessProbe": probe()}])
    with_ip.status.pod_ip = "10.88.0.5"
    host_network = make_pod(uid="u2", containers=[{"name": "c", "readinessProbe": probe()}])
    async with running(*probes.specs()) as tree:
        await probes.start_worker(tree, with_ip, "readiness", handler)
        await probes.start_worker(tree, host_network, "readiness", handler, container_id="cid-9", host_ip="192.0.2.7")
        await trio.sleep(1)
    assert seen == [("cid-1", "10.88.0.5"), ("cid-9", "192.0.2.7")]


# -- the manager with recording workers ----------------------------------------------------------


class Recorder:
    def __init__(self, crash_first: set[str] = frozenset()) -> None:
        self.journal: list[tuple[str, str, str]] = []
        self.targets: dict[str, ProbeTarget] = {}
        self.crash_first = set(crash_first)

    def make_worker(self, target: ProbeTarget):
        async def run(ctx) -> None:
            self.journal.append(("start", target.child_name, target.container_id))
            self.targets[target.child_name] = target
            try:
                if target.child_name in self.crash_first:
                    self.crash_first.discard(target.child_name)
                    await trio.sleep(1)
                    raise RuntimeError("probe worker bug")
                await trio.sleep_forever()
            finally:
                self.journal.append(("stop", target.child_name, target.container_id))

        return run

    def take(self) -> list[tuple[str, str, str]]:
        journal, self.journal = self.journal, []
        return sorted(journal)


def manager_tree(results: ProbeResults, recorder: Recorder, rng=lambda: 0.5) -> Supervisor:
    holder: list[Supervisor] = []
    manager = ChildSpec(
        "manager",
        probe_manager_actor(tree=lambda: holder[0], results=results, make_worker=recorder.make_worker, rng=rng),
        mailbox=MANAGER_MAILBOX,
    )
    tree = Supervisor("root", [Supervisor.child_spec("probes", [manager])])
    holder.append(tree)
    return tree


async def tell(tree: Supervisor, message: ProbeTargets) -> None:
    await tree.registry.lookup("root/probes/manager").send(message)
    await trio.sleep(0.5)


PROBED = make_pod(
    containers=[{"name": "app", "livenessProbe": probe(), "readinessProbe": probe()}, {"name": "plain"}],
    init=[{"name": "side", "restartPolicy": "Always", "startupProbe": probe()},
          {"name": "setup", "readinessProbe": probe()}],
)


async def run_tree(tree: Supervisor, nursery: trio.Nursery) -> None:
    await nursery.start(tree.run)


async def test_manager_starts_a_worker_per_running_container_and_probe(autojump_clock):
    results, recorder = ProbeResults(), Recorder()
    tree = manager_tree(results, recorder)
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1", "plain": "p1", "side": "s1"},
                                      started_at={"app": 1000.0}))
        assert recorder.take() == [("start", "u1.app.liveness", "a1"), ("start", "u1.app.readiness", "a1"),
                                   ("start", "u1.side.startup", "s1")]
        assert recorder.targets["u1.app.liveness"].started_at == 1000.0
        # The same targets again change nothing.
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1", "plain": "p1", "side": "s1"}))
        assert recorder.take() == []
        nursery.cancel_scope.cancel()


async def test_manager_replaces_workers_of_a_new_container_and_clears_its_results(autojump_clock):
    results, recorder = ProbeResults(), Recorder()
    tree = manager_tree(results, recorder)
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1", "side": "s1"}))
        recorder.take()
        results.set(UID, "app", "liveness", "a1", "failure", "dead")
        results.set(UID, "side", "startup", "s1", "success")
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a2", "side": "s1"}))
        assert recorder.take() == [("start", "u1.app.liveness", "a2"), ("start", "u1.app.readiness", "a2"),
                                   ("stop", "u1.app.liveness", "a1"), ("stop", "u1.app.readiness", "a1")]
        assert results.failed_liveness(UID) == {} and results.started(UID) == {"side": True}
        nursery.cancel_scope.cancel()


async def test_manager_stops_workers_of_stopped_containers_and_removed_pods(autojump_clock):
    results, recorder = ProbeResults(), Recorder()
    tree = manager_tree(results, recorder)
    other = make_pod(uid="u2", containers=[{"name": "app", "readinessProbe": probe()}])
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1", "side": "s1"}))
        await tell(tree, ProbeTargets("u2", other, running={"app": "b1"}))
        recorder.take()
        results.set(UID, "app", "readiness", "a1", "success")
        results.set("u2", "app", "readiness", "b1", "success")
        await tell(tree, ProbeTargets(UID, PROBED, running={"side": "s1"}))
        assert recorder.take() == [("stop", "u1.app.liveness", "a1"), ("stop", "u1.app.readiness", "a1")]
        assert results.ready(UID) == {}
        await tell(tree, ProbeTargets(UID, None))
        assert recorder.take() == [("stop", "u1.side.startup", "s1")]
        assert results.ready("u2") == {"app": True}  # the other pod is untouched
        assert [c.name for c in find(tree, "root/probes").children] == ["manager", "u2.app.readiness"]
        nursery.cancel_scope.cancel()


async def test_a_crashing_probe_worker_is_restarted_alone(autojump_clock):
    results, recorder = ProbeResults(), Recorder(crash_first={"u1.app.readiness"})
    tree = manager_tree(results, recorder)
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1"}))
        await trio.sleep(5)
        assert recorder.take() == [("start", "u1.app.liveness", "a1"), ("start", "u1.app.readiness", "a1"),
                                   ("start", "u1.app.readiness", "a1"), ("stop", "u1.app.readiness", "a1")]
        snapshot = find(tree, "root/probes/u1.app.readiness")
        assert snapshot.restarts == 1 and snapshot.state == "running"
        assert find(tree, "root/probes/u1.app.liveness").restarts == 0
        nursery.cancel_scope.cancel()


async def test_a_restarted_manager_adopts_the_workers_the_board_knows(autojump_clock):
    results, recorder = ProbeResults(), Recorder()
    tree = manager_tree(results, recorder)
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1"}))
        recorder.take()
        results.set(UID, "app", "readiness", "a1", "success")  # what a real worker publishes
        await tree.find_supervisor("root/probes").crash_child("manager")
        await trio.sleep(1)
        # The liveness worker had published nothing: it is not known, so it is stopped.
        assert recorder.take() == [("stop", "u1.app.liveness", "a1")]
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1"}))
        assert recorder.take() == [("start", "u1.app.liveness", "a1")]
        nursery.cancel_scope.cancel()


async def test_workers_started_right_after_the_kubelet_are_spread_over_a_period(autojump_clock):
    results, recorder = ProbeResults(), Recorder()
    tree = manager_tree(results, recorder, rng=lambda: 0.25)
    late = make_pod(uid="u2", containers=[{"name": "app", "readinessProbe": probe(period=10)}])
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await tell(tree, ProbeTargets(UID, PROBED, running={"app": "a1"}))
        await trio.sleep(15)
        await tell(tree, ProbeTargets("u2", late, running={"app": "b1"}))
        assert recorder.targets["u1.app.readiness"].jitter == 2.5
        assert recorder.targets["u2.app.readiness"].jitter == 0.0
        nursery.cancel_scope.cancel()


# -- the whole subtree ---------------------------------------------------------------------------


async def test_probes_subtree_from_targets_to_results(autojump_clock):
    results, inbox = ProbeResults(), Inbox()
    handlers = {"a1": Script(), "a2": Script(then="failure")}

    async def handler(probe, container, container_id, host):
        return await handlers[container_id](probe, container, container_id, host)

    holder: list[Supervisor] = []
    pod = make_pod(containers=[{"name": "app", "readinessProbe": probe(period=5)}])
    tree = Supervisor("root", [
        inbox.spec("sync-loop"),
        probes_supervisor_spec(tree=lambda: holder[0], results=results, metrics=ProbeMetrics(CollectorRegistry()),
                               runtime=None, host_ip="127.0.0.1", handler=handler),
    ])
    holder.append(tree)
    async with trio.open_nursery() as nursery:
        await run_tree(tree, nursery)
        await trio.sleep(20)  # past the first period: no jitter
        await tell(tree, ProbeTargets(UID, pod, running={"app": "a1"}))
        assert results.ready(UID, running={"app": "a1"}) == {"app": True}
        await tell(tree, ProbeTargets(UID, pod, running={"app": "a2"}))
        assert results.ready(UID, running={"app": "a2"}) == {"app": False}
        await tell(tree, ProbeTargets(UID, None))
        assert results.ready(UID) == {} and len(results) == 0
        nursery.cancel_scope.cancel()
    assert [(m.container_id, m.result) for m in inbox.messages] == [
        ("a1", "failure"), ("a1", "success"), ("a2", "failure")]


# -- the board -----------------------------------------------------------------------------------


def test_board_reports_a_change_only_when_the_result_or_the_container_changes():
    board = ProbeResults()
    assert board.set(UID, "c", "readiness", "a1", "failure") is True
    assert board.set(UID, "c", "readiness", "a1", "failure", "again") is False
    assert board.set(UID, "c", "readiness", "a1", "success") is True
    assert board.set(UID, "c", "readiness", "a2", "success") is True  # a new container


def test_board_answers_per_pod_and_only_about_the_running_containers():
    board = ProbeResults()
    board.set(UID, "a", "readiness", "a1", "success")
    board.set(UID, "b", "readiness", "b1", "failure")
    board.set(UID, "a", "liveness", "a1", "failure", "HTTP probe failed with statuscode: 500")
    board.set(UID, "b", "startup", "b1", "failure", "timeout")
    board.set("u2", "a", "readiness", "x1", "success")
    assert board.ready(UID) == {"a": True, "b": False}
    assert board.ready(UID, running={"a": "a1", "b": "b2"}) == {"a": True}
    assert board.failed_liveness(UID) == {"a": "HTTP probe failed with statuscode: 500"}
    assert board.failed_startup(UID) == {"b": "timeout"} and board.started(UID) == {"b": False}
    board.remove_pod(UID)
    assert board.ready(UID) == {} and board.ready("u2") == {"a": True}
