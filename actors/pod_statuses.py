"""The pods this kubelet holds and their latest computed status, as /pods serves them.

Pod workers publish a pod's status after every sync; the sync loop publishes pods it
refused at admission. The server reads, and in cluster mode the status manager reports
the same statuses to the API server. The board also keeps the status each pod carried
when it came from its source (for an API pod: the API's, as of the last watch event), and
the Burstable pods' cpu requests summed as pods come and go, for the burstable QoS cgroup.
"""

from __future__ import annotations

import msgspec

from pykubelet.messages.pod import Pod, PodList, PodStatus, pod_list
from pykubelet.pods.container_resources import burstable_cpu_request


class PodStatuses:
    def __init__(self) -> None:
        self._pods: dict[str, Pod] = {}
        self._source_status: dict[str, PodStatus] = {}
        # API pods whose worker has stopped and removed everything, until the status manager
        # has deleted their API object (or found it gone): kept here, outside the status
        # manager, so that a crash of it between the two loses no deletion.
        self._terminated: dict[str, tuple[str, str]] = {}
        # Kept as pods are set and removed: the container manager asks at each pod cgroup
        # it makes, and summing over every pod then would cost the node O(pods) a pod.
        self._burstable_cpu: dict[str, int] = {}  # uid -> millicores, Burstable pods only
        self._burstable_cpu_total = 0

    def set(self, pod: Pod, status: PodStatus) -> None:
        """Publish `status` for `pod`, the pod as its source gave it."""
        uid = pod.metadata.uid
        before = self._pods.get(uid)
        if before is None or before.spec is not pod.spec:
            self._count_burstable_cpu(uid, burstable_cpu_request(pod))
        self._pods[uid] = msgspec.structs.replace(pod, status=status)
        self._source_status[uid] = pod.status

    def _count_burstable_cpu(self, uid: str, milli_cpu: int) -> None:
        self._burstable_cpu_total += milli_cpu - self._burstable_cpu.pop(uid, 0)
        if milli_cpu:
            self._burstable_cpu[uid] = milli_cpu

    def burstable_cpu_requests(self) -> int:
        """The cpu requests of the Burstable pods on the board, summed (millicores)."""
        return self._burstable_cpu_total

    def source_status(self, uid: str) -> PodStatus | None:
        """The status the pod carried when its source gave it (None: not on the board)."""
        return self._source_status.get(uid)

    def pod(self, uid: str) -> Pod | None:
        """The pod with its published status (None: not on the board)."""
        return self._pods.get(uid)

    def source_pod(self, uid: str) -> Pod | None:
        """The pod as its source gave it, the last time it was published (None: not on the
        board)."""
        pod = self._pods.get(uid)
        return msgspec.structs.replace(pod, status=self._source_status[uid]) if pod is not None else None

    def get(self, uid: str) -> PodStatus | None:
        pod = self._pods.get(uid)
        return pod.status if pod is not None else None

    def remove(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._count_burstable_cpu(uid, 0)
        self._source_status.pop(uid, None)

    def terminate(self, uid: str, namespace: str, name: str) -> None:
        """The pod worker is done with API pod `uid`: off the board, and on the status
        manager's list of pods whose API object it may now delete."""
        self.remove(uid)
        if name:  # an orphan the runtime knew no name of has no API object to find
            self._terminated[uid] = (namespace, name)

    def terminated(self) -> dict[str, tuple[str, str]]:
        """uid -> (namespace, name) of the API pods terminated and not yet released."""
        return dict(self._terminated)

    def release_terminated(self, uid: str) -> None:
        """The status manager has deleted the pod's API object, or found it gone."""
        self._terminated.pop(uid, None)

    def pods(self) -> list[Pod]:
        return sorted(self._pods.values(), key=lambda p: (p.metadata.namespace, p.metadata.name))

    def pod_list(self) -> PodList:
        return pod_list(self.pods())

    def __len__(self) -> int:
        return len(self._pods)
