"""CRI Exec/Attach/PortForward against a real, private containerd, spoken to through the
upgrade proxy behind the kubelet's HTTP server: a command's output and exit status, stdin,
attach, port-forward, single-use URLs, the SPDY handshake, and a client going away.

The client is a minimal WebSocket client written here (RFC 6455 framing, masked from the
client) speaking v4.channel.k8s.io: every message starts with its channel, 0 stdin,
1 stdout, 2 stderr, 3 the exit status as a JSON metav1.Status.
"""

from __future__ import annotations

import functools
import uuid
from urllib.parse import urlsplit

import pytest
import trio
from cri_api.v1 import api_pb2

from pykubelet.actors.server.http import Request, Response, serve_connection
from pykubelet.ports.cri import CriCallError, CriClient, CriNotFound
from pykubelet.ports import upgrade_proxy
from pykubelet.ports.upgrade_proxy import proxy_upgrade, streaming_url_is_local
from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.websocket import exit_code, websocket
from tests.support.daemon import free_port

pytestmark = pytest.mark.containerd

STDIN, STDOUT, STDERR, STATUS = 0, 1, 2, 3


# -- the kubelet's side, cut down -------------------------------------------------------------


class StreamingFront:
    """actors/server/http.py serving one route: every request is proxied to `url` (the
    streaming URL the test got from CRI), as the kubelet API's /exec, /attach and
    /portForward routes do."""

    def __init__(self) -> None:
        self.url = ""
        self.port = 0
        self.sessions_ended = 0
        self.session_ended = trio.Event()

    async def handle(self, request: Request) -> Response:
        url = self.url

        async def upgrade(stream: trio.abc.Stream, already_read: bytes) -> None:
            try:
                await proxy_upgrade(
                    stream, method=request.method, target_url=url,
                    raw_headers=request.raw_headers, already_read=already_read,
                )
            finally:
                self.sessions_ended += 1
                self.session_ended.set()

        return Response(101, upgrade=upgrade)


@pytest.fixture
async def front(nursery) -> StreamingFront:
    front = StreamingFront()

    async def serve(stream: trio.SocketStream) -> None:
        await serve_connection(stream, front.handle)

    listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
    front.port = listeners[0].socket.getsockname()[1]
    return front


# -- a pod to stream to -----------------------------------------------------------------------


def host_network_sandbox(name: str) -> api_pb2.PodSandboxConfig:
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace="default", uid=str(uuid.uuid4())),
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
            )
        ),
    )


async def start_pod(cri: CriClient, name: str, script: str) -> tuple[str, str]:
    """(sandbox id, container id) of a running busybox container running `script` (which
    stops at once on TERM)."""
    sandbox_config = host_network_sandbox(name)
    sandbox_id = await cri.run_pod_sandbox(sandbox_config)
    container_id = await cri.create_container(
        sandbox_id,
        api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name="main"),
            image=api_pb2.ImageSpec(image=BUSYBOX_IMAGE),
            command=["sh", "-c", f"trap 'exit 0' TERM; {script}"],
        ),
        sandbox_config,
    )
    await cri.start_container(container_id)
    return sandbox_id, container_id


IDLE = "while true; do sleep 0.1; done"


# -- the CRI calls ----------------------------------------------------------------------------


async def test_streaming_urls_are_single_use_urls_on_loopback(cri: CriClient) -> None:
    sandbox_id, container_id = await start_pod(cri, "stream-urls", IDLE)
    urls = {
        "exec": await cri.exec(container_id, ["true"], stdin=False, stdout=True, stderr=True, tty=False),
        "attach": await cri.attach(container_id, stdin=True, stdout=True, stderr=False, tty=True),
        "portforward": await cri.port_forward(sandbox_id, [8080]),
    }
    for kind, url in urls.items():
        assert streaming_url_is_local(url), url
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.path.startswith(f"/{kind}/"), url
    registry = cri.metrics.registry
    for operation in ("exec", "attach", "port_forward"):
        assert registry.get_sample_value(
            "kubelet_runtime_operations_total", {"operation_type": operation}
        ) == 1


