"""The status manager on MockClock against an in-memory pods API (patches applied by the
test API server's strategic merge patch): a status is written once per change, never while
it does not change; 500s back off 0.5 s doubling to the period and the latest status wins;
a pod gone from the API (404, another UID) is forgotten; a pod being deleted is deleted
(grace 0, UID precondition) once the kubelet let it go; a restart reconciles by GET."""

from __future__ import annotations

import copy
import logging
from typing import Any

import msgspec
import pytest
import trio

from tests.support.api_fakes import api_error
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.status_manager import status_manager_actor
from pykubelet.actors.status_sync import WRITERS, pod_path
from pykubelet.messages.api_server import ApiServerAnswersAgain
from pykubelet.messages.pod_status_reports import (
    MirrorPodCreated,
    PodStatusChanged,
    PodTerminated,
    StatusManagerMessage,
)
from pykubelet.messages.pod import (
    ContainerState,
    ContainerStateRunning,
    ContainerStatus,
    ObjectMeta,
    Pod,
    PodCondition,
    PodSpec,
    PodStatus,
)
from pykubelet.ports.apiserver import unavailable
from pykubelet.supervisor import ChildSpec, MailboxSpec
from tests.support.actors import running
from tests.support.apiserver import patch as smp
from tests.support.apiserver import schema

NS = "default"
DELETING = "2026-01-01T00:00:30Z"



class FakeStatusApi:
    """Pods in memory; get, patch of /status (strategic, the UID as precondition), delete
    with DeleteOptions; every call recorded; failures injected per call."""

    def __init__(self) -> None:
        self.latency = 0.0  # seconds each call takes (MockClock time)
        self.in_flight = self.most_in_flight = 0
        self.pods: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[float, str, str, Any]] = []
        self.failures: list[BaseException] = []  # for the next calls, whatever their verb
        self.down = False  # no answer to any call (an outage)
        self.patch_failures: list[BaseException] = []
        self.rv = 100

    def create(self, name: str, *, uid: str | None = None, status: dict | None = None, **meta: Any) -> dict[str, Any]:
        self.rv += 1
        self.pods[name] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "resourceVersion": str(self.rv), **meta},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}]},
            "status": status or {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        }
        return self.pods[name]

    async def _answer_after_latency(self) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await trio.sleep(self.latency)
        finally:
            self.in_flight -= 1

    def _call(self, verb: str, path: str, body: Any = None) -> str:
        self.calls.append((trio.current_time(), verb, path, copy.deepcopy(body)))
        if self.down:
            raise unavailable(ConnectionRefusedError(111, "Connection refused"), method=verb, path=path,
                              url="https://127.0.0.1" + path)
        if self.failures:
            raise self.failures.pop(0)
        name = path.split("/")[6]
        if name not in self.pods:
            raise api_error(404, "NotFound", f'pods "{name}" not found', method=verb, path=path)
        return name

    async def get(self, path: str) -> dict[str, Any]:
        await self._answer_after_latency()
        return copy.deepcopy(self.pods[self._call("GET", path)])

    async def patch(self, path: str, body: Any, patch_type: str = "strategic") -> dict[str, Any]:
        await self._answer_after_latency()
        name = self._call("PATCH", path, body)
        if self.patch_failures:
            raise self.patch_failures.pop(0)
        assert path.endswith("/status") and patch_type == "strategic"
        pod = self.pods[name]
        if body["metadata"]["uid"] != pod["metadata"]["uid"]:
            raise api_error(409, "Conflict", "Precondition failed: UID in precondition", method="PATCH", path=path)
        patched = smp.apply(smp.STRATEGIC, pod, body, schema.kind_schema("", "v1", "Pod"))
        schema.validate(patched, "", "v1", "Pod")
        self.rv += 1
        patched["metadata"]["resourceVersion"] = str(self.rv)
        self.pods[name] = patched
        return copy.deepcopy(patched)

    async def delete(self, path: str, body: Any = None) -> dict[str, Any] | None:
        await trio.lowlevel.checkpoint()
        name = self._call("DELETE", path, body)
        if body["preconditions"]["uid"] != self.pods[name]["metadata"]["uid"]:
            raise api_error(409, "Conflict", "Precondition failed: UID in precondition", method="DELETE", path=path)
        return self.pods.pop(name)

    def verbs(self, since: float = -1.0) -> list[tuple[float, str, str]]:
        return [(t, verb, path.rsplit("/", 1)[-1]) for t, verb, path, _ in self.calls if t >= since]

    def bodies(self, verb: str) -> list[Any]:
        return [body for _, v, _, body in self.calls if v == verb]


