"""The ConfigMaps and Secrets that the node's pods reference, kept fresh by one watch per
object (Go: the watch-based configmap and secret managers), and the Services whose
variables containers get. Pod workers register what their pod references and read it
here; the `object-watches` actor runs the watches.

The Node authorizer lets a node read an object only while a pod bound to it references
it, and only by name: each object is listed and watched with a metadata.name field
selector, never a whole namespace.
"""

from __future__ import annotations

import base64
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NamedTuple

import trio

from pykubelet.messages.pod import Pod
from pykubelet.pods.backoff import watch_backoff
from pykubelet.pods.env import ServiceEnv
from pykubelet.ports.apiserver import ApiError, Gone
from pykubelet.supervisor import ActorContext

log = logging.getLogger("pykubelet.volumes.objects")

WATCH_TIMEOUT_RANGE = (300, 600)  # as the api source: client-go's reflector spread
SERVICES_PATH = "/api/v1/services"


class ObjectKey(NamedTuple):
    kind: Literal["configmaps", "secrets"]
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind[:-1]} {self.namespace}/{self.name}"

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/{self.kind}"


class ObjectNotReady(Exception):
    """The object's first read has not answered yet (the API server is slow or down)."""


def referenced_objects(pod: Pod) -> set[ObjectKey]:
    """Every ConfigMap and Secret the pod reads: volumes, projections, env and envFrom."""
    namespace, keys = pod.metadata.namespace, set()

    def add(kind: Literal["configmaps", "secrets"], name: str) -> None:
        if name:
            keys.add(ObjectKey(kind, namespace, name))

    for volume in pod.spec.volumes:
        if volume.config_map is not None:
            add("configmaps", volume.config_map.name)
        if volume.secret is not None:
            add("secrets", volume.secret.secret_name)
        for projection in volume.projected.sources if volume.projected is not None else ():
            if projection.config_map is not None:
                add("configmaps", projection.config_map.name)
            if projection.secret is not None:
                add("secrets", projection.secret.name)
    for container in [*pod.spec.init_containers, *pod.spec.containers]:
        for source in container.env_from:
            if source.config_map_ref is not None:
                add("configmaps", source.config_map_ref.name)
            if source.secret_ref is not None:
                add("secrets", source.secret_ref.name)
        for env in container.env:
            if env.value_from is not None and env.value_from.config_map_key_ref is not None:
                add("configmaps", env.value_from.config_map_key_ref.name)
            if env.value_from is not None and env.value_from.secret_key_ref is not None:
                add("secrets", env.value_from.secret_key_ref.name)
    return keys