async def test_streaming_calls_fail_with_typed_errors_counted_in_metrics(cri: CriClient) -> None:
    _, container_id = await start_pod(cri, "stream-errors", IDLE)
    with pytest.raises(CriCallError) as invalid:
        await cri.exec(container_id, ["true"], stdin=False, stdout=True, stderr=True, tty=True)
    assert invalid.value.code == "INVALID_ARGUMENT" and invalid.value.operation == "exec"
    assert "tty and stderr cannot both be true" in str(invalid.value)
    with pytest.raises(CriNotFound):
        await cri.attach("no-such-container", stdin=False, stdout=True, stderr=False, tty=False)
    registry = cri.metrics.registry
    for operation in ("exec", "attach"):
        assert registry.get_sample_value(
            "kubelet_runtime_operations_errors_total", {"operation_type": operation}
        ) == 1


# -- through the proxy ------------------------------------------------------------------------


async def test_exec_output_and_exit_status_come_back_through_the_proxy(
    cri: CriClient, front: StreamingFront
) -> None:
    _, container_id = await start_pod(cri, "exec-ws", IDLE)
    front.url = await cri.exec(
        container_id, ["sh", "-c", "echo out; echo err >&2; exit 3"],
        stdin=False, stdout=True, stderr=True, tty=False,
    )
    with trio.fail_after(10):
        async with websocket(front.port, "/exec/default/exec-ws/main?command=sh") as ws:
            assert ws.status_line == "HTTP/1.1 101 Switching Protocols"
            assert b"Sec-WebSocket-Protocol: v4.channel.k8s.io" in ws.head
            channels = await ws.channels()
        await front.session_ended.wait()
    assert channels[STDOUT] == b"out\n"
    assert channels[STDERR] == b"err\n"
    assert exit_code(channels[STATUS]) == 3

    front.url = await cri.exec(
        container_id, ["echo", "fine"], stdin=False, stdout=True, stderr=False, tty=False
    )
    with trio.fail_after(10):
        async with websocket(front.port, "/exec/default/exec-ws/main") as ws:
            channels = await ws.channels()
    assert channels[STDOUT] == b"fine\n" and exit_code(channels[STATUS]) == 0


async def test_exec_stdin_reaches_the_command_through_the_proxy(
    cri: CriClient, front: StreamingFront
) -> None:
    _, container_id = await start_pod(cri, "exec-stdin", IDLE)
    front.url = await cri.exec(
        container_id, ["sh", "-c", "read line; echo \"got $line\""],
        stdin=True, stdout=True, stderr=True, tty=False,
    )
    with trio.fail_after(10):
        async with websocket(front.port, "/exec/default/exec-stdin/main") as ws:
            await ws.send(STDIN, b"hello\n")
            channels = await ws.channels()
    assert channels[STDOUT] == b"got hello\n" and exit_code(channels[STATUS]) == 0


async def test_attach_streams_the_main_process_output_through_the_proxy(
    cri: CriClient, front: StreamingFront
) -> None:
    _, container_id = await start_pod(
        cri, "attach-ws", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done"
    )
    front.url = await cri.attach(container_id, stdin=False, stdout=True, stderr=False, tty=False)
    seen = b""
    with trio.fail_after(10):
        async with websocket(front.port, "/attach/default/attach-ws/main") as ws:
            while b"tick" not in seen:
                message = await ws.receive()
                assert message is not None, f"closed after {seen!r}"
                if message[0] == STDOUT:
                    seen += message[1]
        await front.session_ended.wait()  # the client left; the session ends with it


async def test_port_forward_reaches_a_port_in_the_pod_through_the_proxy(
    cri: CriClient, front: StreamingFront
) -> None:
    port = free_port()
    sandbox_id, _ = await start_pod(cri, "pf-ws", f"nc -ll -p {port} -e cat & wait")
    with trio.fail_after(10):
        while True:  # host network: the echo server listens on this machine's loopback
            try:
                await (await trio.open_tcp_stream("127.0.0.1", port)).aclose()
                break
            except OSError:
                await trio.sleep(0.05)
    front.url = await cri.port_forward(sandbox_id, [port])
    # Port-forward channels: 0 data and 1 errors of the first port; each opens with the
    # port number (little endian).
    with trio.fail_after(10):
        async with websocket(front.port, f"/portForward/default/pf-ws?ports={port}") as ws:
            assert ws.status_line == "HTTP/1.1 101 Switching Protocols"
            assert await ws.receive() == (0, port.to_bytes(2, "little"))
            assert await ws.receive() == (1, port.to_bytes(2, "little"))
            await ws.send(0, b"ping\n")
            assert await ws.receive() == (0, b"ping\n")


