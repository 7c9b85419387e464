"""The pod lifecycle's mailbox protocols: sources -> pod config -> sync loop -> pod workers,
and the PLEG's events. Each mailbox accepts one tagged union of these Structs.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .pod import Pod
from .probes import ProbeResult

# --- sources -> pod config ----------------------------------------------------------


class ManifestProblem(msgspec.Struct, frozen=True):
    """A manifest that could not become a pod: origin is the file path or the URL."""

    source: str  # "file" | "http"
    origin: str
    message: str


class SourcePods(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """Everything one source holds now (a full set, sent after each scan or poll)."""

    source: str
    pods: list[Pod]
    problems: list[ManifestProblem] = []


PodConfigMessage = SourcePods

# --- pod config -> sync loop --------------------------------------------------------

PodOperation = Literal["ADD", "UPDATE", "REMOVE", "RECONCILE"]


class PodUpdate(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    op: PodOperation
    source: str
    pods: list[Pod]


class SourcesReady(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """Every configured source has delivered its first full set: the sync loop may now
    terminate what runs in the runtime but is in no source."""

    sources: list[str]


class ManifestProblems(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """The current problems of all sources, for /pods and the log."""

    problems: list[ManifestProblem]


PlegEventType = Literal["ContainerStarted", "ContainerDied", "ContainerRemoved", "ContainerChanged", "SandboxChanged"]


class PlegEvent(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    pod_uid: str
    type: PlegEventType
    container_id: str = ""


class HousekeepingTick(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """Every 2s: find pods running in the runtime that no source wants."""


class ObjectsChanged(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """A ConfigMap or Secret these pods read changed: sync them, so that their volumes
    show it (Go reaches them at the next sync; this is sooner)."""

    pod_uids: list[str]


class EvictPod(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """The eviction manager's verdict (Go: killPodFunc with a status): stop the pod with this
    grace period and end it Failed with this reason and message; `disruption_target` adds
    the DisruptionTarget condition (reason TerminationByKubelet, the same message)."""

    pod_uid: str
    reason: str  # "Evicted"
    message: str
    grace_period_seconds: int
    disruption_target: bool = True
    annotations: dict[str, str] = {}  # the eviction's figures, as Go annotates its Event


SyncLoopMessage = (
    PodUpdate | SourcesReady | ManifestProblems | PlegEvent | ProbeResult | HousekeepingTick | ObjectsChanged | EvictPod
)

# --- sync loop -> pod worker --------------------------------------------------------


class SyncPod(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """Drive the pod to this spec (also sent, unchanged, to re-check after events)."""

    pod: Pod


class TerminatePod(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """Stop every container and the sandbox, with this grace period (None: the pod's).

    namespace/name: the pod's, when the sync loop knows them. A worker made only to
    terminate has no spec, and once the runtime holds nothing of the pod (an earlier
    incarnation stopped it) they are the only names PodTerminated can carry, without which
    the status manager cannot delete the API object of a pod being deleted."""

    grace_period_seconds: int | None = None
    reason: str = ""
    namespace: str = ""
    name: str = ""


class EvictedPod(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """Stop the pod for good and report it Failed (EvictPod, forwarded to its worker)."""

    eviction: EvictPod


PodWorkerMessage = SyncPod | TerminatePod | EvictedPod
