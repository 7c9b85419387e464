"""status_patch(): the pods/status strategic merge patch the Go kubelet sends (Go's own
TestPatchPodStatus vectors first), and a round trip through the test API server's
schema-driven strategic merge patch: applying the patch to the old status gives the new."""

from __future__ import annotations

import copy

import pytest

from pykubelet.messages.pod import (
    ContainerState,
    ContainerStateRunning,
    ContainerStateWaiting,
    ContainerStatus,
    PodCondition,
    PodIP,
    PodStatus,
)
from pykubelet.pods.status_patch import merge_pod_status, status_patch
from tests.support.apiserver import patch as smp
from tests.support.apiserver import schema

UID = "myuid"


def go_status(**changes) -> PodStatus:
    """Go's getPodStatus() of TestPatchPodStatus, as this kubelet models it."""
    fields = dict(
        phase="Running",
        conditions=[PodCondition(type="Ready", status="True"), PodCondition(type="PodScheduled", status="True")],
        container_statuses=[
            ContainerStatus(name="container1", ready=True, restart_count=0),
            ContainerStatus(name="container2", ready=True, restart_count=0),
        ],
        message="Message",
    )
    fields.update(changes)
    return PodStatus(**fields)


def go_status_dict() -> dict:
    """The same status as the API server serves it."""
    return {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "container1", "ready": True, "restartCount": 0, "image": "", "imageID": "", "state": {}, "lastState": {}},
            {"name": "container2", "ready": True, "restartCount": 0, "image": "", "imageID": "", "state": {}, "lastState": {}},
        ],
        "message": "Message",
    }


# --- Go's vectors -----------------------------------------------------------------------


def test_no_change_is_no_patch():
    assert status_patch(go_status_dict(), go_status(), uid=UID) is None


def test_a_message_change_replaces_the_message():
    assert status_patch(go_status_dict(), go_status(message="random message"), uid=UID) == {
        "metadata": {"uid": UID}, "status": {"message": "random message"},
    }


def test_a_condition_change_sends_only_that_condition_and_the_order():
    new = go_status(conditions=[PodCondition(type="Ready", status="False"), PodCondition(type="PodScheduled", status="True")])
    assert status_patch(go_status_dict(), new, uid=UID) == {
        "metadata": {"uid": UID},
        "status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
            "conditions": [{"status": "False", "type": "Ready"}],
        },
    }


def test_an_added_init_container_status_sends_the_whole_list_with_the_required_fields():
    new = go_status(init_container_statuses=[ContainerStatus(name="init-container", ready=True, restart_count=0)])
    assert status_patch(go_status_dict(), new, uid=UID) == {
        "metadata": {"uid": UID},
        "status": {"initContainerStatuses": [
            {"image": "", "imageID": "", "lastState": {}, "name": "init-container", "ready": True, "restartCount": 0, "state": {}},
        ]},
    }


# --- the rest of the rules --------------------------------------------------------------


def test_last_probe_time_and_empty_values_are_not_changes():
    old = go_status_dict()
    old["conditions"][0]["lastProbeTime"] = "2026-01-01T00:00:00Z"
    old["conditions"][1]["lastProbeTime"] = None
    old["reason"] = ""
    old["podIPs"] = []
    assert status_patch(old, go_status(), uid=UID) is None