def board_pod(name: str, *, uid: str | None = None, source: str = "api", deletion: str | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace=NS, uid=uid or f"uid-{name}", deletion_timestamp=deletion,
                            annotations={"kubernetes.io/config.source": source}),
        spec=PodSpec(node_name="node1"),
    )


def status(phase: str = "Running", *, ready: bool = True, restarts: int = 0) -> PodStatus:
    flag = "True" if ready else "False"
    return PodStatus(
        phase=phase, host_ip="127.0.0.1", pod_ip="127.0.0.1", start_time="2026-01-01T00:00:01Z", qos_class="BestEffort",
        conditions=[PodCondition(type="Ready", status=flag, last_transition_time="2026-01-01T00:00:02Z"),
                    PodCondition(type="PodScheduled", status="True")],
        container_statuses=[ContainerStatus(
            name="c", ready=ready, restart_count=restarts, image="busybox", image_id="sha256:1",
            state=ContainerState(running=ContainerStateRunning(started_at="2026-01-01T00:00:02Z")))],
    )


class Harness:
    def __init__(self, *, mailbox: bool = False, **settings: Any) -> None:
        self.api = FakeStatusApi()
        self.board = PodStatuses()
        spec_mailbox = MailboxSpec(capacity=64, durable=True, accepts=StatusManagerMessage.__args__) if mailbox else None
        self.spec = ChildSpec("status-manager", status_manager_actor(client=self.api, statuses=self.board, **settings),
                              mailbox=spec_mailbox)

    def api_status(self, name: str) -> dict[str, Any]:
        return self.api.pods[name]["status"]


async def test_a_status_is_written_once_per_change_and_never_while_unchanged(autojump_clock):
    h = Harness()
    h.api.create("web")
    h.board.set(board_pod("web"), status(ready=False))
    async with running(h.spec):
        await trio.sleep(0.5)
        assert h.api.verbs() == [(0, "GET", "web"), (0, "PATCH", "status")]
        assert h.api_status("web")["phase"] == "Running"
        assert h.api.bodies("PATCH")[0]["metadata"] == {"uid": "uid-web"}
        await trio.sleep(60)
        assert len(h.api.calls) == 2  # nothing changed: nothing sent
        h.board.set(board_pod("web"), status(ready=True))
        await trio.sleep(1)
        assert h.api.verbs(since=1)[0][1:] == ("PATCH", "status")  # no GET: the last answer is known
        assert len(h.api.calls) == 3
        assert h.api.bodies("PATCH")[1]["status"]["conditions"] == [{"status": "True", "type": "Ready"}]
        h.board.set(board_pod("web"), status(ready=True))  # the same status again
        await trio.sleep(30)
        assert len(h.api.calls) == 3


