"""The pods and events as pykubelet-inspect reads them from the daemon: only the fields it
shows or looks up, each with a default, so that a newer daemon's extra fields pass."""

from __future__ import annotations

import msgspec

# -- pods ---------------------------------------------------------------------------------


class _ContainerState(msgspec.Struct):
    reason: str | None = None
    exitCode: int | None = None
    signal: int | None = None
    finishedAt: str | None = None


class _ContainerStateSet(msgspec.Struct):
    waiting: _ContainerState | None = None
    terminated: _ContainerState | None = None


class _ContainerStatus(msgspec.Struct):
    name: str = ""
    ready: bool = False
    restartCount: int = 0
    state: _ContainerStateSet | None = None
    lastState: _ContainerStateSet | None = None


class _PodStatus(msgspec.Struct):
    phase: str | None = None
    reason: str | None = None
    podIP: str | None = None
    qosClass: str | None = None
    startTime: str | None = None
    initContainerStatuses: list[_ContainerStatus] = []
    containerStatuses: list[_ContainerStatus] = []


# The API writes quantities as strings; a hand-made PodList may write a number.
_Quantities = dict[str, str | int | float]


class _Resources(msgspec.Struct):
    requests: _Quantities = {}
    limits: _Quantities = {}


class _Container(msgspec.Struct):
    name: str = ""
    resources: _Resources | None = None
    restartPolicy: str | None = None  # an init container's "Always" makes it a sidecar


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None
    containers: list[_Container] = []
    initContainers: list[_Container] = []
    overhead: _Quantities = {}


class _ObjectMeta(msgspec.Struct):
    name: str = ""
    namespace: str = "default"
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None


class Pod(msgspec.Struct):
    metadata: _ObjectMeta = msgspec.field(default_factory=_ObjectMeta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class PodList(msgspec.Struct):
    kind: str
    items: list[Pod] = []


# -- events -------------------------------------------------------------------------------


class _InvolvedObject(msgspec.Struct):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    fieldPath: str = ""


class Event(msgspec.Struct):
    involvedObject: _InvolvedObject = msgspec.field(default_factory=_InvolvedObject)
    reason: str = ""
    message: str = ""
    type: str = ""
    count: int = 1
    firstTimestamp: str | None = None
    lastTimestamp: str | None = None


class EventList(msgspec.Struct):
    kind: str
    items: list[Event] = []
