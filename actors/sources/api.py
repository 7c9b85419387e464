"""The api source: the pods the scheduler bound to this node, by list+watch of
/api/v1/pods?fieldSelector=spec.nodeName=<node> (Go: pkg/kubelet/config/apiserver.go, a
reflector over an undelta store). It sends pod config the full set as SourcePods after the
first list and after every change, at most once per min_send_interval (bursts coalesce).

Until the API server has answered one list, nothing is sent: pod config then does not see
the source, so the kubelet kills no pod it does not know yet. A watch that ends is resumed
from the last resourceVersion; 410 Gone re-lists (the same pods keep their UIDs, so pod
config sees no change and no container restarts); any other failure waits 0.5 s doubling
to 30 s, each wait stretched by up to half (pods/backoff.py's watch_backoff), and tries
again. Pods being deleted (deletionTimestamp) stay in the set: pod config
passes them on as UPDATE, and the sync loop terminates them with their grace period.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgspec
import trio

from pykubelet.messages.pod import Pod
from pykubelet.pods.backoff import WATCH_BACKOFF_INITIAL, WATCH_BACKOFF_MAX, ExponentialBackoff, watch_backoff
from pykubelet.pods.manifest import CONFIG_MIRROR
from pykubelet.messages.pod_updates import ManifestProblem, SourcePods
from pykubelet.ports.apiserver import ApiError, Gone, WatchEvent, decode
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.sources.api")

SOURCE = "api"
PODS_PATH = "/api/v1/pods"

MIN_SEND_INTERVAL = 0.05
# client-go's reflector asks the server to end each watch after 5 to 10 minutes, so that
# the watches of many nodes do not all end together.
WATCH_TIMEOUT_RANGE = (300, 600)


class PodsApi(Protocol):
    """The API client calls this source makes (ports.apiserver.ApiClient)."""

    async def list(self, path: str, params: Mapping[str, Any] | None = None
                   ) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """An async context manager yielding WatchEvents, with .resource_version."""


def node_selector(node_name: str) -> str:
    """The only pod list a node identity may make (Node authorizer)."""
    return f"spec.nodeName={node_name}"


# --- the pure part: the set as the list and the watch events make it -------------------------


class ApiPodSet:
    """The pods bound to this node as last listed and watched, decoded, by UID.

    An object that does not decode as a Pod is left out and reported as a problem naming
    it; a pod bound to another node (never served for our selector) is left out too.
    """

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self.listed = False  # the API answered a list at least once
        self._pods: dict[str, Pod] = {}
        self._problems: dict[str, ManifestProblem] = {}

    def replace(self, items: list[dict[str, Any]]) -> bool:
        """A new list's items; True when the set changed (the first list always counts)."""
        before = (dict(self._pods), dict(self._problems))
        self._pods.clear()
        self._problems.clear()
        for obj in items:
            self._put(obj)
        first, self.listed = not self.listed, True
        return first or _unversioned_all(before[0]) != _unversioned_all(self._pods) or before[1] != self._problems

    def apply(self, event: WatchEvent) -> bool:
        """One watch event; True when the set changed. BOOKMARKs change nothing."""
        if event.type in ("ADDED", "MODIFIED"):
            uid = _uid(event.object)
            before = (_unversioned(self._pods.get(uid)), self._problems.get(uid))
            self._put(event.object)
            return before != (_unversioned(self._pods.get(uid)), self._problems.get(uid))
        if event.type == "DELETED":
            uid = _uid(event.object)
            return (self._pods.pop(uid, None), self._problems.pop(uid, None)) != (None, None)
        return False

    def _put(self, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        self._pods.pop(uid, None)
        self._problems.pop(uid, None)
        meta = obj.get("metadata") or {}
        origin = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if ((obj.get("spec") or {}).get("nodeName") or "") != self.node_name:
            return
        if CONFIG_MIRROR in (meta.get("annotations") or {}):
            return  # a mirror pod stands for a static pod: never run (Go: IsMirrorPod)
        try:
            pod = decode(obj, Pod)
        except ValueError as exc:
            self._problems[uid] = ManifestProblem(source=SOURCE, origin=origin, message=str(exc))
            return
        self._pods[uid] = pod

    def source_pods(self) -> SourcePods:
        pods = sorted(self._pods.values(), key=lambda p: (p.metadata.namespace, p.metadata.name))
        problems = sorted(self._problems.values(), key=lambda p: p.origin)
        return SourcePods(source=SOURCE, pods=pods, problems=problems)

    def __len__(self) -> int:
        return len(self._pods)


def _unversioned(pod: Pod | None) -> Pod | None:
    """The pod without its resourceVersion: an update that changed nothing the kubelet
    reads (a no-op write, a field it does not model) is not a change of the set."""
    if pod is None:
        return None
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, resource_version=""))


def _unversioned_all(pods: dict[str, Pod]) -> dict[str, Pod | None]:
    return {uid: _unversioned(pod) for uid, pod in pods.items()}


