"""The probe handlers: exec (CRI ExecSync), httpGet (httpx), tcpSocket (trio), grpc (the
grpc.health.v1 protocol through ports/grpc_client, on a connection of its own).

Each returns (outcome, message) within the probe's timeout, as Go's pkg/probe does:
"success" or "failure" (with why), or "unknown" when the probe could not be run at all
(Go's error result, which the worker throws away). Host names are never resolved: a host
that is not an IP literal is "unknown" with a message saying so.
"""

from __future__ import annotations

import functools
import ipaddress
import shlex
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import trio

from pykubelet.messages.pod import Container, ExecAction, GRPCAction, HTTPGetAction, TCPSocketAction
from pykubelet.messages.probes import ProbeOutcome
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.probes import InvalidProbe, ResolvedProbe, resolve_port
from pykubelet.ports.cri import CommandTimedOut, CriClient, CriError
from pykubelet.ports.grpc_client import Connection, RpcError, unary
from pykubelet.ports.http_get import (
    DialError,
    DialTimeout,
    HttpAnswer,
    HttpGetError,
    close_socket,
    open_tcp,
    host_port,
    http_get,
)

if TYPE_CHECKING:
    import httpx

ProbeAnswer = tuple[ProbeOutcome, str]

KUBE_VERSION = "1.36"  # the Kubernetes minor this kubelet speaks for
USER_AGENT = f"kube-probe/{KUBE_VERSION}"
MAX_OUTPUT = 10 * 1024  # Go reads at most 10 KiB of a probe's body or command output
MAX_REDIRECTS = 10  # Go's http.Client: the 10th redirect response is an error

HEALTH_CHECK = b"/grpc.health.v1.Health/Check"
HEALTH_MAX_MESSAGE = 4 * 1024 * 1024  # grpc's default for what a client receives
# grpc-go's connection back-off (which the Go prober's blocking dial follows until its
# timeout): 1 s, then 1.6 times longer each try, up to 120 s.
_DIAL_RETRY_FIRST, _DIAL_RETRY_FACTOR, _DIAL_RETRY_MAX = 1.0, 1.6, 120.0
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


@functools.lru_cache(maxsize=4096)  # a probe asks about the same host every period
def ip_literal(host: str) -> str | None:
    """The host as an IP address string, or None if it is a name (which we never resolve)."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def _not_an_ip(what: str, host: str) -> ProbeAnswer:
    if not host:
        return "unknown", f"{what}: no host to probe (the pod has no IP yet)"
    return "unknown", f"{what}: host {host!r} is not an IP address; pykubelet does not resolve host names"


# -- exec --------------------------------------------------------------------------------------


async def probe_exec(cri: CriClient, container_id: str, command: Sequence[str], timeout: float) -> ProbeAnswer:
    """Exit 0: success; other exit: failure with the output; past the timeout: failure;
    any other runtime error: unknown."""
    try:
        result = await cri.exec_sync(container_id, list(command), timeout)
    except CommandTimedOut:
        return "failure", f"command timed out after {timeout:g}s: {shlex.join(command)}"
    except CriError as error:
        return "unknown", f"exec {shlex.join(command)}: {error}"
    output = (result.stdout + result.stderr)[:MAX_OUTPUT].decode(errors="replace").strip()
    if result.exit_code == 0:
        return "success", output
    detail = f": {output}" if output else ""
    return "failure", f"command {shlex.join(command)} exited with code {result.exit_code}{detail}"


# -- httpGet -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)  # a probe asks for the same URL every period
def http_url(scheme: str, host: str, port: int, path: str) -> httpx.URL:
    """Go's formatURL: the path may carry a query; IPv6 hosts are bracketed."""
    import httpx  # on the first httpGet probe: a node without one never loads it

    path = path or "/"
    if not path.startswith("/"):
        path = "/" + path
    return httpx.URL(f"{(scheme or 'http').lower()}://{host_port(host, port)}{path}")


def http_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The request's headers as Go's newProbeRequest sets them: the probe's own, then
    User-Agent kube-probe/<version> and Accept */* unless given (an empty Accept removes it);
    no keep-alive, no compression."""
    given = {name.lower() for name, _ in headers}
    out = [(name, value) for name, value in headers if not (name.lower() == "accept" and value == "")]
    if "user-agent" not in given:
        out.append(("User-Agent", USER_AGENT))
    if "accept" not in given:
        out.append(("Accept", "*/*"))
    out.append(("Connection", "close"))
    return out