def _object_data(key: ObjectKey, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ConfigMap's data and binaryData (bytes), or a Secret's data decoded from base64."""
    if key.kind == "secrets":
        data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (obj.get("stringData") or {}).items()})
        return data
    data: dict[str, Any] = dict(obj.get("data") or {})
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


class ObjectCache:
    """What the watches last saw, by object, and who uses it. Held outside the actor so
    that a restarted object-watches actor serves the same registrations."""

    def __init__(self, on_change: Callable[[set[str]], None] | None = None) -> None:
        self._users: dict[ObjectKey, set[str]] = {}
        self._by_pod: dict[str, set[ObjectKey]] = {}
        self._data: dict[ObjectKey, dict[str, Any] | None] = {}  # None: the API has no such object
        self._synced: dict[ObjectKey, trio.Event] = {}
        self.wanted_changed = trio.Event()
        self.on_change = on_change  # called with the UIDs of the pods using a changed object
        self.services: dict[tuple[str, str], ServiceEnv] = {}
        self.services_synced = trio.Event()

    # -- registrations (pod workers) ------------------------------------------------

    def use(self, pod_uid: str, keys: Iterable[ObjectKey]) -> None:
        keys = set(keys)
        before = self._by_pod.get(pod_uid, set())
        if keys == before:
            return
        for key in before - keys:
            self._forget(pod_uid, key)
        for key in keys - before:
            self._users.setdefault(key, set()).add(pod_uid)
            self._synced.setdefault(key, trio.Event())
        self._by_pod[pod_uid] = keys
        self._wanted()

    def release(self, pod_uid: str) -> None:
        for key in self._by_pod.pop(pod_uid, set()):
            self._forget(pod_uid, key)
        self._wanted()

    def _forget(self, pod_uid: str, key: ObjectKey) -> None:
        # The data stays until the actor stops the watch (drop_unwanted): a pod that uses
        # the object again meanwhile finds it read and watched, not waiting for a list that
        # the running watch would never make.
        users = self._users.get(key)
        if users is not None:
            users.discard(pod_uid)
            if not users:
                del self._users[key]

    def drop_unwanted(self) -> None:
        """Forget what no pod uses any more (the actor, as it stops those watches)."""
        for key in [k for k in self._synced if k not in self._users]:
            self._data.pop(key, None)
            del self._synced[key]

    def _wanted(self) -> None:
        self.wanted_changed.set()
        self.wanted_changed = trio.Event()

    def wanted(self) -> set[ObjectKey]:
        return set(self._users)

    # -- reads (pod workers) -----------------------------------------------------------

    async def snapshot(self, keys: Iterable[ObjectKey], *, timeout: float) -> ObjectSnapshot:
        """The data of `keys` (which the caller registered), once each was read at least
        once; ObjectNotReady after `timeout` seconds otherwise."""
        with trio.move_on_after(timeout):
            for key in keys:
                await self._synced[key].wait()
            return ObjectSnapshot({key: self._data.get(key) for key in keys})
        raise ObjectNotReady(", ".join(str(k) for k in sorted(keys) if not self._synced[k].is_set()))

    def service_env(self, namespace: str) -> list[ServiceEnv]:
        return [s for (ns, _), s in sorted(self.services.items()) if ns in (namespace, "default")]

    # -- updates (the watches) ------------------------------------------------------------

    def set(self, key: ObjectKey, obj: Mapping[str, Any] | None) -> None:
        if key not in self._synced:
            return  # released while its read was in flight
        data = None if obj is None else _object_data(key, obj)
        first = not self._synced[key].is_set()
        changed = self._data.get(key, ...) != data
        self._data[key] = data
        self._synced[key].set()
        if changed and not first and self.on_change is not None:
            self.on_change(set(self._users.get(key, ())))


class ObjectSnapshot:
    """The objects one sync reads, as volumes read them (pods.volume_payload.VolumeObjects):
    a ConfigMap's data and binaryData (bytes) together."""

    def __init__(self, data: Mapping[ObjectKey, dict[str, Any] | None]) -> None:
        self._data = data

    def config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._data.get(ObjectKey("configmaps", namespace, name))

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self._data.get(ObjectKey("secrets", namespace, name))

    def for_env(self) -> EnvSnapshot:
        return EnvSnapshot(self)


class EnvSnapshot:
    """The same objects as env reads them (pods.env.EnvObjects): a ConfigMap's data only,
    never its binaryData (Go reads .Data for configMapKeyRef and envFrom)."""

    def __init__(self, snapshot: ObjectSnapshot) -> None:
        self._snapshot = snapshot

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        data = self._snapshot.config_map(namespace, name)
        return None if data is None else {k: v for k, v in data.items() if isinstance(v, str)}

    def secret(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        return self._snapshot.secret(namespace, name)


EMPTY_SNAPSHOT = ObjectSnapshot({})


def _service_env(obj: Mapping[str, Any]) -> ServiceEnv | None:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    cluster_ip = spec.get("clusterIP") or ""
    if not cluster_ip or cluster_ip == "None":
        return None  # headless services give no variables (Go: IsServiceIPSet)
    ports = tuple(
        (p.get("name") or "", int(p.get("port") or 0), p.get("protocol") or "TCP") for p in spec.get("ports") or []
    )
    return ServiceEnv(name=meta.get("name", ""), namespace=meta.get("namespace", ""), cluster_ip=cluster_ip, ports=ports)


# --- the actor --------------------------------------------------------------------------


async def _reflect(
    client: Any, path: str, selector: str | None, replace: Callable, apply: Callable, what: str,
    jitter_source: Callable[[], float],
) -> None:
    """List, then watch from the list's resourceVersion; again after errors (with the
    jittered watch back-off) and after 410 Gone. Runs until cancelled."""
    backoff = watch_backoff(random=jitter_source)
    version, failing = None, False
    params = {"fieldSelector": selector} if selector else {}
    while True:
        try:
            if version is None:
                items, version = await client.list(path, params)
                replace(items)
            watch = {**params, "resourceVersion": version, "allowWatchBookmarks": "true",
                     "timeoutSeconds": str(random.randint(*WATCH_TIMEOUT_RANGE))}
            async with client.watch(path, watch) as events:
                async for event in events:
                    version = events.resource_version or version
                    backoff.reset()
                    failing = False
                    apply(event)
        except Gone:
            version = None
        except ApiError as exc:
            if not failing:
                log.warning("watching %s: %s (retrying, back-off up to %gs)", what, exc, backoff.maximum)
                failing = True
            await trio.sleep(backoff.next_delay())


async def _watch_object(client: Any, cache: ObjectCache, key: ObjectKey, jitter_source: Callable[[], float]) -> None:
    def replace(items: list[dict[str, Any]]) -> None:
        cache.set(key, items[0] if items else None)

    def apply(event: Any) -> None:
        if event.type in ("ADDED", "MODIFIED"):
            cache.set(key, event.object)
        elif event.type == "DELETED":
            cache.set(key, None)

    await _reflect(client, key.path, f"metadata.name={key.name}", replace, apply, str(key), jitter_source)


async def _watch_services(client: Any, cache: ObjectCache, jitter_source: Callable[[], float]) -> None:
    def put(obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = (meta.get("namespace", ""), meta.get("name", ""))
        service = _service_env(obj)
        if service is None:
            cache.services.pop(name, None)
        else:
            cache.services[name] = service

    def replace(items: list[dict[str, Any]]) -> None:
        cache.services.clear()
        for obj in items:
            put(obj)
        cache.services_synced.set()

    def apply(event: Any) -> None:
        if event.type in ("ADDED", "MODIFIED"):
            put(event.object)
        elif event.type == "DELETED":
            meta = event.object.get("metadata") or {}
            cache.services.pop((meta.get("namespace", ""), meta.get("name", "")), None)

    await _reflect(client, SERVICES_PATH, None, replace, apply, "services", jitter_source)


def object_watches_actor(*, client: Any, cache: ObjectCache, jitter_source: Callable[[], float] = random.random):
    """One watch per referenced object, started and stopped as pods register and release
    them, and one watch of all Services (the system:node role may list them).
    `jitter_source` draws the back-off's jitter in [0, 1)."""

    async def run(ctx: ActorContext) -> None:
        running: dict[ObjectKey, trio.CancelScope] = {}

        async def watch(key: ObjectKey, task_status=trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await _watch_object(client, cache, key, jitter_source)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_services, client, cache, jitter_source)
            while True:
                changed = cache.wanted_changed
                wanted = cache.wanted()
                for key in set(running) - wanted:
                    running.pop(key).cancel()
                cache.drop_unwanted()
                for key in wanted - set(running):
                    running[key] = await nursery.start(watch, key)
                await changed.wait()

    return run
