"""What pod workers tell the status manager (its mailbox protocol, cluster mode)."""

from __future__ import annotations

import msgspec


class PodStatusChanged(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """A pod's status on the board changed: look now rather than at the next poll."""

    pod_uid: str


class PodTerminated(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """A pod worker stopped and removed every container and the sandbox of this pod (sent
    for pods from the API): if the API pod is being deleted, it may go now."""

    pod_uid: str
    namespace: str
    name: str


StatusManagerMessage = PodStatusChanged | PodTerminated