# GET a URL with exactly these headers: the answer, or HttpGetError. The real one is
# ports.http_get.http_get; tests give probe_http a fake.
Fetch = Callable[["httpx.URL", tuple[tuple[str, str], ...], int], Awaitable[HttpAnswer]]

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})  # the ones Go's http.Client follows


@functools.lru_cache(maxsize=4096)
def _request_headers(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(http_headers(headers))


async def probe_http(
    url: httpx.URL,
    headers: Sequence[tuple[str, str]] = (),
    timeout: float = 1.0,
    *,
    fetch: Fetch = http_get,
) -> ProbeAnswer:
    """GET the URL: 200-399 success, else failure. Redirects to the same host are followed
    (the 10th redirect fails the probe); one to another host is not, and its 3xx counts as a
    success with a warning, as Go's probe does."""
    import httpx

    if ip_literal(url.host) is None:
        return _not_an_ip(f'Get "{url}"', url.host)
    request_headers = _request_headers(tuple(headers))
    with trio.move_on_after(timeout):
        first_host = url.host
        for requests in range(1, MAX_REDIRECTS + 1):
            try:
                answer = await fetch(url, request_headers, MAX_OUTPUT)
            except HttpGetError as error:
                return "failure", f'Get "{url}": {error}'
            if answer.status in REDIRECT_CODES and answer.location:
                try:
                    target = url.join(answer.location)
                except httpx.InvalidURL as error:
                    return "failure", f'Get "{url}": bad redirect location {answer.location!r}: {error}'
                if target.host == first_host:
                    if requests == MAX_REDIRECTS:
                        return "failure", f'Get "{target}": stopped after {MAX_REDIRECTS} redirects'
                    url = target
                    continue
            return _judge(answer)
    return "failure", f'Get "{url}": no answer within the {timeout:g}s timeout (Client.Timeout exceeded)'


def _judge(answer: HttpAnswer) -> ProbeAnswer:
    code = answer.status
    if 200 <= code < 300:
        return "success", ""
    if 300 <= code < 400:
        where = f" to {answer.location}" if answer.location else ""
        body = answer.body[:MAX_OUTPUT].decode(errors="replace")
        return "success", f"Probe terminated redirects ({code}{where}), Response body: {body}"
    # The body stays out of a failure message: it may carry what an operator must not see
    # in events (Go, kubernetes#99425).
    return "failure", f"HTTP probe failed with statuscode: {code}"


# -- tcpSocket ---------------------------------------------------------------------------------


async def probe_tcp(host: str, port: int, timeout: float) -> ProbeAnswer:
    """Success if a TCP connection opens within the timeout (it is closed at once)."""
    address = ip_literal(host)
    if address is None:
        return _not_an_ip(f"dial tcp {host_port(host, port)}", host)
    try:
        sock, waited = await open_tcp(address, port, timeout)
    except DialError as error:  # refused, or no connection within the timeout
        return "failure", str(error)
    close_socket(sock, waited)
    return "success", ""


# -- grpc --------------------------------------------------------------------------------------
# ports/grpc_client on the probe's own TCP connection (as the Go prober dials one per probe):
# a trio cancellation cancels the call. The two messages are built by hand
# (HealthCheckRequest{string service = 1}, HealthCheckResponse{ServingStatus status = 1}) to
# need no generated stubs.


def encode_health_request(service: str) -> bytes:
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_health_response(data: bytes) -> int:
    """The status field of a HealthCheckResponse (0, UNKNOWN, when absent)."""
    status, i = 0, 0
    while i < len(data):
        key, i = _read_varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
            if field == 1:
                status = value
        elif wire == 2:
            length, i = _read_varint(data, i)
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"HealthCheckResponse: unsupported wire type {wire}")
    if i > len(data):
        raise ValueError("HealthCheckResponse: truncated")
    return status


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise ValueError("HealthCheckResponse: truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


async def probe_grpc(host: str, port: int, service: str, timeout: float) -> ProbeAnswer:
    """grpc.health.v1.Health/Check for the service: SERVING is success; anything else,
    including no connection within the timeout, is failure (as Go, mimicking
    grpc_health_probe)."""
    address = ip_literal(host)
    if address is None:
        return _not_an_ip(f"grpc {host_port(host, port)}", host)
    addr = host_port(address, port)
    deadline = trio.current_time() + timeout
    not_connected = f'timeout: failed to connect service "{addr}" within {timeout:g}s'
    retry = ExponentialBackoff(_DIAL_RETRY_FIRST, _DIAL_RETRY_MAX, factor=_DIAL_RETRY_FACTOR)
    while True:
        sock = await _dial_until(address, port, deadline, retry)
        if sock is None:
            return "failure", not_connected
        connection = Connection.over(sock, authority=addr.encode(), max_message=HEALTH_MAX_MESSAGE,
                                     user_agent=USER_AGENT.encode(), close=close_socket)
        try:
            data = await unary(connection, HEALTH_CHECK, encode_health_request(service),
                               max(deadline - trio.current_time(), 0.001))
            break
        except RpcError as error:
            if error.connected and not error.retryable:
                return _health_rpc_failed(error, timeout)
            if error.code == "DEADLINE_EXCEEDED":
                return "failure", not_connected
        finally:
            connection.close()
        # Connected, but no HTTP/2 server answered (it closed, spoke something else, or went
        # away before the call): as the Go prober's blocking dial, try again on grpc-go's
        # back-off until the timeout.
        await trio.sleep_until(min(deadline, trio.current_time() + retry.next_delay()))
    try:
        status = decode_health_response(data)
    except ValueError as error:
        return "failure", f"error: health rpc probe failed: {error}"
    if status != 1:
        return "failure", f'service unhealthy (responded with "{SERVING_STATUS.get(status, status)}")'
    return "success", "service healthy"


def _health_rpc_failed(error: RpcError, timeout: float) -> ProbeAnswer:
    if error.code == "UNIMPLEMENTED":
        return "failure", (
            "error: this server does not implement the grpc health protocol "
            f"(grpc.health.v1.Health): {error.details}"
        )
    if error.code == "DEADLINE_EXCEEDED":
        return "failure", f"timeout: health rpc did not complete within {timeout:g}s"
    return "failure", f"error: health rpc probe failed: {error.code}: {error.details}"


async def _dial_until(
    address: str, port: int, deadline: float, retry: ExponentialBackoff
) -> socket.socket | None:
    """A TCP connection, tried again on the probe's back-off (one for all its connection
    attempts, as grpc-go's) until the deadline, as the Go prober's blocking dial: None when
    there is none by then."""
    while True:
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            return None
        try:
            sock, _ = await open_tcp(address, port, remaining)
            return sock
        except DialTimeout:
            return None
        except DialError:  # refused or unreachable: the next try after the back-off
            await trio.sleep_until(min(deadline, trio.current_time() + retry.next_delay()))


# -- one probe, whatever its handler -------------------------------------------------------------


async def run_probe(
    probe: ResolvedProbe,
    container: Container,
    *,
    container_id: str,
    host: str,
    cri: Callable[[], CriClient],
) -> ProbeAnswer:
    """Run a resolved probe of a container once. `host` is the default target (the pod's IP)
    for httpGet and tcpSocket without a host of their own, and for grpc; `cri()` gives the
    runtime client for exec (a CriError from it, e.g. not connected, is "unknown")."""
    action = probe.action
    try:
        if isinstance(action, ExecAction):
            try:
                client = cri()
            except CriError as error:
                return "unknown", f"exec {shlex.join(action.command)}: {error}"
            return await probe_exec(client, container_id, action.command, probe.timeout)
        if isinstance(action, HTTPGetAction):
            import httpx

            port = resolve_port(action.port, container)
            try:
                url = http_url(action.scheme, action.host or host, port, action.path)
            except (httpx.InvalidURL, ValueError) as problem:
                return "unknown", f"httpGet: cannot make a URL of scheme {action.scheme!r}, path {action.path!r}: {problem}"
            headers = [(h.name, h.value) for h in action.http_headers]
            return await probe_http(url, headers, probe.timeout)
        if isinstance(action, TCPSocketAction):
            return await probe_tcp(action.host or host, resolve_port(action.port, container), probe.timeout)
        if isinstance(action, GRPCAction):
            return await probe_grpc(host, resolve_port(action.port, container), action.service or "", probe.timeout)
    except InvalidProbe as problem:
        return "unknown", f"{probe.handler}: {problem}"
    return "unknown", f"no handler for a {probe.handler} probe"


__all__ = [
    "MAX_OUTPUT",
    "MAX_REDIRECTS",
    "USER_AGENT",
    "ProbeAnswer",
    "decode_health_response",
    "encode_health_request",
    "http_headers",
    "http_url",
    "ip_literal",
    "probe_exec",
    "probe_grpc",
    "probe_http",
    "probe_tcp",
    "run_probe",
]
