"""The log rotation actor on MockClock against a fake CRI over real files: when rounds
run, what a round rotates, compresses and removes, a failed reopen, workers, cleanup,
and that it stops and restarts with nothing but the files."""

from __future__ import annotations

import gzip
import logging
import os
import time
from datetime import datetime
from pathlib import Path

import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.log_rotation import (
    LogRotationMetrics,
    LogRotationSettings,
    LogRotator,
    compress_in_thread,
    compress_log,
    log_rotation_actor,
)
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.pods.labels import (
    CONTAINER_NAME_LABEL,
    MANAGED_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION,
)
from pykubelet.ports.cri import CriCallError, RuntimeUnavailable, RuntimeVersion
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

WALL_START = 1_700_000_000.0
LINE = b"2024-01-01T00:00:00.000000000Z stdout F " + b"x" * 60 + b"\n"  # 100 bytes


def stamp(trio_seconds: float) -> str:
    return datetime.fromtimestamp(WALL_START + trio_seconds).strftime("%Y%m%d-%H%M%S")


class FakeCri:
    """ListContainers, ContainerStatus and ReopenContainerLog over real log files: a
    container "writes" with write(); a reopen creates the log file anew, as containerd."""

    endpoint = "unix:///fake.sock"

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.containers: dict[str, api_pb2.Container] = {}
        self.paths: dict[str, Path] = {}
        self.reopened: list[tuple[str, float]] = []
        self.failing_reopen: set[str] = set()
        self.fail_next_list = False
        self.lists = 0
        self.status_delay = 0.0
        self.in_status = 0
        self.most_in_status = 0
        self.status_calls: list[str] = []

    def container(self, cid: str, *, pod: str = "web", name: str = "app", restart_count: int = 0,
                  state: int = api_pb2.CONTAINER_RUNNING, managed: bool = True) -> Path:  # fmt: skip
        labels = {POD_NAMESPACE_LABEL: "default", POD_NAME_LABEL: pod, POD_UID_LABEL: f"uid-{pod}",
                  CONTAINER_NAME_LABEL: name, **({MANAGED_LABEL: "true"} if managed else {})}  # fmt: skip
        self.containers[cid] = api_pb2.Container(
            id=cid, metadata=api_pb2.ContainerMetadata(name=name, attempt=restart_count), state=state,
            labels=labels, annotations={RESTART_COUNT_ANNOTATION: str(restart_count)},
        )
        path = self.logs / f"default_{pod}_uid-{pod}" / name / f"{restart_count}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        self.paths[cid] = path
        return path

    def write(self, cid: str, lines: int) -> None:
        with open(self.paths[cid], "ab") as log:
            log.write(LINE * lines)

    async def list_containers(self, filter=None):
        self.lists += 1
        if self.fail_next_list:
            self.fail_next_list = False
            raise RuntimeUnavailable(endpoint=self.endpoint, operation="list_containers", detail="connect: refused")
        found = list(self.containers.values())
        if filter is not None:
            if filter.HasField("state"):
                found = [c for c in found if c.state == filter.state.state]
            found = [c for c in found if all(c.labels.get(k) == v for k, v in filter.label_selector.items())]
        return found

    async def container_status(self, cid, verbose=False):
        self.status_calls.append(cid)
        self.in_status += 1
        self.most_in_status = max(self.most_in_status, self.in_status)
        try:
            await trio.sleep(self.status_delay)
        finally:
            self.in_status -= 1
        c = self.containers[cid]
        return api_pb2.ContainerStatusResponse(status=api_pb2.ContainerStatus(
            id=cid, state=c.state, labels=c.labels, log_path=str(self.paths[cid]),
        ))

    async def reopen_container_log(self, cid):
        if cid in self.failing_reopen:
            raise CriCallError(endpoint=self.endpoint, operation="reopen_container_log", code="UNKNOWN",
                               detail="container is not running")  # fmt: skip
        self.reopened.append((cid, trio.current_time()))
        self.paths[cid].touch()


async def compress_inline(path: str) -> None:
    # On the autojump clock a worker thread would let the clock jump while it runs; the
    # thread itself is tested below on the real clock, and against containerd.
    compress_log(path)


