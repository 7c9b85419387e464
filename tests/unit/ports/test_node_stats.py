"""Reading the node's numbers: /proc and cgroup parsers on fixture text, the cgroup readers
and the cgroup scan on fake v1 and v2 trees, disk usage on real files."""

from __future__ import annotations

import os

import pytest

from pykubelet.pods.stats_summary import Interface, Memory
from pykubelet.ports.node_stats import (
    CgroupMounts,
    cgroup_id,
    cgroup_memory,
    cgroup_pod_uid,
    disk_usage,
    files_usage,
    meminfo_memory,
    parse_boot_time,
    parse_flat_keyed,
    parse_int,
    parse_meminfo,
    parse_mounts,
    parse_net_dev,
    parse_running_tasks,
    read_cgroup,
    scan_cgroups,
    statfs,
)

NOW = 1_700_000_000.0

# This machine's /proc/self/mounts (cgroup v1, each controller on its own mount).
MOUNTS_V1_SPLIT = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
MOUNTS_V1_COMBINED = """\
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
"""
MOUNTS_V2 = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
"""


@pytest.mark.parametrize(
    "text, expected, version, tree",
    [
        pytest.param(MOUNTS_V1_SPLIT, CgroupMounts(cpuacct="/sys/fs/cgroup/cpuacct", memory="/sys/fs/cgroup/memory",
                                                   unified="/sys/fs/cgroup/unified"),
                     1, "/sys/fs/cgroup/memory", id="v1-split-hybrid-uses-v1"),
        pytest.param(MOUNTS_V1_COMBINED, CgroupMounts(cpuacct="/sys/fs/cgroup/cpu,cpuacct",
                                                      memory="/sys/fs/cgroup/memory"),
                     1, "/sys/fs/cgroup/memory", id="v1-cpu-cpuacct-together"),
        pytest.param(MOUNTS_V2, CgroupMounts(unified="/sys/fs/cgroup"), 2, "/sys/fs/cgroup", id="v2-unified"),
        pytest.param("", CgroupMounts(), 0, None, id="no-cgroups"),
    ],
)
def test_parse_mounts_finds_the_hierarchies(text, expected, version, tree):
    mounts = parse_mounts(text)
    assert mounts == expected
    assert (mounts.version, mounts.tree) == (version, tree)


MEMORY_STAT_V1 = """\
cache 9494528
rss 7348224
inactive_file 8192
pgfault 117650
pgmajfault 3
total_cache 747446272
total_rss 201220096
total_inactive_file 454459392
total_pgfault 56132507
"""
MEMORY_STAT_V2 = """\
anon 1200128
file 5660672
inactive_file 4096000
pgfault 4242
pgmajfault 2
"""


def test_parse_flat_keyed_skips_what_is_not_a_number():
    assert parse_flat_keyed("usage_usec 12\nbogus x\n\nnr_periods 0") == {"usage_usec": 12, "nr_periods": 0}


@pytest.mark.parametrize("text, expected", [("42\n", 42), ("max\n", None), (None, None), ("", None)])
def test_parse_int(text, expected):
    assert parse_int(text) == expected


@pytest.mark.parametrize(
    "usage, stat, limit, version, expected",
    [
        pytest.param(948486144, MEMORY_STAT_V1, 9223372036854771712, 1,
                     Memory(time=NOW, usage_bytes=948486144, working_set_bytes=948486144 - 454459392,
                            rss_bytes=201220096, page_faults=117650, major_page_faults=3),
                     id="v1-hierarchical-total-keys-unlimited"),
        pytest.param(10_000_000, MEMORY_STAT_V2, 20_000_000, 2,
                     Memory(time=NOW, available_bytes=20_000_000 - 5_904_000, usage_bytes=10_000_000,
                            working_set_bytes=5_904_000, rss_bytes=1200128, page_faults=4242, major_page_faults=2),
                     id="v2-anon-inactive-file-limited"),
        pytest.param(100, "", None, 1, Memory(time=NOW, usage_bytes=100, working_set_bytes=100), id="v1-no-stat"),
        pytest.param(None, MEMORY_STAT_V1, None, 1, None, id="no-usage-no-memory"),
    ],
)
def test_cgroup_memory_as_cadvisor(usage, stat, limit, version, expected):
    assert cgroup_memory(usage, parse_flat_keyed(stat), limit, version=version, time=NOW) == expected


MEMINFO = """\
MemTotal:       24683520 kB
MemFree:        23541760 kB
MemAvailable:   23993344 kB
Inactive(file):   300000 kB
AnonPages:        150000 kB
HugePages_Total:       0
"""


def test_meminfo_memory_for_a_v2_root():
    meminfo = parse_meminfo(MEMINFO)
    assert meminfo["MemTotal"] == 24683520 * 1024 and meminfo["HugePages_Total"] == 0
    usage = (24683520 - 23541760) * 1024
    ws = usage - 300000 * 1024
    assert meminfo_memory(meminfo, time=NOW) == Memory(
        time=NOW, available_bytes=24683520 * 1024 - ws, usage_bytes=usage, working_set_bytes=ws,
        rss_bytes=150000 * 1024)
    assert meminfo_memory({}, time=NOW) is None


def test_parse_boot_time():
    assert parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1795557903\nprocesses 9\n") == 1795557903
    assert parse_boot_time("cpu 1\n") is None


@pytest.mark.parametrize(
    "text, expected",
    [("0.56 0.85 0.73 2/108 12655\n", 108), ("1.36 3.49 4.53 2/3518 3715089", 3518), ("garbage", None),
     ("0.1 0.1 0.1 nope 1", None)],
)
def test_parse_running_tasks_reads_loadavg_like_go(text, expected):
    assert parse_running_tasks(text) == expected


NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 983581981  230255    0    0    0     0          0         0 983581981  230255    0    0    0     0       0          0
  eth0: 145397044    3603    1    0    0     0          0         0   233148    2148    2    0    0     0       0          0
vethab12: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0
docker0: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0
 pykt0:   11624     164    0    0    0     0          0       164     5254      49    0    4    0     0       0          0
"""


