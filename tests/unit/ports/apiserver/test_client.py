"""ApiClient against a real TLS server on 127.0.0.1 that requires the node's client
certificate: the verbs, error mapping, watches, timeouts, resets and metrics."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry

from pykubelet.messages.pod import Pod
from pykubelet.ports.apiserver import (
    AlreadyExists,
    ApiClient,
    ApiReachability,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ProtocolError,
    RestClientMetrics,
    ServerError,
    TooManyRequests,
    Unauthorized,
    decode,
    load_kubeconfig,
)

from .conftest import kubeconfig_doc, write_kubeconfig
from .https_server import HttpsServer, hang, reply, reset, status, watch_stream
from .pki import Pki

PODS = "/api/v1/pods"
WEB = "/api/v1/namespaces/default/pods/web"


def pod(name: str = "web", rv: str = "10", **extra: object) -> dict:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": rv,
                         "uid": f"uid-{name}"},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "busybox"}],
                     "someFutureField": {"x": 1}},
            **extra}


@pytest.fixture
async def api(node_kubeconfig: str):
    async with ApiClient(load_kubeconfig(node_kubeconfig), timeout=2.0) as client:
        yield client


# --- verbs -----------------------------------------------------------------------------


async def test_get_sends_the_client_certificate_and_returns_the_object(api, https_server) -> None:
    https_server.on("GET", WEB, reply(200, pod()))
    assert await api.get(WEB) == pod()
    seen = https_server.seen[-1]
    assert seen.client_cn == "system:node:node1"
    assert seen.headers["accept"] == "application/json"
    assert seen.headers["user-agent"].startswith("pykubelet/")
    assert seen.headers["user-agent"].endswith(" kubelet")
    assert "authorization" not in seen.headers


async def test_list_follows_continue_and_returns_the_first_pages_resource_version(
        api, https_server) -> None:
    page = {"kind": "PodList", "apiVersion": "v1"}
    https_server.on("GET", PODS,
                    reply(200, {**page, "metadata": {"resourceVersion": "100", "continue": "c1"},
                                "items": [pod("a")]}),
                    reply(200, {**page, "metadata": {"resourceVersion": "100"},
                                "items": [{"metadata": {"name": "b"}}]}))
    items, rv = await api.list(PODS, {"fieldSelector": "spec.nodeName=node1", "limit": 1,
                                      "resourceVersion": "0"})
    assert rv == "100"
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert items[1]["kind"] == "Pod" and items[1]["apiVersion"] == "v1"
    first, second = https_server.seen[-2:]
    assert first.query == {"fieldSelector": "spec.nodeName=node1", "limit": "1", "resourceVersion": "0"}
    assert second.query == {"fieldSelector": "spec.nodeName=node1", "limit": "1", "continue": "c1"}


async def test_create_replace_patch_delete(api, https_server) -> None:
    https_server.on("POST", "/api/v1/namespaces/default/pods", reply(201, pod(rv="1")))
    https_server.on("PUT", WEB, reply(200, pod(rv="2")))
    https_server.on("PATCH", f"{WEB}/status", reply(200, pod(rv="3")))
    https_server.on("DELETE", WEB, reply(200, pod(rv="4")))
    https_server.on("DELETE", "/api/v1/namespaces/default/events/e1",
                    reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}))

    assert (await api.create("/api/v1/namespaces/default/pods", pod()))["metadata"]["resourceVersion"] == "1"
    assert https_server.seen[-1].json() == pod()
    assert https_server.seen[-1].headers["content-type"] == "application/json"

    await api.replace(WEB, pod(rv="1"))
    assert https_server.seen[-1].method == "PUT"

    for patch_type, content_type in [("strategic", "application/strategic-merge-patch+json"),
                                     ("merge", "application/merge-patch+json")]:
        await api.patch(f"{WEB}/status", {"status": {"phase": "Running"}}, patch_type)
        assert https_server.seen[-1].headers["content-type"] == content_type
        assert https_server.seen[-1].json() == {"status": {"phase": "Running"}}
    await api.patch(f"{WEB}/status", [{"op": "replace", "path": "/status/phase", "value": "Failed"}], "json")
    assert https_server.seen[-1].headers["content-type"] == "application/json-patch+json"

    options = {"gracePeriodSeconds": 0, "preconditions": {"uid": "uid-web"}}
    deleted = await api.delete(WEB, options)
    assert deleted["metadata"]["resourceVersion"] == "4"
    assert https_server.seen[-1].json() == options
    assert await api.delete("/api/v1/namespaces/default/events/e1") is None
    assert https_server.seen[-1].body == b""

    with pytest.raises(ValueError, match="patch_type 'apply' is not one of strategic, merge, json"):
        await api.patch(WEB, {}, "apply")  # type: ignore[arg-type]


async def test_bearer_token_is_sent(tmp_path: Path, pki: Pki, https_server) -> None:
    creds = load_kubeconfig(write_kubeconfig(tmp_path / "k.conf", kubeconfig_doc(
        https_server.url, ca=str(pki.ca.cert), cert=str(pki.node1.cert), key=str(pki.node1.key),
        token="secret-token")))
    https_server.on("GET", WEB, reply(200, pod()))
    async with ApiClient(creds) as api:
        await api.get(WEB)
    assert https_server.seen[-1].headers["authorization"] == "Bearer secret-token"


def test_decode_reads_a_struct_and_ignores_unknown_fields() -> None:
    typed = decode(pod(), Pod)
    assert typed.metadata.name == "web" and typed.spec.node_name == "node1"
    with pytest.raises(ValueError) as caught:
        decode({"kind": "Pod", "metadata": {"name": "web", "namespace": "default",
                                            "labels": "oops"}}, Pod)
    assert str(caught.value) == ("Pod default/web: cannot decode as Pod: Expected `object`, got "
                                 "`str` - at `$.metadata.labels`")


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("reply_, cls", [
    (status(401, "Unauthorized", "Unauthorized"), Unauthorized),
    (status(403, "Forbidden", 'pods "web" is forbidden: User "system:node:node1" cannot get'), Forbidden),
    (status(404, "NotFound", 'pods "web" not found'), NotFound),
    (status(409, "Conflict", "the object has been modified"), Conflict),
    (status(409, "AlreadyExists", 'pods "web" already exists'), AlreadyExists),
    (status(410, "Gone", "gone"), Gone),
    (status(422, "Invalid", "invalid", details={"causes": [{"field": "spec"}]}), Invalid),
    (status(429, "TooManyRequests", "slow down", headers={"Retry-After": "2"}), TooManyRequests),
    (status(500, "InternalError", "etcd is down"), ServerError),
    (reply(503, "<html>unavailable</html>"), ServerError),
])
async def test_error_answers_become_typed_errors(api, https_server, reply_, cls) -> None:
    https_server.on("GET", WEB, reply_)
    with pytest.raises(cls) as caught:
        await api.get(WEB)
    err = caught.value
    assert str(err).startswith(f"GET {https_server.url}{WEB}: {err.status} ")
    assert (err.path, err.verb, err.method) == (WEB, "get", "GET")
    if cls is TooManyRequests:
        assert err.retry_after == 2.0
    if cls is Invalid:
        assert err.causes == [{"field": "spec"}]


async def test_a_success_that_is_not_json_is_a_protocol_error(api, https_server) -> None:
    https_server.on("GET", WEB, reply(200, "<html>proxy login</html>"))
    with pytest.raises(ProtocolError, match="200 but the body is not JSON"):
        await api.get(WEB)


async def test_a_hanging_server_is_unavailable_within_the_timeout(node_kubeconfig, https_server) -> None:
    https_server.on("GET", WEB, hang)
    async with ApiClient(load_kubeconfig(node_kubeconfig), timeout=0.3) as api:
        started = time.monotonic()
        with pytest.raises(ApiUnavailable) as caught:
            await api.get(WEB)
        assert time.monotonic() - started < 1.5
    assert caught.value.timeout == 0.3
    assert str(caught.value) == (
        f"GET {https_server.url}{WEB}: the API server did not answer within 0.3s (the client's "
        "request timeout); is it overloaded or unreachable?")


async def test_a_reset_connection_is_unavailable(api, https_server) -> None:
    https_server.on("GET", WEB, reset)
    with pytest.raises(ApiUnavailable) as caught:
        await api.get(WEB)
    assert str(caught.value).startswith(
        f"GET {https_server.url}{WEB}: the connection failed or was closed before the API "
        "server answered (")


async def test_connection_refused(tmp_path: Path, pki: Pki) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = write_kubeconfig(tmp_path / "k.conf", kubeconfig_doc(
        f"https://127.0.0.1:{port}", ca=str(pki.ca.cert), cert=str(pki.node1.cert),
        key=str(pki.node1.key)))
    registry = CollectorRegistry()
    async with ApiClient(load_kubeconfig(kc), metrics=RestClientMetrics(registry)) as api:
        with pytest.raises(ApiUnavailable) as caught:
            await api.get(WEB)
    assert str(caught.value) == (
        f"GET https://127.0.0.1:{port}{WEB}: connection refused; is the API server running at "
        f"this address (clusters[local].server in kubeconfig {kc})?")
    labels = {"code": "<error>", "method": "GET", "host": f"127.0.0.1:{port}"}
    assert registry.get_sample_value("rest_client_requests_total", labels) == 1


async def test_wrong_ca_says_so_and_names_the_ca(tmp_path: Path, pki: Pki, https_server) -> None:
    kc = write_kubeconfig(tmp_path / "k.conf", kubeconfig_doc(
        https_server.url, ca=str(pki.other_ca.cert), cert=str(pki.node1.cert),
        key=str(pki.node1.key)))
    async with ApiClient(load_kubeconfig(kc)) as api:
        with pytest.raises(ApiUnavailable) as caught:
            await api.get(WEB)
    message = str(caught.value)
    assert message.startswith(f"GET {https_server.url}{WEB}: TLS handshake failed: ")
    assert message.endswith(f"; wrong CA? the server's certificate was checked against "
                            f"certificate-authority {pki.other_ca.cert} (kubeconfig {kc})")


async def test_a_server_certificate_for_another_address(tmp_path: Path, pki: Pki) -> None:
    server = HttpsServer(pki.server_elsewhere.cert, pki.server_elsewhere.key,
                         client_ca=pki.ca.cert).start()
    try:
        kc = write_kubeconfig(tmp_path / "k.conf", kubeconfig_doc(
            server.url, ca=str(pki.ca.cert), cert=str(pki.node1.cert), key=str(pki.node1.key)))
        async with ApiClient(load_kubeconfig(kc)) as api:
            with pytest.raises(ApiUnavailable) as caught:
                await api.get(WEB)
    finally:
        server.stop()
    assert str(caught.value) == (
        f"GET {server.url}{WEB}: TLS handshake failed: IP address mismatch, certificate is not "
        "valid for '127.0.0.1'; put an address from the certificate's subjectAltNames in "
        f"clusters[local].server of kubeconfig {kc}, or set tls-server-name")


async def test_a_client_certificate_refused_in_the_tls_handshake(tmp_path: Path, pki: Pki) -> None:
    # kube-apiserver itself answers an untrusted client certificate with 401; a TLS proxy
    # in front of it may refuse it in the handshake. TLS 1.2 makes that happen inside the
    # handshake (with 1.3 the alert races the first read).
    server = HttpsServer(pki.server.cert, pki.server.key, client_ca=pki.ca.cert,
                         tls_max=ssl.TLSVersion.TLSv1_2).start()
    try:
        kc = write_kubeconfig(tmp_path / "k.conf", kubeconfig_doc(
            server.url, ca=str(pki.ca.cert), cert=str(pki.stranger.cert),
            key=str(pki.stranger.key)))
        async with ApiClient(load_kubeconfig(kc)) as api:
            with pytest.raises(ApiUnavailable) as caught:
                await api.get(WEB)
    finally:
        server.stop()
    cert = load_kubeconfig(kc).client_certificate
    assert str(caught.value) == (
        f"GET {server.url}{WEB}: the API server ended the TLS handshake (TLSV1_ALERT_UNKNOWN_CA): "
        f"it did not accept the client certificate {cert.describe()}; is it signed by the "
        "cluster's client CA?")


# --- watch -----------------------------------------------------------------------------


def event(type_: str, name: str, rv: str) -> dict:
    if type_ == "BOOKMARK":
        return {"type": type_, "object": {"kind": "Pod", "apiVersion": "v1",
                                          "metadata": {"resourceVersion": rv}}}
    return {"type": type_, "object": pod(name, rv)}


async def test_watch_yields_events_and_bookmarks_until_the_server_ends_it(api, https_server) -> None:
    https_server.on("GET", PODS, watch_stream([
        event("ADDED", "a", "11"), event("MODIFIED", "a", "12"), event("BOOKMARK", "", "13"),
        event("DELETED", "a", "14")], chunk_split=True))
    params = {"resourceVersion": "10", "allowWatchBookmarks": True,
              "fieldSelector": "spec.nodeName=node1", "timeoutSeconds": 300}
    seen = []
    async with api.watch(PODS, params) as events:
        assert events.resource_version == "10"
        async for ev in events:
            seen.append((ev.type, ev.resource_version))
        assert events.resource_version == "14"
    assert seen == [("ADDED", "11"), ("MODIFIED", "12"), ("BOOKMARK", "13"), ("DELETED", "14")]
    assert https_server.seen[-1].query == {
        "resourceVersion": "10", "allowWatchBookmarks": "true",
        "fieldSelector": "spec.nodeName=node1", "timeoutSeconds": "300", "watch": "true"}


async def test_watch_error_410_is_raised_as_gone_after_the_earlier_events(api, https_server) -> None:
    expired = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": "too old resource version: 5 (20)", "reason": "Expired", "code": 410}
    https_server.on("GET", PODS, watch_stream([event("ADDED", "a", "21"),
                                               {"type": "ERROR", "object": expired}]))
    seen = []
    with pytest.raises(Gone) as caught:
        async with api.watch(PODS, {"resourceVersion": "5"}) as events:
            async for ev in events:
                seen.append(ev.type)
    assert seen == ["ADDED"]
    assert (caught.value.status, caught.value.reason, caught.value.verb) == (410, "Expired", "watch")
    assert str(caught.value) == (
        f"GET {https_server.url}{PODS}?resourceVersion=5&watch=true: 410 Expired: too old "
        "resource version: 5 (20); re-list to get a current resourceVersion")


async def test_watch_refused_at_the_start_raises_on_entry(api, https_server) -> None:
    https_server.on("GET", PODS, status(403, "Forbidden", "no"))
    with pytest.raises(Forbidden, match="system:node:node1 may not watch pods at the cluster scope"):
        async with api.watch(PODS):
            pytest.fail("entered a refused watch")


async def test_a_silent_watch_is_unavailable_after_the_read_timeout(node_kubeconfig,
                                                                     https_server) -> None:
    https_server.on("GET", PODS, watch_stream([event("ADDED", "a", "11")], then_hang=True))
    async with ApiClient(load_kubeconfig(node_kubeconfig), watch_read_timeout=0.3) as api:
        seen = []
        started = time.monotonic()
        with pytest.raises(ApiUnavailable) as caught:
            async with api.watch(PODS) as events:
                async for ev in events:
                    seen.append(ev.type)
        assert time.monotonic() - started < 1.5
    assert seen == ["ADDED"]
    assert str(caught.value) == (
        f"GET {https_server.url}{PODS}?watch=true: the watch received no event or bookmark "
        "within 0.3s (watch read timeout); the connection is presumed dead, watch again from "
        "the last resourceVersion")


async def test_a_watch_outlives_the_request_timeout(node_kubeconfig, https_server) -> None:
    slow = [event("ADDED", "a", "11")]
    https_server.on("GET", PODS, watch_stream(slow, then_hang=True))
    async with ApiClient(load_kubeconfig(node_kubeconfig), timeout=0.2,
                         watch_read_timeout=5) as api:
        async with api.watch(PODS) as events:
            with trio.move_on_after(0.6) as scope:
                async for _ in events:
                    pass
    assert scope.cancelled_caught  # still open after 3x the request timeout


async def test_iterating_a_watch_outside_async_with_is_refused(api) -> None:
    with pytest.raises(RuntimeError, match="inside `async with api.watch"):
        async for _ in api.watch(PODS):
            pass


async def test_a_malformed_watch_event_is_a_protocol_error(api, https_server) -> None:
    https_server.on("GET", PODS, watch_stream([b"<html>\n"]))
    with pytest.raises(ProtocolError, match="not a watch event"):
        async with api.watch(PODS) as events:
            async for _ in events:
                pass


# --- rate limit and metrics ------------------------------------------------------------


async def test_requests_are_rate_limited_but_watches_are_not(node_kubeconfig, https_server) -> None:
    https_server.on("GET", WEB, reply(200, pod()))
    https_server.on("GET", PODS, watch_stream([]))
    async with ApiClient(load_kubeconfig(node_kubeconfig), qps=0.1, burst=2) as api:
        await api.get(WEB)
        await api.get(WEB)
        assert api.limiter.tokens() < 0.1
        async with api.watch(PODS) as events:
            async for _ in events:
                pass
        assert api.limiter.tokens() >= 0  # the watch took no token
        with trio.move_on_after(0.3) as scope:
            await api.get(WEB)  # the third request waits ~10 s for its token
        assert scope.cancelled_caught


async def test_metrics_have_client_gos_names_and_labels(node_kubeconfig, https_server) -> None:
    registry = CollectorRegistry()
    https_server.on("GET", WEB, reply(200, pod()))
    https_server.on("PATCH", WEB, status(404, "NotFound", "no"))
    async with ApiClient(load_kubeconfig(node_kubeconfig),
                         metrics=RestClientMetrics(registry)) as api:
        await api.get(WEB)
        with pytest.raises(NotFound):
            await api.patch(WEB, {})
    host = f"127.0.0.1:{https_server.port}"
    value = registry.get_sample_value
    assert value("rest_client_requests_total", {"code": "200", "method": "GET", "host": host}) == 1
    assert value("rest_client_requests_total", {"code": "404", "method": "PATCH", "host": host}) == 1
    assert value("rest_client_request_duration_seconds_count", {"verb": "GET", "host": host}) == 1
    assert value("rest_client_rate_limiter_duration_seconds_count", {"verb": "PATCH", "host": host}) == 1


async def test_a_redirect_is_not_followed(api, https_server) -> None:
    https_server.on("GET", WEB, reply(302, None, headers={"Location": "https://sso.example/login"}))
    with pytest.raises(ProtocolError) as caught:
        await api.get(WEB)
    assert str(caught.value) == (
        f"GET {https_server.url}{WEB}: 302 redirect to https://sso.example/login; the "
        "kubeconfig's server must be the API server itself")


# --- reachability -----------------------------------------------------------------------


async def test_the_first_answer_after_a_request_that_got_none_says_the_api_server_answers_again(
        node_kubeconfig, https_server) -> None:
    heard: list[str] = []
    reachability = ApiReachability(on_answers_again=lambda: heard.append("again"))
    https_server.on("GET", WEB, reply(200, pod()), reset, reset, status(404, "NotFound", "no"), reply(200, pod()),
                    status(503, "ServiceUnavailable", "starting"),
                    status(429, "TooManyRequests", "slow down", headers={"Retry-After": "1"}), reply(200, pod()))
    outcomes = []
    async with ApiClient(load_kubeconfig(node_kubeconfig), timeout=2.0, reachability=reachability) as api:
        for _ in range(8):
            try:
                await api.get(WEB)
                outcomes.append(("answer", len(heard)))
            except (ApiUnavailable, ServerError, TooManyRequests, NotFound) as exc:
                outcomes.append((type(exc).__name__, len(heard)))
    # An answer of any kind but 5xx and 429 (here a 404) ends a failure, and only the first is reported.
    assert outcomes == [("answer", 0), ("ApiUnavailable", 0), ("ApiUnavailable", 0), ("NotFound", 1),
                        ("answer", 1), ("ServerError", 1), ("TooManyRequests", 1), ("answer", 2)]


async def test_a_watch_started_after_a_failure_says_the_api_server_answers_again(
        node_kubeconfig, https_server) -> None:
    heard: list[str] = []
    reachability = ApiReachability(on_answers_again=lambda: heard.append("again"))
    https_server.on("GET", PODS, reset, watch_stream([event("ADDED", "a", "11")]))
    async with ApiClient(load_kubeconfig(node_kubeconfig), timeout=2.0, reachability=reachability) as api:
        with pytest.raises(ApiUnavailable):
            async with api.watch(PODS, {"resourceVersion": "10"}):
                pytest.fail("entered a reset watch")
        assert heard == []
        async with api.watch(PODS, {"resourceVersion": "10"}) as events:
            assert heard == ["again"]
            assert [ev.type async for ev in events] == ["ADDED"]
    assert heard == ["again"]
