"""Making sure a container's image is there before it is created (Go: images.EnsureImageExists).

imagePullPolicy Never / IfNotPresent / Always; a failed pull is ErrImagePull and, while
its back-off lasts, ImagePullBackOff; a missing image under Never is ErrImageNeverPull.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pykubelet.messages.pod import Container, Pod
from pykubelet.pods.backoff import CrashLoopBackOff, image_backoff_key, image_pull_backoff_message
from pykubelet.ports.cri import CriCallError, CriClient


@dataclass(frozen=True)
class ImageProblem:
    """Why the container cannot be created now: its waiting reason and message."""

    reason: str
    message: str
    retry_in: float | None = None  # seconds until a pull may be tried again


async def ensure_image(cri: CriClient, pod: Pod, container: Container, backoff: CrashLoopBackOff) -> str | ImageProblem:
    """The image's reference in the runtime, or why it is not available."""
    image = container.image
    policy = container.image_pull_policy or "IfNotPresent"
    present = await cri.image_status(image)
    image_ref = present.image.id if present.HasField("image") else ""
    if policy == "Never":
        if image_ref:
            return image_ref
        return ImageProblem(
            "ErrImageNeverPull", f'Container image "{image}" is not present with pull policy of Never'
        )
    if policy == "IfNotPresent" and image_ref:
        return image_ref
    key = image_backoff_key(pod, image)
    if backoff.in_backoff_since_update(key, time.time()):
        return ImageProblem("ImagePullBackOff", image_pull_backoff_message(image), retry_in=backoff.delay(key))
    try:
        return await cri.pull_image(image)
    except CriCallError as exc:
        backoff.next(key, time.time())
        return ImageProblem(
            "ErrImagePull",
            f'failed to pull image "{image}": {exc}',
            retry_in=backoff.delay(key),
        )
