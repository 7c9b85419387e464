"""The Node object, its conditions and the status patch, as the Go kubelet builds them."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest

from tests.support.api_fakes import apply_strategic_merge
from pykubelet.pods.node import (
    NodeFacts,
    binary_quantity,
    container_runtime_version,
    disallowed_node_labels,
    go_arch,
    initial_node,
    kubelet_version,
    merge_status,
    needs_report,
    node_conditions,
    node_labels,
    owned_status,
    reconcile_existing,
    status_changed,
    status_patch,
)

T0 = datetime(2026, 11, 22, 22, 7, 6, tzinfo=timezone.utc).timestamp()
T0_TEXT = "2026-11-22T22:07:06Z"
T1 = T0 + 10
T1_TEXT = "2026-11-22T22:07:16Z"

FACTS = NodeFacts(
    cpu_count=8,
    memory_bytes=24684084 * 1024,
    ephemeral_storage_bytes=100 * 1024**3,
    os_image="Debian GNU/Linux 12 (bookworm)",
    kernel_version="6.1.0-18-amd64",
    machine="x86_64",
    machine_id="3d1219c7c4c5404aaa1f6d2a48adfda4",
    boot_id="977a9c5f-b5db-45d3-b896-cb55a8e6b6df",
)


# --- names, quantities, labels -------------------------------------------------------


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0"),
        (1000, "1k"),  # below 1024 Go prints DecimalSI
        (1023, "1023"),
        (2_000_000, "2M"),  # no binary suffix: the server reads DecimalSI and echoes "2M"
        (1024, "1Ki"),
        (24684084 * 1024, "24684084Ki"),
        (24576 * 1024**2, "24Gi"),
        (24577 * 1024**2, "24577Mi"),
        (100 * 1024**3 + 513, "107374182913"),
        (3 * 1024**6, "3Ei"),
    ],
)
def test_byte_counts_are_canonical_binary_quantities(value, text):
    assert binary_quantity(value) == text


@pytest.mark.parametrize(
    "machine, arch", [("x86_64", "amd64"), ("aarch64", "arm64"), ("armv7l", "arm"), ("s390x", "s390x")]
)
def test_uname_machine_maps_to_goarch(machine, arch):
    assert go_arch(machine) == arch


def test_kubelet_version_is_the_kubernetes_version_with_pykubelet_as_build_metadata():
    assert kubelet_version("0.1.0") == "v1.36.0+pykubelet.0.1.0"
    assert kubelet_version("0.2.0.dev3+g1ddad5c") == "v1.36.0+pykubelet.0.2.0.dev3-g1ddad5c"


def test_container_runtime_version_is_type_scheme_version():
    assert container_runtime_version("containerd", "1.6.20") == "containerd://1.6.20"
    assert container_runtime_version(None, None) == "unknown://Unknown"


def test_node_labels_then_flags_win():
    assert node_labels("node-a", "x86_64", {"env": "test", "kubernetes.io/hostname": "other"}) == {
        "kubernetes.io/hostname": "other",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "env": "test",
    }


@pytest.mark.parametrize(
    "labels, refused",
    [
        ({"env": "prod", "example.com/team": "a"}, []),
        ({"node.kubernetes.io/pool": "a", "x.kubelet.kubernetes.io/y": "1", "topology.kubernetes.io/zone": "z"}, []),
        ({"node-role.kubernetes.io/worker": ""}, ["node-role.kubernetes.io/worker"]),
        ({"node-restriction.kubernetes.io/secure": "1"}, ["node-restriction.kubernetes.io/secure"]),
        ({"k8s.io/thing": "1", "kubernetes.io/custom": "1"}, ["k8s.io/thing", "kubernetes.io/custom"]),
    ],
)
def test_node_labels_the_go_kubelet_refuses(labels, refused):
    assert disallowed_node_labels(labels) == refused


# --- the Node ------------------------------------------------------------------------


def _owned(**overrides):
    args = dict(hostname="node-a", node_ip="10.0.0.5", max_pods=110, kubelet_port=10250,
                runtime_name="containerd", runtime_version="1.6.20", kubelet_version="v1.36.0+pykubelet.0.1.0")
    args.update(overrides)
    return owned_status(FACTS, **args)


def test_initial_node_carries_labels_capacity_addresses_node_info_and_endpoint():
    conditions = node_conditions(None, now=T0, runtime_ok=True)
    node = initial_node(
        "node-a", labels=node_labels("node-a", FACTS.machine, {"env": "test"}), status=_owned(),
        conditions=conditions,
    )
    assert node["apiVersion"] == "v1" and node["kind"] == "Node"
    assert node["metadata"] == {
        "name": "node-a",
        "labels": {"kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux",
                   "kubernetes.io/arch": "amd64", "env": "test"},
    }
    status = node["status"]
    assert status["capacity"] == {"cpu": "8", "ephemeral-storage": "100Gi", "memory": "24684084Ki", "pods": "110"}
    assert status["allocatable"] == status["capacity"]
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.5"},
        {"type": "Hostname", "address": "node-a"},
    ]
    assert status["nodeInfo"] == {
        "machineID": "3d1219c7c4c5404aaa1f6d2a48adfda4",
        "systemUUID": "",
        "bootID": "977a9c5f-b5db-45d3-b896-cb55a8e6b6df",
        "kernelVersion": "6.1.0-18-amd64",
        "osImage": "Debian GNU/Linux 12 (bookworm)",
        "containerRuntimeVersion": "containerd://1.6.20",
        "kubeletVersion": "v1.36.0+pykubelet.0.1.0",
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert [c["type"] for c in status["conditions"]] == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]


def test_dual_stack_node_ips_are_all_internal_addresses():
    assert _owned(node_ip=("10.0.0.5", "fd00::5"))["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.5"},
        {"type": "InternalIP", "address": "fd00::5"},
        {"type": "Hostname", "address": "node-a"},
    ]


def test_merge_status_keeps_what_others_wrote():
    old = {
        "capacity": {"cpu": "4", "example.com/gpu": "2"},
        "allocatable": {"cpu": "4", "example.com/gpu": "2"},
        "images": [{"names": ["busybox"], "sizeBytes": 1}],
    }
    new = merge_status(old, _owned(), [])
    assert new["capacity"]["example.com/gpu"] == "2" and new["capacity"]["cpu"] == "8"
    assert new["allocatable"]["example.com/gpu"] == "2"
    assert new["images"] == old["images"]
    assert old["capacity"]["cpu"] == "4"  # not mutated


def test_reconcile_existing_sets_default_labels_and_status_but_keeps_others():
    initial = initial_node("node-a", labels=node_labels("node-a", "x86_64", {"env": "new"}), status=_owned())
    existing = {
        "metadata": {"name": "node-a", "uid": "u-1", "labels": {
            "kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
            "env": "old", "team": "a"}},
        "status": {"capacity": {"cpu": "4", "memory": "1Gi", "pods": "110"},
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}],
                   "conditions": [{"type": "Ready", "status": "Unknown"}]},
    }  # fmt: skip
    patch = reconcile_existing(existing, initial)
    assert patch["metadata"] == {"labels": {"kubernetes.io/arch": "amd64"}}  # env stays "old", as Go
    assert patch["status"]["addresses"][-1] == {"$patch": "replace"}
    assert "conditions" not in patch["status"]
    after = apply_strategic_merge(existing, patch)
    assert after["metadata"]["labels"]["team"] == "a"
    assert after["status"]["capacity"] == _owned()["capacity"]
    assert after["status"]["addresses"] == _owned()["addresses"]
    assert after["status"]["conditions"] == existing["status"]["conditions"]
    assert reconcile_existing(after, initial) is None


# --- conditions ----------------------------------------------------------------------


def _by_type(conditions):
    return {c["type"]: c for c in conditions}


def test_a_new_node_is_ready_without_pressure():
    conditions = node_conditions(None, now=T0, runtime_ok=True)
    assert conditions == [
        {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": T0_TEXT, "lastTransitionTime": T0_TEXT,
         "reason": "KubeletHasSufficientMemory", "message": "kubelet has sufficient memory available"},
        {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": T0_TEXT, "lastTransitionTime": T0_TEXT,
         "reason": "KubeletHasNoDiskPressure", "message": "kubelet has no disk pressure"},
        {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": T0_TEXT, "lastTransitionTime": T0_TEXT,
         "reason": "KubeletHasSufficientPID", "message": "kubelet has sufficient PID available"},
        {"type": "Ready", "status": "True", "lastHeartbeatTime": T0_TEXT, "lastTransitionTime": T0_TEXT,
         "reason": "KubeletReady", "message": "kubelet is posting ready status"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "inputs, message",
    [
        (dict(runtime_ok=False, runtime_detail="CRI version: no CRI runtime answers at unix:///x.sock"),
         "container runtime is down: CRI version: no CRI runtime answers at unix:///x.sock"),
        (dict(runtime_ok=True, pleg_ok=False, pleg_detail="pleg was last seen active 3m0s ago; threshold is 3m0s"),
         "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s"),
        (dict(runtime_ok=True, network_ok=False,
              network_detail="NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized"),
         "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
         "message:cni plugin not initialized"),
        (dict(runtime_ok=False, runtime_detail="gone", pleg_ok=False, pleg_detail="stuck"),
         "[container runtime is down: gone, PLEG is not healthy: stuck]"),
    ],
)  # fmt: skip
def test_ready_is_false_with_go_reason_and_what_fails(inputs, message):
    ready = _by_type(node_conditions(None, now=T0, **inputs))["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "KubeletNotReady", message)


def test_transition_time_is_kept_while_the_status_holds_and_moves_when_it_flips():
    first = node_conditions(None, now=T0, runtime_ok=True)
    same = _by_type(node_conditions(first, now=T1, runtime_ok=True))
    assert same["Ready"]["lastHeartbeatTime"] == T1_TEXT and same["Ready"]["lastTransitionTime"] == T0_TEXT
    assert same["MemoryPressure"]["lastTransitionTime"] == T0_TEXT

    flipped = node_conditions(first, now=T1, runtime_ok=False, runtime_detail="gone")
    ready = _by_type(flipped)["Ready"]
    assert ready["lastTransitionTime"] == T1_TEXT and ready["status"] == "False"

    # A new message with the same status keeps the transition time (Go does too).
    later = _by_type(node_conditions(flipped, now=T1 + 10, runtime_ok=False, runtime_detail="still gone"))["Ready"]
    assert later["lastTransitionTime"] == T1_TEXT and later["message"] == "container runtime is down: still gone"


@pytest.mark.parametrize(
    "kind, flag, reason, message",
    [
        ("MemoryPressure", "memory_pressure", "KubeletHasInsufficientMemory",
         "kubelet has insufficient memory available"),
        ("DiskPressure", "disk_pressure", "KubeletHasDiskPressure", "kubelet has disk pressure"),
        ("PIDPressure", "pid_pressure", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
    ],
)
def test_pressure_conditions_flip_with_go_reasons(kind, flag, reason, message):
    first = node_conditions(None, now=T0, runtime_ok=True)
    condition = _by_type(node_conditions(first, now=T1, runtime_ok=True, **{flag: True}))[kind]
    assert condition == {"type": kind, "status": "True", "lastHeartbeatTime": T1_TEXT,
                         "lastTransitionTime": T1_TEXT, "reason": reason, "message": message}  # fmt: skip


def test_conditions_of_other_writers_stay_in_place_and_unknown_ready_turns_true():
    previous = [
        {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "lastTransitionTime": T0_TEXT},
    ]
    conditions = node_conditions(previous, now=T1, runtime_ok=True)
    assert [c["type"] for c in conditions] == ["NetworkUnavailable", "Ready", "MemoryPressure", "DiskPressure",
                                               "PIDPressure"]  # fmt: skip
    assert conditions[0] == previous[0]
    assert conditions[1]["status"] == "True" and conditions[1]["lastTransitionTime"] == T1_TEXT


# --- the patch -----------------------------------------------------------------------


def _status(now, **ready):
    return merge_status({}, _owned(), node_conditions(None, now=now, runtime_ok=True, **ready))


def test_heartbeat_only_is_no_change_and_no_patch_unless_due():
    old = _status(T0)
    new = merge_status(old, _owned(), node_conditions(old["conditions"], now=T1, runtime_ok=True))
    assert not status_changed(old, new)
    assert status_patch(old, new) is None
    patch = status_patch(old, new, heartbeat=True)
    assert patch == {
        "status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "DiskPressure"},
                                            {"type": "PIDPressure"}, {"type": "Ready"}],
            "conditions": [{"lastHeartbeatTime": T1_TEXT, "type": t}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
        }
    }  # fmt: skip
    assert apply_strategic_merge({"status": old}, patch)["status"] == new
    assert status_patch(old, old, heartbeat=True) is None


def test_a_ready_flip_patches_only_what_changed():
    old = _status(T0)
    new = merge_status(old, _owned(), node_conditions(old["conditions"], now=T1, runtime_ok=False,
                                                      runtime_detail="gone"))  # fmt: skip
    assert status_changed(old, new)
    patch = status_patch(old, new)
    ready = [c for c in patch["status"]["conditions"] if c["type"] == "Ready"][0]
    assert ready == {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
                     "message": "container runtime is down: gone", "lastHeartbeatTime": T1_TEXT,
                     "lastTransitionTime": T1_TEXT}  # fmt: skip
    assert set(patch["status"]) == {"$setElementOrder/conditions", "conditions"}
    assert apply_strategic_merge({"status": old}, patch)["status"] == new


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda s: s["capacity"].update(memory="1Gi"), {"capacity": {"memory": "1Gi"}}),
        (lambda s: s["nodeInfo"].update(containerRuntimeVersion="containerd://1.7.0"),
         {"nodeInfo": {"containerRuntimeVersion": "containerd://1.7.0"}}),
        (lambda s: s.update(addresses=[{"type": "InternalIP", "address": "10.0.0.6"}]),
         {"addresses": [{"type": "InternalIP", "address": "10.0.0.6"}, {"$patch": "replace"}]}),
        (lambda s: s["conditions"].pop(0),
         {"$setElementOrder/conditions": [{"type": "DiskPressure"}, {"type": "PIDPressure"}, {"type": "Ready"}],
          "conditions": [{"$patch": "delete", "type": "MemoryPressure"}]}),
    ],
)  # fmt: skip
def test_status_patch_shapes(change, expected):
    old = _status(T0)
    new = copy.deepcopy(old)
    change(new)
    patch = status_patch(old, new)
    assert patch == {"status": expected}
    assert apply_strategic_merge({"status": old}, patch)["status"] == new


@pytest.mark.parametrize(
    "last, now, changed, due",
    [
        (None, 0.0, False, True),  # never written
        (0.0, 10.0, True, True),  # a change is written at once
        (0.0, 10.0, False, False),
        (0.0, 299.9, False, False),
        (0.0, 300.0, False, True),  # every --node-status-report-frequency
    ],
)
def test_needs_report(last, now, changed, due):
    assert needs_report(last, now, changed, report_frequency=300.0) is due