async def test_a_used_url_answers_404_through_the_proxy(cri: CriClient, front: StreamingFront) -> None:
    _, container_id = await start_pod(cri, "exec-twice", IDLE)
    front.url = await cri.exec(container_id, ["true"], stdin=False, stdout=True, stderr=False, tty=False)
    with trio.fail_after(10):
        async with websocket(front.port, "/exec/default/exec-twice/main") as ws:
            await ws.channels()
        async with websocket(front.port, "/exec/default/exec-twice/main") as ws:
            assert ws.status_line == "HTTP/1.1 404 Not Found"
            # The answer whole, then the end of the connection.
            assert await ws.read_to_end() == b"404 page not found\n"


async def test_v5_websocket_is_refused_by_containerd_and_relayed(
    cri: CriClient, front: StreamingFront
) -> None:
    # containerd 1.6 offers no v5.channel.k8s.io (stdin close); the Go kubelet would
    # translate v5 to SPDY itself (ExtendWebSocketsToKubelet), a plain proxy relays the no.
    _, container_id = await start_pod(cri, "exec-v5", IDLE)
    front.url = await cri.exec(container_id, ["true"], stdin=False, stdout=True, stderr=False, tty=False)
    with trio.fail_after(15):
        async with websocket(front.port, "/exec/default/exec-v5/main", "v5.channel.k8s.io") as ws:
            assert ws.status_line == "HTTP/1.1 403 Forbidden"


async def test_spdy_upgrade_is_accepted_through_the_proxy(
    cri: CriClient, front: StreamingFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    # containerd keeps a SPDY connection with no streams open for 30s after the client's
    # EOF; the proxy ends the session once it has been silent that long after a half-close.
    monkeypatch.setattr(upgrade_proxy, "HALF_CLOSED_IDLE_TIMEOUT", 1.0)
    _, container_id = await start_pod(cri, "exec-spdy", IDLE)
    front.url = await cri.exec(container_id, ["true"], stdin=False, stdout=True, stderr=False, tty=False)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", front.port)
        async with stream:
            # As kubectl (client-go's SPDY executor) opens an exec.
            await stream.send_all(
                b"POST /exec/default/exec-spdy/main?command=true&output=1 HTTP/1.1\r\n"
                + f"Host: 127.0.0.1:{front.port}\r\n".encode()
                + b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
                b"X-Stream-Protocol-Version: channel.k8s.io\r\n"
                b"Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n\r\n"
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive_some(65536)
        left = trio.current_time()
        await front.session_ended.wait()
        assert trio.current_time() - left < 3
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 101 Switching Protocols"
    assert b"Upgrade: SPDY/3.1" in lines and b"X-Stream-Protocol-Version: v4.channel.k8s.io" in lines


async def test_client_going_away_mid_exec_ends_the_session(
    cri: CriClient, front: StreamingFront
) -> None:
    _, container_id = await start_pod(cri, "exec-gone", IDLE)
    front.url = await cri.exec(
        container_id, ["sh", "-c", "while true; do echo y; sleep 0.05; done"],
        stdin=False, stdout=True, stderr=False, tty=False,
    )
    with trio.fail_after(10):
        async with websocket(front.port, "/exec/default/exec-gone/main") as ws:
            output = b""
            while output.count(b"y") < 3:
                message = await ws.receive()
                assert message is not None
                output += message[1]
        # The client dropped the connection (no close frame): containerd ends its side on
        # the EOF the proxy passes on, and the session is over.
        await front.session_ended.wait()
    assert front.sessions_ended == 1
