"""The pods this kubelet holds and their latest computed status, as /pods serves them.

Pod workers publish a pod's status after every sync; the sync loop publishes pods it
refused at admission. The server reads, and in cluster mode the status manager reports
the same statuses to the API server. The board also keeps the status each pod carried
when it came from its source (for an API pod: the API's, as of the last watch event).
"""

from __future__ import annotations

import msgspec

from pykubelet.messages.pod import Pod, PodList, PodStatus, pod_list


class PodStatuses:
    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}
        self._source_status: dict[str, PodStatus] = {}

    def set(self, pod: Pod, status: PodStatus) -> None:
        """Publish `status` for `pod`, the pod as its source gave it."""
        self._pods[pod.metadata.uid] = msgspec.structs.replace(pod, status=status)
        self._source_status[pod.metadata.uid] = pod.status

    def source_status(self, uid: str) -> PodStatus | None:
        """The status the pod carried when its source gave it (None: not on the board)."""
        return self._source_status.get(uid)

    def pod(self, uid: str) -> Pod | None:
        """The pod with its published status (None: not on the board)."""
        return self._pods.get(uid)

    def get(self, uid: str) -> PodStatus | None:
        pod = self._pods.get(uid)
        return pod.status if pod is not None else None

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._source_status.pop(uid, None)

    def pods(self) -> list[Pod]:
        return sorted(self._pods.values(), key=lambda p: (p.metadata.namespace, p.metadata.name))

    def pod_list(self) -> PodList:
        return pod_list(self.pods())

    def __len__(self) -> int:
        return len(self._pods)
