"""The kubepods hierarchy's cgroup names: QoS and pod cgroups, the cgroupfs and systemd
drivers' paths, and reading a pod uid back from a directory name (Go's cm.CgroupName)."""

from __future__ import annotations

import pytest

from pykubelet.pods.cgroup_names import (
    cgroup_name,
    cgroupfs_path,
    parse_cgroupfs,
    pod_cgroup_name,
    pod_uid_from_cgroup,
    qos_cgroup_name,
    systemd_path,
)
from tests.unit.pods.test_container_resources import BURSTABLE, GUARANTEED, ctr, pod

@pytest.mark.parametrize("qos, name", [
    ("Guaranteed", ("kubepods",)), ("Burstable", ("kubepods", "burstable")),
    ("BestEffort", ("kubepods", "besteffort")),
])  # fmt: skip
def test_qos_cgroups_sit_under_kubepods_and_guaranteed_pods_directly_in_it(qos, name):
    assert qos_cgroup_name(qos) == name


@pytest.mark.parametrize("candidate, cgroupfs, systemd", [
    (pod(BURSTABLE), "/kubepods/burstable/pod1234-abcd",
     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice"),
    (pod(ctr()), "/kubepods/besteffort/pod1234-abcd",
     "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd.slice"),
    (pod(GUARANTEED), "/kubepods/pod1234-abcd", "/kubepods.slice/kubepods-pod1234_abcd.slice"),
])  # fmt: skip
def test_pod_cgroup_paths_for_both_drivers(candidate, cgroupfs, systemd):
    name = pod_cgroup_name(candidate)
    assert (cgroupfs_path(name), systemd_path(name)) == (cgroupfs, systemd)


def test_systemd_path_as_gos_example():
    name = ("kubepods", "burstable", "pod1234-abcd-5678-efgh")
    assert systemd_path(name) == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice")  # fmt: skip


def test_the_root_cgroup_is_slash_for_both_drivers():
    assert (cgroupfs_path(()), systemd_path(())) == ("/", "/")


@pytest.mark.parametrize("path, name", [("/", ()), ("", ()), ("/kubepods/burstable", ("kubepods", "burstable")),
                                        ("custom", ("custom",))])  # fmt: skip
def test_parse_cgroupfs(path, name):
    assert parse_cgroupfs(path) == name


def test_a_cgroup_root_prefixes_the_qos_cgroups():
    assert cgroupfs_path(qos_cgroup_name("Burstable", parse_cgroupfs("/custom") + ("kubepods",))) == (
        "/custom/kubepods/burstable")  # fmt: skip


@pytest.mark.parametrize("component", ["a_b", "a/b"])
def test_cgroup_name_refuses_what_the_systemd_form_could_not_read_back(component):
    with pytest.raises(ValueError, match="may not contain"):
        cgroup_name(("kubepods",), component)


@pytest.mark.parametrize("directory, systemd, uid", [
    ("pod1234-abcd", False, "1234-abcd"),
    ("burstable", False, None),
    ("besteffort", False, None),
    ("pod", False, None),
    ("kubepods-burstable-pod1234_abcd.slice", True, "1234-abcd"),
    ("kubepods-pod12_34.slice", True, "12-34"),
    ("kubepods-burstable.slice", True, None),
    ("kubepods-besteffort.slice", True, None),
])  # fmt: skip
def test_pod_uid_from_cgroup_directory(directory, systemd, uid):
    assert pod_uid_from_cgroup(directory, systemd=systemd) == uid


def test_a_pod_cgroup_name_reads_back_to_its_uid_under_both_drivers():
    name = pod_cgroup_name(pod(BURSTABLE, uid="6f1c-22aa-4b1e"))
    assert pod_uid_from_cgroup(cgroupfs_path(name).rsplit("/", 1)[1], systemd=False) == "6f1c-22aa-4b1e"
    assert pod_uid_from_cgroup(systemd_path(name).rsplit("/", 1)[1], systemd=True) == "6f1c-22aa-4b1e"
