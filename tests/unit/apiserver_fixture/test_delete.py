"""Pod deletion as kube-apiserver does it for a pod bound to a node: graceful (the object
stays with deletionTimestamp and deletionGracePeriodSeconds) until a delete with grace 0,
which honours a UID precondition; an unbound pod goes at once."""

from __future__ import annotations

import datetime

from tests.support.apiserver import objects
from tests.support.apiserver.objects import watch_events

PODS = "/api/v1/namespaces/default/pods"


def _parse(ts: str) -> datetime.datetime:
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)


def test_graceful_delete_keeps_the_pod_then_grace_zero_with_uid_precondition_removes_it(apiserver):
    created = apiserver.admin.post(PODS, json=objects.pod("web", "node1")).json()
    uid = created["metadata"]["uid"]
    rv = created["metadata"]["resourceVersion"]
    with apiserver.admin.stream("GET", PODS, params={"watch": "1", "resourceVersion": rv}) as response:
        events = watch_events(response)
        graceful = apiserver.admin.request("DELETE", f"{PODS}/web", json={"gracePeriodSeconds": 20})
        assert graceful.status_code == 200
        meta = graceful.json()["metadata"]
        assert meta["deletionGracePeriodSeconds"] == 20
        remaining = _parse(meta["deletionTimestamp"]) - datetime.datetime.now(datetime.timezone.utc)
        assert 15 < remaining.total_seconds() <= 21
        assert meta["generation"] == 2
        modified = next(events)
        assert modified["type"] == "MODIFIED" and modified["object"]["metadata"]["deletionTimestamp"]
        assert apiserver.admin.get(f"{PODS}/web").status_code == 200

        node1 = apiserver.client("system:node:node1")
        wrong = node1.request("DELETE", f"{PODS}/web", json={"gracePeriodSeconds": 0, "preconditions": {"uid": "not-it"}})
        assert wrong.status_code == 409
        assert wrong.json()["message"].endswith(f"Precondition failed: UID in precondition: not-it, UID in object meta: {uid}")

        gone = node1.request("DELETE", f"{PODS}/web", json={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        assert gone.status_code == 200 and gone.json()["metadata"]["uid"] == uid
        deleted = next(events)
        assert deleted["type"] == "DELETED" and deleted["object"]["metadata"]["uid"] == uid
    assert apiserver.admin.get(f"{PODS}/web").status_code == 404


def test_default_grace_period_is_the_pods_termination_grace_period(apiserver):
    apiserver.admin.post(PODS, json=objects.pod("web", "node1", terminationGracePeriodSeconds=7))
    meta = apiserver.admin.delete(f"{PODS}/web").json()["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 7


def test_a_second_graceful_delete_only_shortens_the_grace_period(apiserver):
    apiserver.admin.post(PODS, json=objects.pod("web", "node1"))
    first = apiserver.admin.delete(f"{PODS}/web", params={"gracePeriodSeconds": "30"}).json()["metadata"]
    longer = apiserver.admin.delete(f"{PODS}/web", params={"gracePeriodSeconds": "60"}).json()["metadata"]
    assert longer == first
    shorter = apiserver.admin.delete(f"{PODS}/web", params={"gracePeriodSeconds": "10"}).json()["metadata"]
    assert shorter["deletionGracePeriodSeconds"] == 10
    assert (_parse(first["deletionTimestamp"]) - _parse(shorter["deletionTimestamp"])).total_seconds() == 20


def test_unbound_and_terminated_pods_are_deleted_at_once(apiserver):
    apiserver.admin.post(PODS, json=objects.pod("pending", None))
    assert apiserver.admin.delete(f"{PODS}/pending").status_code == 200
    assert apiserver.admin.get(f"{PODS}/pending").status_code == 404
    apiserver.admin.post(PODS, json=objects.pod("done", "node1"))
    apiserver.client("system:node:node1").patch(f"{PODS}/done/status", json={"status": {"phase": "Succeeded"}},
                                                 headers={"Content-Type": "application/merge-patch+json"})
    apiserver.admin.delete(f"{PODS}/done")
    assert apiserver.admin.get(f"{PODS}/done").status_code == 404


def test_delete_of_a_missing_pod_is_404_and_other_kinds_answer_a_status(apiserver):
    missing = apiserver.admin.delete(f"{PODS}/nope")
    assert missing.status_code == 404 and missing.json()["message"] == 'pods "nope" not found'
    apiserver.admin.post("/api/v1/nodes", json=objects.node("node1"))
    status = apiserver.admin.delete("/api/v1/nodes/node1").json()
    assert status["kind"] == "Status" and status["status"] == "Success" and status["details"]["name"] == "node1"


def test_finalizers_hold_a_deleted_object_until_removed(apiserver):
    pod = objects.pod("held", None)
    pod["metadata"]["finalizers"] = ["example.com/hold"]
    apiserver.admin.post(PODS, json=pod)
    held = apiserver.admin.delete(f"{PODS}/held").json()
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["deletionGracePeriodSeconds"] == 0
    apiserver.admin.patch(f"{PODS}/held", json={"metadata": {"finalizers": None}},
                          headers={"Content-Type": "application/merge-patch+json"})
    assert apiserver.admin.get(f"{PODS}/held").status_code == 404
