"""The probe handlers against real peers on 127.0.0.1: an HTTP server, TCP ports, a gRPC
server implementing grpc.health.v1 by hand, and exec in the embedded runtime; and the
probes subtree probing a real server end to end."""

from __future__ import annotations

import socket
import threading
import functools
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import msgspec
import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.probes import ProbeMetrics, ProbeResults, probes_supervisor_spec
from pykubelet.messages.pod import Container, Pod, Probe
from pykubelet.messages.probes import ProbeTargets
from pykubelet.pods.probes import resolve_probe
from pykubelet.ports.cri import CriClient
from tests.support import grpc_health_server
from pykubelet.ports.probers import USER_AGENT, probe_exec, probe_grpc, probe_http, probe_tcp, run_probe
from pykubelet.supervisor import Supervisor
from tests.support.actors import Inbox

# -- an HTTP server ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        port = self.server.server_address[1]
        path = self.path
        if path == "/ok":
            self._answer(200, b"fine")
        elif path == "/missing":
            self._answer(404, b"secret body")
        elif path == "/moved":
            self._answer(301, b"", location="/ok")
        elif path == "/moved-to-missing":
            self._answer(302, b"", location=f"http://127.0.0.1:{port}/missing")
        elif path == "/away":
            self._answer(302, b"elsewhere", location=f"http://127.0.0.2:{port}/ok")
        elif path == "/loop":
            self._answer(302, b"", location="/loop")
        elif path == "/slow":
            time.sleep(3)
            self._answer(200, b"late")
        elif path == "/agent":
            ok = self.headers.get("User-Agent") == USER_AGENT and self.headers.get("X-Custom") == "yes"
            self._answer(200 if ok else 400, b"")
        else:
            self._answer(500, b"")

    def _answer(self, code: int, body: bytes, location: str = "") -> None:
        self.send_response(code)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def url(port: int, path: str) -> httpx.URL:
    return httpx.URL(f"http://127.0.0.1:{port}{path}")


async def test_http_200_is_success(http_port):
    assert await probe_http(url(http_port, "/ok"), timeout=1) == ("success", "")


async def test_http_404_is_failure(http_port):
    assert await probe_http(url(http_port, "/missing"), timeout=1) == ("failure", "HTTP probe failed with statuscode: 404")


async def test_http_301_to_the_same_host_is_followed(http_port):
    assert await probe_http(url(http_port, "/moved"), timeout=1) == ("success", "")
    assert await probe_http(url(http_port, "/moved-to-missing"), timeout=1) == (
        "failure", "HTTP probe failed with statuscode: 404")


async def test_http_302_to_another_host_is_a_success_with_a_warning(http_port):
    outcome, message = await probe_http(url(http_port, "/away"), timeout=1)
    assert outcome == "success"
    assert message == f"Probe terminated redirects (302 to http://127.0.0.2:{http_port}/ok), Response body: elsewhere"


async def test_http_redirect_loop_stops_after_10(http_port):
    outcome, message = await probe_http(url(http_port, "/loop"), timeout=2)
    assert (outcome, message) == ("failure", f'Get "http://127.0.0.1:{http_port}/loop": stopped after 10 redirects')


async def test_http_slow_answer_is_a_timeout_failure(http_port):
    started = time.monotonic()
    outcome, message = await probe_http(url(http_port, "/slow"), timeout=1)
    assert outcome == "failure" and "within the 1s timeout" in message
    assert time.monotonic() - started < 2


async def test_http_sends_kube_probe_user_agent_and_the_probes_headers(http_port):
    assert await probe_http(url(http_port, "/agent"), [("X-Custom", "yes")], timeout=1) == ("success", "")


async def test_http_nothing_listening_is_failure():
    port = _closed_port()
    outcome, message = await probe_http(url(port, "/"), timeout=1)
    assert (outcome, message) == ("failure", f'Get "http://127.0.0.1:{port}/": dial tcp 127.0.0.1:{port}: connect: connection refused')


