"""The probe handlers without peers: URL and headers, redirects over a fake fetch, the
hand-built health messages, exec outcomes from a fake CRI client, host names refused.
(tests/integration/test_probers.py runs each against a real peer.)"""

from __future__ import annotations

import httpx
import msgspec
import pytest
import trio

from pykubelet.messages.pod import Container, Probe
from pykubelet.pods.probes import resolve_probe
from pykubelet.ports.cri import CommandTimedOut, CriCallError, ExecSyncResult, RuntimeUnavailable
from pykubelet.ports.http_get import HttpAnswer, HttpGetError
from pykubelet.ports.probers import (
    USER_AGENT,
    Fetch,
    decode_health_response,
    encode_health_request,
    http_headers,
    http_url,
    ip_literal,
    probe_exec,
    probe_grpc,
    probe_http,
    probe_tcp,
    run_probe,
)


def test_user_agent_is_kube_probe_with_the_kubernetes_minor():
    assert USER_AGENT == "kube-probe/1.36"


@pytest.mark.parametrize(
    "scheme, host, port, path, expected",
    [
        ("HTTP", "10.0.0.1", 8080, "/healthz", ("http", "10.0.0.1", 8080, b"/healthz")),
        ("HTTPS", "10.0.0.1", 8443, "", ("https", "10.0.0.1", 8443, b"/")),
        ("HTTP", "::1", 8080, "ready?verbose=1", ("http", "::1", 8080, b"/ready?verbose=1")),
        ("HTTP", "10.0.0.1", 80, "/", ("http", "10.0.0.1", None, b"/")),  # the default port is implied
    ],
)
def test_url_is_built_as_go_formats_it(scheme, host, port, path, expected):
    url = http_url(scheme, host, port, path)
    assert (url.scheme, url.host, url.port, url.raw_path) == expected


@pytest.mark.parametrize(
    "given, expected",
    [
        ([], [("User-Agent", USER_AGENT), ("Accept", "*/*"), ("Connection", "close")]),
        ([("user-agent", "mine"), ("X-A", "1")], [("user-agent", "mine"), ("X-A", "1"), ("Accept", "*/*"), ("Connection", "close")]),
        ([("Accept", "")], [("User-Agent", USER_AGENT), ("Connection", "close")]),
        ([("Accept", "text/plain")], [("Accept", "text/plain"), ("User-Agent", USER_AGENT), ("Connection", "close")]),
    ],
)
def test_headers_are_set_as_go_sets_them(given, expected):
    assert http_headers(given) == expected


@pytest.mark.parametrize("host, ip", [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("[::1]", "::1"),
                                      ("localhost", None), ("example.com", None), ("", None)])
def test_only_ip_literals_are_hosts(host, ip):
    assert ip_literal(host) == ip


# -- httpGet over a fake fetch ------------------------------------------------------------------


def fetcher(routes: dict[str, tuple[int, str] | tuple[int, str, bytes]]) -> tuple[Fetch, list[tuple[httpx.URL, dict[str, str]]]]:
    """A fake of ports.http_get.http_get answering by "host:port/path"; what it was asked."""
    seen: list[tuple[httpx.URL, dict[str, str]]] = []

    async def fetch(url: httpx.URL, headers: tuple[tuple[str, str], ...], max_body: int) -> HttpAnswer:
        seen.append((url, {name.lower(): value for name, value in headers}))
        code, location, *body = routes.get(f"{url.host}:{url.port or 80}{url.path}", (404, ""))
        return HttpAnswer(code, location, (body[0] if body else b"body")[:max_body] if 300 <= code < 400 else b"")

    return fetch, seen


async def test_2xx_is_success_and_the_request_carries_kube_probe_headers():
    fetch, seen = fetcher({"10.1.1.1:8080/healthz": (204, "")})
    outcome = await probe_http(httpx.URL("http://10.1.1.1:8080/healthz"), [("X-Probe", "yes")], 1, fetch=fetch)
    assert outcome == ("success", "")
    headers = seen[0][1]
    assert headers["user-agent"] == USER_AGENT and headers["x-probe"] == "yes"
    assert headers["connection"] == "close" and "accept-encoding" not in headers


