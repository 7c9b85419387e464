"""The volume manager on a temporary root: hostPath type checks, emptyDir, configMap and
downwardAPI files by the atomic writer, secrets on tmpfs, a volume type pykubelet cannot
mount refused by name, and everything removed with the pod."""

from __future__ import annotations

import os
import socket

import msgspec
import pytest

from pykubelet.actors.volumes.manager import MountFailed, VolumeManager, host_path_error
from pykubelet.actors.volumes.object_cache import ObjectKey, ObjectSnapshot
from pykubelet.messages.pod import Pod
from pykubelet.pods.downward_api import PodFacts
from pykubelet.ports.mounts import is_mount_point

FACTS = PodFacts(node_name="node1", host_ip="127.0.0.1")


def pod(volumes: list[dict], **spec) -> Pod:
    return msgspec.convert(
        {"metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "labels": {"app": "web"}},
         "spec": {"volumes": volumes, "containers": [{"name": "c"}], **spec}},
        Pod,
    )


@pytest.mark.parametrize(
    "kind, type_, error",
    [
        ("dir", "Directory", None),
        ("dir", "", None),
        ("file", "Directory", "is not a directory"),
        ("file", "File", None),
        ("dir", "File", "is not a file"),
        ("missing", "Directory", "does not exist"),
        ("socket", "Socket", None),
        ("file", "Socket", "is not a socket file"),
        ("chardev", "CharDevice", None),
        ("file", "BlockDevice", "is not a block device"),
        ("file", "Dir", "is not one of"),
    ],
)
def test_host_path_types_are_checked(tmp_path, kind, type_, error):
    path = {"dir": tmp_path, "file": tmp_path / "f", "missing": tmp_path / "nope",
            "socket": tmp_path / "s", "chardev": "/dev/null"}[kind]
    if kind == "file":
        path.write_text("x")
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    st = os.stat(path) if os.path.exists(path) else None
    message = host_path_error(str(path), type_, st)
    assert (message is None) if error is None else (error in message)


async def test_or_create_types_create_what_is_missing_but_not_a_files_parent(tmp_path):
    manager = VolumeManager(str(tmp_path / "root"))
    volumes = [
        {"name": "d", "hostPath": {"path": str(tmp_path / "made" / "dir"), "type": "DirectoryOrCreate"}},
        {"name": "f", "hostPath": {"path": str(tmp_path / "file"), "type": "FileOrCreate"}},
    ]
    paths = await manager.set_up(pod(volumes), FACTS)
    assert os.path.isdir(paths["d"]) and os.path.isfile(paths["f"])
    with pytest.raises(MountFailed, match='volume "g" : hostPath'):
        await manager.set_up(pod([{"name": "g", "hostPath": {"path": str(tmp_path / "no" / "f"), "type": "FileOrCreate"}}]), FACTS)


async def test_a_volume_type_pykubelet_cannot_mount_fails_naming_volume_and_type(tmp_path):
    manager = VolumeManager(str(tmp_path))
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}, {"name": "scratch", "emptyDir": {}}]
    with pytest.raises(MountFailed) as failed:
        await manager.set_up(pod(volumes), FACTS)
    assert str(failed.value) == (
        'MountVolume.SetUp failed for volume "data" : volume type persistentVolumeClaim is not supported by pykubelet'
    )
    # The other volumes were set up all the same.
    assert os.path.isdir(manager.volume_dir("u-1", "emptyDir", "scratch"))