async def test_a_pod_new_on_the_board_is_patched_against_its_api_copy_without_a_get(autojump_clock):
    h = Harness()
    h.api.create("old")
    h.board.set(board_pod("old"), status())
    async with running(h.spec):
        await trio.sleep(1)
        assert h.api.verbs() == [(0, "GET", "old"), (0, "PATCH", "status")]  # there at the first look
        api_copy = h.api.create("new", status={"phase": "Pending", "reason": "Stale", "qosClass": "BestEffort"})
        watched = msgspec.convert({**api_copy, "spec": {"nodeName": "node1"}}, Pod)  # as the API source decodes it
        watched = msgspec.structs.replace(watched, metadata=board_pod("new").metadata)
        h.board.set(watched, status())
        await trio.sleep(2)  # the next poll
        assert [call[1:] for call in h.api.verbs(since=1)] == [("PATCH", "status")]
        body = h.api.bodies("PATCH")[1]["status"]
        assert body["phase"] == "Running" and body["reason"] is None  # what differs from the API's copy
        assert "qosClass" not in body  # already so in the API
        assert h.api_status("new")["phase"] == "Running" and "reason" not in h.api_status("new")


async def test_a_status_change_is_seen_within_a_poll_or_at_once_on_a_message(autojump_clock):
    h = Harness(mailbox=True, poll=None, period=10.0)
    h.api.create("web")
    h.board.set(board_pod("web"), status(ready=False))
    async with running(h.spec) as tree:
        await trio.sleep(3)
        assert h.api.verbs() == [(0, "GET", "web"), (0, "PATCH", "status")]
        h.board.set(board_pod("web"), status(ready=True))
        await tree.registry.lookup("root/status-manager").send(PodStatusChanged(pod_uid="uid-web"))
        await trio.sleep(0.01)
        assert h.api.verbs(since=1) == [(3, "PATCH", "status")]
        assert h.api_status("web")["conditions"][0]["status"] == "True"
        # Without a message the board is still read every period, on the whole look's own
        # schedule (t=0, 10, ...), which messages between do not put off.
        h.board.set(board_pod("web"), status(ready=False))
        await trio.sleep(10)
        assert h.api.verbs(since=4) == [(10, "PATCH", "status")]


async def test_a_message_looks_at_the_pods_it_names_alone_and_the_rest_waits_for_the_whole_look(autojump_clock):
    h = Harness(mailbox=True, poll=None, period=10.0)
    for name in ("a", "b"):
        h.api.create(name)
        h.board.set(board_pod(name), status(ready=False))
    async with running(h.spec) as tree:
        await trio.sleep(3)
        assert sorted(h.api.verbs()) == [(0, "GET", "a"), (0, "GET", "b"), (0, "PATCH", "status"), (0, "PATCH", "status")]
        h.board.set(board_pod("a"), status(ready=True))
        h.board.set(board_pod("b"), status(ready=True))  # no message names b
        await tree.registry.lookup("root/status-manager").send(PodStatusChanged(pod_uid="uid-a"))
        await trio.sleep(0.01)
        assert [body["metadata"]["uid"] for body in h.api.bodies("PATCH")[2:]] == ["uid-a"]
        await trio.sleep(7)  # t=10: the whole look
        assert [body["metadata"]["uid"] for body in h.api.bodies("PATCH")[2:]] == ["uid-a", "uid-b"]
        assert h.api.verbs(since=4) == [(10, "PATCH", "status")]
        # A pod that left the board, named by a message, is let go at once (deleted: it was being deleted).
        h.api.pods["b"]["metadata"]["deletionTimestamp"] = DELETING
        h.board.remove("uid-b")
        await tree.registry.lookup("root/status-manager").send(PodStatusChanged(pod_uid="uid-b"))
        await trio.sleep(0.01)
        assert h.api.verbs(since=10.005)[-1][1:] == ("DELETE", "b") and "b" not in h.api.pods


async def test_a_slow_api_server_gets_several_pods_at_once_but_never_more_than_writers(autojump_clock):
    h = Harness()
    h.api.latency = 1.0
    for i in range(10):
        h.api.create(f"p{i}")
        h.board.set(board_pod(f"p{i}"), status())
    async with running(h.spec):
        await trio.sleep(6.5)
        # GET + PATCH of 2 s per pod, WRITERS pods at a time: 10 pods in 3 waves, 6 s
        # (one pod after another would take 20 s).
        assert all(h.api_status(f"p{i}")["phase"] == "Running" for i in range(10))
        assert h.api.most_in_flight == WRITERS


