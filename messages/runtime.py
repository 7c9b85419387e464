"""What the runtime holds, as the kubelet sees it: a pod's full status (the Go kubelet's
kubecontainer.PodStatus), read over CRI by the pod workers and decided on by
compute_pod_actions and the status computation; and the PLEG's relist of every managed
sandbox and container (Relist), which it shares as RuntimePods with the sync loop and the
pod workers.

Times are Unix seconds (float); CRI's nanoseconds are converted at the port.
"""

from __future__ import annotations

from typing import Literal

import msgspec

ContainerRuntimeState = Literal["created", "running", "exited", "unknown"]
SandboxRuntimeState = Literal["ready", "notready"]


class ContainerRuntimeStatus(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    name: str
    state: ContainerRuntimeState
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""  # the runtime's, e.g. "Completed", "Error", "OOMKilled"
    message: str = ""
    image: str = ""  # as the spec named it
    image_ref: str = ""  # the runtime's image id (digest)
    hash: str = ""  # io.kubernetes.container.hash: the spec this container was made from
    restart_count: int = 0  # io.kubernetes.container.restartCount
    attempt: int = 0  # CRI metadata attempt
    # io.kubernetes.pod.terminationGracePeriod: how long the pod that made it may take to
    # stop, kept on the container so that an orphan can be stopped as its pod wanted.
    grace_period: int | None = None
    # io.kubernetes.container.preStopHandler: the spec's preStop handler as JSON, so that
    # it runs even when the kubelet that started the container is gone.
    prestop_handler: str = ""


class SandboxRuntimeStatus(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    state: SandboxRuntimeState
    created_at: float
    attempt: int = 0
    ip: str = ""


class PodRuntimeStatus(msgspec.Struct, kw_only=True, frozen=True):
    uid: str
    name: str
    namespace: str
    # Newest first, both: sandboxes[0] is the current sandbox, and for each container
    # name the first entry is its latest attempt.
    sandboxes: list[SandboxRuntimeStatus] = []
    containers: list[ContainerRuntimeStatus] = []

    def latest(self, name: str) -> ContainerRuntimeStatus | None:
        """The newest container of this name, or None if it never ran."""
        for container in self.containers:
            if container.name == name:
                return container
        return None

    @property
    def ip(self) -> str:
        return self.sandboxes[0].ip if self.sandboxes else ""


# --- the PLEG's relist: every managed sandbox and container, from two list calls ---------


class RelistedContainer(msgspec.Struct, frozen=True):
    id: str
    pod_uid: str
    name: str
    state: str


class RelistedSandbox(msgspec.Struct, frozen=True):
    id: str
    pod_uid: str
    name: str
    namespace: str
    ready: bool


class Relist(msgspec.Struct, frozen=True):
    sandboxes: list[RelistedSandbox]
    containers: list[RelistedContainer]

    def pod_uids(self) -> set[str]:
        return {s.pod_uid for s in self.sandboxes} | {c.pod_uid for c in self.containers}
