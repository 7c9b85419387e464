"""The server actor over real sockets: healthz, admin socket, metrics, events, restart and
crash, and the debugging handlers (logs, run) on the admin socket."""

from __future__ import annotations

import os
import socket
import stat

import httpx
import msgspec
import pytest
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from pykubelet.actors.events import EventRecorder, pod_reference
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.server import ServerError, ServerSettings, server_actor
from pykubelet.actors.server.http import (
    UNIX_SEND_BUFFER,
    AdminSocketInUse,
    Request,
    Response,
    open_unix,
    queue_whole_answers,
)
from pykubelet.actors.server.kubelet_api import KubeletApiSources
from pykubelet.actors.server.routes import AdminRoutes
from pykubelet.actors.server.metrics import ActorTreeCollector
from pykubelet.messages.events import Event
from pykubelet.messages.pod import ObjectMeta, Pod, pod_list
from pykubelet.messages.supervision import ActorSnapshot
from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def idle(ctx):
    async for _ in ctx.mailbox:
        pass


class Node:
    """A small tree (a worker and the server) plus clients for both listeners."""

    def __init__(self, tmp_path, *, fault_injection: bool, healthz_port: int | None = None):
        self.health = HealthBoard()
        self.metrics = CollectorRegistry()
        self.events = EventRecorder(self.metrics, host="node-1")
        self.socket = str(tmp_path / "pykubelet.sock")
        self.port = free_port() if healthz_port is None else healthz_port
        settings = ServerSettings(
            admin_socket=self.socket,
            healthz_port=self.port,
            enable_fault_injection=fault_injection,
        )
        self.tree = Supervisor(
            "root",
            [
                ChildSpec("worker", idle, mailbox=MailboxSpec(capacity=8)),
                ChildSpec(
                    "server",
                    server_actor(
                        settings,
                        tree=lambda: self.tree,
                        health=self.health,
                        metrics=self.metrics,
                        events=self.events.events,
                    ),
                ),
            ],
        )
        self.metrics.register(ActorTreeCollector(self.tree.snapshot))

    def admin(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=self.socket), base_url="http://admin")

    async def wait_serving(self) -> None:
        """Until the admin socket accepts connections (the file exists a moment earlier)."""
        with trio.fail_after(5):
            while True:
                try:
                    stream = await trio.open_unix_socket(self.socket)
                except OSError:
                    await trio.sleep(0.01)
                    continue
                await stream.aclose()
                return


@pytest.fixture
async def node(tmp_path, nursery):
    node = Node(tmp_path, fault_injection=False)
    await nursery.start(node.tree.run)
    await node.wait_serving()
    return node


@pytest.fixture
async def faulty_node(tmp_path, nursery):
    node = Node(tmp_path, fault_injection=True)
    await nursery.start(node.tree.run)
    await node.wait_serving()
    return node


async def test_healthz_is_500_naming_the_failing_check_then_ok(node):
    node.health.register("runtime", "not yet connected to unix:///run/containerd/containerd.sock")
    async with httpx.AsyncClient() as client:
        url = f"http://127.0.0.1:{node.port}/healthz"
        answer = await client.get(url)
        assert answer.status_code == 500
        assert "[-]runtime failed: not yet connected to unix:///run/containerd/containerd.sock" in answer.text
        node.health.report("runtime", True, "containerd 1.6.20 (CRI v1)")
        answer = await client.get(url)
        assert (answer.status_code, answer.text) == (200, "ok")
        verbose = await client.get(url + "?verbose")
        assert "[+]runtime ok: containerd 1.6.20 (CRI v1)" in verbose.text
        assert (await client.get(f"http://127.0.0.1:{node.port}/metrics")).status_code == 404
    async with node.admin() as admin:
        assert (await admin.get("/healthz")).text == "ok"