def test_one_changed_container_status_sends_the_whole_atomic_list():
    running = ContainerState(running=ContainerStateRunning(started_at="2026-01-01T00:00:00Z"))
    new = go_status(container_statuses=[
        ContainerStatus(name="container1", ready=True, restart_count=0),
        ContainerStatus(name="container2", ready=True, restart_count=1, state=running, image="busybox", image_id="sha256:1"),
    ])
    body = status_patch(go_status_dict(), new, uid=UID)
    assert [c["name"] for c in body["status"]["containerStatuses"]] == ["container1", "container2"]
    assert body["status"]["containerStatuses"][1]["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    assert set(body["status"]) == {"containerStatuses"}


def test_conditions_the_kubelet_does_not_own_are_kept_as_the_api_holds_them():
    old = go_status_dict()
    old["conditions"].insert(0, {"type": "example.com/gate", "status": "True", "observedGeneration": 3})
    # The kubelet's copy of the gate is stale; the API's wins (Go's mergePodStatus).
    new = go_status(conditions=[
        PodCondition(type="example.com/gate", status="False"),
        PodCondition(type="Ready", status="False"),
        PodCondition(type="PodScheduled", status="True"),
    ])
    assert [c["type"] for c in merge_pod_status(old, new)["conditions"]] == ["example.com/gate", "Ready", "PodScheduled"]
    assert status_patch(old, new, uid=UID)["status"] == {
        "$setElementOrder/conditions": [{"type": "example.com/gate"}, {"type": "Ready"}, {"type": "PodScheduled"}],
        "conditions": [{"status": "False", "type": "Ready"}],
    }


def test_a_cleared_field_is_deleted_and_a_cleared_condition_reason_too():
    old = go_status_dict()
    old["conditions"][0].update(reason="ContainersNotReady", message="containers with unready status: [c]", observedGeneration=2)
    old["reason"] = "Evicted"
    body = status_patch(old, go_status(message=""), uid=UID)
    assert body["status"]["message"] is None
    assert body["status"]["reason"] is None
    # reason and message go; observedGeneration is not the kubelet's to drop
    assert body["status"]["conditions"] == [{"reason": None, "message": None, "type": "Ready"}]


def test_a_gone_kubelet_condition_is_deleted_by_its_key():
    new = go_status(conditions=[PodCondition(type="PodScheduled", status="True")])
    assert status_patch(go_status_dict(), new, uid=UID)["status"] == {
        "$setElementOrder/conditions": [{"type": "PodScheduled"}],
        "conditions": [{"$patch": "delete", "type": "Ready"}],
    }


def test_fields_the_kubelet_does_not_model_are_left_alone():
    old = {**go_status_dict(), "nominatedNodeName": "node9", "hostIPs": [{"ip": "10.0.0.1"}], "resize": "Proposed"}
    assert status_patch(old, go_status(), uid=UID) is None
    body = status_patch(old, go_status(host_ip="10.0.0.2"), uid=UID)
    assert body["status"] == {"hostIP": "10.0.0.2"}


def test_pod_ips_merge_by_ip():
    old = {**go_status_dict(), "podIP": "10.1.0.4", "podIPs": [{"ip": "10.1.0.4"}, {"ip": "fd00::4"}]}
    new = go_status(pod_ip="10.1.0.5", pod_ips=[PodIP(ip="10.1.0.5")])
    assert status_patch(old, new, uid=UID)["status"] == {
        "podIP": "10.1.0.5",
        "$setElementOrder/podIPs": [{"ip": "10.1.0.5"}],
        "podIPs": [{"ip": "10.1.0.5"}, {"$patch": "delete", "ip": "10.1.0.4"}, {"$patch": "delete", "ip": "fd00::4"}],
    }


def test_an_unknown_api_status_gets_everything():
    body = status_patch(None, go_status(), uid=UID)
    assert body["metadata"] == {"uid": UID}
    assert body["status"]["phase"] == "Running"
    assert body["status"]["$setElementOrder/conditions"] == [{"type": "Ready"}, {"type": "PodScheduled"}]


# --- round trip through the test API server's strategic merge patch ---------------------------

WAITING = ContainerState(waiting=ContainerStateWaiting(reason="ContainerCreating"))
RUNNING = ContainerState(running=ContainerStateRunning(started_at="2026-01-01T00:00:05Z"))

ROUND_TRIPS = {
    "pending to running": (
        {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        PodStatus(
            phase="Running", host_ip="127.0.0.1", pod_ip="127.0.0.1", pod_ips=[PodIP(ip="127.0.0.1")],
            start_time="2026-01-01T00:00:01Z", qos_class="BestEffort",
            conditions=[
                PodCondition(type="PodReadyToStartContainers", status="True", last_transition_time="2026-01-01T00:00:02Z"),
                PodCondition(type="Initialized", status="True", last_transition_time="2026-01-01T00:00:02Z"),
                PodCondition(type="Ready", status="True", last_transition_time="2026-01-01T00:00:06Z"),
                PodCondition(type="ContainersReady", status="True", last_transition_time="2026-01-01T00:00:06Z"),
                PodCondition(type="PodScheduled", status="True", last_transition_time="2026-01-01T00:00:00Z"),
            ],
            container_statuses=[ContainerStatus(name="c", ready=True, restart_count=0, state=RUNNING, image="busybox",
                                                image_id="sha256:ab", container_id="containerd://1", started=True)],
        ),
    ),
    "running to crash loop": (
        {**go_status_dict(), "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/gate", "status": "True"},
                                            {"type": "PodScheduled", "status": "True"}]},
        go_status(
            conditions=[PodCondition(type="Ready", status="False", reason="ContainersNotReady"),
                        PodCondition(type="PodScheduled", status="True")],
            container_statuses=[ContainerStatus(name="container1", ready=False, restart_count=3, state=WAITING)],
            message="",
        ),
    ),
}


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_the_patch_applied_by_the_api_server_gives_the_new_status(name):
    old, new = ROUND_TRIPS[name]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "uid": UID},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": copy.deepcopy(old)}
    body = status_patch(old, new, uid=UID)
    patched = smp.apply(smp.STRATEGIC, pod, body, schema.kind_schema("", "v1", "Pod"))
    assert patched["metadata"]["uid"] == UID
    # What the API now holds is the merged new status: the patch from it is empty.
    assert status_patch(patched["status"], new, uid=UID) is None
    schema.validate(patched, "", "v1", "Pod")
