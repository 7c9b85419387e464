"""The object cache: what a pod references, registrations, snapshots that wait for the
first read, change notices, and the watches by name that the actor runs (fake API)."""

from __future__ import annotations

import base64

import msgspec
import pytest
import trio

from pykubelet.actors.volumes.object_cache import (
    ObjectCache,
    ObjectKey,
    ObjectNotReady,
    object_watches_actor,
    referenced_objects,
)
from pykubelet.messages.pod import Pod
from pykubelet.ports.apiserver import WatchEvent, error_from_status
from pykubelet.supervisor import ChildSpec
from tests.support.actors import running

CM = ObjectKey("configmaps", "ns", "cfg")
SECRET = ObjectKey("secrets", "ns", "s")


def pod(spec: dict) -> Pod:
    return msgspec.convert({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec}, Pod)


def test_every_reference_of_a_pod_is_found():
    p = pod({
        "volumes": [
            {"name": "a", "configMap": {"name": "cm-vol"}},
            {"name": "b", "secret": {"secretName": "s-vol"}},
            {"name": "c", "projected": {"sources": [{"configMap": {"name": "cm-proj"}}, {"secret": {"name": "s-proj"}},
                                                    {"serviceAccountToken": {"path": "token"}}]}},
        ],
        "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "s-from"}}]}],
        "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cm-from"}}],
                        "env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s-env", "key": "k"}}},
                                {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
    })
    assert referenced_objects(p) == {
        ObjectKey("configmaps", "ns", n) for n in ("cm-vol", "cm-proj", "cm-from", "cm-env")
    } | {ObjectKey("secrets", "ns", n) for n in ("s-vol", "s-proj", "s-from", "s-env")}


async def test_a_snapshot_waits_for_the_first_read_of_each_object():
    cache = ObjectCache()
    cache.use("u1", {CM, SECRET})
    with pytest.raises(ObjectNotReady, match="configmap ns/cfg"):
        await cache.snapshot({CM, SECRET}, timeout=0.01)
    cache.set(CM, {"data": {"a": "1"}, "binaryData": {"b": base64.b64encode(b"\x00").decode()}})
    cache.set(SECRET, None)
    snapshot = await cache.snapshot({CM, SECRET}, timeout=1)
    assert snapshot.config_map("ns", "cfg") == {"a": "1", "b": b"\x00"}  # as volumes read it
    assert snapshot.for_env().config_map("ns", "cfg") == {"a": "1"}  # env reads data only
    assert snapshot.secret("ns", "s") is None  # read, and not there


async def test_secret_data_is_decoded_from_base64():
    cache = ObjectCache()
    cache.use("u1", {SECRET})
    cache.set(SECRET, {"data": {"password": base64.b64encode(b"hunter2").decode()}})
    assert (await cache.snapshot({SECRET}, timeout=1)).secret("ns", "s") == {"password": b"hunter2"}


def test_a_change_after_the_first_read_names_the_pods_using_the_object():
    changed: list[set[str]] = []
    cache = ObjectCache(on_change=changed.append)
    cache.use("u1", {CM})
    cache.use("u2", {CM})
    cache.set(CM, {"data": {"a": "1"}})  # the first read is no change
    cache.set(CM, {"data": {"a": "1"}})  # nor is the same data again
    assert changed == []
    cache.set(CM, {"data": {"a": "2"}})
    assert changed == [{"u1", "u2"}]


def test_an_object_is_wanted_while_some_pod_uses_it():
    cache = ObjectCache()
    cache.use("u1", {CM, SECRET})
    cache.use("u2", {CM})
    cache.release("u1")
    assert cache.wanted() == {CM}
    cache.use("u2", set())
    assert cache.wanted() == set()