def _uid(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


# --- the actor ------------------------------------------------------------------------------


class _Publisher:
    """Sends the set to pod config when it changed: at once after a quiet spell, then at
    most once per interval, so that a burst of events becomes one SourcePods."""

    def __init__(self, mailbox: Any, pods: ApiPodSet, interval: float) -> None:
        self._mailbox = mailbox
        self._pods = pods
        self._interval = interval
        self._changed = trio.Event()
        self.last_sent: SourcePods | None = None

    def changed(self) -> None:
        self._changed.set()

    async def run(self) -> None:
        while True:
            await self._changed.wait()
            self._changed = trio.Event()
            update = self._pods.source_pods()
            if update == self.last_sent:
                continue
            await self._mailbox.send(update)
            self.last_sent = update
            await trio.sleep(self._interval)


class _ErrorLog:
    """One log line per change of error, and one when the API answers again."""

    def __init__(self) -> None:
        self._last: tuple[str, int | None, str] | None = None

    def failed(self, exc: ApiError, retry_in: float, backoff_max: float) -> None:
        key = (type(exc).__name__, exc.status, exc.reason)
        if key != self._last:
            log.warning("pods from the API server: %s (retrying, back-off up to %gs)", exc, backoff_max)
            self._last = key
        log.log(V(4), "pods from the API server: retry in %gs", retry_in)

    def recovered(self) -> None:
        if self._last is not None:
            log.info("pods from the API server: the API server answers again")
            self._last = None


async def list_and_watch(
    client: PodsApi,
    pods: ApiPodSet,
    changed: Any,
    *,
    backoff: ExponentialBackoff,
    watch_timeout: Any = lambda: random.randint(*WATCH_TIMEOUT_RANGE),
) -> None:
    """Keep `pods` equal to the API's pods bound to pods.node_name; call changed() after
    each change. Runs until cancelled."""
    selector = node_selector(pods.node_name)
    errors = _ErrorLog()
    resource_version: str | None = None  # None: list first
    gone_twice = False
    while True:
        try:
            if resource_version is None:
                items, resource_version = await client.list(PODS_PATH, {"fieldSelector": selector})
                if not gone_twice:  # a list between two 410s proves nothing yet
                    errors.recovered()
                    backoff.reset()
                if pods.replace(items):
                    changed()
                log.log(V(4), "listed %d pods at resourceVersion %s", len(pods), resource_version)
            params = {
                "fieldSelector": selector,
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(watch_timeout()),
            }
            async with client.watch(PODS_PATH, params) as events:
                async for event in events:
                    resource_version = events.resource_version or resource_version
                    errors.recovered()
                    backoff.reset()
                    gone_twice = False
                    if pods.apply(event):
                        changed()
                resource_version = events.resource_version or resource_version
            # The server ended the watch (timeoutSeconds): watch on from where it stopped.
        except Gone as exc:
            # The history we watch from is compacted: list again. Twice in a row with
            # nothing in between is a server in trouble, not history: back off then.
            log.info("pod watch expired (%s): re-listing", exc.message)
            resource_version = None
            if gone_twice:
                await _back_off(exc, errors, backoff)
            gone_twice = True
        except ApiError as exc:
            # Unreachable, 5xx, a hang cut by the client's timeouts, 401/403: try again
            # later, from the same resourceVersion (a watch resumes, a list is retried).
            await _back_off(exc, errors, backoff)


async def _back_off(exc: ApiError, errors: _ErrorLog, backoff: ExponentialBackoff) -> None:
    delay = backoff.next_delay()
    errors.failed(exc, delay, backoff.maximum)
    await trio.sleep(delay)


def api_source_actor(
    *,
    client: PodsApi,
    node_name: str,
    send_to: str = "root/pod-config",
    min_send_interval: float = MIN_SEND_INTERVAL,
    backoff_initial: float = WATCH_BACKOFF_INITIAL,
    backoff_max: float = WATCH_BACKOFF_MAX,
    jitter_source: Callable[[], float] = random.random,
):
    """The actor function of the api source (ChildSpec name "api", so that pod config
    counts it among the sources). The mailbox at send_to (pod config) must exist first.
    `jitter_source` draws the back-off's jitter in [0, 1)."""
    if min_send_interval < 0:
        raise ValueError(f"min_send_interval={min_send_interval:g}: needs >= 0")
    watch_backoff(backoff_initial, backoff_max)  # refuses bad settings now, not at the first error

    async def run(ctx: ActorContext) -> None:
        pods = ApiPodSet(node_name)
        publisher = _Publisher(ctx.registry.lookup(send_to), pods, min_send_interval)
        log.info("watching pods bound to node %s on the API server", node_name, extra={"node": node_name})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher.run)
            backoff = watch_backoff(backoff_initial, backoff_max, jitter_source)
            await list_and_watch(client, pods, publisher.changed, backoff=backoff)

    return run