def test_parse_net_dev_counts_what_cadvisor_counts():
    assert parse_net_dev(NET_DEV) == [
        Interface(name="eth0", rx_bytes=145397044, rx_errors=1, tx_bytes=233148, tx_errors=2),
        Interface(name="pykt0", rx_bytes=11624, rx_errors=0, tx_bytes=5254, tx_errors=0),
    ]


ID = "b8cbc53b49e6040b7b19f6b87c76c9049209d6d805158049ce7ca8887d843163"
UID = "08892070-254d-4bd8-9d10-82b81aa5ef50"


@pytest.mark.parametrize(
    "name, expected",
    [
        pytest.param(ID, ID, id="cgroupfs-the-id"),
        pytest.param(f"cri-containerd-{ID}.scope", ID, id="systemd-scope"),
        pytest.param(f"docker-{ID}.scope", ID, id="docker-scope"),
        pytest.param("k8s.io", "k8s.io", id="other-folders-as-they-are"),
    ],
)
def test_cgroup_id_as_go_extract_id_from_cgroup_path(name, expected):
    assert cgroup_id(name) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        pytest.param(f"pod{UID}", UID, id="cgroupfs"),
        pytest.param(f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", UID, id="systemd"),
        pytest.param(f"kubepods-pod{UID.replace('-', '_')}.slice", UID, id="systemd-guaranteed"),
        pytest.param("kubepods-burstable.slice", None, id="qos-slice"),
        pytest.param("pod", None, id="just-pod"),
        pytest.param("pods.scope", None, id="not-a-pod"),
    ],
)
def test_cgroup_pod_uid(name, expected):
    assert cgroup_pod_uid(name) == expected


# --- readers on fake trees ------------------------------------------------------------------


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v1_tree(tmp_path, rel: str, *, cpu: str = "123456789\n", usage: str = "1048576\n",
            stat: str = MEMORY_STAT_V1, limit: str = "9223372036854771712\n", procs: str = "41\n42\n"):
    cpuacct, memory = tmp_path / "cpuacct", tmp_path / "memory"
    write(cpuacct / rel / "cpuacct.usage", cpu)
    write(memory / rel / "memory.usage_in_bytes", usage)
    write(memory / rel / "memory.stat", stat)
    write(memory / rel / "memory.limit_in_bytes", limit)
    write(memory / rel / "cgroup.procs", procs)
    return CgroupMounts(cpuacct=str(cpuacct), memory=str(memory))


def test_read_cgroup_v1(tmp_path):
    mounts = v1_tree(tmp_path, f"k8s.io/{ID}", usage="600000000\n", stat="total_inactive_file 100000000\ntotal_rss 5\n",
                     limit="1000000000\n")
    reading = read_cgroup(mounts, f"/k8s.io/{ID}", now=NOW)
    assert reading.cpu_usage_ns == 123456789
    assert reading.memory == Memory(time=NOW, available_bytes=500000000, usage_bytes=600000000,
                                    working_set_bytes=500000000, rss_bytes=5)
    assert (reading.process_count, reading.first_pid) == (2, 41)


def test_read_cgroup_root_takes_the_machine_memory_as_its_limit(tmp_path):
    mounts = v1_tree(tmp_path, "", usage="300\n", stat="total_inactive_file 100\n")
    reading = read_cgroup(mounts, "/", now=NOW, memory_limit=1000)
    assert reading.memory.available_bytes == 800


def test_read_cgroup_v2(tmp_path):
    folder = tmp_path / "unified" / "kubepods" / f"pod{UID}" / ID
    write(folder / "cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n")
    write(folder / "memory.current", "10000000\n")
    write(folder / "memory.stat", MEMORY_STAT_V2)
    write(folder / "memory.max", "max\n")
    write(folder / "cgroup.procs", "7\n")
    mounts = CgroupMounts(unified=str(tmp_path / "unified"))
    reading = read_cgroup(mounts, f"/kubepods/pod{UID}/{ID}", now=NOW)
    assert reading.cpu_usage_ns == 2_500_000
    assert reading.memory == Memory(time=NOW, usage_bytes=10_000_000, working_set_bytes=5_904_000, rss_bytes=1200128,
                                    page_faults=4242, major_page_faults=2)
    assert (reading.process_count, reading.first_pid) == (1, 7)