class FakeObjectsApi:
    """Lists one object by name and streams watch events the test sends."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.lists: list[tuple[str, dict]] = []
        self.list_times: list[float] = []
        self.list_errors = 0  # this many lists of an object by name fail with a 500
        self.send, self.receive = trio.open_memory_channel(10)

    async def list(self, path, params=None):
        self.lists.append((path, dict(params or {})))
        selector = (params or {}).get("fieldSelector", "")
        if not selector:
            return [], "1"
        self.list_times.append(trio.current_time())
        if self.list_errors:
            self.list_errors -= 1
            raise error_from_status(500, {"kind": "Status", "message": "etcd is sad"}, method="GET", path=path)
        name = selector.removeprefix("metadata.name=")
        return ([self.objects[name]] if name in self.objects else []), "1"

    def watch(self, path, params=None):
        api = self

        class Stream:
            resource_version = "1"

            async def __aenter__(self):
                return self

            async def __aexit__(self, *exc):
                return False

            def __aiter__(self):
                return self

            async def __anext__(self):
                if "fieldSelector" not in (params or {}):
                    await trio.sleep_forever()
                return await api.receive.receive()

        return Stream()


async def test_the_actor_watches_each_wanted_object_by_name_and_follows_changes(autojump_clock):
    api = FakeObjectsApi()
    api.objects["cfg"] = {"metadata": {"name": "cfg"}, "data": {"a": "1"}}
    changed: list[set[str]] = []
    cache = ObjectCache(on_change=changed.append)
    async with running(ChildSpec("object-watches", object_watches_actor(client=api, cache=cache))):
        cache.use("u1", {CM})
        snapshot = await cache.snapshot({CM}, timeout=5)
        assert snapshot.config_map("ns", "cfg") == {"a": "1"}
        assert ("/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name=cfg"}) in api.lists
        assert all(params.get("fieldSelector", "metadata.name=") .startswith("metadata.name=")
                   or path == "/api/v1/services" for path, params in api.lists)
        await api.send.send(WatchEvent(type="MODIFIED", object={"metadata": {"name": "cfg"}, "data": {"a": "2"}}))
        while not changed:
            await trio.sleep(0.01)
        assert changed == [{"u1"}]
        assert (await cache.snapshot({CM}, timeout=1)).config_map("ns", "cfg") == {"a": "2"}


async def test_an_object_released_and_used_again_before_the_watch_stops_is_still_read(autojump_clock):
    api = FakeObjectsApi()
    api.objects["cfg"] = {"metadata": {"name": "cfg"}, "data": {"a": "1"}}
    cache = ObjectCache()
    async with running(ChildSpec("object-watches", object_watches_actor(client=api, cache=cache))):
        cache.use("u1", {CM})
        await cache.snapshot({CM}, timeout=5)
        cache.release("u1")
        cache.use("u2", {CM})  # before the actor saw the release
        snapshot = await cache.snapshot({CM}, timeout=5)
        assert snapshot.config_map("ns", "cfg") == {"a": "1"}
        await trio.sleep(1)
        cache.release("u2")
        await trio.sleep(1)
        assert cache.wanted() == set()
        with pytest.raises(KeyError):
            await cache.snapshot({CM}, timeout=1)  # forgotten once the watch stopped


@pytest.mark.parametrize(
    "jitter, gaps",
    [(0.0, [0.5, 1, 2, 4, 8, 16, 30, 30]), (0.5, [0.625, 1.25, 2.5, 5, 10, 20, 37.5, 37.5])],
)
async def test_a_failing_object_watch_backs_off_half_a_second_doubling_to_30s_with_jitter(autojump_clock, jitter, gaps):
    api = FakeObjectsApi()
    api.objects["cfg"] = {"metadata": {"name": "cfg"}, "data": {"a": "1"}}
    api.list_errors = len(gaps)
    cache = ObjectCache()
    actor = object_watches_actor(client=api, cache=cache, jitter_source=lambda: jitter)
    async with running(ChildSpec("object-watches", actor)):
        cache.use("u1", {CM})
        snapshot = await cache.snapshot({CM}, timeout=200)
        assert snapshot.config_map("ns", "cfg") == {"a": "1"}
        times = api.list_times
        assert [round(b - a, 3) for a, b in zip(times[:-1], times[1:])] == gaps
