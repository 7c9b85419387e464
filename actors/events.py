"""The event recorder: what the kubelet tells an operator about its pods (Pulling, Started,
BackOff, Unhealthy, ...), kept in a bounded ring that /events and `pykubelet-inspect
events` read. The actors that emit (pod workers, probes) share one recorder, as they share
the health board; it is a plain object, not an actor, and never blocks.

Before an event is kept it passes the correlator, client-go's EventCorrelator with its
defaults: similar events are aggregated, repeats counted, and each pod's event rate is
capped by a token bucket, so a crash-looping pod cannot flood the ring (or, in cluster
mode, the API server).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import msgspec
from prometheus_client import CollectorRegistry, Counter

from pykubelet.messages.events import Event, EventSource, EventType, ObjectReference
from pykubelet.messages.pod import ObjectMeta, Pod
from pykubelet.pods.status import rfc3339
from pykubelet.ports.apiserver.ratelimit import TokenBucket

log = logging.getLogger(__name__)

# --- the Go kubelet's reasons (pkg/kubelet/events/event.go) -------------------------------

# containers
CREATED_CONTAINER = "Created"
STARTED_CONTAINER = "Started"
FAILED_TO_CREATE_CONTAINER = "Failed"
FAILED_TO_START_CONTAINER = "Failed"
KILLING_CONTAINER = "Killing"
PREEMPT_CONTAINER = "Preempting"
BACK_OFF_START_CONTAINER = "BackOff"  # crash loop; Go uses the same word for image pulls
EXCEEDED_GRACE_PERIOD = "ExceededGracePeriod"
# pods
FAILED_TO_KILL_POD = "FailedKillPod"
FAILED_TO_CREATE_POD_CONTAINER = "FailedCreatePodContainer"
FAILED_TO_MAKE_POD_DATA_DIRECTORIES = "Failed"
NETWORK_NOT_READY = "NetworkNotReady"
SANDBOX_CHANGED = "SandboxChanged"
FAILED_CREATE_POD_SANDBOX = "FailedCreatePodSandBox"
FAILED_STATUS_POD_SANDBOX = "FailedPodSandBoxStatus"
FAILED_MOUNT_VOLUME = "FailedMount"
# images
PULLING_IMAGE = "Pulling"
PULLED_IMAGE = "Pulled"
FAILED_TO_PULL_IMAGE = "Failed"
FAILED_TO_INSPECT_IMAGE = "InspectFailed"
ERR_IMAGE_NEVER_PULL_POLICY = "ErrImageNeverPull"
BACK_OFF_PULL_IMAGE = "BackOff"
# probes
CONTAINER_UNHEALTHY = "Unhealthy"
CONTAINER_PROBE_WARNING = "ProbeWarning"
# pod workers, config
FAILED_SYNC = "FailedSync"
FAILED_VALIDATION = "FailedValidation"
# lifecycle hooks
FAILED_POST_START_HOOK = "FailedPostStartHook"
FAILED_PRE_STOP_HOOK = "FailedPreStopHook"
# the node
STARTING_KUBELET = "Starting"
NODE_READY = "NodeReady"
NODE_NOT_READY = "NodeNotReady"
NODE_REBOOTED = "Rebooted"
CONTAINER_GC_FAILED = "ContainerGCFailed"
IMAGE_GC_FAILED = "ImageGCFailed"

NORMAL: EventType = "Normal"
WARNING: EventType = "Warning"

# --- client-go's correlator defaults (tools/record/events_cache.go) -----------------------

SPAM_BURST = 25  # events a source may send about one object at once ...
SPAM_QPS = 1 / 300  # ... then one more every 5 minutes
AGGREGATE_MAX_EVENTS = 10  # similar events (differing only in message) before aggregating
AGGREGATE_INTERVAL = 600.0  # seconds without a similar event before counting starts over
AGGREGATE_PREFIX = "(combined from similar events): "
LRU_ENTRIES = 4096  # the correlator's caches, each
DEFAULT_CAPACITY = 1000  # events the ring keeps


def pod_reference(pod: Pod, container_name: str | None = None) -> ObjectReference:
    """The pod as an event's involved object; with a container, its field path
    (spec.containers{name} or spec.initContainers{name}), as Go's GenerateContainerRef."""
    field_path = ""
    if container_name is not None:
        init = any(c.name == container_name for c in pod.spec.init_containers)
        field_path = f"spec.{'initContainers' if init else 'containers'}{{{container_name}}}"
    return ObjectReference(
        kind="Pod",
        namespace=pod.metadata.namespace,
        name=pod.metadata.name,
        uid=pod.metadata.uid,
        api_version="v1",
        field_path=field_path,
    )