async def test_once_the_api_server_is_unavailable_no_other_pod_is_started(autojump_clock):
    h = Harness()
    h.api.latency = 1.0
    h.api.failures = [api_error(500, "InternalError", "etcd is sad", method="GET", path=pod_path(NS, "p0"))]
    for i in range(10):
        h.api.create(f"p{i}")
        h.board.set(board_pod(f"p{i}"), status())
    async with running(h.spec):
        await trio.sleep(0.5)
        assert h.api.in_flight == WRITERS  # the first wave's GETs
        await trio.sleep(1.4)
        # The first GET answered failed at 1 s; the other writers' PATCHes went out (a pod
        # already started finishes), and no other pod was started: the round ends at 2 s.
        assert h.api.in_flight == WRITERS - 1
        assert len({path.split("/")[6] for _, _, path, _ in h.api.calls}) == WRITERS


async def test_500s_back_off_and_the_latest_status_is_the_one_written(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="pykubelet.status_manager")
    h = Harness()
    h.api.create("web")
    h.api.failures = [api_error(500, "InternalError", "etcd is sad", method="GET", path=pod_path(NS, "web"))
                      for _ in range(5)]
    h.board.set(board_pod("web"), status(restarts=0))
    async with running(h.spec):
        await trio.sleep(2)
        h.board.set(board_pod("web"), status(restarts=1))  # changes while the API fails
        await trio.sleep(30)
        times = [t for t, _, _ in h.api.verbs()]
        # 0, then 0.5, 1, 2, 4 s apart; then the GET and the PATCH of the latest status
        assert times == [0, 0.5, 1.5, 3.5, 7.5, 15.5, 15.5]
        assert h.api_status("web")["containerStatuses"][0]["restartCount"] == 1
        assert len(h.api.bodies("PATCH")) == 1  # the superseded status was never sent
        messages = [r.getMessage() for r in caplog.records]
        assert sum("not written, retrying" in m for m in messages) == 1
        assert any("written again" in m for m in messages)


async def test_the_back_off_is_capped_at_the_period(autojump_clock):
    h = Harness(period=4.0)
    h.api.create("web")
    h.api.failures = [unavailable(ConnectionResetError(104, "Connection reset by peer"), method="GET",
                                  path=pod_path(NS, "web"), url="https://127.0.0.1" + pod_path(NS, "web"))
                      for _ in range(6)]
    h.board.set(board_pod("web"), status())
    async with running(h.spec):
        await trio.sleep(30)
        times = [t for t, _, _ in h.api.verbs()]
        assert times[:7] == [0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5]


async def test_a_pod_gone_from_the_api_is_forgotten(autojump_clock):
    h = Harness()
    h.api.create("web")
    h.board.set(board_pod("web"), status(ready=False))
    async with running(h.spec):
        await trio.sleep(1.5)
        del h.api.pods["web"]
        h.board.set(board_pod("web"), status(ready=True))
        await trio.sleep(1)
        assert [v for _, v, _ in h.api.verbs()] == ["GET", "PATCH", "PATCH"]  # the last one: 404
        h.board.set(board_pod("web"), status(ready=False))
        await trio.sleep(30)
        assert len(h.api.calls) == 3  # forgotten: no more writes while its status lingers
        h.board.remove("uid-web")
        await trio.sleep(30)
        assert len(h.api.calls) == 3  # and nothing to delete


async def test_a_new_pod_under_the_same_name_is_not_written(autojump_clock):
    h = Harness()
    h.api.create("web", uid="uid-new")
    h.board.set(board_pod("web", uid="uid-old"), status())
    async with running(h.spec):
        await trio.sleep(30)
        assert [v for _, v, _ in h.api.verbs()] == ["GET"]
        assert h.api_status("web")["phase"] == "Pending"


