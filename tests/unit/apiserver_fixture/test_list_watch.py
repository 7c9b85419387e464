"""List and watch: fieldSelector spec.nodeName, resourceVersion semantics, events that
start or stop matching a selector, bookmarks, and 410 Gone for an expired version."""

from __future__ import annotations

import httpx
import trio

from tests.support.apiserver import LocalApiServer, objects
from tests.support.apiserver.objects import take, watch_events

PODS = "/api/v1/namespaces/default/pods"
MINE = {"fieldSelector": "spec.nodeName=node1"}


def _create(apiserver: LocalApiServer, name: str, node: str | None = "node1") -> dict:
    response = apiserver.admin.post(PODS, json=objects.pod(name, node))
    assert response.status_code == 201, response.text
    return response.json()


def test_list_with_field_selector_returns_pods_bound_to_the_node_and_a_resource_version(apiserver):
    _create(apiserver, "a")
    _create(apiserver, "b", "node2")
    _create(apiserver, "c", None)
    node1 = apiserver.client("system:node:node1")
    listed = node1.get("/api/v1/pods", params=MINE).json()
    assert [p["metadata"]["name"] for p in listed["items"]] == ["a"]
    assert "kind" not in listed["items"][0]  # list items carry no kind, as kube-apiserver's
    assert int(listed["metadata"]["resourceVersion"]) >= int(listed["items"][0]["metadata"]["resourceVersion"])
    negated = apiserver.admin.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName!=node1"}).json()
    assert sorted(p["metadata"]["name"] for p in negated["items"]) == ["b", "c"]
    bad = apiserver.admin.get("/api/v1/pods", params={"fieldSelector": "spec.nodeNam=node1"})
    assert bad.status_code == 400 and bad.json()["message"] == "field label not supported: spec.nodeNam"


