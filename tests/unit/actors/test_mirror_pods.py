"""The mirror pod actor on MockClock against an in-memory pods API: a mirror pod is created
at start, recreated within a period after it was deleted, deleted (grace 0, UID
precondition) when its static pod leaves the board; a change of the board is acted on
within a poll; nothing is created before the Node's UID is known; an API error is logged
once and retried next period, or as soon as the API server answers again; the status
manager is told of each mirror pod created."""

from __future__ import annotations

import copy
import logging
from typing import Any

import trio

from pykubelet.actors.mirror_pods import mirror_pods_actor
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.messages.api_server import ApiServerAnswersAgain, MirrorPodsMessage
from pykubelet.messages.pod import Container, ObjectMeta, Pod, PodSpec, PodStatus
from pykubelet.messages.pod_status_reports import MirrorPodCreated
from pykubelet.ports.apiserver import error_from_status, unavailable
from pykubelet.supervisor import ChildSpec, MailboxSpec
from tests.support.actors import Inbox, running

NS = "kube-system"


class FakePodsApi:
    """Pods in memory by name: list (by spec.nodeName), create, delete with preconditions."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[float, str, str]] = []
        self.failures: list[BaseException] = []
        self.down = False  # no answer to any call (an outage)
        self.next_uid = 0

    def _record(self, verb: str, path: str) -> None:
        self.calls.append((trio.current_time(), verb, path))
        if self.down:
            raise unavailable(ConnectionRefusedError(111, "Connection refused"), method=verb, path=path,
                              url="https://127.0.0.1" + path)
        if self.failures:
            raise self.failures.pop(0)

    async def list(self, path: str, params: Any = None) -> tuple[list[dict[str, Any]], str]:
        await trio.lowlevel.checkpoint()
        self._record("LIST", path)
        node = params["fieldSelector"].removeprefix("spec.nodeName=")
        return [copy.deepcopy(p) for p in self.pods.values() if p["spec"].get("nodeName") == node], "1"

    async def create(self, path: str, body: Any) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        self._record("CREATE", path)
        name = body["metadata"]["name"]
        if name in self.pods:
            raise error_from_status(409, {"reason": "AlreadyExists", "message": "exists"}, method="POST", path=path)
        self.next_uid += 1
        pod = copy.deepcopy(body)
        pod["metadata"]["uid"] = f"m{self.next_uid}"
        self.pods[name] = pod
        return copy.deepcopy(pod)

    async def delete(self, path: str, body: Any = None) -> None:
        await trio.lowlevel.checkpoint()
        self._record("DELETE", path)
        assert body["gracePeriodSeconds"] == 0
        name = path.rsplit("/", 1)[-1]
        if name not in self.pods:
            raise error_from_status(404, {"reason": "NotFound", "message": "gone"}, method="DELETE", path=path)
        if self.pods[name]["metadata"]["uid"] != body["preconditions"]["uid"]:
            raise error_from_status(409, {"reason": "Conflict", "message": "uid"}, method="DELETE", path=path)
        del self.pods[name]

    def verbs(self) -> list[str]:
        return [verb for _, verb, _ in self.calls]


def static_pod(name: str, hash_: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace=NS, uid=hash_,  # a static pod's UID is its config hash
                            annotations={"kubernetes.io/config.hash": hash_, "kubernetes.io/config.source": "file"}),
        spec=PodSpec(node_name="node1", containers=[Container(name="c", image="busybox")]),
    )


class Harness:
    def __init__(self, node_uid: str | None = "node-uid", *, mailbox: bool = False) -> None:
        self.api = FakePodsApi()
        self.board = PodStatuses()
        self.node_uid = node_uid
        self.desired: set[str] | None = None  # None: the board's pods, as the sync loop wants them
        self.status_manager = Inbox()  # what the status manager is told, when mailbox
        self.spec = ChildSpec("mirror-pods", mirror_pods_actor(
            client=self.api, statuses=self.board, node_name="node1", registered_node_uid=lambda: self.node_uid,
            desired=lambda: self.desired if self.desired is not None else {p.metadata.uid for p in self.board.pods()},
            status_manager="root/status-manager" if mailbox else None,
        ), mailbox=MailboxSpec(capacity=4, accepts=(MirrorPodsMessage,)) if mailbox else None)

    def children(self) -> list[ChildSpec]:
        return [self.status_manager.spec("status-manager"), self.spec]

    def mirror(self, name: str) -> dict[str, Any] | None:
        return self.api.pods.get(name)


async def test_a_static_pod_gets_a_mirror_pod_recreated_after_deletion_and_deleted_with_it(autojump_clock):
    h = Harness()
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus(phase="Running"))
    async with running(h.spec):
        await trio.sleep(0.5)
        mirror = h.mirror("etcd-node1")
        assert mirror is not None and mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] == "h1"
        assert mirror["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
        assert h.api.verbs() == ["LIST", "CREATE"]
        await trio.sleep(20)
        assert h.api.verbs() == ["LIST", "CREATE", "LIST", "LIST"]  # steady: a list per period
        del h.api.pods["etcd-node1"]  # an admin deletes it
        await trio.sleep(10)
        assert h.mirror("etcd-node1")["metadata"]["uid"] == "m2"
        h.board.remove("h1")  # the static pod is gone
        await trio.sleep(1.5)  # within a poll, not a period
        assert h.mirror("etcd-node1") is None
        assert h.api.calls[-1][1] == "DELETE"


async def test_an_edited_static_pod_gets_its_mirror_pod_replaced(autojump_clock):
    h = Harness()
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus())
    async with running(h.spec):
        await trio.sleep(0.5)
        h.board.remove("h1")
        h.board.set(static_pod("etcd-node1", "h2"), PodStatus())
        await trio.sleep(1.5)
        mirror = h.mirror("etcd-node1")
        assert mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"] == "h2"
        assert h.api.verbs() == ["LIST", "CREATE", "LIST", "DELETE", "CREATE"]


async def test_nothing_is_created_before_the_node_uid_is_known(autojump_clock):
    h = Harness(node_uid=None)
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus())
    async with running(h.spec):
        await trio.sleep(5)
        assert h.mirror("etcd-node1") is None
        h.node_uid = "node-uid"
        await trio.sleep(1.5)
        assert h.mirror("etcd-node1")["metadata"]["ownerReferences"][0]["uid"] == "node-uid"


async def test_api_errors_are_logged_once_and_retried_each_period(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="pykubelet.mirror_pods")
    h = Harness()
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus())
    for _ in range(3):
        h.api.failures.append(unavailable(None, method="GET", path="/api/v1/pods", url="https://x/api/v1/pods"))
    async with running(h.spec):
        await trio.sleep(25)
        assert h.mirror("etcd-node1") is None
        assert [t for t, _, _ in h.api.calls] == [0.0, 10.0, 20.0]
        await trio.sleep(10)
        assert h.mirror("etcd-node1") is not None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "listing mirror pods" in warnings[0].getMessage()
    assert any("succeeds again" in r.getMessage() for r in caplog.records)


async def test_with_no_static_pod_and_no_mirror_pod_nothing_is_listed_after_the_first_round(autojump_clock):
    h = Harness()
    async with running(h.spec):
        await trio.sleep(35)
        assert h.api.verbs() == ["LIST"]  # a node running only API pods costs no list per period


async def test_a_restarted_kubelet_leaves_mirror_pods_alone_until_it_knows_what_is_wanted(autojump_clock):
    # After a restart the board fills pod by pod; a mirror pod whose static pod is wanted
    # but not on the board yet is kept, and none is deleted before every source was seen.
    h = Harness()
    h.api.pods["etcd-node1"] = {"metadata": {"name": "etcd-node1", "namespace": NS, "uid": "m0",
                                             "annotations": {"kubernetes.io/config.mirror": "h1"}},
                                "spec": {"nodeName": "node1"}}
    wanted: list[set[str] | None] = [None]
    h.spec = ChildSpec("mirror-pods", mirror_pods_actor(
        client=h.api, statuses=h.board, node_name="node1", registered_node_uid=lambda: "node-uid",
        desired=lambda: wanted[0],
    ))
    async with running(h.spec):
        await trio.sleep(30)  # sources not all seen yet: nothing deleted
        assert "DELETE" not in h.api.verbs()
        wanted[0] = {"h1"}  # the file source's pod is wanted, its worker has not published yet
        await trio.sleep(30)
        assert "DELETE" not in h.api.verbs() and h.mirror("etcd-node1")["metadata"]["uid"] == "m0"
        h.board.set(static_pod("etcd-node1", "h1"), PodStatus(phase="Running"))
        await trio.sleep(30)
        assert h.api.verbs().count("CREATE") == 0 and h.mirror("etcd-node1")["metadata"]["uid"] == "m0"
        wanted[0] = set()  # its manifest went away while the kubelet was down
        h.board.remove("h1")
        await trio.sleep(2)
        assert h.mirror("etcd-node1") is None


async def test_a_round_that_failed_in_an_outage_is_done_again_as_soon_as_the_api_server_answers(autojump_clock):
    h = Harness(mailbox=True)
    h.api.down = True
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus(phase="Running"))  # added while the API is away
    async with running(*h.children()) as tree:
        await trio.sleep(3)
        assert h.api.calls == [(0.0, "LIST", "/api/v1/pods")]
        h.api.down = False
        await tree.registry.lookup("root/mirror-pods").send(ApiServerAnswersAgain())
        await trio.sleep(0.01)
        assert [(t, verb) for t, verb, _ in h.api.calls] == [(0.0, "LIST"), (3.0, "LIST"), (3.0, "CREATE")]  # not at 10
        assert h.mirror("etcd-node1") is not None
        assert h.status_manager.take() == [MirrorPodCreated(pod_uid="h1")]  # so that it writes the status now
        assert tree.snapshot().children[1].restarts == 0


async def test_the_api_server_answering_again_after_a_round_that_succeeded_starts_no_round(autojump_clock):
    h = Harness(mailbox=True)
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus(phase="Running"))
    async with running(*h.children()) as tree:
        await trio.sleep(3)
        await tree.registry.lookup("root/mirror-pods").send(ApiServerAnswersAgain())
        await trio.sleep(5)
        assert h.api.verbs() == ["LIST", "CREATE"]


async def test_a_retry_on_answers_again_that_fails_too_waits_the_whole_period(autojump_clock):
    # The mirror pod requests alone keep failing while others are answered: one retry at
    # once, then a period, however often the word comes.
    h = Harness(mailbox=True)
    h.api.down = True
    h.board.set(static_pod("etcd-node1", "h1"), PodStatus(phase="Running"))
    async with running(*h.children()) as tree:
        mailbox = tree.registry.lookup("root/mirror-pods")
        await trio.sleep(3)
        for _ in range(19):  # 3 to 12.5
            await mailbox.send(ApiServerAnswersAgain())
            await trio.sleep(0.5)
        assert [t for t, _, _ in h.api.calls] == [0.0, 3.0]
        await trio.sleep(1)
        assert [t for t, _, _ in h.api.calls] == [0.0, 3.0, 13.0]
        h.api.down = False
        await trio.sleep(0.5)
        await mailbox.send(ApiServerAnswersAgain())  # that wait was whole: this one may be cut short
        await trio.sleep(0.01)
        assert [verb for t, verb, _ in h.api.calls if t > 13.5] == ["LIST", "CREATE"]
