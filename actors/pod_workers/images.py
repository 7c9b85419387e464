"""Making sure a container's image is there before it is created (Go: images.EnsureImageExists).

imagePullPolicy Never / IfNotPresent / Always; a failed pull is ErrImagePull and, while
its back-off lasts, ImagePullBackOff; a missing image under Never is ErrImageNeverPull.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from pykubelet.actors import events
from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.actions import should_pull_image
from pykubelet.pods.backoff import CrashLoopBackOff, image_backoff_key, image_pull_backoff_message
from pykubelet.ports.cri import CriCallError, CriClient


Record = Callable[[str, str, str], None]


@dataclass(frozen=True)
class ImageProblem:
    """Why the container cannot be created now: its waiting reason and message."""

    reason: str
    message: str
    retry_in: float | None = None  # seconds until a pull may be tried again


async def ensure_image(
    cri: CriClient, pod: Pod, container: Container, backoff: CrashLoopBackOff, record: Record,
    pulls: trio.CapacityLimiter | None = None, on_pull: Callable[[], None] | None = None,
    waiting: Callable[[Callable[[], Awaitable[str]]], Awaitable[str]] | None = None,
) -> str | ImageProblem:
    """The image's reference in the runtime, or why it is not available. `record(type,
    reason, message)` records the image events (Pulling, Pulled, Failed, BackOff). `pulls`
    bounds the pulls of the node at once (serializeImagePulls: 1, maxParallelImagePulls);
    `on_pull()` is called before a pull waits for its turn; `waiting(pull)` awaits the wait
    for that turn and the pull (the pod worker's, to give them up when the pod is deleted)."""
    image = container.image
    present = await cri.image_status(image)
    image_ref = present.image.id if present.HasField("image") else ""
    if not should_pull_image(container, bool(image_ref)):
        if image_ref:
            return image_ref
        message = f'Container image "{image}" is not present with pull policy of Never'
        record("Warning", events.ERR_IMAGE_NEVER_PULL_POLICY, message)
        return ImageProblem("ErrImageNeverPull", message)
    key = image_backoff_key(pod, image)
    if backoff.in_backoff_since_update(key, time.time()):
        record("Normal", events.BACK_OFF_PULL_IMAGE, image_pull_backoff_message(image))
        return ImageProblem("ImagePullBackOff", image_pull_backoff_message(image), retry_in=backoff.delay(key))
    record("Normal", events.PULLING_IMAGE, f'Pulling image "{image}"')
    started = trio.current_time()
    if on_pull is not None:
        on_pull()
    pulling = started

    async def pull() -> str:
        nonlocal pulling
        async with pulls if pulls is not None else contextlib.nullcontext():
            pulling = trio.current_time()
            return await cri.pull_image(image)

    try:
        image_ref = await (waiting(pull) if waiting is not None else pull())
    except CriCallError as exc:
        backoff.next(key, time.time())
        message = f'Failed to pull image "{image}": {exc}'
        record("Warning", events.FAILED_TO_PULL_IMAGE, message)
        return ImageProblem("ErrImagePull", message, retry_in=backoff.delay(key))
    done = trio.current_time()
    record("Normal", events.PULLED_IMAGE, f'Successfully pulled image "{image}" in {done - pulling:.3f}s '
                                          f'({done - started:.3f}s including waiting)')
    return image_ref