class Harness:
    def __init__(self, tmp_path: Path, settings: LogRotationSettings) -> None:
        self.logs = tmp_path / "pod-logs"
        self.logs.mkdir()
        self.cri = FakeCri(self.logs)
        self.registry = CollectorRegistry()
        self.handle = RuntimeHandle(self.cri.endpoint)
        self.handle.attach(self.cri, RuntimeVersion("fake", "1", "v1", "0.1.0"))
        self.metrics = LogRotationMetrics(self.registry)
        self.settings = settings
        self.spec = ChildSpec("log-rotation", log_rotation_actor(
            settings, runtime=self.handle, metrics=self.metrics, pod_logs_dir=str(self.logs),
            wall_clock=lambda: WALL_START + trio.current_time(), compress=compress_inline,
        ))

    def rotator(self, compress=compress_inline) -> LogRotator:
        return LogRotator(self.settings, runtime=self.handle, metrics=self.metrics, pod_logs_dir=str(self.logs),
                          wall_clock=lambda: WALL_START + trio.current_time(), compress=compress)  # fmt: skip

    def metric(self, name: str) -> float:
        return self.registry.get_sample_value(name) or 0.0


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_a_log_at_max_size_is_rotated_and_reopened_every_interval(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=1000, monitor_interval=10))
    log = h.cri.container("c1")
    h.cri.write("c1", 10)  # 1000 bytes: at the limit
    async with running(h.spec):
        await trio.sleep(1)
        assert files(log.parent) == ["0.log", f"0.log.{stamp(0)}"]
        assert log.stat().st_size == 0  # the runtime's new file
        assert (log.parent / f"0.log.{stamp(0)}").read_bytes() == LINE * 10
        assert h.cri.reopened == [("c1", 0)]

        h.cri.write("c1", 9)  # below the limit at t=10: stays
        await trio.sleep(10)
        assert h.cri.reopened == [("c1", 0)]
        h.cri.write("c1", 1)
        await trio.sleep(10)  # t=20
        assert h.cri.reopened == [("c1", 0), ("c1", 20)]
        assert files(log.parent) == ["0.log", f"0.log.{stamp(0)}.gz", f"0.log.{stamp(20)}"]
        assert h.metric("pykubelet_container_log_rotations_total") == 2


async def test_a_running_containers_log_path_is_read_once_not_each_round(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=1000, monitor_interval=10))
    h.cri.container("c1")
    async with running(h.spec):
        await trio.sleep(35)  # rounds at 0, 10, 20, 30
        assert h.cri.status_calls == ["c1"]
        second = h.cri.container("c2", pod="db")
        h.cri.write("c2", 10)
        await trio.sleep(10)  # t=40: the new container's path is read, and its log rotated
        assert h.cri.status_calls == ["c1", "c2"]
        assert h.cri.reopened == [("c2", 40)] and files(second.parent) == ["0.log", f"0.log.{stamp(40)}"]
        del h.cri.containers["c1"]  # gone: forgotten, and a container of that id later is read anew
        await trio.sleep(10)
        h.cri.container("c1", name="other")
        await trio.sleep(10)
        assert h.cri.status_calls == ["c1", "c2", "c1"]


async def test_older_rotated_files_are_gzipped_and_at_most_max_files_exist(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=100, max_files=3, monitor_interval=10))
    log = h.cri.container("c1")
    async with running(h.spec):
        for round in range(5):
            h.cri.write("c1", round + 1)  # each rotated file tells which round it was
            await trio.sleep(10)
            assert len(files(log.parent)) == min(round + 2, 3)
        # t=40 rotated last; t=30 compressed; t=20 and older removed.
        assert files(log.parent) == ["0.log", f"0.log.{stamp(30)}.gz", f"0.log.{stamp(40)}"]
        assert gzip.decompress((log.parent / f"0.log.{stamp(30)}.gz").read_bytes()) == LINE * 4
        assert (log.parent / f"0.log.{stamp(40)}").read_bytes() == LINE * 5


async def test_a_failed_reopen_renames_the_log_back_is_logged_once_and_spares_the_others(
    autojump_clock, tmp_path, caplog
):
    h = Harness(tmp_path, LogRotationSettings(max_size=100, monitor_interval=10))
    stuck = h.cri.container("c1", pod="stuck")
    fine = h.cri.container("c2", pod="fine")
    h.cri.failing_reopen.add("c1")
    h.cri.write("c1", 2)
    h.cri.write("c2", 2)
    with caplog.at_level(logging.WARNING, logger="pykubelet.log_rotation"):
        async with running(h.spec) as tree:
            await trio.sleep(21)  # three rounds
            assert files(stuck.parent) == ["0.log"] and stuck.read_bytes() == LINE * 2
            assert files(fine.parent) == ["0.log", f"0.log.{stamp(0)}"]
            warnings = [r for r in caplog.records if "cannot rotate the log of container c1" in r.getMessage()]
            assert len(warnings) == 1 and "container is not running" in warnings[0].getMessage()
            assert warnings[0].container == "app" and warnings[0].pod_uid == "uid-stuck"
            assert h.metric("pykubelet_container_log_rotation_errors_total") == 3

            h.cri.failing_reopen.clear()
            await trio.sleep(10)
            assert files(stuck.parent) == ["0.log", f"0.log.{stamp(30)}"]
            assert tree.snapshot().children[0].restarts == 0