async def test_http_get_action_through_run_probe_with_a_named_port(http_port):
    probe = resolve_probe(msgspec.convert({"httpGet": {"path": "/ok", "port": "web"}}, Probe))
    container = msgspec.convert({"name": "app", "ports": [{"name": "web", "containerPort": http_port}]}, Container)
    answer = await run_probe(probe, container, container_id="x", host="127.0.0.1", cri=lambda: None)
    assert answer == ("success", "")


# -- tcpSocket -----------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_tcp_open_port_is_success():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        assert await probe_tcp("127.0.0.1", listener.getsockname()[1], 1) == ("success", "")
    finally:
        listener.close()


async def test_tcp_closed_port_is_failure():
    port = _closed_port()
    assert await probe_tcp("127.0.0.1", port, 1) == ("failure", f"dial tcp 127.0.0.1:{port}: connect: connection refused")



async def test_tcp_connect_that_hangs_fails_at_the_timeout():
    # A listener whose accept queue is full drops SYNs: the connect stays in SYN_SENT.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    try:
        for _ in range(3):  # fill the queue (its length varies with the kernel) until a connect hangs
            try:
                queued.append(socket.create_connection(("127.0.0.1", port), timeout=0.5))
            except TimeoutError:
                break
        else:
            pytest.fail("the listener's accept queue never filled")
        began = trio.current_time()
        answer = await probe_tcp("127.0.0.1", port, 0.3)
        assert answer == ("failure", f"dial tcp 127.0.0.1:{port}: i/o timeout after 0.3s")
        assert 0.3 <= trio.current_time() - began < 0.9  # the dial waited for its timeout, not the SYN retry
    finally:
        for sock in queued:
            sock.close()
        listener.close()


# -- grpc ----------------------------------------------------------------------------------------


@pytest.fixture
def grpc_port() -> Iterator[int]:
    with grpc_health_server.running() as port:
        yield port


async def test_grpc_serving_is_success(grpc_port):
    assert await probe_grpc("127.0.0.1", grpc_port, "", 1) == ("success", "service healthy")
    assert await probe_grpc("127.0.0.1", grpc_port, "ok", 1) == ("success", "service healthy")


async def test_grpc_not_serving_is_failure(grpc_port):
    assert await probe_grpc("127.0.0.1", grpc_port, "down", 1) == (
        "failure", 'service unhealthy (responded with "NOT_SERVING")')


async def test_grpc_unknown_service_is_failure(grpc_port):
    outcome, message = await probe_grpc("127.0.0.1", grpc_port, "nope", 1)
    assert outcome == "failure" and message == "error: health rpc probe failed: NOT_FOUND: unknown service"


async def test_grpc_slow_check_is_a_timeout_failure(grpc_port):
    started = time.monotonic()
    assert await probe_grpc("127.0.0.1", grpc_port, "slow", 1) == (
        "failure", "timeout: health rpc did not complete within 1s")
    assert time.monotonic() - started < 2


async def test_grpc_nothing_listening_is_failure_within_the_timeout():
    port = _closed_port()
    started = time.monotonic()
    assert await probe_grpc("127.0.0.1", port, "", 1) == (
        "failure", f'timeout: failed to connect service "127.0.0.1:{port}" within 1s')
    assert time.monotonic() - started < 2


async def test_grpc_peer_that_is_no_http2_server_is_retried_then_a_connect_timeout(nursery):
    """As the Go prober's blocking dial: a peer that answers HTTP/1.x and closes is not a
    gRPC server yet; the probe dials again on grpc-go's back-off until its timeout."""
    connections = []

    async def http1(stream: trio.SocketStream) -> None:
        connections.append(stream)
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await stream.aclose()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, http1, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    started = time.monotonic()
    assert await probe_grpc("127.0.0.1", port, "", 1.5) == (
        "failure", f'timeout: failed to connect service "127.0.0.1:{port}" within 1.5s')
    assert 1.4 < time.monotonic() - started < 3
    assert len(connections) == 2  # at once, and after the 1 s back-off