async def test_a_restart_reconciles_by_get_and_writes_only_what_differs(autojump_clock):
    h = Harness()
    h.api.create("same", status=msgspec.to_builtins(status()))
    h.api.create("stale", status=msgspec.to_builtins(status(restarts=0)))
    h.board.set(board_pod("same"), status())
    h.board.set(board_pod("stale"), status(restarts=2))
    async with running(h.spec):
        await trio.sleep(5)
        assert sorted((v, p) for _, v, p in h.api.verbs()) == [("GET", "same"), ("GET", "stale"), ("PATCH", "status")]
        (body,) = h.api.bodies("PATCH")
        assert set(body["status"]) == {"containerStatuses"}


def static_board_pod(name: str, hash_: str) -> Pod:
    pod = board_pod(name, uid=f"static-{hash_}", source="file")
    annotations = {**pod.metadata.annotations, "kubernetes.io/config.hash": hash_}
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations))


def mirror_of(hash_: str) -> dict[str, str]:
    return {"kubernetes.io/config.mirror": hash_, "kubernetes.io/config.hash": hash_,
            "kubernetes.io/config.source": "file"}


async def test_a_static_pod_without_a_mirror_pod_is_looked_at_once_a_period_and_never_written(autojump_clock):
    h = Harness()
    h.board.set(static_board_pod("etcd-node1", "h1"), status())
    async with running(h.spec):
        await trio.sleep(25)
        assert [(t, v) for t, v, _ in h.api.verbs()] == [(0.0, "GET"), (10.0, "GET"), (20.0, "GET")]
        h.api.create("etcd-node1", uid="m-old", annotations=mirror_of("h0"))  # of an older manifest
        await trio.sleep(10)
        assert [v for _, v, _ in h.api.verbs()] == ["GET"] * 4


async def test_a_static_pods_status_goes_to_its_mirror_pod_and_to_its_replacement(autojump_clock):
    h = Harness()
    h.api.create("etcd-node1", uid="m1", annotations=mirror_of("h1"))
    h.board.set(static_board_pod("etcd-node1", "h1"), status())
    async with running(h.spec):
        await trio.sleep(1)
        (body,) = h.api.bodies("PATCH")
        assert body["metadata"]["uid"] == "m1"  # the mirror pod's UID, not the static pod's
        assert h.api_status("etcd-node1")["phase"] == "Running"
        # The mirror pod actor replaced the mirror pod: the next period writes the new one.
        del h.api.pods["etcd-node1"]
        h.api.create("etcd-node1", uid="m2", annotations=mirror_of("h1"))
        await trio.sleep(10)
        assert h.api.bodies("PATCH")[-1]["metadata"]["uid"] == "m2"
        assert h.api_status("etcd-node1")["phase"] == "Running"
        # Nothing changes: a GET per period, no write.
        writes = len(h.api.bodies("PATCH"))
        await trio.sleep(30)
        assert len(h.api.bodies("PATCH")) == writes
        # Its status leaves the board: forgotten, never deleted here.
        h.board.remove("static-h1")
        await trio.sleep(30)
        assert "DELETE" not in [v for _, v, _ in h.api.verbs()] and "etcd-node1" in h.api.pods


def web_in_an_outage() -> Harness:
    """A status manager with a mailbox, pod web on the board, and no answer from the API."""
    h = Harness(mailbox=True)
    h.api.create("web")
    h.api.down = True
    h.board.set(board_pod("web"), status())
    return h


