"""A pod worker whose syncs fail on the runtime retries with the one back-off: 1 s doubling
to 10 s, each wait stretched by up to half (Go's workerBackOffPeriodJitterFactor), and the
pod is on the status board meanwhile. A fake CRI client that never answers; no runtime."""

from __future__ import annotations

import random

import msgspec
import pytest
import trio

from pykubelet.actors.pod_workers import pod_worker_actor
from pykubelet.messages.pod import Pod
from pykubelet.ports.cri import RuntimeUnavailable
from pykubelet.supervisor import ChildSpec, MailboxSpec
from tests.support.actors import running, worker_deps

ENDPOINT = "unix:///run/nothing.sock"


class GoneRuntime:
    """Every list call fails as an unreachable runtime does; records when it was asked."""

    def __init__(self) -> None:
        self.sandbox_lists: list[float] = []

    async def list_pod_sandbox(self, *args, **kwargs):
        self.sandbox_lists.append(trio.current_time())
        raise RuntimeUnavailable(endpoint=ENDPOINT, operation="list_pod_sandbox", detail="connect: refused")

    async def list_containers(self, *args, **kwargs):
        raise RuntimeUnavailable(endpoint=ENDPOINT, operation="list_containers", detail="connect: refused")


@pytest.fixture
def seeded():
    saved = random.getstate()
    random.seed(14)  # the worker's jitter draws from the global source
    yield
    random.setstate(saved)


async def test_failed_syncs_retry_1s_doubling_to_10s_with_up_to_half_jitter(autojump_clock, tmp_path, seeded):
    client = GoneRuntime()
    deps = worker_deps(client, str(tmp_path))
    pod = msgspec.convert({"metadata": {"name": "web", "namespace": "default", "uid": "u1"},
                           "spec": {"containers": [{"name": "app", "image": "busybox"}]}}, Pod)
    worker = ChildSpec("u1", pod_worker_actor("u1", pod, deps), mailbox=MailboxSpec(capacity=8, durable=True))
    async with running(worker):
        await trio.sleep(60)
    times = client.sandbox_lists
    gaps = [b - a for a, b in zip(times, times[1:])]
    bases = [1, 2, 4, 8, 10, 10]
    assert len(gaps) >= len(bases)
    for gap, base in zip(gaps, bases + [10] * len(gaps)):
        assert base <= gap <= base * 1.5, (gaps, bases)
    assert any(gap > base for gap, base in zip(gaps, bases))  # jittered, not the bare doubling
    assert deps.statuses.get("u1").phase == "Pending"  # on the board while the runtime is away
