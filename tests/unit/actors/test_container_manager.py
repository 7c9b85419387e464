"""The container manager's choices before any cgroup is written: what it refuses at start
(failCgroupV1 on a v1 host, cgroupsPerQOS without cgroups), where a pod's cgroup is, and
the CRI resources a container gets."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.actors.container_manager import ContainerManager, ContainerManagerError, ContainerManagerSettings
from pykubelet.messages.pod import Pod
from pykubelet.ports.cgroups import CgroupMode

V1 = CgroupMode(version=1, mount_points={c: f"/sys/fs/cgroup/{c}" for c in ("cpu", "cpuacct", "memory", "pids")})
NONE = CgroupMode(version=0)


def pod(resources: dict | None = None) -> Pod:
    container = {"name": "c", "image": "busybox", **({"resources": resources} if resources else {})}
    return msgspec.convert({"metadata": {"name": "web", "namespace": "default", "uid": "1234-abcd"},
                            "spec": {"containers": [container]}}, Pod)


def test_a_cgroup_v1_host_is_refused_while_fail_cgroup_v1_naming_the_way_out():
    with pytest.raises(ContainerManagerError) as refused:
        ContainerManager.for_node(ContainerManagerSettings(fail_cgroup_v1=True), mode=V1)
    assert "failCgroupV1: false" in str(refused.value) and "--fail-cgroupv1=false" in str(refused.value)


def test_cgroups_per_qos_without_a_cgroup_filesystem_is_refused():
    with pytest.raises(ContainerManagerError, match="cgroupsPerQOS: false"):
        ContainerManager.for_node(ContainerManagerSettings(fail_cgroup_v1=False), mode=NONE)


@pytest.mark.parametrize("settings", [
    ContainerManagerSettings(fail_cgroup_v1=False, cgroups_per_qos=False),
    ContainerManagerSettings(fail_cgroup_v1=False, embedded_runtime=True),
])  # fmt: skip
def test_without_pod_cgroups_pods_get_none_but_containers_keep_their_resources(settings):
    manager = ContainerManager.for_node(settings, mode=V1)
    assert not manager.enabled and manager.pod_cgroup(pod()) == ""
    limited = pod({"limits": {"memory": "64Mi", "cpu": "500m"}})
    resources = manager.container_resources(limited, limited.spec.containers[0])
    assert (resources.memory_limit_in_bytes, resources.cpu_quota) == (64 * 2**20, 50000)


@pytest.mark.parametrize("resources, path", [
    ({"limits": {"memory": "64Mi", "cpu": "1"}}, "/custom/kubepods/pod1234-abcd"),
    ({"requests": {"cpu": "100m"}}, "/custom/kubepods/burstable/pod1234-abcd"),
    (None, "/custom/kubepods/besteffort/pod1234-abcd"),
])  # fmt: skip
def test_a_pods_cgroup_is_under_its_qos_class_below_the_cgroup_root(resources, path):
    manager = ContainerManager.for_node(ContainerManagerSettings(fail_cgroup_v1=False, cgroup_root="/custom"), mode=V1)
    assert manager.pod_cgroup(pod(resources)) == path


def test_the_embedded_runtime_starts_on_a_cgroup_v1_host_whatever_fail_cgroup_v1_says():
    # Its containers are host processes in no cgroup of the kubelet's.
    manager = ContainerManager.for_node(ContainerManagerSettings(fail_cgroup_v1=True, embedded_runtime=True), mode=V1)
    assert not manager.enabled