async def test_what_piled_up_in_an_outage_is_written_as_soon_as_the_api_server_answers_again(autojump_clock):
    h = web_in_an_outage()
    async with running(h.spec) as tree:
        await trio.sleep(26)  # failed at 0, 0.5, 1.5, 3.5, 7.5, 15.5, 25.5: the back-off is 10 s now
        assert [t for t, _, _ in h.api.verbs()] == [0, 0.5, 1.5, 3.5, 7.5, 15.5, 25.5]
        h.api.down = False  # back at 26; another request of the daemon is answered at 27
        await trio.sleep(1)
        await tree.registry.lookup("root/status-manager").send(ApiServerAnswersAgain())
        await trio.sleep(0.01)
        assert h.api.verbs(since=26) == [(27, "GET", "web"), (27, "PATCH", "status")]  # not at 35.5
        assert h.api_status("web")["phase"] == "Running"
        assert tree.snapshot().children[0].restarts == 0  # the same incarnation, not a new one's first look


async def test_a_retry_on_answers_again_that_fails_too_waits_the_whole_back_off(autojump_clock):
    # Requests of this actor alone keep failing while others are answered: one retry at
    # once, then the back-off as if nothing had been heard, however often the word comes.
    h = web_in_an_outage()
    async with running(h.spec) as tree:
        mailbox = tree.registry.lookup("root/status-manager")
        await trio.sleep(16)  # failed at 0, 0.5, 1.5, 3.5, 7.5, 15.5: next at 25.5
        await mailbox.send(ApiServerAnswersAgain())
        await trio.sleep(0.01)
        assert [t for t, _, _ in h.api.verbs(since=15.6)] == [16]  # cut short
        for _ in range(18):  # until 25.01
            await mailbox.send(ApiServerAnswersAgain())
            await trio.sleep(0.5)
        assert [t for t, _, _ in h.api.verbs(since=15.6)] == [16]
        await trio.sleep(1)
        assert [t for t, _, _ in h.api.verbs(since=15.6)] == [16, 26]  # the whole 10 s after 16
        h.api.down = False
        await trio.sleep(1)
        # That back-off was not cut short, so this one may be.
        await mailbox.send(ApiServerAnswersAgain())
        await trio.sleep(0.01)
        assert [v for t, v, _ in h.api.verbs(since=26.5) if t < 27.1] == ["GET", "PATCH"]


async def test_a_static_pods_status_is_written_as_soon_as_its_mirror_pod_is_created(autojump_clock):
    h = Harness(mailbox=True)
    h.board.set(static_board_pod("etcd-node1", "h1"), status())
    async with running(h.spec) as tree:
        await trio.sleep(3)
        assert [(t, v) for t, v, _ in h.api.verbs()] == [(0.0, "GET")]  # no mirror pod yet: held for a period
        h.api.create("etcd-node1", uid="m1", annotations=mirror_of("h1"))
        await tree.registry.lookup("root/status-manager").send(MirrorPodCreated(pod_uid="static-h1"))
        await trio.sleep(0.01)
        assert [(t, v) for t, v, _ in h.api.verbs(since=1)] == [(3.0, "GET"), (3.0, "PATCH")]  # not at 10
        assert h.api.bodies("PATCH")[0]["metadata"]["uid"] == "m1"
        assert h.api_status("etcd-node1")["phase"] == "Running"


async def test_a_pod_being_deleted_is_deleted_once_its_status_left_the_board(autojump_clock):
    h = Harness()
    h.api.create("web", deletionTimestamp=DELETING, deletionGracePeriodSeconds=30)
    h.board.set(board_pod("web", deletion=DELETING), status())
    async with running(h.spec):
        await trio.sleep(5)
        assert [v for _, v, _ in h.api.verbs()] == ["GET", "PATCH"]  # not before the kubelet let it go
        h.board.remove("uid-web")  # the pod worker stopped and removed everything
        await trio.sleep(1.5)
        assert [v for _, v, _ in h.api.verbs()] == ["GET", "PATCH", "DELETE"]
        assert h.api.bodies("DELETE") == [{"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-web"}}]
        assert "web" not in h.api.pods