async def test_admin_socket_is_mode_0600(node):
    mode = os.stat(node.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


async def test_debug_actors_serves_the_tree_snapshot(node):
    async with node.admin() as admin:
        answer = await admin.get("/debug/actors")
    snap = msgspec.json.decode(answer.content, type=ActorSnapshot)
    assert [c.path for c in snap.children] == ["root/worker", "root/server"]
    assert snap.children[0].mailbox.capacity == 8


async def test_events_serves_an_event_list_filtered_by_namespace_and_uid(node):
    def ref(name, namespace):
        return pod_reference(Pod(metadata=ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}")))

    async with node.admin() as admin:
        empty = await admin.get("/events")
        assert empty.json() == {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": []}
        node.events.record(ref("web", "default"), "Normal", "Started", "Started container app",
                           field_path="spec.containers{app}")
        node.events.record(ref("dns", "kube-system"), "Warning", "BackOff", "Back-off restarting failed container")
        every = await admin.get("/events")
        system = await admin.get("/events", params={"namespace": "kube-system"})
        web = await admin.get("/events?uid=uid-web&namespace=")
    assert every.headers["content-type"].startswith("application/json")
    items = msgspec.json.decode(every.content, type=_EventList).items
    assert [(e.involved_object.name, e.reason, e.count) for e in items] == [("web", "Started", 1), ("dns", "BackOff", 1)]
    first = every.json()["items"][0]
    assert first["involvedObject"] == {"kind": "Pod", "namespace": "default", "name": "web", "uid": "uid-web",
                                       "apiVersion": "v1", "fieldPath": "spec.containers{app}"}
    assert first["source"] == {"component": "kubelet", "host": "node-1"}
    assert (first["type"], first["count"]) == ("Normal", 1) and first["lastTimestamp"].endswith("Z")
    assert first["metadata"]["namespace"] == "default" and first["metadata"]["name"].startswith("web.")
    assert [i["involvedObject"]["name"] for i in system.json()["items"]] == ["dns"]
    assert [i["involvedObject"]["name"] for i in web.json()["items"]] == ["web"]


class _EventList(msgspec.Struct):
    items: list[Event]


async def test_events_default_to_an_empty_list_for_callers_without_a_recorder():
    routes = AdminRoutes(tree=lambda: None, health=HealthBoard(), metrics=CollectorRegistry(),
                         fault_injection=False, own_path="root/server")
    answer = await routes(Request(method="GET", path="/events", query={"namespace": ["default"]}, headers={}))
    assert answer.status == 200
    assert msgspec.json.decode(answer.body) == {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": []}


async def test_crash_is_refused_without_fault_injection(node):
    async with node.admin() as admin:
        answer = await admin.post("/debug/actors/root/worker/crash")
    assert answer.status_code == 403
    assert "--enable-fault-injection" in answer.json()["error"]
    assert node.tree.snapshot().children[0].restarts == 0


async def test_crash_with_fault_injection_restarts_the_actor_and_shows_in_metrics(faulty_node):
    node = faulty_node
    async with node.admin() as admin:
        answer = await admin.post("/debug/actors/root/worker/crash")
        assert answer.status_code == 200 and answer.json() == {"path": "root/worker", "result": "crashed"}
        await trio.sleep(0.05)
        snap = msgspec.json.decode((await admin.get("/debug/actors")).content, type=ActorSnapshot)
        worker = snap.children[0]
        assert worker.restarts == 1 and worker.state == "running"
        assert worker.last_error.type == "InjectedCrash"
        metrics = (await admin.get("/metrics")).text
    samples = {
        (s.name, s.labels.get("actor")): s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
    }
    assert samples[("pykubelet_actor_restarts_total", "root/worker")] == 1
    assert samples[("pykubelet_actor_up", "root/worker")] == 1
    assert samples[("pykubelet_actor_mailbox_depth", "root/worker")] == 0
    assert samples[("pykubelet_actor_restarts_total", "root/server")] == 0


async def test_restart_by_path_and_errors_for_unknown_paths(node):
    async with node.admin() as admin:
        answer = await admin.post("/debug/actors/root/worker/restart")
        assert answer.json() == {"path": "root/worker", "result": "restarted"}
        assert node.tree.snapshot().children[0].restarts == 1
        missing = await admin.post("/debug/actors/root/nope/restart")
        assert missing.status_code == 404 and "no actor at root/nope" in missing.json()["error"]
        root = await admin.post("/debug/actors/root/restart")
        assert root.status_code == 400 and "restart the daemon" in root.json()["error"]
        assert (await admin.get("/debug/actors/root/worker/restart")).status_code == 405


async def test_the_server_can_restart_itself_and_answers_first(node):
    async with node.admin() as admin:
        answer = await admin.post("/debug/actors/root/server/restart")
    assert answer.status_code == 202
    with trio.fail_after(5):
        while node.tree.snapshot().children[1].restarts != 1:
            await trio.sleep(0.01)
        while True:
            try:
                async with node.admin() as admin:
                    assert (await admin.get("/healthz")).status_code == 200
                break
            except httpx.TransportError:
                await trio.sleep(0.01)


async def test_a_stale_admin_socket_is_replaced_and_a_live_one_refused(tmp_path):
    path = str(tmp_path / "stale.sock")
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(path)
    leftover.close()  # the file stays, nobody listens
    listener = await open_unix(path)
    try:
        with pytest.raises(AdminSocketInUse, match="another pykubelet runs with this root dir"):
            await open_unix(path)
    finally:
        await listener.aclose()


async def test_healthz_port_in_use_is_a_clear_crash(tmp_path, autojump_clock):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        node = Node(tmp_path, fault_injection=False, healthz_port=taken.getsockname()[1])
        with pytest.raises(ServerError, match=r"healthz 127.0.0.1:\d+: .*pass --healthz-port"):
            await server_actor(
                ServerSettings(admin_socket=node.socket, healthz_port=node.port),
                tree=lambda: node.tree,
                health=node.health,
                metrics=node.metrics,
            )(_FakeCtx())


class _FakeCtx:
    path = "root/server"


# -- the debugging handlers on the admin socket (pykubelet-inspect logs and exec) -----------


class FakeDebugging:
    """Stands in for DebuggingHandlers.handlers(): records each request it is handed."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, list[str]]]] = []

    async def container_logs(self, request: Request) -> Response:
        self.seen.append((request.method, request.path, request.query))

        async def produce(send) -> None:
            await send(b"first line\n")
            await trio.sleep(0.01)
            await send(b"second line\n")

        return Response(200, content_type="text/plain", stream=produce)

    async def run(self, request: Request) -> Response:
        self.seen.append((request.method, request.path, request.query))
        return Response(200, b"hi\n")

    def handlers(self) -> dict:
        return {"containerLogs": self.container_logs, "run": self.run, "exec": self.run}


@pytest.fixture
async def debugging_node(tmp_path, nursery):
    debugging = FakeDebugging()
    node = Node(tmp_path, fault_injection=False)
    api_sources = KubeletApiSources(
        health=node.health, metrics=node.metrics, pods=lambda: pod_list([]), running_pods=lambda: [], configz={},
        debugging=debugging.handlers(),
    )
    # The kubelet API itself is off (enableServer false): the socket serves them anyway.
    node.tree = Supervisor("root", [ChildSpec("server", server_actor(
        ServerSettings(admin_socket=node.socket, healthz_port=node.port),
        tree=lambda: node.tree, health=node.health, metrics=node.metrics, api_sources=api_sources,
    ))])
    await nursery.start(node.tree.run)
    await node.wait_serving()
    return node, debugging


async def test_admin_socket_streams_container_logs_from_the_debugging_handler(debugging_node):
    node, debugging = debugging_node
    chunks = []
    async with node.admin() as admin:
        async with admin.stream("GET", "/containerLogs/default/web-node1/app?follow=true&tailLines=1") as answer:
            assert answer.status_code == 200
            assert answer.headers["transfer-encoding"] == "chunked"
            async for chunk in answer.aiter_raw():
                chunks.append(chunk)
    assert b"".join(chunks) == b"first line\nsecond line\n"
    assert debugging.seen == [("GET", "/containerLogs/default/web-node1/app", {"follow": ["true"], "tailLines": ["1"]})]


async def test_admin_socket_runs_a_command_through_the_debugging_handler(debugging_node):
    node, debugging = debugging_node
    async with node.admin() as admin:
        answer = await admin.post("/run/default/web-node1/app", params={"cmd": "echo hi"})
    assert (answer.status_code, answer.content) == (200, b"hi\n")
    assert debugging.seen == [("POST", "/run/default/web-node1/app", {"cmd": ["echo hi"]})]


@pytest.mark.parametrize(
    "method, path, status, message",
    [
        ("POST", "/containerLogs/default/web/app", 405, "/containerLogs/default/web/app: use GET"),
        ("GET", "/run/default/web/app", 405, "/run/default/web/app: use POST"),
        # exec, attach and port-forward upgrade the connection: not on the socket.
        ("POST", "/exec/default/web/app", 404, "not found: POST /exec/default/web/app"),
    ],
)
async def test_admin_socket_debugging_routes_take_one_method_and_no_upgrades(method, path, status, message):
    debugging = FakeDebugging()
    routes = AdminRoutes(tree=lambda: None, health=HealthBoard(), metrics=CollectorRegistry(),
                         fault_injection=False, own_path="root/server", debugging=debugging.handlers())
    answer = await routes(Request(method=method, path=path, query={}, headers={}))
    assert (answer.status, msgspec.json.decode(answer.body)) == (status, {"error": message})
    assert debugging.seen == []


async def test_admin_socket_without_debugging_handlers_says_it_serves_none():
    routes = AdminRoutes(tree=lambda: None, health=HealthBoard(), metrics=CollectorRegistry(),
                         fault_injection=False, own_path="root/server")
    answer = await routes(Request(method="GET", path="/containerLogs/default/web/app", query={}, headers={}))
    assert answer.status == 404
    assert msgspec.json.decode(answer.body) == {
        "error": "not found: GET /containerLogs/default/web/app: this daemon serves no /containerLogs"}


async def test_the_admin_socket_is_made_0600_without_touching_the_process_umask(tmp_path, monkeypatch):
    # A umask changed around an awaited bind would give files other tasks create meanwhile
    # (an emptyDir, a termination-message file) the socket's mode.
    from pykubelet.actors.server.http import open_unix

    changed: list[int] = []
    monkeypatch.setattr(os, "umask", lambda mask: changed.append(mask) or 0o022)
    listener = await open_unix(str(tmp_path / "pykubelet.sock"))
    try:
        assert changed == []
        assert stat.S_IMODE(os.stat(tmp_path / "pykubelet.sock").st_mode) == 0o600
        assert sorted(p.name for p in tmp_path.iterdir()) == ["pykubelet.sock"]  # no private dir left
    finally:
        await listener.aclose()


async def test_an_admin_socket_that_cannot_be_bound_leaves_no_descriptor_open(tmp_path):
    """Found by the simulation's leak check: the socket was left to the garbage collector,
    and the error's traceback holds it (a supervisor keeps the last error of each crash),
    so each failed start of the server kept one descriptor."""
    gone = tmp_path / "removed" / "pykubelet.sock"  # its directory does not exist
    before = set(os.listdir("/proc/self/fd"))
    errors = []
    for _ in range(3):
        with pytest.raises(OSError) as caught:
            await open_unix(str(gone))
        errors.append(caught.value)  # as crash records keep them
    assert set(os.listdir("/proc/self/fd")) == before


async def test_an_admin_socket_connection_queues_a_500_pod_answer_at_once():
    # /pods at 500 pods is ~865 kB; with the default unix send buffer (208 KiB) the daemon
    # wrote it in pieces, waking once for each as the client read.
    with open("/proc/sys/net/core/wmem_max") as f:
        if int(f.read()) < UNIX_SEND_BUFFER:
            pytest.skip("net.core.wmem_max is below UNIX_SEND_BUFFER here: the kernel caps the buffer")
    answer = b"x" * 865_000
    for queued in (False, True):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with ours, theirs:
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
            if queued:
                queue_whole_answers(stream)
            sent = ours.send(answer)  # non-blocking (trio's): what fits while the peer reads nothing
        assert (sent == len(answer)) is queued
