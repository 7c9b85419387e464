"""The event sink: sends the events the recorder keeps to the API server, as client-go's
event broadcaster and recordToSink do for the Go kubelet (cluster mode only).

The recorder hands each kept event to a bounded queue (never blocking it; the oldest
waiting event is dropped when full). The actor takes them one at a time: a new event is
created (POST), a repeat (count > 1) is patched (count, lastTimestamp, message) and
created when the API server no longer has it. Requests pass a token bucket (the kubelet's
eventRecordQPS 50, eventBurst 100); an event that cannot be delivered is retried every
10 s (the first retry jittered) up to 12 tries, then dropped with a log line.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgspec
import trio
from prometheus_client import CollectorRegistry, Counter

from pykubelet.actors.events import EventRecorder
from pykubelet.messages.events import Event
from pykubelet.ports.apiserver.errors import (
    AlreadyExists,
    ApiError,
    ApiUnavailable,
    NotFound,
    ProtocolError,
    ServerError,
    TooManyRequests,
)
from pykubelet.ports.apiserver.ratelimit import TokenBucket
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.event_sink")

# client-go tools/record (event.go) and the kubelet's defaults
EVENT_RECORD_QPS = 50.0  # KubeletConfiguration eventRecordQPS
EVENT_BURST = 100  # eventBurst
MAX_QUEUED = 1000  # maxQueuedEvents: the broadcaster's queue
MAX_TRIES = 12  # maxTriesPerEvent
RETRY_SLEEP = 10.0  # sleepDuration between tries (the first one times a random factor)
REJECTION_LOG_PERIOD = 60.0  # one log line per error reason per minute


class EventApi(Protocol):
    """The API client calls this actor makes."""

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...


class EventSinkMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.sent = Counter(
            "pykubelet_event_sink_requests", "Event requests the API server accepted, by verb",
            ["verb"], registry=registry,
        )  # fmt: skip
        self.dropped = Counter(
            "pykubelet_event_sink_dropped",
            "Events not delivered to the API server: sink_queue_full (the oldest waiting event "
            "gave way), retries_exhausted (12 tries), rejected (the API server refused it)",
            ["reason"], registry=registry,
        )  # fmt: skip


# --- what to send: pure ---------------------------------------------------------------


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"


@dataclass(frozen=True)
class SinkRequest:
    verb: Literal["create", "patch"]
    path: str
    body: dict[str, Any]


def event_body(event: Event) -> dict[str, Any]:
    """The core/v1 Event to create; the reporting fields as client-go's makeEvent sets
    them (reportingComponent = source.component, reportingInstance = source.host)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Event", **msgspec.to_builtins(event)}
    body["metadata"] = {"name": event.metadata.name, "namespace": event.metadata.namespace}
    body["reportingComponent"] = event.source.component
    body["reportingInstance"] = event.source.host
    return body


def sink_request(event: Event, *, known_new: bool = False) -> SinkRequest:
    """client-go's recordEvent: a repeat (count > 1) is a strategic merge patch of what
    changes (count, lastTimestamp, message), anything else a create. `known_new`: the sink
    knows the event was never created (its first sighting was coalesced away)."""
    path = events_path(event.metadata.namespace)
    if event.count > 1 and not known_new:
        patch = {"count": event.count, "lastTimestamp": event.last_timestamp, "message": event.message}
        return SinkRequest("patch", f"{path}/{event.metadata.name}", patch)
    return SinkRequest("create", path, event_body(event))


def retry_delay(tries: int, *, sleep: float = RETRY_SLEEP, jitter: Callable[[], float] = random.random) -> float:
    """Seconds to wait after `tries` failed tries: client-go spreads the first retry of a
    burst of kubelets over the period, then waits the full period."""
    return sleep * jitter() if tries == 1 else sleep


def retriable(error: ApiError) -> bool:
    """No answer, or one saying "later" (5xx, 429): try again. Any other answer (forbidden,
    invalid, namespace gone) will not change: drop the event, as client-go does."""
    return isinstance(error, (ApiUnavailable, ServerError, TooManyRequests, ProtocolError))


# --- the queue between the recorder and the actor ---------------------------------------


class EventQueue:
    """Bounded, never blocking put (the recorder's thread of control is a pod worker's).
    A repeat of an event still waiting replaces it in place, so a crash loop costs one
    request per delivery, not one per repeat."""

    def __init__(self, capacity: int = MAX_QUEUED, on_drop: Callable[[Event], None] | None = None) -> None:
        self.capacity = capacity
        self._on_drop = on_drop
        # (namespace, name) -> (latest event, known never created)
        self._waiting: OrderedDict[tuple[str, str], tuple[Event, bool]] = OrderedDict()
        self._wakeup: trio.Event | None = None

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, event: Event) -> None:
        key = (event.metadata.namespace, event.metadata.name)
        waiting = self._waiting.get(key)
        if waiting is not None:
            self._waiting[key] = (event, waiting[1] or waiting[0].count == 1)
        else:
            if len(self._waiting) >= self.capacity:
                _, (oldest, _) = self._waiting.popitem(last=False)
                if self._on_drop is not None:
                    self._on_drop(oldest)
            self._waiting[key] = (event, False)
        if self._wakeup is not None:
            self._wakeup.set()

    async def get(self) -> tuple[Event, bool]:
        while not self._waiting:
            self._wakeup = trio.Event()
            await self._wakeup.wait()
        self._wakeup = None
        _, item = self._waiting.popitem(last=False)
        return item