# --- the correlator: pure bookkeeping on the caller's clock --------------------------------

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """Go's groupcache lru.Cache: the least recently used entry leaves first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)


# Slotted: the correlator keeps one of each for every event key (two or more a pod).
@dataclass(slots=True)
class _Aggregate:
    messages: dict[str, None] = field(default_factory=dict)  # an ordered set
    last_seen: float = 0.0


@dataclass(frozen=True, slots=True)
class _Observation:
    count: int
    first_timestamp: str
    name: str


def _event_key(event: Event) -> tuple:
    ref, source = event.involved_object, event.source
    return (
        source.component, source.host, ref.kind, ref.namespace, ref.name, ref.field_path,
        ref.uid, ref.api_version, event.type, event.reason, event.message,
    )


def _aggregate_key(event: Event) -> tuple:
    # Not the field path: the containers of one pod aggregate together, as in Go.
    ref, source = event.involved_object, event.source
    return (
        "aggregate", source.component, source.host, ref.kind, ref.namespace, ref.name,
        ref.uid, ref.api_version, event.type, event.reason,
    )


def _spam_key(event: Event) -> tuple:
    ref, source = event.involved_object, event.source
    return (source.component, source.host, ref.kind, ref.namespace, ref.name, ref.uid, ref.api_version)


class EventCorrelator:
    """client-go's EventCorrelator, in its order: aggregate, count, then filter spam.

    - Aggregation: once `max_events` events that differ only in their message were seen
      within `interval` seconds of each other (same source, object, type and reason), the
      next ones become one event "(combined from similar events): <latest message>".
    - Counting: an event identical to one seen before (or the aggregate again) is that
      event with count + 1, its first timestamp and name, and the new last timestamp.
    - Spam filter: a token bucket per source and object (burst 25, one more every 300 s).
      Filtered events were still counted, so the next one let through carries their count.
    """

    def __init__(
        self,
        *,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
        max_events: int = AGGREGATE_MAX_EVENTS,
        interval: float = AGGREGATE_INTERVAL,
        lru_entries: int = LRU_ENTRIES,
    ) -> None:
        self.burst, self.qps = burst, qps
        self.max_events, self.interval = max_events, interval
        self._buckets: _Lru[tuple, TokenBucket] = _Lru(lru_entries)
        self._aggregates: _Lru[tuple, _Aggregate] = _Lru(lru_entries)
        self._observations: _Lru[tuple, _Observation] = _Lru(lru_entries)

    def correlate(self, event: Event, now: float) -> tuple[Event, tuple] | None:
        """The event to keep and its key (a kept event with the same key is replaced),
        or None when the spam filter drops it."""
        event, key = self._aggregate(event, now)
        event = self._observe(event, key)
        if not self._accept(event, now):
            return None
        return event, key

    def _aggregate(self, event: Event, now: float) -> tuple[Event, tuple]:
        key = _aggregate_key(event)
        record = self._aggregates.get(key)
        if record is None or now - record.last_seen > self.interval:
            record = _Aggregate()
        record.messages[event.message] = None
        record.last_seen = now
        self._aggregates.put(key, record)
        if len(record.messages) < self.max_events:
            return event, _event_key(event)
        # Keep the set just under the threshold, so that every new message aggregates
        # (Go pops an arbitrary one; the oldest here, for repeatable tests).
        del record.messages[next(iter(record.messages))]
        return msgspec.structs.replace(event, message=AGGREGATE_PREFIX + event.message), key

    def _observe(self, event: Event, key: tuple) -> Event:
        last = self._observations.get(key)
        if last is not None:
            event = msgspec.structs.replace(
                event,
                metadata=ObjectMeta(name=last.name, namespace=event.metadata.namespace),
                first_timestamp=last.first_timestamp,
                count=last.count + 1,
            )
        self._observations.put(key, _Observation(event.count, event.first_timestamp, event.metadata.name))
        return event

    def _accept(self, event: Event, now: float) -> bool:
        key = _spam_key(event)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.qps, self.burst)  # starts full, refills continuously
        accepted = bucket.try_acquire(now)
        self._buckets.put(key, bucket)
        return accepted


# --- the recorder ----------------------------------------------------------------------


class EventRecorder:
    """record() from any actor; events() for the server. One per daemon (its metrics are
    registered on the registry given)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "",
        clock: Callable[[], float] = time.time,
        capacity: int = DEFAULT_CAPACITY,
        correlator: EventCorrelator | None = None,
    ) -> None:
        # The clock stamps the events too (RFC 3339), so the daemon's is a wall clock.
        self._clock = clock
        self._source = EventSource(component="kubelet", host=host)
        self._capacity = capacity
        self._correlator = correlator or EventCorrelator()
        self._ring: OrderedDict[tuple, Event] = OrderedDict()
        self._listeners: list[Callable[[Event], None]] = []
        self._recorded = Counter(
            "pykubelet_events",
            "Events recorded (after aggregation and the spam filter), by type and reason",
            ["type", "reason"],
            registry=registry,
        )
        self._dropped = Counter(
            "pykubelet_events_dropped",
            "Events dropped by the spam filter (more than 25 about one object, then 1 per 5 minutes)",
            registry=registry,
        )

    def record(
        self,
        pod_ref: ObjectReference,
        type: EventType,
        reason: str,
        message: str,
        *,
        field_path: str = "",
    ) -> Event | None:
        """Record an event about pod_ref (field_path, when given, names the container).
        Returns the event as kept, or None when the spam filter dropped it."""
        if type not in (NORMAL, WARNING):
            raise ValueError(f"event {reason!r}: type {type!r} is neither Normal nor Warning")
        if field_path:
            pod_ref = msgspec.structs.replace(pod_ref, field_path=field_path)
        now = self._clock()
        stamp = rfc3339(now)
        event = Event(
            metadata=ObjectMeta(
                name=f"{pod_ref.name}.{int(now * 1e9):x}", namespace=pod_ref.namespace or "default"
            ),
            involved_object=pod_ref,
            reason=reason,
            message=message,
            type=type,
            count=1,
            first_timestamp=stamp,
            last_timestamp=stamp,
            source=self._source,
        )
        correlated = self._correlator.correlate(event, now)
        if correlated is None:
            self._dropped.inc()
            return None
        event, key = correlated
        self._ring[key] = event
        self._ring.move_to_end(key)
        while len(self._ring) > self._capacity:
            self._ring.popitem(last=False)
        self._recorded.labels(type=type, reason=reason).inc()
        fields = {
            "object": f"{pod_ref.namespace}/{pod_ref.name}" if pod_ref.namespace else pod_ref.name,
            "kind": pod_ref.kind,
            "type": type,
            "reason": reason,
        }
        if pod_ref.field_path:
            fields["fieldPath"] = pod_ref.field_path
        if event.count > 1:
            fields["count"] = event.count
        log.info("event: %s", event.message, extra=fields)
        for listener in self._listeners:
            listener(event)
        return event

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call listener(event) with every event kept from now on (new, or a repeat with
        its count raised), synchronously inside record(): it must not block or raise (the
        API sink only queues it). Returns the function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def events(self, namespace: str | None = None, involved_uid: str | None = None) -> list[Event]:
        """The kept events, oldest first (a repeated event moves to the end)."""
        return [
            event
            for event in self._ring.values()
            if (namespace is None or event.involved_object.namespace == namespace)
            and (involved_uid is None or event.involved_object.uid == involved_uid)
        ]
