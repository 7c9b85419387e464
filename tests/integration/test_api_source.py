"""The api source and the status manager against the test API server, as the node identity
system:node:node1 (Node authorizer + NodeRestriction): the source lists and watches exactly
the pods bound to node1 (created by the admin), keeps pods being deleted, re-lists after
the watch history expires (410) and rides out a burst of 500s; the status manager's
strategic merge patches are accepted (schema-validated) and seen by the admin, written only
on change, retried through 500s, and a pod being deleted is deleted once the kubelet let
it go."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.sources.api import api_source_actor
from pykubelet.actors.status_manager import status_manager_actor
from pykubelet.messages.pod import (
    ContainerState,
    ContainerStateRunning,
    ContainerStateWaiting,
    ContainerStatus,
    Pod,
    PodCondition,
    PodIP,
    PodStatus,
)
from pykubelet.actors.pod_config import pod_config_actor
from pykubelet.messages.pod_updates import PodConfigMessage, PodUpdate, SourcePods, SourcesReady
from pykubelet.pods.status_patch import status_patch
from pykubelet.ports.apiserver import ApiClient, decode, load_kubeconfig
from pykubelet.supervisor import ChildSpec, MailboxSpec
from tests.support.actors import Inbox, running
from tests.support.apiserver.handle import LocalApiServer

NODE = "node1"
NODE_USER = f"system:node:{NODE}"
PODS = "/api/v1/namespaces/default/pods"


def pod_manifest(name: str, node: str | None = NODE) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def create_pod(server: LocalApiServer, name: str, node: str | None = NODE) -> dict[str, Any]:
    response = server.admin.post(PODS, json=pod_manifest(name, node))
    assert response.status_code == 201, response.text
    return response.json()


@asynccontextmanager
async def node_client(server: LocalApiServer) -> AsyncIterator[ApiClient]:
    credentials = load_kubeconfig(str(server.kubeconfig(NODE_USER)))
    async with ApiClient(credentials, timeout=5.0, watch_read_timeout=30.0) as client:
        yield client


async def eventually(check: Callable[[], Any], *, timeout: float = 15.0, what: str = "condition") -> Any:
    with trio.move_on_after(timeout):
        while True:
            result = check()
            if result:
                return result
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def sent_sets(inbox: Inbox) -> list[SourcePods]:
    return [m for m in inbox.messages if isinstance(m, SourcePods)]


def last_names(inbox: Inbox) -> list[str] | None:
    sets = sent_sets(inbox)
    return [p.metadata.name for p in sets[-1].pods] if sets else None


# --- the api source -------------------------------------------------------------------------


async def test_the_api_source_lists_and_watches_the_pods_bound_to_this_node(apiserver):
    create_pod(apiserver, "before")
    create_pod(apiserver, "elsewhere", node="node2")
    create_pod(apiserver, "unscheduled", node=None)
    inbox = Inbox()
    async with node_client(apiserver) as client:
        source = ChildSpec("api", api_source_actor(client=client, node_name=NODE, backoff_initial=0.1))
        async with running(inbox.spec("pod-config"), source):
            await eventually(lambda: last_names(inbox) == ["before"], what="the first list")
            first = sent_sets(inbox)[0]
            assert first.source == "api" and first.problems == []
            assert first.pods[0].spec.node_name == NODE

            create_pod(apiserver, "after")
            create_pod(apiserver, "elsewhere-too", node="node2")
            await eventually(lambda: last_names(inbox) == ["after", "before"], what="the ADDED event")

            # Graceful deletion: the pod stays, now with its deletionTimestamp.
            response = apiserver.admin.request("DELETE", f"{PODS}/before", json={"gracePeriodSeconds": 30})
            assert response.status_code == 200, response.text

            def being_deleted() -> bool:
                sets = sent_sets(inbox)
                pods = {p.metadata.name: p for p in sets[-1].pods}
                before = pods.get("before")
                return before is not None and before.metadata.deletion_timestamp is not None

            await eventually(being_deleted, what="the pod with its deletionTimestamp")
            assert sent_sets(inbox)[-1].pods[1].metadata.deletion_grace_period_seconds == 30
            # Unscheduled and other nodes' pods never showed up.
            seen = {p.metadata.name for s in sent_sets(inbox) for p in s.pods}
            assert seen == {"before", "after"}
            # Every request this node made was allowed (no 403 for the selector).
            mine = apiserver.requests(user=NODE_USER, resource="pods")
            assert {r.verb for r in mine} == {"list", "watch"}
            assert all(r.status in (200, None) for r in mine)
            assert all("fieldSelector=spec.nodeName%3Dnode1" in r.query or "fieldSelector=spec.nodeName=node1" in r.query
                       for r in mine)


async def test_the_api_source_relists_after_410_and_survives_500s(apiserver):
    created = create_pod(apiserver, "web")
    inbox = Inbox()
    async with node_client(apiserver) as client:
        source = ChildSpec("api", api_source_actor(client=client, node_name=NODE, backoff_initial=0.1))
        async with running(inbox.spec("pod-config"), source):
            await eventually(lambda: last_names(inbox) == ["web"], what="the first list")
            sends = len(sent_sets(inbox))

            # The watch history is compacted: 410, re-list, the same pods: nothing to send.
            lists_before = len(apiserver.requests(user=NODE_USER, verb="list"))
            apiserver.expire_watches()
            await eventually(lambda: len(apiserver.requests(user=NODE_USER, verb="list")) > lists_before,
                             what="the re-list after 410")
            await trio.sleep(0.5)
            assert len(sent_sets(inbox)) == sends
            assert sent_sets(inbox)[-1].pods[0].metadata.uid == created["metadata"]["uid"]

            # A burst of 500s on the node's pod reads, with the history expired under it, and
            # a pod created meanwhile: the source backs off, re-lists and finds it.
            apiserver.fail(500, count=4, users=NODE_USER, resources="pods")
            apiserver.expire_watches()
            create_pod(apiserver, "during")
            await eventually(lambda: last_names(inbox) == ["during", "web"], what="recovery after the 500s")
            failed = [r for r in apiserver.requests(user=NODE_USER, resource="pods") if r.status == 500]
            assert len(failed) == 4

            # And the watch works again afterwards.
            create_pod(apiserver, "later")
            await eventually(lambda: last_names(inbox) == ["during", "later", "web"], what="the watch after recovery")


async def test_through_pod_config_a_relist_after_410_changes_nothing_for_the_sync_loop(apiserver):
    create_pod(apiserver, "web")
    sync_loop = Inbox()
    async with node_client(apiserver) as client:
        children = [
            sync_loop.spec("sync-loop"),
            ChildSpec("pod-config", pod_config_actor(sources=["api"]),
                      mailbox=MailboxSpec(capacity=64, durable=True, accepts=(PodConfigMessage,))),
            ChildSpec("api", api_source_actor(client=client, node_name=NODE)),
        ]
        async with running(*children):
            await eventually(lambda: any(isinstance(m, SourcesReady) for m in sync_loop.messages), what="SourcesReady")
            updates = [(m.op, [p.metadata.name for p in m.pods]) for m in sync_loop.messages if isinstance(m, PodUpdate)]
            assert updates == [("ADD", ["web"])]
            assert sync_loop.messages[0].pods[0].metadata.annotations["kubernetes.io/config.source"] == "api"
            sync_loop.take()
            lists = len(apiserver.requests(user=NODE_USER, verb="list"))
            apiserver.expire_watches()
            await eventually(lambda: len(apiserver.requests(user=NODE_USER, verb="list")) > lists, what="the re-list")
            await trio.sleep(0.5)
            assert sync_loop.messages == []  # same UIDs: no REMOVE/ADD, so no container restarts


# --- the status manager ----------------------------------------------------------------------


def board_pod(server: LocalApiServer, name: str) -> Pod:
    """The pod as the sync loop has it: from the API, stamped by pod config."""
    pod = decode(server.admin.get(f"{PODS}/{name}").json(), Pod)
    annotations = {**pod.metadata.annotations, "kubernetes.io/config.source": "api"}
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations))


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def kubelet_status(*, running: bool, restarts: int = 0) -> PodStatus:
    t = now()
    if running:
        state = ContainerState(running=ContainerStateRunning(started_at=t))
        image_id, container_id = "sha256:" + "ab" * 32, "containerd://" + "cd" * 32
    else:
        state = ContainerState(waiting=ContainerStateWaiting(reason="ContainerCreating"))
        image_id, container_id = "", ""
    flag = "True" if running else "False"
    return PodStatus(
        phase="Running" if running else "Pending",
        host_ip="127.0.0.1", pod_ip="127.0.0.1", pod_ips=[PodIP(ip="127.0.0.1")], start_time=t, qos_class="BestEffort",
        conditions=[
            PodCondition(type="PodReadyToStartContainers", status="True", last_transition_time=t),
            PodCondition(type="Initialized", status="True", last_transition_time=t),
            PodCondition(type="Ready", status=flag, last_transition_time=t,
                         reason="" if running else "ContainersNotReady",
                         message="" if running else "containers with unready status: [c]"),
            PodCondition(type="ContainersReady", status=flag, last_transition_time=t,
                         reason="" if running else "ContainersNotReady"),
            PodCondition(type="PodScheduled", status="True", last_transition_time=t),
        ],
        container_statuses=[ContainerStatus(
            name="c", ready=running, restart_count=restarts, state=state, image="docker.io/library/busybox:1.36",
            image_id=image_id, container_id=container_id, started=running)],
    )


async def test_the_status_managers_patches_are_accepted_and_seen_by_the_admin(apiserver):
    created = create_pod(apiserver, "web")
    uid = created["metadata"]["uid"]
    board = PodStatuses()
    pending = kubelet_status(running=False)
    board.set(board_pod(apiserver, "web"), pending)  # a waiting container: imageID "" (required, empty)

    def api_status() -> dict[str, Any]:
        return apiserver.admin.get(f"{PODS}/web").json()["status"]

    async with node_client(apiserver) as client:
        manager = ChildSpec("status-manager", status_manager_actor(client=client, statuses=board, poll=0.1,
                                                                   backoff_initial=0.1))
        async with running(manager):
            await eventually(lambda: api_status().get("phase") == "Pending" and api_status().get("containerStatuses"),
                             what="the Pending status")
            assert status_patch(api_status(), pending, uid=uid) is None  # the API holds exactly it

            ready = kubelet_status(running=True)
            board.set(board_pod(apiserver, "web"), ready)
            await eventually(lambda: api_status().get("phase") == "Running", what="the Running status")
            status = api_status()
            assert status_patch(status, ready, uid=uid) is None
            assert [c["type"] for c in status["conditions"]] == [
                "PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            assert status["containerStatuses"][0]["state"]["running"]["startedAt"]
            assert status["podIPs"] == [{"ip": "127.0.0.1"}]

            # Nothing changes: nothing is written.
            patches = len(apiserver.requests(user=NODE_USER, resource="pods/status", verb="patch"))
            await trio.sleep(1.0)
            assert len(apiserver.requests(user=NODE_USER, resource="pods/status", verb="patch")) == patches
            assert all(r.status == 200 for r in apiserver.requests(user=NODE_USER))

            # A burst of 500s on status writes: retried, the latest status lands.
            apiserver.fail(500, count=3, users=NODE_USER, resources="pods/status")
            restarted = kubelet_status(running=True, restarts=1)
            board.set(board_pod(apiserver, "web"), restarted)
            await eventually(lambda: api_status()["containerStatuses"][0]["restartCount"] == 1,
                             what="the status after the 500s")
            assert status_patch(api_status(), restarted, uid=uid) is None


async def test_a_pod_being_deleted_is_deleted_by_the_node_once_the_kubelet_let_it_go(apiserver):
    created = create_pod(apiserver, "web")
    board = PodStatuses()
    board.set(board_pod(apiserver, "web"), kubelet_status(running=True))
    async with node_client(apiserver) as client:
        manager = ChildSpec("status-manager", status_manager_actor(client=client, statuses=board, poll=0.1))
        async with running(manager):
            await eventually(lambda: apiserver.admin.get(f"{PODS}/web").json()["status"].get("phase") == "Running",
                             what="the Running status")
            response = apiserver.admin.request("DELETE", f"{PODS}/web", json={"gracePeriodSeconds": 30})
            assert response.status_code == 200
            assert response.json()["metadata"]["deletionTimestamp"]
            await trio.sleep(0.5)
            assert apiserver.admin.get(f"{PODS}/web").status_code == 200  # the kubelet still runs it

            board.remove(created["metadata"]["uid"])  # the pod worker stopped and removed everything
            await eventually(lambda: apiserver.admin.get(f"{PODS}/web").status_code == 404, what="the deletion")
            (delete,) = apiserver.requests(user=NODE_USER, verb="delete")
            assert delete.status == 200 and delete.resource == "pods"