async def test_config_map_and_downward_api_files_are_written_and_updated_in_place(tmp_path):
    manager = VolumeManager(str(tmp_path))
    volumes = [{"name": "cfg", "configMap": {"name": "app"}},
               {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
    objects = ObjectSnapshot({ObjectKey("configmaps", "ns", "app"): {"mode": "a"}})
    paths = await manager.set_up(pod(volumes), FACTS, objects)
    assert open(os.path.join(paths["cfg"], "mode")).read() == "a"
    assert open(os.path.join(paths["info"], "labels")).read() == 'app="web"'
    assert os.readlink(os.path.join(paths["cfg"], "mode")) == "..data/mode"
    objects = ObjectSnapshot({ObjectKey("configmaps", "ns", "app"): {"mode": "b"}})
    await manager.set_up(pod(volumes), FACTS, objects)
    assert open(os.path.join(paths["cfg"], "mode")).read() == "b"


async def test_a_missing_config_map_fails_the_mount_with_gos_message(tmp_path):
    manager = VolumeManager(str(tmp_path))
    objects = ObjectSnapshot({ObjectKey("configmaps", "ns", "app"): None})
    with pytest.raises(MountFailed, match='volume "cfg" : configmap "app" not found'):
        await manager.set_up(pod([{"name": "cfg", "configMap": {"name": "app"}}]), FACTS, objects)
    optional = [{"name": "cfg", "configMap": {"name": "app", "optional": True}}]
    assert os.path.isdir((await manager.set_up(pod(optional), FACTS, objects))["cfg"])


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting tmpfs needs root")
async def test_secrets_live_on_tmpfs_and_everything_goes_with_the_pod(tmp_path):
    manager = VolumeManager(str(tmp_path))
    volumes = [{"name": "s", "secret": {"secretName": "db", "defaultMode": 0o400}},
               {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]
    objects = ObjectSnapshot({ObjectKey("secrets", "ns", "db"): {"password": b"hunter2"}})
    paths = await manager.set_up(pod(volumes), FACTS, objects)
    try:
        assert is_mount_point(paths["s"]) and is_mount_point(paths["mem"])
        assert open(os.path.join(paths["s"], "password"), "rb").read() == b"hunter2"
        assert oct(os.stat(os.path.join(paths["s"], "password")).st_mode & 0o777) == "0o400"
        mount = next(line for line in open("/proc/mounts") if paths["mem"] in line)
        assert "size=1024k" in mount
        # A second set-up (a restarted kubelet) reuses the mounts.
        await manager.set_up(pod(volumes), FACTS, objects)
        assert sum(paths["s"] in line for line in open("/proc/mounts")) == 1
    finally:
        await manager.tear_down("u-1")
    assert not os.path.exists(manager.pod_dir("u-1"))
    assert not any(str(tmp_path) in line for line in open("/proc/mounts"))


async def test_fs_group_owns_an_empty_dir(tmp_path):
    manager = VolumeManager(str(tmp_path))
    paths = await manager.set_up(pod([{"name": "e", "emptyDir": {}}], securityContext={"fsGroup": 2000}), FACTS)
    st = os.stat(paths["e"])
    assert st.st_gid == 2000 and st.st_mode & 0o2070 == 0o2070


async def test_a_cancelled_tear_down_leaves_the_disk_to_its_thread_and_is_not_started_twice(tmp_path, monkeypatch):
    """A gc or pod worker cancelled (its supervisor restarting it) while a slow unmount or
    rmtree runs returns at once; the removal goes on alone, and a second tear-down of the
    same pod meanwhile waits for it instead of removing beside it."""
    import threading

    import trio
    import trio.testing

    from pykubelet.actors.volumes import manager as volume_manager

    started, release, calls = threading.Event(), threading.Event(), []

    def slow_remove(path: str) -> None:
        calls.append(path)
        started.set()
        release.wait(30)
        volume_manager.shutil.rmtree(path, ignore_errors=True)

    monkeypatch.setattr(volume_manager, "_remove_dir", slow_remove)
    manager = VolumeManager(str(tmp_path))
    (tmp_path / "pods" / "u-1" / "volumes").mkdir(parents=True)
    pod_dir = manager.pod_dir("u-1")
    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(manager.tear_down, "u-1")
                await trio.to_thread.run_sync(started.wait)
                scope.cancel()
        assert scope.cancelled_caught and not release.is_set()
        assert pod_dir in volume_manager.REMOVALS

        second_done = trio.Event()

        async def second() -> None:  # while the first still runs
            await manager.tear_down("u-1")
            second_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await trio.testing.wait_all_tasks_blocked()
            assert not second_done.is_set()  # it waits on the first removal, which cannot end yet
            release.set()
        assert calls == [pod_dir] and not os.path.exists(pod_dir)
    finally:
        release.set()
    assert pod_dir not in volume_manager.REMOVALS
    await manager.tear_down("u-1")  # gone: nothing in flight, a removal of its own
    assert calls == [pod_dir, pod_dir]


async def test_a_tear_down_cancelled_before_its_thread_started_claims_nothing(tmp_path, monkeypatch):
    """Cancelled while waiting for a worker thread (all of trio's are busy): the directory
    is not left marked as being removed, so the next tear-down removes it."""
    import trio

    from pykubelet.actors.volumes import manager as volume_manager

    manager = VolumeManager(str(tmp_path))
    (tmp_path / "pods" / "u-2" / "volumes").mkdir(parents=True)
    with trio.CancelScope() as scope:
        scope.cancel()
        await manager.tear_down("u-2")
    assert scope.cancelled_caught and manager.pod_dir("u-2") not in volume_manager.REMOVALS
    await manager.tear_down("u-2")
    assert not os.path.exists(manager.pod_dir("u-2"))