async def test_4xx_and_5xx_are_failures_that_do_not_show_the_body():
    fetch, _ = fetcher({"10.1.1.1:8080/a": (500, "", b"secret")})
    outcome, message = await probe_http(httpx.URL("http://10.1.1.1:8080/a"), fetch=fetch)
    assert (outcome, message) == ("failure", "HTTP probe failed with statuscode: 500")


async def test_redirects_to_the_same_host_are_followed_even_to_another_port():
    fetch, seen = fetcher({"10.1.1.1:8080/a": (301, "/b"), "10.1.1.1:8080/b": (302, "http://10.1.1.1:8081/c"),
                           "10.1.1.1:8081/c": (200, "")})
    assert await probe_http(httpx.URL("http://10.1.1.1:8080/a"), fetch=fetch) == ("success", "")
    assert [str(url) for url, _ in seen] == ["http://10.1.1.1:8080/a", "http://10.1.1.1:8080/b", "http://10.1.1.1:8081/c"]


async def test_a_redirect_to_another_host_is_a_success_with_a_warning_and_not_followed():
    fetch, seen = fetcher({"10.1.1.1:8080/a": (302, "http://10.9.9.9/elsewhere")})
    outcome, message = await probe_http(httpx.URL("http://10.1.1.1:8080/a"), fetch=fetch)
    assert outcome == "success"
    assert message.startswith("Probe terminated redirects (302 to http://10.9.9.9/elsewhere)")
    assert len(seen) == 1


async def test_the_tenth_redirect_fails_the_probe():
    fetch, seen = fetcher({f"10.1.1.1:8080/{i}": (302, f"/{i + 1}") for i in range(20)})
    outcome, message = await probe_http(httpx.URL("http://10.1.1.1:8080/0"), fetch=fetch)
    assert (outcome, message) == ("failure", 'Get "http://10.1.1.1:8080/10": stopped after 10 redirects')
    assert len(seen) == 10


async def test_a_3xx_without_location_is_a_success_with_a_warning():
    fetch, _ = fetcher({"10.1.1.1:8080/a": (304, "")})
    outcome, message = await probe_http(httpx.URL("http://10.1.1.1:8080/a"), fetch=fetch)
    assert (outcome, message) == ("success", "Probe terminated redirects (304), Response body: body")


async def test_a_failed_get_is_a_failure_naming_the_url():
    async def refused(url, headers, max_body):
        raise HttpGetError("dial tcp 10.1.1.1:8080: connect: connection refused")

    outcome = await probe_http(httpx.URL("http://10.1.1.1:8080/a"), fetch=refused)
    assert outcome == ("failure", 'Get "http://10.1.1.1:8080/a": dial tcp 10.1.1.1:8080: connect: connection refused')


async def test_a_get_past_the_timeout_is_a_failure(autojump_clock):
    async def hangs(url, headers, max_body):
        await trio.sleep_forever()

    outcome = await probe_http(httpx.URL("http://10.1.1.1:8080/a"), timeout=2, fetch=hangs)
    assert outcome == ("failure", 'Get "http://10.1.1.1:8080/a": no answer within the 2s timeout (Client.Timeout exceeded)')


async def test_a_host_name_is_never_resolved():
    fetch, seen = fetcher({})
    outcome, message = await probe_http(httpx.URL("http://example.com:80/"), fetch=fetch)
    assert outcome == "unknown" and "not an IP address" in message and not seen


async def test_tcp_and_grpc_refuse_host_names_too():
    assert (await probe_tcp("db.local", 5432, 1))[0] == "unknown"
    outcome, message = await probe_grpc("grpc.local", 50051, "", 1)
    assert outcome == "unknown" and "'grpc.local' is not an IP address" in message
    assert (await probe_tcp("", 80, 1)) == ("unknown", "dial tcp :80: no host to probe (the pod has no IP yet)")