def test_read_cgroup_of_a_gone_cgroup_is_none(tmp_path):
    mounts = v1_tree(tmp_path, "k8s.io/other")
    assert read_cgroup(mounts, "/k8s.io/gone", now=NOW) is None
    assert read_cgroup(CgroupMounts(), "/", now=NOW) is None


def test_read_cgroup_leaves_out_what_a_file_lacks(tmp_path):
    mounts = v1_tree(tmp_path, "c", cpu="garbage\n", usage="300\n")
    (tmp_path / "memory" / "c" / "memory.stat").unlink()
    reading = read_cgroup(mounts, "/c", now=NOW, processes=False)
    assert reading.cpu_usage_ns is None and reading.process_count is None
    assert reading.memory == Memory(time=NOW, usage_bytes=300, working_set_bytes=300)


def test_a_cgroup_with_neither_cpu_nor_memory_readable_is_gone(tmp_path):
    mounts = v1_tree(tmp_path, "c", cpu="garbage\n")
    (tmp_path / "memory" / "c" / "memory.usage_in_bytes").unlink()
    assert read_cgroup(mounts, "/c", now=NOW) is None


def test_scan_finds_containers_and_pods_by_folder_name(tmp_path):
    memory = tmp_path / "memory"
    other = "f" * 64
    for rel in [f"k8s.io/{ID}", f"kubepods/burstable/pod{UID}/{other}", "system.slice/cron.service",
                f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{'1' * 8}_2.slice/"
                f"cri-containerd-{'a' * 64}.scope", "a/b/c/d/e/f/g/h/i/j/k/" + "e" * 64]:
        (memory / rel).mkdir(parents=True)
    mounts = CgroupMounts(memory=str(memory))
    wanted = {ID, other, "a" * 64, "e" * 64, "gone"}
    containers, pods = scan_cgroups(mounts, wanted, {UID, "11111111-2", "nope"})
    assert containers == {
        ID: f"/k8s.io/{ID}",
        other: f"/kubepods/burstable/pod{UID}/{other}",
        "a" * 64: f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{'1' * 8}_2.slice/"
                  f"cri-containerd-{'a' * 64}.scope",
    }  # e*64 is deeper than the scan goes (10 levels: a cgroupRoot puts kubepods lower)
    assert pods == {UID: f"/kubepods/burstable/pod{UID}",
                    "11111111-2": f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{'1' * 8}_2.slice"}


def test_scan_with_nothing_wanted_reads_nothing(tmp_path):
    assert scan_cgroups(CgroupMounts(memory=str(tmp_path / "missing")), {ID}, set()) == ({}, {})
    assert scan_cgroups(CgroupMounts(), {ID}, {UID}) == ({}, {})


# --- disk usage -----------------------------------------------------------------------------


def test_disk_usage_counts_blocks_and_inodes_once_without_following_symlinks(tmp_path):
    volume = tmp_path / "volume"
    (volume / "sub").mkdir(parents=True)
    (volume / "sub" / "data").write_bytes(b"x" * 10000)
    os.link(volume / "sub" / "data", volume / "hardlink")
    outside = tmp_path / "outside"
    outside.write_bytes(b"y" * 100000)
    os.symlink(outside, volume / "link")
    usage = disk_usage(str(volume), now=NOW)
    blocks = sum(os.lstat(p).st_blocks for p in [volume, volume / "sub", volume / "sub" / "data", volume / "link"])
    assert (usage.used_bytes, usage.inodes_used) == (blocks * 512, 4)
    assert usage.used_bytes < 100000  # the symlink's target is not counted
    assert disk_usage(str(tmp_path / "missing"), now=NOW) is None


def test_files_usage_counts_only_the_files_right_in_the_folder(tmp_path):
    (tmp_path / "0.log").write_bytes(b"a" * 5000)
    (tmp_path / "1.log").write_bytes(b"")
    (tmp_path / "container").mkdir()
    (tmp_path / "container" / "0.log").write_bytes(b"b" * 50000)
    usage = files_usage(str(tmp_path), now=NOW)
    assert usage.inodes_used == 2
    assert usage.used_bytes == os.lstat(tmp_path / "0.log").st_blocks * 512
    assert files_usage(str(tmp_path / "missing"), now=NOW) is None


def test_statfs_of_a_real_folder(tmp_path):
    fs = statfs(str(tmp_path), now=NOW)
    assert fs.capacity_bytes > 0 and fs.inodes_used == fs.inodes - fs.inodes_free
    assert statfs(str(tmp_path / "missing"), now=NOW) is None