async def test_a_deletion_timestamp_only_the_api_knows_is_asked_for_when_the_pod_leaves(autojump_clock):
    h = Harness()
    h.api.create("web")
    h.api.create("kept")
    h.board.set(board_pod("web"), status())
    h.board.set(board_pod("kept"), status())
    async with running(h.spec):
        await trio.sleep(5)
        h.api.pods["web"]["metadata"].update(deletionTimestamp=DELETING, deletionGracePeriodSeconds=30)
        h.board.remove("uid-web")
        h.board.remove("uid-kept")  # let go, but not being deleted: only forgotten
        await trio.sleep(5)
        assert sorted((v, p) for t, v, p in h.api.verbs() if t > 0) == [("DELETE", "web"), ("GET", "kept"), ("GET", "web")]
        assert "kept" in h.api.pods and "web" not in h.api.pods
        await trio.sleep(30)
        assert len([c for c in h.api.calls if c[0] > 0]) == 3


async def test_pod_terminated_deletes_a_pod_never_seen_on_the_board(autojump_clock):
    h = Harness(mailbox=True)
    h.api.create("web", deletionTimestamp=DELETING, deletionGracePeriodSeconds=0)
    async with running(h.spec) as tree:
        await trio.sleep(1)
        await tree.registry.lookup("root/status-manager").send(PodTerminated(pod_uid="uid-web", namespace=NS, name="web"))
        await trio.sleep(0.01)
        assert [v for _, v, _ in h.api.verbs()] == ["GET", "DELETE"]
        assert "web" not in h.api.pods


async def test_a_deletion_that_fails_is_retried_and_a_new_pod_under_the_name_is_spared(autojump_clock):
    h = Harness()
    h.api.create("web", deletionTimestamp=DELETING, deletionGracePeriodSeconds=30)
    h.board.set(board_pod("web", deletion=DELETING), status())
    async with running(h.spec):
        await trio.sleep(1.5)
        h.api.failures = [api_error(503, "ServiceUnavailable", "try later", method="DELETE", path=pod_path(NS, "web"))]
        h.board.remove("uid-web")
        await trio.sleep(1.5)
        assert [(t, v) for t, v, _ in h.api.verbs()][-2:] == [(2, "DELETE"), (2.5, "DELETE")]
        assert "web" not in h.api.pods
    # The UID precondition: a pod recreated under the name meanwhile stays.
    h = Harness()
    h.api.create("web", uid="uid-new")
    h.board.set(board_pod("web", uid="uid-old", deletion=DELETING), status())
    async with running(h.spec):
        await trio.sleep(1.5)
        h.board.remove("uid-old")
        await trio.sleep(5)
        assert h.api.pods["web"]["metadata"]["uid"] == "uid-new"


async def test_an_invalid_status_is_held_for_a_period_and_logged_once(autojump_clock, caplog):
    caplog.set_level(logging.WARNING, logger="pykubelet.status_manager")
    h = Harness(period=10.0)
    h.api.create("web")
    h.board.set(board_pod("web"), status())
    async with running(h.spec):
        await trio.sleep(0.1)
        invalid = api_error(422, "Invalid", 'Pod "web" is invalid: status.podIP: Invalid value', method="PATCH",
                            path=pod_path(NS, "web") + "/status")
        h.api.patch_failures = [invalid, invalid, invalid]
        h.board.set(board_pod("web"), status(ready=False))
        await trio.sleep(25)
        patch_times = [t for t, v, _ in h.api.verbs() if v == "PATCH"]
        # seen at the next poll (1 s), then held for a period each time
        assert [round(t, 1) for t in patch_times] == [0, 1, 11, 21]
        assert sum("refused a write" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("settings", [{"period": 0}, {"poll": 0}, {"backoff_initial": 20.0}])
def test_bad_settings_are_refused(settings):
    with pytest.raises(ValueError):
        status_manager_actor(client=FakeStatusApi(), statuses=PodStatuses(), **settings)
