"""Container log rotation against a private containerd: a chatty container's log is
rotated, containerd writes on into the new log after ReopenContainerLog, older rotated
files are gzipped, no line is lost, and never more than containerLogMaxFiles files exist."""

from __future__ import annotations

import gzip
import itertools
import re
import uuid
from pathlib import Path

import msgspec
import pytest
import trio
from cri_api.v1 import api_pb2
from prometheus_client import CollectorRegistry

from pykubelet.actors.log_rotation import LogRotationMetrics, LogRotationSettings, LogRotator
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.messages.pod import Pod
from pykubelet.pods.runtime_config import container_config, sandbox_config
from pykubelet.ports.cri import CriCallError, CriClient
from tests.support.containerd import BUSYBOX_IMAGE

# About 80 bytes a line in the CRI format, a line every few milliseconds.
CHATTY = ["sh", "-c", "trap 'exit 0' TERM; i=0; while true; do echo \"line $i of a chatty container\"; "
          "i=$((i+1)); sleep 0.005; done"]  # fmt: skip
EXITS_AT_ONCE = ["sh", "-c", "echo bye"]
MAX_SIZE = 2048
MAX_FILES = 3
LINE_NUMBER = re.compile(rb"^\S+ stdout [FP] line (\d+) of a chatty container$")


def make_pod(name: str, command: list[str]) -> Pod:
    return msgspec.convert(
        {
            "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4())},
            "spec": {
                "hostNetwork": True,
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "command": command}],
            },
        },
        Pod,
    )


async def start(cri: CriClient, pod: Pod, logs: Path) -> tuple[str, Path]:
    """Sandbox and container made as the pod workers make them; the container's id and log."""
    sandbox = sandbox_config(pod, attempt=0, pod_logs_dir=str(logs))
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    config = container_config(pod, pod.spec.containers[0], image_ref=BUSYBOX_IMAGE, restart_count=0, volume_paths={})
    cid = await cri.create_container(sandbox_id, config, sandbox)
    await cri.start_container(cid)
    return cid, Path((await cri.container_status(cid)).status.log_path)


async def wait_for_size(path: Path, size: int) -> None:
    with trio.fail_after(10):
        while not path.exists() or path.stat().st_size < size:
            await trio.sleep(0.02)


def line_numbers(data: bytes) -> list[int]:
    numbers = []
    for line in data.splitlines():
        match = LINE_NUMBER.match(line)
        assert match, f"not a line of the chatty container: {line!r}"
        numbers.append(int(match[1]))
    return numbers


@pytest.mark.containerd
async def test_a_chatty_containers_log_is_rotated_compressed_and_pruned(cri, containerd, tmp_path):
    logs = tmp_path / "pod-logs"
    cid, log = await start(cri, make_pod("chatty", CHATTY), logs)
    handle = RuntimeHandle(containerd.endpoint)
    handle.attach(cri, cri.runtime_version)
    registry = CollectorRegistry()
    seconds = itertools.count(1_700_000_000)  # a new second for every rotation
    rotator = LogRotator(
        LogRotationSettings(max_size=MAX_SIZE, max_files=MAX_FILES), runtime=handle,
        metrics=LogRotationMetrics(registry), pod_logs_dir=str(logs), wall_clock=lambda: next(seconds),
    )

    for _ in range(5):
        await wait_for_size(log, MAX_SIZE)
        await rotator.rotate_logs()
        names = sorted(p.name for p in log.parent.iterdir())
        assert len(names) <= MAX_FILES, names
        assert "0.log" in names  # reopened by containerd at once
        assert not [n for n in names if n.endswith(".tmp")]
    assert registry.get_sample_value("pykubelet_container_log_rotations_total") == 5
    assert (await cri.container_status(cid)).status.state == api_pb2.CONTAINER_RUNNING

    rotated = sorted(p for p in log.parent.iterdir() if p != log)
    assert [p.name.endswith(".gz") for p in rotated] == [True, False]  # only the newest stays plain
    older, newest = gzip.decompress(rotated[0].read_bytes()), rotated[1].read_bytes()
    assert len(older) >= MAX_SIZE and len(newest) >= MAX_SIZE
    await wait_for_size(log, 200)  # containerd writes on into the new 0.log
    current = log.read_bytes()
    # Not a line lost or doubled across two rotations: containerd wrote to the renamed
    # file until ReopenContainerLog, then to the new one.
    numbers = line_numbers(older) + line_numbers(newest) + line_numbers(current[: current.rfind(b"\n") + 1])
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


@pytest.mark.containerd
async def test_containerd_refuses_to_reopen_the_log_of_an_exited_container(cri, tmp_path):
    # The failure the rotation answers by renaming the log back (the unit tests' fake).
    cid, _ = await start(cri, make_pod("done", EXITS_AT_ONCE), tmp_path / "pod-logs")
    with trio.fail_after(10):
        while (await cri.container_status(cid)).status.state != api_pb2.CONTAINER_EXITED:
            await trio.sleep(0.05)
    with pytest.raises(CriCallError, match="container is not running"):
        await cri.reopen_container_log(cid)