# -- the health messages -----------------------------------------------------------------------


@pytest.mark.parametrize("service, wire", [("", b""), ("echo", b"\x0a\x04echo"), ("x" * 200, b"\x0a\xc8\x01" + b"x" * 200)])
def test_health_request_encodes_the_service_field(service, wire):
    assert encode_health_request(service) == wire


@pytest.mark.parametrize("wire, status", [(b"", 0), (b"\x08\x01", 1), (b"\x08\x02", 2), (b"\x08\x03", 3),
                                          (b"\x12\x02hi\x08\x01", 1)])
def test_health_response_decodes_the_status_field(wire, status):
    assert decode_health_response(wire) == status


def test_a_truncated_health_response_is_an_error():
    with pytest.raises(ValueError):
        decode_health_response(b"\x08")


# -- exec through a fake CRI client ------------------------------------------------------------


class FakeCri:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls: list[tuple[str, list[str], float]] = []

    async def exec_sync(self, container_id, cmd, timeout):
        self.calls.append((container_id, cmd, timeout))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_exec_exit_0_is_success():
    cri = FakeCri(ExecSyncResult(stdout=b"ok\n", stderr=b"", exit_code=0))
    assert await probe_exec(cri, "c1", ["cat", "/ready"], 2) == ("success", "ok")
    assert cri.calls == [("c1", ["cat", "/ready"], 2)]


async def test_exec_non_zero_exit_is_a_failure_with_the_output():
    cri = FakeCri(ExecSyncResult(stdout=b"", stderr=b"no such file\n", exit_code=1))
    assert await probe_exec(cri, "c1", ["cat", "/ready"], 1) == (
        "failure", "command cat /ready exited with code 1: no such file")


async def test_exec_timeout_is_a_failure():
    cri = FakeCri(CommandTimedOut(endpoint="unix:///x", cmd=["sleep", "9"], timeout=1))
    outcome, message = await probe_exec(cri, "c1", ["sleep", "9"], 1)
    assert outcome == "failure" and message.startswith("command timed out")


async def test_other_runtime_errors_are_unknown():
    cri = FakeCri(CriCallError(endpoint="unix:///x", operation="exec_sync", code="NOT_FOUND", detail="gone"))
    outcome, message = await probe_exec(cri, "c1", ["true"], 1)
    assert outcome == "unknown" and "gone" in message


# -- dispatch ----------------------------------------------------------------------------------


def resolved(**fields):
    return resolve_probe(msgspec.convert(fields, Probe))


async def test_run_probe_with_an_unknown_port_name_is_unknown():
    container = msgspec.convert({"name": "web"}, Container)
    answer = await run_probe(resolved(tcpSocket={"port": "web"}), container, container_id="c1", host="127.0.0.1",
                             cri=lambda: None)
    assert answer == ("unknown", 'tcpSocket: no port named "web" in container "web" (named ports: none)')


async def test_run_probe_exec_without_a_runtime_is_unknown():
    def disconnected():
        raise RuntimeUnavailable(endpoint="unix:///x", operation="call", detail="the runtime link is not connected")

    container = msgspec.convert({"name": "web"}, Container)
    outcome, message = await run_probe(resolved(exec={"command": ["true"]}), container, container_id="c1",
                                       host="127.0.0.1", cri=disconnected)
    assert outcome == "unknown" and "not connected" in message


async def test_run_probe_exec_uses_the_runtime_client_with_the_probe_timeout():
    cri = FakeCri(ExecSyncResult(stdout=b"", stderr=b"", exit_code=0))
    container = msgspec.convert({"name": "web"}, Container)
    answer = await run_probe(resolved(exec={"command": ["true"]}, timeoutSeconds=4), container, container_id="c9",
                             host="127.0.0.1", cri=lambda: cri)
    assert answer == ("success", "") and cri.calls == [("c9", ["true"], 4.0)]
