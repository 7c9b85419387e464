"""Cgroups as the Go kubelet's cgroupfs driver keeps them: the pure conversions and file plans,
then create, update, destroy and the readings against the machine's real cgroup filesystem
(as root), in a uniquely named scratch cgroup removed afterwards. v1 runs where the v1
controllers are mounted; v2 on a cgroup2 root, or on a hybrid host's unified mount with the
controllers it has. A part needing a controller the node lacks skips alone."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from pykubelet.ports.cgroups import CgroupConfig, CgroupError, CgroupManager, CgroupMode, detect_cgroup_mode
from pykubelet.ports.cgroups.limits import (
    CgroupWrite,
    cpu_max_text,
    cpu_weight_from_shares,
    hugepage_size_name,
    resource_writes,
)

MiB = 1 << 20

# -- pure ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shares, weight", [
    (2, 1), (1024, 39), (512, 20), (262143, 9999), (262144, 10000), (1 << 20, 10000), (1, 1), (0, 1),
])
def test_v2_cpu_weight_is_converted_from_shares_as_go_does(shares, weight):
    assert cpu_weight_from_shares(shares) == weight


@pytest.mark.parametrize("quota, period, text", [
    (50000, 100000, "50000 100000"),
    (-1, 100000, "max 100000"),
    (None, 100000, "max 100000"),  # runc: no quota is no limit
    (0, 100000, "max 100000"),
    (20000, None, "20000"),  # the kernel keeps the period
    (-1, None, "max"),
    (None, None, None),  # nothing to write
])
def test_v2_cpu_max_text_is_quota_or_max_then_period(quota, period, text):
    assert cpu_max_text(quota, period) == text


@pytest.mark.parametrize("kb, name", [(64, "64KB"), (2048, "2MB"), (16384, "16MB"), (1048576, "1GB"), (3072, "3MB")])
def test_hugepage_sizes_are_named_as_the_hugetlb_files_name_them(kb, name):
    assert hugepage_size_name(kb) == name


def test_v1_writes_memory_then_cpu_period_before_quota_then_pids():
    config = CgroupConfig(cpu_shares=512, cpu_quota=-1, cpu_period=100000, memory_limit=-1, pids_limit=-1)
    assert resource_writes(config, version=1, hugepage_sizes=None) == [
        CgroupWrite("memory", "memory.limit_in_bytes", "-1"),
        CgroupWrite("cpu", "cpu.shares", "512"),
        CgroupWrite("cpu", "cpu.cfs_period_us", "100000"),
        CgroupWrite("cpu", "cpu.cfs_quota_us", "-1"),
        CgroupWrite("pids", "pids.max", "max"),
    ]


def test_v2_writes_max_for_unlimited_and_weight_for_shares():
    config = CgroupConfig(cpu_shares=1024, cpu_quota=25000, cpu_period=100000, memory_limit=-1, pids_limit=42)
    assert resource_writes(config, version=2, hugepage_sizes=None) == [
        CgroupWrite("memory", "memory.max", "max"),
        CgroupWrite("cpu", "cpu.weight", "39"),
        CgroupWrite("cpu", "cpu.max", "25000 100000"),
        CgroupWrite("pids", "pids.max", "42"),
    ]


def test_an_unset_field_writes_nothing():
    assert resource_writes(CgroupConfig(), version=1, hugepage_sizes=None) == []
    assert resource_writes(CgroupConfig(), version=2, hugepage_sizes=None) == []


def test_every_host_hugepage_size_not_named_is_limited_to_0_as_go_does():
    config = CgroupConfig(hugepage_limits={"2MB": 4 * MiB})
    assert resource_writes(config, version=2, hugepage_sizes=["2MB", "1GB"]) == [
        CgroupWrite("hugetlb", "hugetlb.2MB.max", str(4 * MiB)),
        CgroupWrite("hugetlb", "hugetlb.2MB.rsvd.max", str(4 * MiB), optional=True),
        CgroupWrite("hugetlb", "hugetlb.1GB.max", "0"),
        CgroupWrite("hugetlb", "hugetlb.1GB.rsvd.max", "0", optional=True),
    ]
    v1 = resource_writes(config, version=1, hugepage_sizes=["2MB"])
    assert [w.file for w in v1] == ["hugetlb.2MB.limit_in_bytes", "hugetlb.2MB.rsvd.limit_in_bytes"]


def test_hugepage_limits_are_skipped_without_a_hugetlb_controller():
    assert resource_writes(CgroupConfig(hugepage_limits={"2MB": MiB}), version=1, hugepage_sizes=None) == []


# -- detecting the mode ----------------------------------------------------------------------

# This machine: v1 controllers each on its own mount, and cgroup2 at unified (hybrid).
MOUNTS_HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
MOUNTS_COMBINED = """\
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
"""


def test_a_hybrid_host_is_v1_with_each_controller_and_named_hierarchy(tmp_path):
    (tmp_path / "mounts").write_text(MOUNTS_HYBRID)
    mode = detect_cgroup_mode(str(tmp_path / "mounts"))
    assert mode.version == 1 and mode.hybrid
    assert mode.unified == "/sys/fs/cgroup/unified"
    controllers = ("cpu", "cpuacct", "cpuset", "memory", "pids", "systemd")
    assert mode.mount_points == {c: f"/sys/fs/cgroup/{c}" for c in controllers}


def test_controllers_mounted_together_share_a_mount_point(tmp_path):
    (tmp_path / "mounts").write_text(MOUNTS_COMBINED)
    mode = detect_cgroup_mode(str(tmp_path / "mounts"))
    assert mode.mount_points == {"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
                                 "memory": "/sys/fs/cgroup/memory"}
    assert not mode.hybrid


def test_a_cgroup2_root_is_v2_with_the_controllers_its_root_offers(tmp_path):
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (tmp_path / "mounts").write_text(f"cgroup2 {root} cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n")
    mode = detect_cgroup_mode(str(tmp_path / "mounts"), root=str(root))
    assert mode.version == 2 and not mode.hybrid
    assert set(mode.mount_points) == {"cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"}
    assert set(mode.mount_points.values()) == {str(root)}


def test_no_cgroup_mount_is_none_and_no_manager_can_be_made(tmp_path):
    (tmp_path / "mounts").write_text("proc /proc proc rw 0 0\n")
    mode = detect_cgroup_mode(str(tmp_path / "mounts"))
    assert mode.version == 0
    with pytest.raises(CgroupError, match="no cgroup hierarchy is mounted"):
        CgroupManager(mode)


def test_the_systemd_driver_is_refused_with_the_fix():
    with pytest.raises(CgroupError) as refused:
        CgroupManager(CgroupMode(version=2, unified="/sys/fs/cgroup"), driver="systemd")
    message = str(refused.value)
    assert "systemd cgroup driver is not supported by pykubelet" in message
    assert "cgroupDriver: cgroupfs" in message and "SystemdCgroup = false" in message


def test_a_relative_or_dotted_name_is_refused():
    manager = CgroupManager(CgroupMode(version=1, mount_points={"memory": "/nonexistent"}))
    for name in ("kubepods", "/kubepods/../etc"):
        with pytest.raises(CgroupError, match="absolute name"):
            manager.exists(name)


# -- the real cgroup filesystem --------------------------------------------------------------


def _real_mode() -> CgroupMode:
    if os.geteuid() != 0:
        pytest.skip("needs root: these tests write the real cgroup filesystem")
    mode = detect_cgroup_mode()
    if mode.version == 0:
        pytest.skip("no cgroup filesystem is mounted")
    return mode


def _v2_mode(mode: CgroupMode) -> CgroupMode:
    """A v2 root, or a hybrid host's unified mount with whatever controllers it offers."""
    if mode.version == 2:
        return mode
    if mode.unified is None:
        pytest.skip("no cgroup2 mount on this host")
    with open(f"{mode.unified}/cgroup.controllers") as f:
        controllers = f.read().split()
    return CgroupMode(version=2, mount_points={c: mode.unified for c in controllers}, unified=mode.unified)


