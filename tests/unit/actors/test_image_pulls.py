"""serializeImagePulls and maxParallelImagePulls: the node's pulls at once are bounded by one
limiter the pod workers share (Go: the serial and parallel image pullers)."""

from __future__ import annotations

import msgspec
import trio
from cri_api.v1 import api_pb2

from pykubelet.actors.pod_workers.images import ensure_image
from pykubelet.messages.pod import Pod
from pykubelet.pods.backoff import CrashLoopBackOff


class SlowRegistry:
    """image_status: never present; pull_image: takes a second of trio's clock."""

    def __init__(self) -> None:
        self.pulling = 0
        self.most_at_once = 0

    async def image_status(self, image: str) -> api_pb2.ImageStatusResponse:
        return api_pb2.ImageStatusResponse()

    async def pull_image(self, image: str) -> str:
        self.pulling += 1
        self.most_at_once = max(self.most_at_once, self.pulling)
        await trio.sleep(1)
        self.pulling -= 1
        return f"sha256:{image}"


def pod(image: str) -> Pod:
    return msgspec.convert({"metadata": {"name": image, "namespace": "default", "uid": image},
                            "spec": {"containers": [{"name": "c", "image": image}]}}, Pod)


async def pull_all(limit: int | None, images: list[str]) -> tuple[SlowRegistry, float, list[str]]:
    registry, events = SlowRegistry(), []
    limiter = trio.CapacityLimiter(limit) if limit else None
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for image in images:
            p = pod(image)
            nursery.start_soon(ensure_image, registry, p, p.spec.containers[0], CrashLoopBackOff(),
                               lambda type, reason, message: events.append(message), limiter)
    return registry, trio.current_time() - started, events


async def test_serialized_pulls_go_one_at_a_time(autojump_clock):
    registry, took, events = await pull_all(1, ["a", "b", "c"])
    assert registry.most_at_once == 1 and took == 3
    assert any("(3.000s including waiting)" in message for message in events)


async def test_parallel_pulls_are_bounded_by_max_parallel_image_pulls(autojump_clock):
    registry, took, _ = await pull_all(2, ["a", "b", "c", "d"])
    assert registry.most_at_once == 2 and took == 2


async def test_without_a_bound_every_pull_starts_at_once(autojump_clock):
    registry, took, _ = await pull_all(None, ["a", "b", "c"])
    assert registry.most_at_once == 3 and took == 1