# --- the actor --------------------------------------------------------------------------


def event_sink_actor(
    *,
    client: EventApi,
    recorder: EventRecorder,
    qps: float | None = EVENT_RECORD_QPS,
    burst: int = EVENT_BURST,
    metrics: EventSinkMetrics | None = None,
    capacity: int = MAX_QUEUED,
    max_tries: int = MAX_TRIES,
    retry_sleep: float = RETRY_SLEEP,
    jitter: Callable[[], float] = random.random,
):
    """Subscribes to the recorder at once (here, not in the actor), so that the queue and
    what it holds outlive a restart of the actor. qps None or 0: no limit (as Go's
    eventRecordQPS 0)."""
    sink = _Sink(client, TokenBucket(qps, burst) if qps else None, metrics, max_tries, retry_sleep, jitter)
    queue = EventQueue(capacity, on_drop=sink.dropped_from_queue)
    recorder.subscribe(queue.put)

    async def run(ctx: ActorContext) -> None:
        while True:
            event, known_new = await queue.get()
            if not len(queue):
                sink.overflowing = False
            await sink.deliver(event, known_new)

    return run


class _Sink:
    def __init__(self, client: EventApi, bucket: TokenBucket | None, metrics: EventSinkMetrics | None,
                 max_tries: int, retry_sleep: float, jitter: Callable[[], float]) -> None:  # fmt: skip
        self.client, self.bucket, self.metrics = client, bucket, metrics
        self.max_tries, self.retry_sleep, self.jitter = max_tries, retry_sleep, jitter
        self.overflowing = False  # logged once per episode of a full queue
        self._last_logged: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def dropped_from_queue(self, event: Event) -> None:
        self._count_drop("sink_queue_full")
        if not self.overflowing:
            self.overflowing = True
            log.warning("event sink queue full: dropping the oldest waiting events (the API server is slow or "
                        "unreachable)", extra={"event": _describe(event)})  # fmt: skip

    async def deliver(self, event: Event, known_new: bool) -> None:
        for tries in range(1, self.max_tries + 1):
            try:
                await self._send(event, known_new)
                return
            except ApiError as error:
                if not retriable(error):
                    self._count_drop("rejected")
                    self._log_limited(error.reason or "rejected", "API server rejected event %s (not retried): %s",
                                      _describe(event), error)  # fmt: skip
                    return
                last = error
            if tries < self.max_tries:
                wait = retry_delay(tries, sleep=self.retry_sleep, jitter=self.jitter)
                if isinstance(last, TooManyRequests) and last.retry_after:
                    wait = max(wait, last.retry_after)
                await trio.sleep(wait)
        self._count_drop("retries_exhausted")
        log.warning("unable to write event %s after %d tries, dropped: %s", _describe(event), self.max_tries, last)

    async def _send(self, event: Event, known_new: bool) -> None:
        request = sink_request(event, known_new=known_new)
        if request.verb == "patch":
            await self._throttle()
            try:
                await self.client.patch(request.path, request.body)
                self._count_sent("patch")
                return
            except NotFound:
                # Expired (events live an hour) or its create was dropped: create it whole.
                request = sink_request(event, known_new=True)
        await self._throttle()
        try:
            await self.client.create(request.path, request.body)
        except AlreadyExists:
            return  # an earlier try did create it, its answer lost
        self._count_sent("create")

    async def _throttle(self) -> None:
        if self.bucket is not None:
            await self.bucket.acquire()

    def _count_sent(self, verb: str) -> None:
        if self.metrics is not None:
            self.metrics.sent.labels(verb=verb).inc()

    def _count_drop(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.dropped.labels(reason=reason).inc()

    def _log_limited(self, key: str, message: str, *args: object) -> None:
        now = trio.current_time()
        last = self._last_logged.get(key)
        if last is not None and now - last < REJECTION_LOG_PERIOD:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        self._last_logged[key] = now
        suppressed = self._suppressed.pop(key, 0)
        suffix = f" ({suppressed} more like it in the last minute)" if suppressed else ""
        log.warning(message + suffix, *args)


def _describe(event: Event) -> str:
    ref = event.involved_object
    return f"{event.metadata.namespace}/{event.metadata.name} ({ref.kind} {ref.name}: {event.reason})"