class Scratch:
    """A manager and a uniquely named cgroup tree, and the processes a test started."""

    def __init__(self, manager: CgroupManager):
        self.manager = manager
        self.top = f"/pykubelet-test-{uuid.uuid4().hex[:12]}"
        self.pod = f"{self.top}/burstable/pod{uuid.uuid4()}"
        self.children: list[subprocess.Popen] = []

    @property
    def mode(self) -> CgroupMode:
        return self.manager.mode

    def folders(self, path: str) -> list[str]:
        """The cgroup's folders the manager makes (v1: every hierarchy but devices)."""
        if self.mode.version == 2:
            return [f"{self.mode.unified}{path}"]
        return sorted({f"{m}{path}" for c, m in self.mode.mount_points.items() if c != "devices"})

    def folder(self, controller: str, path: str) -> str:
        mount = self.mode.unified if self.mode.version == 2 else self.mode.mount_points[controller]
        return f"{mount}{path}"

    def read(self, controller: str, path: str, file: str) -> str:
        with open(f"{self.folder(controller, path)}/{file}") as f:
            return f.read().strip()

    def has(self, controller: str) -> bool:
        return controller in self.mode.mount_points

    def need(self, *controllers: str) -> None:
        missing = [c for c in controllers if not self.has(c)]
        if missing:
            pytest.skip(f"cgroup v{self.mode.version} here has no {', '.join(missing)} controller")

    def spawn(self, argv: list[str], **kwargs) -> subprocess.Popen:
        child = subprocess.Popen(argv, **kwargs)
        self.children.append(child)
        return child

    def move(self, pid: int, path: str) -> None:
        """Put a process into the cgroup in every hierarchy, as a runtime does."""
        for folder in self.folders(path):
            with open(f"{folder}/cgroup.procs", "w") as f:
                f.write(str(pid))

    def cleanup(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
        try:
            self.manager.destroy(self.top)
        except CgroupError:
            pass
        mounts = {self.mode.unified} if self.mode.version == 2 else set(self.mode.mount_points.values())
        if self.mode.hybrid:
            mounts.add(self.mode.unified)
        for mount in mounts:  # whatever destroy left: children first
            for directory, _, _ in os.walk(f"{mount}{self.top}", topdown=False):
                try:
                    os.rmdir(directory)
                except OSError:
                    pass


@pytest.fixture(params=["v1", "v2"])
def scratch(request) -> Iterator[Scratch]:
    mode = _real_mode()
    if request.param == "v1":
        if mode.version != 1:
            pytest.skip("cgroup v1 controllers are not mounted on this host")
    else:
        mode = _v2_mode(mode)
    unified_enabled = None
    if mode.version == 2 and mode.unified:
        with open(f"{mode.unified}/cgroup.subtree_control") as f:
            unified_enabled = set(f.read().split())
    scratch = Scratch(CgroupManager(mode))
    try:
        yield scratch
    finally:
        scratch.cleanup()
        if unified_enabled is not None and mode.unified != "/sys/fs/cgroup":
            # A hybrid host's unified root: give back what create() enabled there.
            with open(f"{mode.unified}/cgroup.subtree_control") as f:
                added = set(f.read().split()) - unified_enabled
            for controller in added:
                try:
                    with open(f"{mode.unified}/cgroup.subtree_control", "w") as f:
                        f.write(f"-{controller}")
                except OSError:
                    pass  # in use by someone else's cgroup since


def _config_for(s: Scratch) -> CgroupConfig:
    """A pod's limits, for the controllers this host has."""
    return CgroupConfig(
        cpu_shares=512 if s.has("cpu") else None,
        cpu_quota=50000 if s.has("cpu") else None,
        cpu_period=100000 if s.has("cpu") else None,
        memory_limit=256 * MiB if s.has("memory") else None,
        pids_limit=100 if s.has("pids") else None,
        hugepage_limits={"2MB": 4 * MiB} if s.has("hugetlb") else {},
    )


def test_create_writes_every_limit_and_reads_back(scratch):
    s = scratch
    assert not s.manager.exists(s.pod)
    s.manager.create(s.pod, _config_for(s))
    assert s.manager.exists(s.pod)
    assert not s.manager.exists(f"{s.top}/burstable/pod-never-made")
    for folder in s.folders(s.pod):
        assert os.path.isdir(folder)
    v1 = s.mode.version == 1
    if s.has("cpu"):
        if v1:
            assert s.read("cpu", s.pod, "cpu.shares") == "512"
            assert s.read("cpu", s.pod, "cpu.cfs_period_us") == "100000"
            assert s.read("cpu", s.pod, "cpu.cfs_quota_us") == "50000"
        else:
            assert s.read("cpu", s.pod, "cpu.weight") == "20"
            assert s.read("cpu", s.pod, "cpu.max") == "50000 100000"
    if s.has("memory"):
        assert s.read("memory", s.pod, "memory.limit_in_bytes" if v1 else "memory.max") == str(256 * MiB)
    if s.has("pids"):
        assert s.read("pids", s.pod, "pids.max") == "100"
    if s.has("hugetlb"):
        suffix = "limit_in_bytes" if v1 else "max"
        assert s.read("hugetlb", s.pod, f"hugetlb.2MB.{suffix}") == str(4 * MiB)
        if os.path.isdir("/sys/kernel/mm/hugepages/hugepages-1048576kB"):
            assert s.read("hugetlb", s.pod, f"hugetlb.1GB.{suffix}") == "0"  # not named: 0, as Go
    if v1 and s.has("cpuset"):
        parent = s.read("cpuset", "", "cpuset.cpus"), s.read("cpuset", "", "cpuset.mems")
        balanced = s.read("cpuset", "", "cpuset.sched_load_balance")
        for level in (s.top, f"{s.top}/burstable", s.pod):  # each new level got its parent's
            assert (s.read("cpuset", level, "cpuset.cpus"), s.read("cpuset", level, "cpuset.mems")) == parent
            # Under a load-balancing root the flag is irrelevant, and off spares a rebuild
            # of the node's scheduler domains; under a root that does not balance, untouched.
            assert s.read("cpuset", level, "cpuset.sched_load_balance") == ("0" if balanced == "1" else "1")
    if not v1:
        with open(f"{s.mode.unified}{s.top}/cgroup.subtree_control") as f:
            assert set(f.read().split()) >= {c for c in ("cpu", "cpuset", "memory", "hugetlb", "pids") if s.has(c)}
    assert s.manager.list_children(f"{s.top}/burstable") == [s.pod]


def test_a_process_moved_in_is_listed_counted_then_killed_by_destroy(scratch):
    s = scratch
    s.manager.create(s.pod, _config_for(s))
    sleeper = s.spawn(["sleep", "300"])
    s.move(sleeper.pid, s.pod)  # v1 cpuset: only possible because create copied cpus and mems
    assert s.manager.pids(s.pod) == [sleeper.pid]
    assert s.manager.pids(s.top) == [sleeper.pid]  # children's processes count
    assert s.manager.cpu_usage_ns(s.pod) >= 0
    if s.has("pids"):
        assert s.manager.pids_current(s.pod) == 1
    if s.has("memory"):
        memory = s.manager.memory_usage(s.pod)
        assert 0 <= memory.working_set_bytes <= memory.usage_bytes
        assert memory.limit_bytes == 256 * MiB

    s.manager.destroy(s.top)

    assert sleeper.wait(timeout=5) == -signal.SIGKILL
    for path in (s.pod, f"{s.top}/burstable", s.top):
        assert not s.manager.exists(path)
        for folder in s.folders(path):
            assert not os.path.exists(folder)
    s.manager.destroy(s.top)  # gone already is fine


def test_on_a_hybrid_host_destroy_also_removes_what_runc_made_in_the_unified_tree(scratch):
    s = scratch
    if not s.mode.hybrid:
        pytest.skip("not a hybrid host (cgroup v1 with a cgroup2 unified mount)")
    s.manager.create(s.pod, _config_for(s))
    container = f"{s.mode.unified}{s.pod}/container"  # as runc makes a container's cgroup there
    os.makedirs(container)
    sleeper = s.spawn(["sleep", "300"])
    with open(f"{container}/cgroup.procs", "w") as f:
        f.write(str(sleeper.pid))
    assert sleeper.pid in s.manager.pids(s.pod)

    s.manager.destroy(s.top)

    assert sleeper.wait(timeout=5) == -signal.SIGKILL
    assert not os.path.exists(f"{s.mode.unified}{s.top}")


def test_update_lowers_the_cpu_quota(scratch):
    s = scratch
    s.need("cpu")
    s.manager.create(s.pod, _config_for(s))
    s.manager.update(s.pod, CgroupConfig(cpu_quota=20000, cpu_period=100000))
    if s.mode.version == 1:
        assert s.read("cpu", s.pod, "cpu.cfs_quota_us") == "20000"
    else:
        assert s.read("cpu", s.pod, "cpu.max") == "20000 100000"


def test_a_shorter_period_is_written_after_the_quota_that_makes_it_fit(scratch):
    """v1 rejects a child whose quota/period exceeds its parent's; runc writes the period
    again after the quota when the kernel refused it first."""
    s = scratch
    s.need("cpu")
    if s.mode.version != 1:
        pytest.skip("cgroup v2 writes quota and period together in cpu.max")
    s.manager.create(s.top, CgroupConfig(cpu_quota=50000, cpu_period=100000))
    s.manager.create(s.pod, CgroupConfig(cpu_quota=50000, cpu_period=100000))
    s.manager.update(s.pod, CgroupConfig(cpu_quota=25000, cpu_period=50000))
    assert (s.read("cpu", s.pod, "cpu.cfs_quota_us"), s.read("cpu", s.pod, "cpu.cfs_period_us")) == ("25000", "50000")


def test_lowering_the_memory_limit_below_usage_names_the_cgroup_file_and_fix(scratch):
    s = scratch
    s.need("memory")
    if s.mode.version != 1:
        pytest.skip("cgroup v2 reclaims or OOM-kills under a lower memory.max instead of refusing it")
    s.manager.create(s.pod, CgroupConfig(memory_limit=-1))
    try:  # no swapping out of the test's pages either, so that reclaim cannot succeed
        with open(f"{s.folder('memory', s.pod)}/memory.swappiness", "w") as f:
            f.write("0")
    except OSError:
        pass
    hog = s.spawn(
        [sys.executable, "-c",
         "import sys; sys.stdin.readline(); b = bytearray(32 << 20)\n"
         "for i in range(0, len(b), 4096): b[i] = 1\n"
         "print('ready', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    s.move(hog.pid, s.pod)
    hog.stdin.write("go\n")
    hog.stdin.flush()
    assert hog.stdout.readline().strip() == "ready"
    assert s.manager.memory_usage(s.pod).usage_bytes >= 32 * MiB

    with pytest.raises(CgroupError) as busy:
        s.manager.update(s.pod, CgroupConfig(memory_limit=MiB))

    error = busy.value
    assert error.errno == errno.EBUSY and error.path == s.pod
    assert error.file == f"{s.folder('memory', s.pod)}/memory.limit_in_bytes"
    assert f"cgroup {s.pod}: {error.file}: cannot lower the memory limit to {MiB} bytes" in str(error)
    assert "set a limit above the usage" in str(error)
    assert hog.poll() is None  # refused, not OOM-killed


def test_creating_under_a_missing_controller_names_it(scratch):
    s = scratch
    if s.mode.version == 2 and not s.has("memory"):
        missing, config, file = "memory", CgroupConfig(memory_limit=MiB), "memory.max"  # really missing here
    else:
        # The node without its pids controller: the same mode, less that mount.
        missing, config, file = "pids", CgroupConfig(pids_limit=10), "pids.max"
        mode = dataclasses.replace(s.mode, mount_points={c: m for c, m in s.mode.mount_points.items() if c != "pids"})
        s.manager = CgroupManager(mode)
    with pytest.raises(CgroupError) as refused:
        s.manager.create(s.pod, config)
    assert refused.value.file == file and refused.value.path == s.pod
    assert f"the {missing} controller is not" in str(refused.value)
    with pytest.raises(CgroupError, match=f"the {missing} controller is not"):
        getattr(s.manager, "memory_usage" if missing == "memory" else "pids_current")(s.pod)


def test_reading_a_cgroup_that_is_not_there_names_the_file(scratch):
    s = scratch
    with pytest.raises(CgroupError) as gone:
        s.manager.cpu_usage_ns(s.pod)
    assert s.pod in str(gone.value) and "does not exist" in str(gone.value)
    assert gone.value.errno == errno.ENOENT
    assert s.manager.pids(s.pod) == [] and s.manager.list_children(s.pod) == []
