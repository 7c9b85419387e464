"""The pods this kubelet holds and their latest computed status, as /pods serves them.

Pod workers publish a pod's status after every sync; the sync loop publishes pods it
refused at admission. The server reads. (The status manager of cluster mode will report
the same statuses to the API server.)
"""

from __future__ import annotations

import msgspec

from pykubelet.messages.pod import Pod, PodList, PodStatus, pod_list


class PodStatuses:
    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}

    def set(self, pod: Pod, status: PodStatus) -> None:
        self._pods[pod.metadata.uid] = msgspec.structs.replace(pod, status=status)

    def get(self, uid: str) -> PodStatus | None:
        pod = self._pods.get(uid)
        return pod.status if pod is not None else None

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def pods(self) -> list[Pod]:
        return sorted(self._pods.values(), key=lambda p: (p.metadata.namespace, p.metadata.name))

    def pod_list(self) -> PodList:
        return pod_list(self.pods())

    def __len__(self) -> int:
        return len(self._pods)
