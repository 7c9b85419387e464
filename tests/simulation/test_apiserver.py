"""The simulated API server (apiserver.py): the kubelet's own ApiClient against the test
API server run in-process, on trio's MockClock. What the simulation relies on: list+watch
with bookmarks, 410 Gone, cut watches, faults on virtual time, lost answers, optimistic
concurrency, graceful deletion, and the record of writes."""

from __future__ import annotations

import pytest
import trio

from pykubelet.ports.apiserver import ApiClient, ApiUnavailable, Conflict, Gone, ServerError

from .apiserver import SimApiServer

NODE = "node1"
PODS = "/api/v1/namespaces/default/pods"
MINE = {"fieldSelector": f"spec.nodeName={NODE}"}


@pytest.fixture
def server() -> SimApiServer:
    return SimApiServer(NODE, bookmark_interval=5.0)


def client(server: SimApiServer, **options) -> ApiClient:
    return ApiClient(server.credentials(), qps=None, transport=server.transport(), **options)


def pod(name: str, node: str = NODE) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "main", "image": "registry.local/main:1"}]}}


async def test_the_node_lists_and_watches_its_pods_with_bookmarks(server, autojump_clock):
    assert (await server.admin("POST", PODS, pod("a")))[0] == 201
    assert (await server.admin("POST", PODS, pod("elsewhere", node="node2")))[0] == 201
    async with client(server) as api:
        items, rv = await api.list("/api/v1/pods", {"fieldSelector": f"spec.nodeName={NODE}"})
        assert [i["metadata"]["name"] for i in items] == ["a"]
        seen = []
        started = trio.current_time()
        params = {"fieldSelector": f"spec.nodeName={NODE}", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with api.watch("/api/v1/pods", params) as events:
            async for event in events:
                seen.append((event.type, round(trio.current_time() - started, 3)))
                if len(seen) == 1:
                    await server.admin("POST", PODS, pod("b"))
                if len(seen) == 3:
                    break
        assert seen[0] == ("BOOKMARK", 5.0)
        assert seen[1] == ("ADDED", 5.0)
        assert seen[2] == ("BOOKMARK", 10.0)


async def test_an_expired_history_ends_the_watch_with_gone(server, autojump_clock):
    async with client(server) as api:
        _, rv = await api.list("/api/v1/pods", MINE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_later, 1.0, server.expire_watches)
            with pytest.raises(Gone):
                await _drain(api, {**MINE, "resourceVersion": rv})
        with pytest.raises(Gone):  # resuming from the old version: 410 too
            async with api.watch("/api/v1/pods", {**MINE, "resourceVersion": rv}) as events:
                async for _ in events:
                    pass


async def test_a_cut_watch_is_unavailable_and_a_silent_one_times_out(server, autojump_clock):
    async with client(server, watch_read_timeout=30.0) as api:
        _, rv = await api.list("/api/v1/pods", MINE)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_later, 1.0, server.cut_watches)
            with pytest.raises(ApiUnavailable):
                await _drain(api, {**MINE, "resourceVersion": rv})
        assert server.open_watches() == 0
        started = trio.current_time()
        with pytest.raises(ApiUnavailable) as caught:  # no bookmarks asked: silent for 30 s
            async with api.watch("/api/v1/pods", {**MINE, "resourceVersion": rv}) as events:
                async for _ in events:
                    pass
        assert trio.current_time() - started == pytest.approx(30.0)
        assert "watch read timeout" in str(caught.value)


async def test_faults_fail_delay_and_reset_on_virtual_time(server, autojump_clock):
    async with client(server) as api:
        server.fail(500, count=1, verbs=["list"])
        with pytest.raises(ServerError):
            await api.list("/api/v1/pods", MINE)
        await api.list("/api/v1/pods", MINE)
        server.latency(2.5, duration=10.0)
        started = trio.current_time()
        await api.list("/api/v1/pods", MINE)
        assert trio.current_time() - started == pytest.approx(2.5)
        server.reset(duration=5.0)
        with pytest.raises(ApiUnavailable):
            await api.list("/api/v1/pods", MINE)
        await trio.sleep(10.0)
        await api.list("/api/v1/pods", MINE)


async def test_a_hang_holds_requests_until_the_client_gives_up(server, autojump_clock):
    async with client(server, timeout=20.0) as api:
        server.hang(duration=60.0)
        started = trio.current_time()
        with pytest.raises(ApiUnavailable):
            await api.list("/api/v1/pods", MINE)
        assert trio.current_time() - started == pytest.approx(20.0)
        await trio.sleep(40.0)
        await api.list("/api/v1/pods", MINE)


async def test_a_lost_answer_still_wrote(server, autojump_clock):
    await server.admin("POST", PODS, pod("a"))
    async with client(server) as api:
        server.lose_answers = 1
        with pytest.raises(ApiUnavailable):
            await api.patch(f"{PODS}/a/status", {"status": {"phase": "Running"}})
        assert (await api.get(f"{PODS}/a"))["status"]["phase"] == "Running"


async def test_a_stale_lease_update_conflicts(server, autojump_clock):
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": NODE, "namespace": "kube-node-lease"},
             "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40}}
    async with client(server) as api:
        created = await api.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
        await api.replace(path, {**created, "spec": {**created["spec"], "leaseDurationSeconds": 41}})
        with pytest.raises(Conflict):
            await api.replace(path, {**created, "spec": {**created["spec"], "leaseDurationSeconds": 42}})


async def test_graceful_deletion_then_the_kubelet_removes_the_object(server, autojump_clock):
    _, created = await server.admin("POST", PODS, pod("a"))
    status, deleting = await server.admin("DELETE", f"{PODS}/a")
    assert status == 200 and deleting["metadata"]["deletionGracePeriodSeconds"] == 5
    async with client(server) as api:
        await api.delete(f"{PODS}/a", {"gracePeriodSeconds": 0, "preconditions": {"uid": created["metadata"]["uid"]}})
    assert server.pods() == []


async def test_writes_are_recorded_with_whether_they_changed_the_object(server, autojump_clock):
    await server.admin("POST", PODS, pod("a"))
    async with client(server) as api:
        await api.patch(f"{PODS}/a/status", {"status": {"phase": "Running"}})
        await api.patch(f"{PODS}/a/status", {"status": {"phase": "Running"}})
    status_writes = [w for w in server.writes if w.resource == "pods/status"]
    assert [(w.user, w.name, w.changed) for w in status_writes] == [
        (f"system:node:{NODE}", "a", True), (f"system:node:{NODE}", "a", False)]
    assert server.writes[0].resource == "pods" and server.writes[0].method == "POST"


async def _drain(api: ApiClient, params: dict) -> None:
    async with api.watch("/api/v1/pods", params) as events:
        async for _ in events:
            pass


async def _later(delay: float, action) -> None:
    await trio.sleep(delay)
    action()
