"""The private containerd of tests/support cleans up after itself: no process, mount, shim
socket, cgroup folder or directory of it survives stop(), even after containerd was killed."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc

from tests.support import containerd as support
from tests.support.containerd import PrivateContainerd


def run_host_network_sandbox(socket: str) -> str:
    config = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="leftover", namespace="default", uid="u-1"),
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(
                namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE)
            )
        ),
    )
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        return runtime.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=10).pod_sandbox_id


def cgroup_folders_named(name: str) -> list[str]:
    found = []
    for mount_point in support.cgroup_mount_points():
        for folder, _, _ in os.walk(mount_point):
            if os.path.basename(folder) == name:
                found.append(folder)
    return found


@pytest.mark.containerd
@pytest.mark.parametrize("restart_works", [True, False], ids=["graceful", "brute-force"])
def test_stop_after_kill_leaves_nothing_behind(
    fresh_containerd: PrivateContainerd, monkeypatch: pytest.MonkeyPatch, restart_works: bool
) -> None:
    instance = fresh_containerd
    sandbox_id = run_host_network_sandbox(instance.socket)
    shims = support._pids_with_cmdline_args(["-address", instance.socket])
    assert shims, "the sandbox runs under a shim of this instance"
    assert cgroup_folders_named(sandbox_id)

    instance.kill()
    if not restart_works:
        def broken_restart(timeout: float = 0) -> None:
            raise RuntimeError("containerd cannot come back")
        monkeypatch.setattr(instance, "restart", broken_restart)
    instance.stop()

    assert support._pids_with_cmdline_args(["-address", instance.socket]) == []
    assert all(not support._pid_alive(pid) for pid in shims)
    assert support._mounts_under(instance.base) == []
    assert not instance.base.exists()
    assert cgroup_folders_named(sandbox_id) == []


def test_dynamic_binaries_are_told_from_static_ones(tmp_path: Path) -> None:
    assert support._is_dynamic_elf(Path("/bin/sh"))
    not_elf = tmp_path / "script"
    not_elf.write_text("#!/bin/sh\n")
    assert support._is_dynamic_elf(not_elf)