async def test_a_missing_log_is_reopened_by_the_runtime(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=100, monitor_interval=10))
    log = h.cri.container("c1")
    log.unlink()
    await h.rotator().rotate_logs()
    assert log.exists() and h.cri.reopened == [("c1", 0)]


async def test_only_running_managed_containers_are_rotated(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=100))
    exited = h.cri.container("c1", pod="done", state=api_pb2.CONTAINER_EXITED)
    foreign = h.cri.container("c2", pod="theirs", managed=False)
    for cid in ("c1", "c2"):
        h.cri.write(cid, 5)
    await h.rotator().rotate_logs()
    assert files(exited.parent) == ["0.log"] and files(foreign.parent) == ["0.log"]
    assert h.cri.reopened == []


async def test_max_workers_containers_are_handled_at_a_time(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=100, max_workers=2))
    for n in range(5):
        h.cri.container(f"c{n}", pod=f"p{n}")
        h.cri.write(f"c{n}", 1)
    h.cri.status_delay = 1.0
    started = trio.current_time()
    await h.rotator().rotate_logs()
    assert h.cri.most_in_status == 2
    assert trio.current_time() - started == 3.0  # five containers, two at a time
    assert sorted(cid for cid, _ in h.cri.reopened) == ["c0", "c1", "c2", "c3", "c4"]


async def test_leftovers_and_rotated_files_of_gone_containers_are_cleaned_up(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=10**6))
    log = h.cri.container("c1", restart_count=1)  # attempt 0 of "app" is gone from the runtime
    d = log.parent
    for name in ["0.log", "0.log.20240101-000001.gz", "0.log.20240101-000002",
                 "1.log.20240101-000003.tmp", "1.log.20240101-000004", "1.log.20240101-000004.gz",
                 "1.log.20240101-000005"]:  # fmt: skip
        (d / name).write_bytes(b"x")
    gone = h.logs / "default_old_uid-old" / "app"  # a pod whose containers are all gone
    gone.mkdir(parents=True)
    for name in ["0.log", "0.log.20240101-000001.gz", "notes.txt"]:
        (gone / name).write_bytes(b"x")
    exited = h.cri.container("c9", pod="done", state=api_pb2.CONTAINER_EXITED)
    (exited.parent / "0.log.20240101-000001.gz").write_bytes(b"x")  # exists: kept

    await h.rotator().rotate_logs()
    assert files(d) == ["0.log", "1.log", "1.log.20240101-000004.gz", "1.log.20240101-000005"]
    assert files(gone) == ["0.log", "notes.txt"]
    assert files(exited.parent) == ["0.log", "0.log.20240101-000001.gz"]


async def test_a_failing_runtime_is_logged_once_and_retried_next_round(autojump_clock, tmp_path, caplog):
    h = Harness(tmp_path, LogRotationSettings(max_size=100, monitor_interval=10))
    log = h.cri.container("c1")
    h.cri.write("c1", 1)
    h.cri.fail_next_list = True
    async with running(h.spec) as tree:
        await trio.sleep(1)
        assert files(log.parent) == ["0.log"]
        assert "container log rotation failed" in caplog.text
        await trio.sleep(10)
        assert files(log.parent) == ["0.log", f"0.log.{stamp(10)}"]
        assert tree.snapshot().children[0].restarts == 0


async def test_a_restarted_actor_carries_on_from_the_files(autojump_clock, tmp_path):
    h = Harness(tmp_path, LogRotationSettings(max_size=100, max_files=3, monitor_interval=10))
    log = h.cri.container("c1")
    async with running(h.spec) as tree:
        h.cri.write("c1", 1)
        await trio.sleep(5)
        await tree.restart_child("log-rotation")
        h.cri.write("c1", 2)
        await trio.sleep(1)  # the new incarnation's first round, at once
        assert files(log.parent) == ["0.log", f"0.log.{stamp(0)}.gz", f"0.log.{stamp(5)}"]
        assert tree.snapshot().children[0].restarts == 1