def test_watch_from_a_resource_version_sends_only_later_events_of_the_node(apiserver):
    _create(apiserver, "before")
    node1 = apiserver.client("system:node:node1")
    rv = node1.get("/api/v1/pods", params=MINE).json()["metadata"]["resourceVersion"]
    with node1.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1", "resourceVersion": rv}) as response:
        assert response.status_code == 200
        events = watch_events(response)
        _create(apiserver, "elsewhere", "node2")
        created = _create(apiserver, "after")
        first = next(events)
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "after")
        assert first["object"]["kind"] == "Pod"
        assert first["object"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
        apiserver.admin.patch(f"{PODS}/after", json={"metadata": {"labels": {"x": "y"}}},
                              headers={"Content-Type": "application/merge-patch+json"})
        assert next(events)["type"] == "MODIFIED"


def test_watch_without_resource_version_starts_with_the_current_objects(apiserver):
    _create(apiserver, "a")
    with apiserver.admin.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1"}) as response:
        events = watch_events(response)
        assert next(events)["type"] == "ADDED"
        _create(apiserver, "b")
        assert next(events)["object"]["metadata"]["name"] == "b"


def test_object_leaving_a_label_selector_arrives_as_deleted(apiserver):
    pod = objects.pod("a", "node1")
    pod["metadata"]["labels"] = {"app": "web"}
    apiserver.admin.post(PODS, json=pod)
    rv = apiserver.admin.get(PODS).json()["metadata"]["resourceVersion"]
    params = {"watch": "1", "resourceVersion": rv, "labelSelector": "app=web"}
    with apiserver.admin.stream("GET", PODS, params=params) as response:
        events = watch_events(response)
        apiserver.admin.patch(f"{PODS}/a", json={"metadata": {"labels": {"app": "db"}}},
                              headers={"Content-Type": "application/merge-patch+json"})
        event = next(events)
        assert event["type"] == "DELETED" and event["object"]["metadata"]["labels"] == {"app": "db"}


def test_bookmarks_carry_the_current_resource_version(apiserver):
    apiserver.configure(bookmark_interval=0.2)
    rv = apiserver.admin.get(PODS).json()["metadata"]["resourceVersion"]
    params = {**MINE, "watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
    with apiserver.admin.stream("GET", "/api/v1/pods", params=params) as response:
        events = watch_events(response)
        _create(apiserver, "elsewhere", "node2")  # filtered out, but it advances the version
        bookmark = next(events)
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"]["kind"] == "Pod"
        assert int(bookmark["object"]["metadata"]["resourceVersion"]) > int(rv)


def test_watch_from_a_version_older_than_the_history_gets_an_error_event_410(apiserver):
    apiserver.configure(history_window=3)
    rv = apiserver.admin.get(PODS).json()["metadata"]["resourceVersion"]
    for index in range(5):
        _create(apiserver, f"p{index}")
    with apiserver.admin.stream("GET", "/api/v1/pods", params={"watch": "1", "resourceVersion": rv}) as response:
        assert response.status_code == 200
        (event,) = list(watch_events(response))
    assert event["type"] == "ERROR"
    status = event["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith(f"too old resource version: {rv} (")
    exact = apiserver.admin.get(PODS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert exact.status_code == 410 and exact.json()["reason"] == "Expired"


def test_expire_watches_ends_open_watches_with_410_and_a_relist_recovers(apiserver):
    _create(apiserver, "a")
    listed = apiserver.admin.get("/api/v1/pods", params=MINE).json()
    rv = listed["metadata"]["resourceVersion"]
    with apiserver.admin.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1", "resourceVersion": rv}) as response:
        events = watch_events(response)
        apiserver.expire_watches()
        assert next(events)["object"]["code"] == 410
    with apiserver.admin.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1", "resourceVersion": rv}) as response:
        assert next(watch_events(response))["object"]["code"] == 410
    fresh = apiserver.admin.get("/api/v1/pods", params=MINE).json()["metadata"]["resourceVersion"]
    with apiserver.admin.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1", "resourceVersion": fresh}) as response:
        events = watch_events(response)
        _create(apiserver, "b")
        assert next(events)["type"] == "ADDED"


def test_watch_ends_at_timeout_seconds(apiserver):
    with apiserver.admin.stream("GET", PODS, params={"watch": "1", "timeoutSeconds": "1"}) as response:
        assert list(watch_events(response)) == []


def test_send_initial_events_ends_with_an_annotated_bookmark(apiserver):
    _create(apiserver, "a")
    params = {**MINE, "watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
              "resourceVersionMatch": "NotOlderThan"}
    with apiserver.admin.stream("GET", "/api/v1/pods", params=params) as response:
        added, bookmark = take(watch_events(response), 2)
    assert added["type"] == "ADDED"
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_from_trio_with_an_async_client(apiserver):
    async with apiserver.async_client("system:node:node1") as client:
        async with client.stream("GET", "/api/v1/pods", params={**MINE, "watch": "1"}) as response:
            assert response.status_code == 200
            await trio.to_thread.run_sync(_create, apiserver, "from-trio")
            with trio.fail_after(10):
                async for line in response.aiter_lines():
                    if line:
                        assert '"from-trio"' in line
                        break


def test_pagination_with_limit_and_continue(apiserver):
    for index in range(5):
        _create(apiserver, f"p{index}")
    first = apiserver.admin.get(PODS, params={"limit": "2"}).json()
    assert len(first["items"]) == 2 and first["metadata"]["remainingItemCount"] == 3
    second = apiserver.admin.get(PODS, params={"limit": "10", "continue": first["metadata"]["continue"]}).json()
    assert [p["metadata"]["name"] for p in second["items"]] == ["p2", "p3", "p4"]
    assert "continue" not in second["metadata"]


def test_a_client_read_timeout_does_not_disturb_the_server(apiserver):
    with httpx.Client(base_url=apiserver.url, verify=apiserver.ssl_context("admin"), timeout=0.3) as client:
        try:
            with client.stream("GET", PODS, params={"watch": "1"}) as response:
                list(watch_events(response))
        except httpx.ReadTimeout:
            pass
    assert apiserver.admin.get(PODS).status_code == 200
