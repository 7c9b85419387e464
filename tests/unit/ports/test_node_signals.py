"""The eviction signals read straight from the node: memory from a fake /proc and memory cgroup
tree in tmp_path (v1 root, meminfo without one, the kubepods cgroup), filesystems from statvfs,
pid.available from /proc; what cannot be read is left out with one warning; the pods' memory,
tasks and disk use; and one real read of this machine."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec
import pytest

from pykubelet.messages.pod import Pod
from pykubelet.pods.eviction_ranking import ContainerStorage, FsUsage
from pykubelet.pods.eviction_thresholds import Observation, Signal
from pykubelet.ports.cgroups import CgroupManager, CgroupMode, detect_cgroup_mode
from pykubelet.ports.node_signals import NodeSignalReader, RateLimitedWarnings
from pykubelet.ports.node_stats import CgroupMounts

GiB = 1 << 30
MiB = 1 << 20
NOW = 100.0

MEMINFO = f"""\
MemTotal:        {8 * GiB // 1024} kB
MemFree:         {3 * GiB // 1024} kB
MemAvailable:    {5 * GiB // 1024} kB
Inactive(file):  {1 * GiB // 1024} kB
"""


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def memory_cgroup(folder: Path, *, usage: int, inactive: int, limit: int = 9223372036854771712) -> None:
    write(folder / "memory.usage_in_bytes", f"{usage}\n")
    write(folder / "memory.limit_in_bytes", f"{limit}\n")
    write(folder / "memory.stat", f"cache 1\nrss 2\ninactive_file 3\ntotal_inactive_file {inactive}\n")


class Node:
    """A fake /proc and v1 memory (and pids) hierarchy under tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        self.proc = tmp_path / "proc"
        self.memory = tmp_path / "cgroup" / "memory"
        self.pids = tmp_path / "cgroup" / "pids"
        self.root_dir = tmp_path / "root"
        self.logs = tmp_path / "logs"
        for folder in (self.memory, self.pids, self.root_dir, self.logs):
            folder.mkdir(parents=True)
        write(self.proc / "meminfo", MEMINFO)
        write(self.proc / "loadavg", "0.52 0.58 0.59 3/300 12345\n")
        write(self.proc / "sys/kernel/pid_max", "32768\n")
        write(self.proc / "sys/kernel/threads-max", "1000\n")
        self.cgroups = CgroupManager(CgroupMode(version=1, mount_points={"memory": str(self.memory),
                                                                         "pids": str(self.pids)}))  # fmt: skip

    def reader(self, *, v1: bool = True, **kwargs) -> NodeSignalReader:
        return NodeSignalReader(
            root_dir=str(self.root_dir), pod_logs_dir=str(self.logs), proc=str(self.proc),
            cgroup_mounts=CgroupMounts(memory=str(self.memory)) if v1 else CgroupMounts(),
            cgroups=kwargs.pop("cgroups", self.cgroups), **kwargs,
        )


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


# -- memory ----------------------------------------------------------------------------------


def test_v1_memory_available_is_memtotal_less_the_root_cgroups_usage_less_inactive_file(node):
    memory_cgroup(node.memory, usage=3 * GiB, inactive=1 * GiB)
    observed = node.reader().observe(now=NOW)
    assert observed[Signal.MEMORY_AVAILABLE] == Observation(available=6 * GiB, capacity=8 * GiB, time=NOW)


def test_without_a_v1_memory_hierarchy_memory_comes_from_meminfo_as_cadvisor_has_it(node):
    # usage = MemTotal - MemFree = 5Gi; working set = usage - Inactive(file) = 4Gi
    observed = node.reader(v1=False).observe(now=NOW)
    assert observed[Signal.MEMORY_AVAILABLE] == Observation(available=4 * GiB, capacity=8 * GiB, time=NOW)


def test_an_unreadable_root_cgroup_falls_back_to_meminfo_with_one_warning(node, caplog):
    reader = node.reader()  # the v1 hierarchy has no files
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert reader.observe(now=NOW)[Signal.MEMORY_AVAILABLE].available == 4 * GiB
    warnings = [r.getMessage() for r in caplog.records if "root memory cgroup" in r.getMessage()]
    assert len(warnings) == 1 and str(node.memory) in warnings[0]


def test_the_working_set_never_makes_available_memory_negative(node):
    memory_cgroup(node.memory, usage=9 * GiB, inactive=0)
    assert node.reader().observe(now=NOW)[Signal.MEMORY_AVAILABLE] == Observation(0, 8 * GiB, NOW)


def test_allocatable_memory_available_is_allocatable_less_the_kubepods_working_set(node):
    memory_cgroup(node.memory, usage=3 * GiB, inactive=1 * GiB)
    memory_cgroup(node.memory / "kubepods", usage=1 * GiB, inactive=256 * MiB, limit=6 * GiB)
    reader = node.reader(allocatable_memory=6 * GiB, kubepods_cgroup="/kubepods")
    observed = reader.observe(now=NOW)
    assert observed[Signal.ALLOCATABLE_MEMORY_AVAILABLE] == Observation(6 * GiB - 768 * MiB, 6 * GiB, NOW)
    assert Signal.ALLOCATABLE_MEMORY_AVAILABLE not in node.reader().observe(now=NOW)  # no kubepods cgroup given


def test_a_missing_kubepods_cgroup_skips_only_its_signal(node, caplog):
    memory_cgroup(node.memory, usage=3 * GiB, inactive=1 * GiB)
    reader = node.reader(allocatable_memory=6 * GiB, kubepods_cgroup="/kubepods")
    with caplog.at_level(logging.WARNING):
        observed = reader.observe(now=NOW)
    assert Signal.ALLOCATABLE_MEMORY_AVAILABLE not in observed and Signal.MEMORY_AVAILABLE in observed
    assert any("allocatableMemory.available not observed" in r.getMessage() for r in caplog.records)


# -- filesystems -----------------------------------------------------------------------------


def test_nodefs_is_the_statvfs_of_the_root_dir(node):
    observed = node.reader().observe(now=NOW)
    fs = os.statvfs(node.root_dir)
    assert observed[Signal.NODEFS_AVAILABLE] == Observation(fs.f_bavail * fs.f_frsize, fs.f_blocks * fs.f_frsize, NOW)
    assert observed[Signal.NODEFS_INODES_FREE] == Observation(fs.f_favail, fs.f_files, NOW)
    assert Signal.IMAGEFS_AVAILABLE not in observed  # the runtime named no image filesystem


def test_an_image_filesystem_on_the_same_device_is_reported_as_nodefs(node, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    reader = node.reader()
    observed = reader.observe(image_fs=str(images), now=NOW)
    assert reader.dedicated_image_fs(str(images)) is False
    for signal in (Signal.IMAGEFS_AVAILABLE, Signal.CONTAINERFS_AVAILABLE):
        assert observed[signal] == observed[Signal.NODEFS_AVAILABLE]
    assert observed[Signal.IMAGEFS_INODES_FREE] == observed[Signal.NODEFS_INODES_FREE]


def test_an_image_filesystem_on_its_own_device_is_its_own_statvfs(node):
    other = "/dev/shm" if os.path.isdir("/dev/shm") else "/proc"
    if os.stat(other).st_dev == os.stat(node.root_dir).st_dev:
        pytest.skip(f"{other} is on the same device as {node.root_dir}")
    reader = node.reader()
    observed = reader.observe(image_fs=other, now=NOW)
    fs = os.statvfs(other)
    assert reader.dedicated_image_fs(other) is True
    assert observed[Signal.IMAGEFS_AVAILABLE] == Observation(fs.f_bavail * fs.f_frsize, fs.f_blocks * fs.f_frsize, NOW)


def test_an_image_filesystem_that_is_not_there_leaves_imagefs_out(node, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        observed = node.reader().observe(image_fs=str(tmp_path / "gone"), now=NOW)
    assert Signal.IMAGEFS_AVAILABLE not in observed and Signal.NODEFS_AVAILABLE in observed
    assert any("imagefs.* not observed" in r.getMessage() for r in caplog.records)


# -- pids ------------------------------------------------------------------------------------


def test_pid_available_is_the_lower_kernel_limit_less_the_tasks_in_loadavg(node):
    assert node.reader().observe(now=NOW)[Signal.PID_AVAILABLE] == Observation(700, 1000, NOW)


def test_an_unreadable_loadavg_skips_pid_available_only(node):
    (node.proc / "loadavg").unlink()
    observed = node.reader(v1=False).observe(now=NOW)
    assert Signal.PID_AVAILABLE not in observed and Signal.MEMORY_AVAILABLE in observed


# -- failures --------------------------------------------------------------------------------


def test_a_reader_that_raises_does_not_stop_the_others_and_is_said_once(node, caplog):
    class Broken(NodeSignalReader):
        def memory_available(self, now):
            raise ValueError("garbage in meminfo")

    clock = [0.0]
    warnings = RateLimitedWarnings(every=600, clock=lambda: clock[0])
    reader = Broken(root_dir=str(node.root_dir), pod_logs_dir=str(node.logs), proc=str(node.proc),
                    cgroup_mounts=CgroupMounts(), warnings=warnings)  # fmt: skip
    with caplog.at_level(logging.WARNING):
        for at in (0.0, 10.0, 599.0, 600.0):
            clock[0] = at
            observed = reader.observe(now=NOW)
            assert Signal.MEMORY_AVAILABLE not in observed
            assert {Signal.NODEFS_AVAILABLE, Signal.PID_AVAILABLE} <= observed.keys()
    warnings = [r.getMessage() for r in caplog.records if "memory.available not observed" in r.getMessage()]
    assert len(warnings) == 2 and "garbage in meminfo" in warnings[0]  # at 0 and again at 600


def test_nothing_readable_is_no_signal_and_no_exception(tmp_path):
    reader = NodeSignalReader(root_dir=str(tmp_path / "nowhere"), pod_logs_dir=str(tmp_path),
                              proc=str(tmp_path / "noproc"), cgroup_mounts=CgroupMounts())  # fmt: skip
    assert reader.observe(image_fs=str(tmp_path / "nothing"), now=NOW) == {}


# -- pods ------------------------------------------------------------------------------------


def pod(uid: str = "u1", *, volumes: list | None = None) -> Pod:
    return msgspec.convert({
        "metadata": {"name": "web", "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "app"}, {"name": "side"}], "initContainers": [{"name": "init"}],
                 "volumes": volumes or []},
    }, Pod)  # fmt: skip


def test_a_pods_memory_and_tasks_come_from_its_cgroup(node):
    memory_cgroup(node.memory / "kubepods" / "podu1", usage=300 * MiB, inactive=100 * MiB)
    write(node.pids / "kubepods" / "podu1" / "pids.current", "42\n")
    usage = node.reader().pods_usage([pod("u1"), pod("u2")], cgroups={"u1": "/kubepods/podu1", "u2": "/kubepods/podu2"},
                                     memory=True, processes=True)  # fmt: skip
    assert (usage["u1"].memory_working_set, usage["u1"].processes) == (200 * MiB, 42)
    assert (usage["u2"].memory_working_set, usage["u2"].processes) == (None, None)  # gone: no stats
    assert usage["u1"].storage is None  # not asked for


def test_a_pods_disk_use_is_its_logs_volumes_and_writable_layers(node):
    the_pod = pod(volumes=[
        {"name": "scratch", "emptyDir": {}}, {"name": "tmp", "emptyDir": {"medium": "Memory"}},
        {"name": "conf", "configMap": {"name": "c"}}, {"name": "host", "hostPath": {"path": "/"}},
    ])
    log_dir = node.logs / "default_web_u1"
    write(log_dir / "app" / "0.log", "x" * 10000)
    write(log_dir / "own.log", "y")  # the pod's own log file
    volumes = node.root_dir / "pods" / "u1" / "volumes"
    write(volumes / "kubernetes.io~empty-dir" / "scratch" / "data" / "big", "z" * 100000)
    write(volumes / "kubernetes.io~configmap" / "conf" / "key", "v")
    write(node.root_dir / "pods" / "u1" / "etc-hosts", "127.0.0.1 localhost\n")

    layer = FsUsage(bytes=5 * MiB, inodes=7)
    storage = node.reader().pod_storage(the_pod, {"side": layer})
    app_logs = storage.containers["app"].logs
    assert app_logs is not None and app_logs.bytes >= 10000 and app_logs.inodes == 1
    assert storage.containers["side"] == ContainerStorage(rootfs=layer, logs=None)
    assert "init" not in storage.containers  # nothing of it on disk
    assert sorted(storage.volumes) == ["conf", "scratch"]  # tmpfs and hostPath are not the pod's disk
    scratch = storage.volumes["scratch"]
    assert scratch.bytes >= 100000 and scratch.inodes == 3  # the folder, data/ and big
    own = sum(os.lstat(p).st_blocks * 512 for p in (log_dir / "own.log", node.root_dir / "pods/u1/etc-hosts"))
    conf = storage.volumes["conf"].bytes
    assert storage.ephemeral_storage == layer.bytes + app_logs.bytes + scratch.bytes + conf + own


def test_disk_use_is_measured_only_for_the_pods_asked_and_within_the_budget(node):
    write(node.logs / "default_web_u1" / "app" / "0.log", "x")
    reader = node.reader()
    assert reader.pods_usage([pod("u1")], storage={"u1"})["u1"].storage is not None
    assert reader.pods_usage([pod("u1")], storage=())["u1"].storage is None
    assert reader.pods_usage([pod("u1")], storage={"u1"}, budget=0.0)["u1"].storage is None


# -- this machine ----------------------------------------------------------------------------


def test_a_real_read_of_this_machine(tmp_path):
    mode = detect_cgroup_mode()
    if mode.version != 1 or "memory" not in mode.mount_points or os.geteuid() != 0:
        pytest.skip("needs root and the cgroup v1 memory hierarchy (as on this project's machine)")
    meminfo = Path("/proc/meminfo").read_text()
    total = int(next(line for line in meminfo.splitlines() if line.startswith("MemTotal:")).split()[1]) * 1024
    reader = NodeSignalReader(root_dir=str(tmp_path), pod_logs_dir=str(tmp_path), cgroups=CgroupManager(mode),
                              allocatable_memory=total, kubepods_cgroup="/")  # fmt: skip
    observed = reader.observe(image_fs="/", now=NOW)
    memory = observed[Signal.MEMORY_AVAILABLE]
    assert memory.capacity == total and 0 < memory.available < total
    root_usage = int(Path(mode.mount_points["memory"], "memory.usage_in_bytes").read_text())
    assert memory.available >= total - root_usage  # usage less inactive file, at most usage
    assert 0 < observed[Signal.ALLOCATABLE_MEMORY_AVAILABLE].available <= total
    pids = observed[Signal.PID_AVAILABLE]
    assert 0 < pids.available < pids.capacity <= int(Path("/proc/sys/kernel/pid_max").read_text())
    for signal in (Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_AVAILABLE):
        assert 0 < observed[signal].available <= observed[signal].capacity