async def test_grpc_server_without_the_health_service_is_failure():
    with grpc_health_server.running("--no-health") as port:
        outcome, message = await probe_grpc("127.0.0.1", port, "", 1)
    assert outcome == "failure"
    assert message.startswith("error: this server does not implement the grpc health protocol")


# -- exec in the embedded runtime ------------------------------------------------------------------

LOOP = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]


async def running_container(cri: CriClient) -> str:
    name = f"probe-{uuid.uuid4().hex[:8]}"
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace="default", uid=str(uuid.uuid4())),
        linux=api_pb2.LinuxPodSandboxConfig(security_context=api_pb2.LinuxSandboxSecurityContext(
            namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE))),
    )
    sandbox_id = await cri.run_pod_sandbox(config)
    container_id = await cri.create_container(sandbox_id, api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="main"), image=api_pb2.ImageSpec(image="busybox:1.36"),
        command=LOOP), config)
    await cri.start_container(container_id)
    return container_id


async def test_exec_exit_0_is_success(embedded_cri):
    container_id = await running_container(embedded_cri)
    assert await probe_exec(embedded_cri, container_id, ["sh", "-c", "echo fine"], 1) == ("success", "fine")


async def test_exec_exit_1_is_failure_with_the_output(embedded_cri):
    container_id = await running_container(embedded_cri)
    assert await probe_exec(embedded_cri, container_id, ["sh", "-c", "echo not ready >&2; exit 1"], 1) == (
        "failure", "command sh -c 'echo not ready >&2; exit 1' exited with code 1: not ready")


async def test_exec_past_the_timeout_is_failure(embedded_cri):
    container_id = await running_container(embedded_cri)
    started = time.monotonic()
    outcome, message = await probe_exec(embedded_cri, container_id, ["sleep", "5"], 1)
    assert (outcome, message) == ("failure", "command timed out after 1s: sleep 5")
    assert time.monotonic() - started < 3


async def test_exec_in_a_missing_container_is_unknown(embedded_cri):
    outcome, message = await probe_exec(embedded_cri, "no-such-container", ["true"], 1)
    assert outcome == "unknown" and "exec true:" in message


# -- the probes subtree with the real handlers -------------------------------------------------------


async def test_probes_subtree_probes_a_real_server_and_reports_to_the_sync_loop(http_port):
    results, inbox, holder = ProbeResults(), Inbox(), []
    pod = msgspec.convert({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{
            "name": "app", "ports": [{"name": "http", "containerPort": http_port}],
            "readinessProbe": {"httpGet": {"path": "/ok", "port": "http"}, "periodSeconds": 1},
            "livenessProbe": {"tcpSocket": {"port": http_port}, "periodSeconds": 1},
        }]},
    }, Pod)
    tree = Supervisor("root", [
        inbox.spec("sync-loop"),
        probes_supervisor_spec(tree=lambda: holder[0], results=results, metrics=ProbeMetrics(CollectorRegistry()),
                               runtime=None, host_ip="127.0.0.1"),
    ])
    holder.append(tree)
    async with trio.open_nursery() as nursery:
        await nursery.start(tree.run)
        await tree.registry.lookup("root/probes/manager").send(
            ProbeTargets("u1", pod, running={"app": "c1"}, started_at={"app": time.time()}))
        with trio.fail_after(5):
            while results.ready("u1") != {"app": True}:
                await trio.sleep(0.05)
        assert results.failed_liveness("u1") == {}
        nursery.cancel_scope.cancel()
    assert {(m.probe, m.result) for m in inbox.messages} == {
        ("readiness", "failure"), ("readiness", "success"), ("liveness", "success")}
