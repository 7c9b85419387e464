"""Kubernetes Events as the kubelet records them (core/v1 Event, the fields it sets).

Recorded locally (a bounded ring, served at /events as an EventList, which
pykubelet-inspect events decodes); cluster mode sends the same objects to the API server.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .pod import ListMeta, ObjectMeta

EventType = Literal["Normal", "Warning"]

# No omit_defaults below: kind "Pod", apiVersion "v1", type "Normal", count 1 and component
# "kubelet" are defaults here but must still be on the wire.


class ObjectReference(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    kind: str = "Pod"
    namespace: str = ""
    name: str = ""
    uid: str = ""
    api_version: str = "v1"
    field_path: str = ""  # spec.containers{name}


class EventSource(msgspec.Struct, frozen=True):
    component: str = "kubelet"
    host: str = ""


class Event(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    # name "<object name>.<hex unix nanos>" and the object's namespace, as Go's recorder
    # names an event; an aggregated or repeated event keeps the name of its first one.
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: ObjectReference
    reason: str
    message: str
    type: EventType = "Normal"
    count: int = 1
    first_timestamp: str = ""
    last_timestamp: str = ""
    source: EventSource = msgspec.field(default_factory=EventSource)


class EventList(msgspec.Struct, rename="camel", kw_only=True, frozen=True):
    """An EventList as the API serves one (/events: oldest first)."""

    api_version: str = "v1"
    kind: str = "EventList"
    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[Event] = []
