"""What the status manager is told (its mailbox protocol, cluster mode): by pod workers,
by the mirror pod actor, and by the daemon when the API server answers again."""

from __future__ import annotations

import msgspec

from pykubelet.messages.api_server import ApiServerAnswersAgain


class PodStatusChanged(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """A pod's status on the board changed: look now rather than at the next poll."""

    pod_uid: str


class PodTerminated(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """A pod worker stopped and removed every container and the sandbox of this pod (sent
    for pods from the API): if the API pod is being deleted, it may go now."""

    pod_uid: str
    namespace: str
    name: str


class MirrorPodCreated(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """The mirror pod actor created the mirror pod of this static pod (its UID on the
    board): its status can be written now, not only once a period."""

    pod_uid: str


StatusManagerMessage = PodStatusChanged | PodTerminated | MirrorPodCreated | ApiServerAnswersAgain
