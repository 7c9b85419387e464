"""The /stats/summary builder: Go's Summary JSON from plain readings, the CPU rate cache,
which pods and containers are shown, the pod sums and ephemeral storage."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.pods import stats_summary
from pykubelet.pods.stats_summary import (
    ContainerStats,
    Cpu,
    CpuUsageCache,
    Fs,
    Interface,
    ListedContainer,
    ListedSandbox,
    Memory,
    Network,
    NodeStats,
    PodStats,
    Rlimit,
    Usage,
    VolumeStats,
    available_bytes,
    ephemeral_storage,
    pod_cpu,
    pod_memory,
    shown,
    with_usage,
    working_set,
)

def summary(node, pods, **kw) -> dict:
    """The summary as the JSON a client decodes."""
    return msgspec.json.decode(msgspec.json.encode(stats_summary.summary(node, pods, **kw)))


T = 1_700_000_000.0  # 2023-11-14T22:13:20Z
T_TEXT = "2023-11-14T22:13:20Z"


# --- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "usage, inactive_file, expected",
    [
        pytest.param(100, 30, 70, id="usage-less-inactive-file"),
        pytest.param(100, None, 100, id="no-inactive-file-the-whole-usage"),
        pytest.param(10, 30, 0, id="never-below-zero"),
        pytest.param(0, 0, 0, id="nothing"),
    ],
)
def test_working_set_is_usage_less_inactive_file(usage, inactive_file, expected):
    assert working_set(usage, inactive_file) == expected


@pytest.mark.parametrize(
    "limit, ws, expected",
    [
        pytest.param(1000, 300, 700, id="limit-less-working-set"),
        pytest.param(None, 300, None, id="no-limit-no-value"),
        pytest.param(9223372036854771712, 300, None, id="v1-unlimited-sentinel"),
        pytest.param((1 << 62) + 1, 300, None, id="just-above-2-to-62-is-unlimited"),
        pytest.param(1 << 62, 0, 1 << 62, id="2-to-62-is-a-limit"),
        pytest.param(1000, None, None, id="no-working-set"),
        pytest.param(100, 300, 0, id="over-the-limit-is-zero"),
    ],
)
def test_available_bytes(limit, ws, expected):
    assert available_bytes(limit, ws) == expected


# --- CPU rates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "readings, expected",
    [
        pytest.param([("c", 1_000, T)], [None], id="first-reading-has-no-rate"),
        pytest.param([("c", 0, T), ("c", 1_000_000_000, T + 2)], [None, 500_000_000], id="half-a-core-over-2s"),
        pytest.param([("c", 0, T), ("c", 2_000_000_000, T + 1)], [None, 2_000_000_000], id="two-cores"),
        pytest.param([("c", 0, T), ("c", 100, T + 10), ("c", 900, T + 10.5)], [None, 10, 10],
                     id="within-the-min-window-the-kept-rate"),
        pytest.param([("c", 0, T), ("c", 100, T + 10), ("c", 900, T + 10.5), ("c", 1_100, T + 11)],
                     [None, 10, 10, 1_000], id="the-older-reading-stays-the-anchor"),
        pytest.param([("c", 0, T), ("c", 100, T + 10), ("c", 100, T + 10)], [None, 10, 10],
                     id="the-same-sample-again-the-same-rate"),
        pytest.param([("c", 5_000, T), ("c", 10, T + 5), ("c", 1_010, T + 10)], [None, None, 200],
                     id="a-counter-gone-back-starts-over"),
        pytest.param([("a", 0, T), ("b", 0, T + 1), ("a", 1_000, T + 2), ("b", 4_000, T + 3)],
                     [None, None, 500, 2_000], id="keys-are-independent"),
    ],
)
def test_cpu_usage_cache_rates(readings, expected):
    cache = CpuUsageCache()
    assert [cache.rate(key, usage, at) for key, usage, at in readings] == expected


def test_readings_older_than_ten_minutes_are_forgotten():
    cache = CpuUsageCache()
    cache.rate("old", 0, T)
    cache.rate("new", 0, T + 300)
    cache.forget_older_than(T + 601)
    assert len(cache) == 1
    assert cache.rate("old", 1_000, T + 602) is None  # starts over
    assert cache.rate("new", 302_000, T + 602) == 1_000


def test_with_rate_fills_usage_nano_cores_and_passes_unknowns():
    cache = CpuUsageCache()
    assert cache.with_rate("c", None) is None
    bare = Cpu(time=T)
    assert cache.with_rate("c", bare) == bare
    assert cache.with_rate("c", Cpu(time=T, usage_core_nano_seconds=0, usage_nano_cores=7)).usage_nano_cores is None
    second = cache.with_rate("c", Cpu(time=T + 2, usage_core_nano_seconds=4_000_000_000))
    assert second == Cpu(time=T + 2, usage_core_nano_seconds=4_000_000_000, usage_nano_cores=2_000_000_000)


# --- pod sums and storage -------------------------------------------------------------------


def container(name: str = "app", **kw) -> ContainerStats:
    return ContainerStats(name=name, start_time=T, **kw)


def test_pod_cpu_and_memory_sum_what_the_containers_know():
    a = container("a", cpu=Cpu(time=T, usage_core_nano_seconds=10, usage_nano_cores=3),
                  memory=Memory(time=T, usage_bytes=100, working_set_bytes=80, rss_bytes=5))
    b = container("b", cpu=Cpu(time=T + 1, usage_core_nano_seconds=20),
                  memory=Memory(time=T + 1, usage_bytes=50, working_set_bytes=40, page_faults=9))
    assert pod_cpu([a, b]) == Cpu(time=T + 1, usage_core_nano_seconds=30, usage_nano_cores=3)
    assert pod_memory([a, b]) == Memory(time=T + 1, usage_bytes=150, working_set_bytes=120, rss_bytes=5, page_faults=9)


def test_pod_sums_are_none_when_no_container_has_a_reading():
    assert pod_cpu([container()]) is None
    assert pod_memory([container()]) is None
    assert pod_cpu([]) is None


ROOT_FS = Fs(time=T, available_bytes=60, capacity_bytes=100, used_bytes=40, inodes_free=6, inodes=10, inodes_used=4)


@pytest.mark.parametrize(
    "pod, used, inodes_used",
    [
        pytest.param(dict(), None, None, id="nothing-used-known"),
        pytest.param(dict(containers=(container(rootfs=Fs(time=T, used_bytes=7, inodes_used=2),
                                                logs=Fs(time=T, used_bytes=3, inodes_used=1)),)),
                     10, 3, id="writable-layer-and-logs"),
        pytest.param(dict(containers=(container(logs=Fs(time=T, used_bytes=3, inodes_used=1)),)),
                     None, None, id="logs-count-only-with-a-rootfs-as-in-go"),
        pytest.param(dict(volumes=(VolumeStats(name="v", fs=Fs(time=T, used_bytes=100, inodes_used=5)),),
                          pod_logs=Usage(time=T, used_bytes=4, inodes_used=1),
                          etc_hosts=Usage(time=T, used_bytes=4096, inodes_used=1)),
                     4200, 7, id="volumes-pod-logs-etc-hosts"),
    ],
)
def test_ephemeral_storage_sums_as_go_calc_ephemeral_storage(pod, used, inodes_used):
    stats = PodStats(name="p", namespace="ns", uid="u", start_time=T, root_fs=ROOT_FS, **pod)
    fs = ephemeral_storage(stats)
    assert (fs.used_bytes, fs.inodes_used) == (used, inodes_used)
    assert (fs.capacity_bytes, fs.available_bytes, fs.inodes, fs.inodes_free) == (100, 60, 10, 6)


def test_no_root_fs_no_ephemeral_storage():
    assert ephemeral_storage(PodStats(name="p", namespace="ns", uid="u", start_time=T)) is None


def test_with_usage_puts_the_files_usage_on_the_filesystems_sizes():
    usage = Usage(time=T + 5, used_bytes=12, inodes_used=2)
    assert with_usage(ROOT_FS, usage) == Fs(time=T + 5, available_bytes=60, capacity_bytes=100, used_bytes=12,
                                             inodes_free=6, inodes=10, inodes_used=2)
    assert with_usage(ROOT_FS, None) == ROOT_FS
    assert with_usage(None, usage) == Fs(time=T + 5, used_bytes=12, inodes_used=2)
    assert with_usage(None, None) is None


# --- which pods -----------------------------------------------------------------------------


def sandbox(sid: str, name: str = "web", *, ready: bool = True, created: float = T, ns: str = "default") -> ListedSandbox:
    return ListedSandbox(id=sid, name=name, namespace=ns, uid=f"uid-{sid}", created_at=created, ready=ready)


def running(cid: str, sid: str, name: str = "app", *, up: bool = True) -> ListedContainer:
    return ListedContainer(id=cid, sandbox_id=sid, name=name, created_at=T, running=up)


def ids(pods) -> list[tuple[str, list[str]]]:
    return [(s.id, [c.id for c in cs]) for s, cs in pods]


@pytest.mark.parametrize(
    "sandboxes, containers, expected",
    [
        pytest.param([sandbox("s1")], [running("c1", "s1")], [("s1", ["c1"])], id="one-pod"),
        pytest.param([sandbox("s1")], [running("c1", "s1", up=False)], [], id="no-running-container-no-pod"),
        pytest.param([sandbox("s1")], [running("c1", "s1"), running("c2", "s1", "side", up=False)],
                     [("s1", ["c1"])], id="exited-containers-left-out"),
        pytest.param([sandbox("old", ready=False, created=T), sandbox("new", created=T + 1)],
                     [running("c1", "old"), running("c2", "new")], [("new", ["c2"])],
                     id="a-recreated-pod-shows-its-ready-sandbox"),
        pytest.param([sandbox("a", ready=False, created=T), sandbox("b", ready=False, created=T + 1)],
                     [running("c1", "a"), running("c2", "b")], [("b", ["c2"])],
                     id="none-ready-the-newest"),
        pytest.param([sandbox("s1", "web"), sandbox("s2", "web", ns="other")],
                     [running("c1", "s1"), running("c2", "s2")], [("s1", ["c1"]), ("s2", ["c2"])],
                     id="same-name-other-namespace-is-another-pod"),
        pytest.param([sandbox("s1", "zeta"), sandbox("s2", "alpha")],
                     [running("c1", "s1", "b"), running("c2", "s1", "a"), running("c3", "s2")],
                     [("s2", ["c3"]), ("s1", ["c2", "c1"])], id="sorted-by-pod-then-container-name"),
        pytest.param([sandbox("s1")], [running("c1", "gone")], [], id="container-of-an-unknown-sandbox"),
    ],
)
def test_shown_pods_follow_go_remove_terminated(sandboxes, containers, expected):
    assert ids(shown(sandboxes, containers)) == expected


# --- the JSON -------------------------------------------------------------------------------


NODE = NodeStats(
    name="node1", start_time=T - 3600,
    cpu=Cpu(time=T, usage_core_nano_seconds=5_000, usage_nano_cores=20),
    memory=Memory(time=T, available_bytes=900, usage_bytes=200, working_set_bytes=100, rss_bytes=50,
                  page_faults=7, major_page_faults=1),
    network=Network(time=T, interfaces=(Interface(name="eth0", rx_bytes=1, rx_errors=0, tx_bytes=2, tx_errors=0),)),
    fs=ROOT_FS,
    image_fs=Fs(time=T, available_bytes=60, capacity_bytes=100, used_bytes=30, inodes_free=6, inodes=10,
                inodes_used=3),
    rlimit=Rlimit(time=T, max_pid=32768, cur_proc=150),
)
POD = PodStats(
    name="web", namespace="default", uid="u1", start_time=T - 60,
    containers=(container(cpu=Cpu(time=T, usage_core_nano_seconds=1_000),
                          memory=Memory(time=T, working_set_bytes=64),
                          rootfs=Fs(time=T, used_bytes=8, inodes_used=2)),),
    volumes=(VolumeStats(name="data", fs=Fs(time=T, used_bytes=4096, inodes_used=1)),),
    process_count=3, root_fs=ROOT_FS,
)


def test_full_summary_json_has_go_field_names_and_leaves_unknowns_out():
    body = summary(NODE, [POD])
    assert body["node"] == {
        "nodeName": "node1",
        "startTime": "2023-11-14T21:13:20Z",
        "cpu": {"time": T_TEXT, "usageNanoCores": 20, "usageCoreNanoSeconds": 5_000},
        "memory": {"time": T_TEXT, "availableBytes": 900, "usageBytes": 200, "workingSetBytes": 100,
                   "rssBytes": 50, "pageFaults": 7, "majorPageFaults": 1},
        "network": {"time": T_TEXT, "name": "eth0", "rxBytes": 1, "rxErrors": 0, "txBytes": 2, "txErrors": 0,
                    "interfaces": [{"name": "eth0", "rxBytes": 1, "rxErrors": 0, "txBytes": 2, "txErrors": 0}]},
        "fs": {"time": T_TEXT, "availableBytes": 60, "capacityBytes": 100, "usedBytes": 40, "inodesFree": 6,
               "inodes": 10, "inodesUsed": 4},
        "runtime": {"imageFs": {"time": T_TEXT, "availableBytes": 60, "capacityBytes": 100, "usedBytes": 30,
                                "inodesFree": 6, "inodes": 10, "inodesUsed": 3}},
        "rlimit": {"time": T_TEXT, "maxpid": 32768, "curproc": 150},
    }
    assert body["pods"] == [{
        "podRef": {"name": "web", "namespace": "default", "uid": "u1"},
        "startTime": "2023-11-14T22:12:20Z",
        "containers": [{
            "name": "app", "startTime": T_TEXT,
            "cpu": {"time": T_TEXT, "usageCoreNanoSeconds": 1_000},
            "memory": {"time": T_TEXT, "workingSetBytes": 64},
            "rootfs": {"time": T_TEXT, "usedBytes": 8, "inodesUsed": 2},
        }],
        "cpu": {"time": T_TEXT, "usageCoreNanoSeconds": 1_000},
        "memory": {"time": T_TEXT, "workingSetBytes": 64},
        "volume": [{"time": T_TEXT, "usedBytes": 4096, "inodesUsed": 1, "name": "data"}],
        "ephemeral-storage": {"time": T_TEXT, "availableBytes": 60, "capacityBytes": 100, "usedBytes": 4104,
                              "inodesFree": 6, "inodes": 10, "inodesUsed": 3},
        "process_stats": {"process_count": 3},
    }]


def test_only_cpu_and_memory_keeps_references_times_cpu_and_memory():
    body = summary(NODE, [POD], only_cpu_and_memory=True)
    assert set(body["node"]) == {"nodeName", "startTime", "cpu", "memory"}
    pod = body["pods"][0]
    assert set(pod) == {"podRef", "startTime", "containers", "cpu", "memory"}
    assert set(pod["containers"][0]) == {"name", "startTime", "cpu", "memory"}


def test_pod_level_readings_win_over_the_containers_sum():
    pod = PodStats(name="p", namespace="ns", uid="u", start_time=T, containers=POD.containers,
                   cpu=Cpu(time=T, usage_core_nano_seconds=9_999), memory=Memory(time=T, usage_bytes=1))
    out = summary(NODE, [pod])["pods"][0]
    assert out["cpu"]["usageCoreNanoSeconds"] == 9_999
    assert out["memory"] == {"time": T_TEXT, "usageBytes": 1}


def test_a_node_with_nothing_known_has_only_its_name_and_start_time():
    body = summary(NodeStats(name="n", start_time=T), [])
    assert body == {"node": {"nodeName": "n", "startTime": T_TEXT}, "pods": []}


def test_network_without_eth0_has_an_empty_inline_name_as_go_serializes_it():
    network = Network(time=T, interfaces=(Interface(name="ens3", rx_bytes=5),))
    out = summary(NodeStats(name="n", start_time=T, network=network), [])["node"]["network"]
    assert out == {"time": T_TEXT, "name": "", "interfaces": [{"name": "ens3", "rxBytes": 5}]}


def test_a_container_without_readings_keeps_name_and_start_time():
    pod = PodStats(name="p", namespace="ns", uid="u", start_time=T, containers=(container("bare"),))
    out = summary(NodeStats(name="n", start_time=T), [pod])["pods"][0]
    assert out == {"podRef": {"name": "p", "namespace": "ns", "uid": "u"}, "startTime": T_TEXT,
                   "containers": [{"name": "bare", "startTime": T_TEXT}]}


def test_times_are_rfc3339_seconds_in_utc():
    out = summary(NodeStats(name="n", start_time=T + 0.999), [])
    assert out["node"]["startTime"] == T_TEXT