async def test_a_negative_max_size_turns_rotation_off(autojump_clock, tmp_path, caplog):
    h = Harness(tmp_path, LogRotationSettings(max_size=-1))
    log = h.cri.container("c1")
    h.cri.write("c1", 100)
    with caplog.at_level(logging.INFO, logger="pykubelet.log_rotation"):
        async with running(h.spec):
            await trio.sleep(60)
    assert files(log.parent) == ["0.log"] and h.cri.lists == 0
    assert "container log rotation disabled" in caplog.text


def test_compress_log_writes_gzip_through_a_tmp_file_and_removes_the_original(tmp_path):
    rotated = tmp_path / "0.log.20240101-000001"
    rotated.write_bytes(LINE * 50_000)  # 5 MB: several chunks
    rotated.chmod(0o640)
    compress_log(str(rotated))
    assert files(tmp_path) == ["0.log.20240101-000001.gz"]
    compressed = tmp_path / "0.log.20240101-000001.gz"
    assert gzip.decompress(compressed.read_bytes()) == LINE * 50_000
    assert compressed.stat().st_mode & 0o777 == 0o640


def test_a_compression_cancelled_midway_leaves_the_original_and_no_tmp(tmp_path):
    rotated = tmp_path / "0.log.20240101-000001"
    rotated.write_bytes(LINE * 50_000)
    checks = []

    def cancelled_at_the_second_chunk() -> None:
        checks.append(1)
        if len(checks) == 2:
            raise trio.Cancelled._create()

    with pytest.raises(trio.Cancelled):
        compress_log(str(rotated), cancelled_at_the_second_chunk)
    assert files(tmp_path) == ["0.log.20240101-000001"]
    assert rotated.read_bytes() == LINE * 50_000


async def test_compression_runs_in_a_thread_while_the_event_loop_goes_on(tmp_path):
    # The real clock: random bytes, which gzip slowly, take a good part of a second.
    rotated = tmp_path / "0.log.20240101-000001"
    data = os.urandom(16 << 20)
    rotated.write_bytes(data)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.005)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        started = time.perf_counter()
        await compress_in_thread(str(rotated))
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    assert elapsed > 0.05, "too quick to tell"
    assert ticks >= elapsed / 0.005 / 4  # the loop ran all along, not once at the end
    assert files(tmp_path) == ["0.log.20240101-000001.gz"]
    assert gzip.decompress((tmp_path / "0.log.20240101-000001.gz").read_bytes()) == data


async def test_a_cancelled_compression_stops_within_a_chunk_and_leaves_no_tmp(tmp_path):
    rotated = tmp_path / "0.log.20240101-000001"
    data = os.urandom(32 << 20)
    rotated.write_bytes(data)
    with trio.move_on_after(0.05) as scope:
        await compress_in_thread(str(rotated))
    assert scope.cancelled_caught
    assert files(tmp_path) == ["0.log.20240101-000001"]
    assert rotated.read_bytes() == data


def test_settings_refuse_what_go_refuses():
    with pytest.raises(ValueError, match="containerLogMaxFiles 1: must be 2 or more"):
        LogRotationSettings(max_files=1)
    with pytest.raises(ValueError, match="containerLogMaxWorkers 0: must be 1 or more"):
        LogRotationSettings(max_workers=0)
    with pytest.raises(ValueError, match="containerLogMonitorInterval"):
        LogRotationSettings(monitor_interval=0)


def test_the_daemon_takes_its_settings_from_the_kubelet_configuration(tmp_path):
    from pykubelet.cli.run import daemon_settings
    from pykubelet.messages.config import KubeletConfiguration, KubeletFlags
    from pykubelet.messages.duration import Duration

    config = KubeletConfiguration(
        container_runtime_endpoint="unix:///run/x.sock", container_log_max_size="2Ki", container_log_max_files=3,
        container_log_monitor_interval=Duration(4), container_log_max_workers=2,
    )
    settings = daemon_settings(KubeletFlags(root_dir=str(tmp_path)), config, frozenset({"containerRuntimeEndpoint"}))
    assert settings.log_rotation == LogRotationSettings(max_size=2048, max_files=3, monitor_interval=4, max_workers=2)
    assert daemon_settings(KubeletFlags(root_dir=str(tmp_path)), KubeletConfiguration(
        container_runtime_endpoint="unix:///run/x.sock"), frozenset({"containerRuntimeEndpoint"}),
    ).log_rotation == LogRotationSettings()
