"""Faults on demand: error statuses, hangs, connection resets and latency, scoped to
matching requests (the admin client is spared by default), and the request log."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.apiserver import objects
from tests.support.apiserver.objects import watch_events

NODE = "system:node:node1"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
MINE = {"fieldSelector": "spec.nodeName=node1"}
TRANSPORT_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)


def test_fail_answers_a_status_for_count_requests_then_recovers(apiserver):
    node1 = apiserver.client(NODE)
    apiserver.fail(500, count=2)
    first = node1.get("/api/v1/nodes/node1")
    assert first.status_code == 500
    assert first.json()["reason"] == "InternalError" and first.json()["kind"] == "Status"
    assert apiserver.admin.get("/api/v1/nodes").status_code == 200  # admin is spared
    assert node1.get("/api/v1/nodes/node1").status_code == 500
    assert node1.get("/api/v1/nodes/node1").status_code == 404  # back to normal: no such node


def test_fail_for_a_duration_and_only_matching_resources(apiserver):
    node1 = apiserver.client(NODE)
    apiserver.fail(503, duration=0.5, resources="leases")
    assert node1.post(LEASES, json=objects.lease("node1")).status_code == 503
    assert node1.get("/api/v1/nodes/node1").status_code == 404
    time.sleep(0.6)
    assert node1.post(LEASES, json=objects.lease("node1")).status_code == 201


def test_429_carries_retry_after(apiserver):
    apiserver.fail(429, count=1, retry_after=3)
    response = apiserver.client(NODE).get("/api/v1/nodes/node1")
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert response.json()["details"]["retryAfterSeconds"] == 3


def test_hang_makes_a_client_time_out_while_admin_is_served(apiserver):
    apiserver.hang(duration=3)
    with httpx.Client(base_url=apiserver.url, verify=apiserver.ssl_context(NODE), timeout=0.5) as node1:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            node1.get("/api/v1/nodes/node1")
        assert time.monotonic() - started < 2.5
        assert apiserver.admin.get("/api/v1/nodes").status_code == 200
        apiserver.clear_faults()
        assert node1.get("/api/v1/nodes/node1").status_code == 404
    assert apiserver.requests(user=NODE)[0].fault == "hang"


def test_hang_stalls_an_open_watch_until_cleared(apiserver):
    node1 = apiserver.client(NODE)
    with node1.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1"}) as response:
        events = watch_events(response)
        apiserver.hang()
        apiserver.admin.post("/api/v1/namespaces/default/pods", json=objects.pod("late", "node1"))
        time.sleep(0.5)
        stalled_at = time.monotonic()
        apiserver.clear_faults()
        event = next(events)
        assert event["object"]["metadata"]["name"] == "late"
        assert time.monotonic() - stalled_at < 2


def test_reset_breaks_open_connections_and_new_requests_until_it_ends(apiserver):
    node1 = apiserver.client(NODE)
    assert node1.get("/api/v1/nodes/node1").status_code == 404  # an open keep-alive connection
    with node1.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1"}) as response:
        apiserver.reset(duration=1.5)
        with pytest.raises(TRANSPORT_ERRORS):
            list(watch_events(response))
    with pytest.raises(TRANSPORT_ERRORS):
        node1.get("/api/v1/nodes/node1")
    assert apiserver.admin.get("/api/v1/nodes").status_code == 200
    time.sleep(1.6)
    assert node1.get("/api/v1/nodes/node1").status_code == 404
    resets = [r for r in apiserver.requests(user=NODE) if r.fault == "reset"]
    assert resets and resets[0].status is None


def test_latency_delays_matching_requests(apiserver):
    apiserver.latency(0.5, verbs="get")
    node1 = apiserver.client(NODE)
    started = time.monotonic()
    node1.get("/api/v1/nodes/node1")
    assert time.monotonic() - started >= 0.5
    started = time.monotonic()
    node1.get("/api/v1/nodes", params={"fieldSelector": "metadata.name=node1"})
    assert time.monotonic() - started < 0.5


def test_request_log_counts_requests_by_verb_and_resource(apiserver):
    node1 = apiserver.client(NODE)
    apiserver.admin.post("/api/v1/namespaces/default/pods", json=objects.pod("web", "node1"))
    apiserver.clear_requests()
    since = time.time()
    node1.post(LEASES, json=objects.lease("node1"))
    for _ in range(3):
        node1.patch("/api/v1/namespaces/default/pods/web/status", json={"status": {"phase": "Running"}},
                    headers={"Content-Type": "application/strategic-merge-patch+json"})
    node1.get(f"{LEASES}/node1")
    assert len(apiserver.requests(verb="patch", resource="pods/status")) == 3
    assert [r.verb for r in apiserver.requests(resource="leases", user=NODE, since=since)] == ["create", "get"]
    record = apiserver.requests(verb="create")[0]
    assert (record.method, record.namespace, record.status) == ("POST", "kube-node-lease", 201)
