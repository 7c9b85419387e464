"""Cluster mode for the simulation: the simulated API server beside the runtime, the steps
that act on it (API pods created, edited and deleted as an administrator would; API
faults), and the invariants that only the API can tell:

  - the API's last status of every pod (a static pod's: its mirror pod's) equals the
    kubelet's final status: nothing lost, nothing stale;
  - no write of pods/status (or nodes/status) that changed nothing;
  - exactly one mirror pod per static pod, none for a static pod that is gone, and none
    deleted while its static pod existed unchanged;
  - a deleted API pod's object is removed, only after its containers stopped, and never
    while it was not being deleted;
  - the Node is registered and Ready, and its Lease renewed within its duration.
"""

from __future__ import annotations

import datetime
import functools
import time
from typing import Any

import msgspec
import trio

from pykubelet.messages.pod import PodStatus
from pykubelet.pods.manifest import CONFIG_MIRROR
from pykubelet.ports.apiserver import ApiClient

from .apiserver import SimApiServer, Write
from .schedule import Step

PODS = "/api/v1/namespaces/default/pods"
# Writes of the kubelet that must change what they write to (a heartbeat always does: the
# lease's renewTime; a node status patch may carry only a new heartbeat time, a change too).
CHANGING_WRITES = ("pods/status", "nodes/status")
_KUBELET_STATUS_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(PodStatus))


class ClusterSide:
    """The API server of one simulated cluster, and what the harness checks against it."""

    def __init__(self, harness, node_name: str) -> None:
        self.harness = harness
        self.node_name = node_name
        self.user = f"system:node:{node_name}"
        self.server = SimApiServer(node_name)
        self.server.on_write = self._check_write
        self.created_at: dict[str, float] = {}  # API pod UID -> trio time of its creation
        self.deleted: dict[str, str] = {}  # UIDs of the API pods the schedule deleted -> name

    def client_factory(self):
        """What the daemon constructs in place of ApiClient: the same client, on this server."""
        return functools.partial(ApiClient, transport=self.server.transport())

    # -- steps ---------------------------------------------------------------------------

    async def step(self, step: Step) -> None:
        model, server = self.harness.model, self.server
        name = step.pod.name if step.pod is not None else step.pod_name
        if step.kind in ("api-edit", "api-delete") and name not in model.pods:
            return  # its api-add was shrunk away
        if step.kind == "api-add" and name in model.pods:
            return  # (a shrunk schedule that lost the delete before it)
        if step.kind == "api-add":
            status, answer = await server.admin("POST", PODS, step.pod.manifest(self.node_name))
            if status != 201:
                raise AssertionError(f"the API server refused {step.pod.render()}: {status} {answer}")
            self.harness.api_pod_added(step.pod, answer["metadata"]["uid"])
        elif step.kind == "api-edit":
            old = model.pods.get(step.pod.name)
            status, answer = await server.admin("PATCH", f"{PODS}/{step.pod.name}", _edit_patch(old.spec, step.pod),
                                                content_type="application/strategic-merge-patch+json")
            if status != 200:
                raise AssertionError(f"the API server refused the edit {step.pod.render()}: {status} {answer}")
            self.harness.api_pod_edited(old, step.pod)
        elif step.kind == "api-delete":
            old = model.pods.get(step.pod_name)
            await server.admin("DELETE", f"{PODS}/{step.pod_name}")  # graceful: its own grace period
            self.deleted[old.uid] = step.pod_name
            self.harness.api_pod_deleted(old)
        elif step.kind == "api-fail":
            server.fail(step.code, count=step.count, resources=[step.resource] if step.resource else None)
        elif step.kind == "api-conflict":
            server.fail(409, count=step.count, verbs=["update", "patch"], resources=[step.resource])
        elif step.kind == "api-latency":
            server.latency(step.code / 1000, step.duration)
        elif step.kind == "api-reset":
            server.reset(step.duration)
        elif step.kind == "api-hang":
            server.hang(step.duration)
        elif step.kind == "api-lose":
            server.lose_answers += step.count
        elif step.kind == "api-expire":
            server.expire_watches()

    # -- invariants while it runs ----------------------------------------------------------

    def _check_write(self, write: Write) -> None:
        if write.user != self.user:
            return
        if write.method in ("PATCH", "PUT") and write.resource in CHANGING_WRITES and not write.changed:
            self.harness.violate(f"{write.method} {write.resource} of {write.name} changed nothing: {write.body}")
        if write.method == "POST" and write.resource == "pods" and write.after is not None:
            self.created_at[write.after["metadata"]["uid"]] = write.at
        if write.method == "DELETE" and write.resource == "pods" and write.before is not None:
            self._check_pod_delete(write)

    def _check_pod_delete(self, write: Write) -> None:
        meta = write.before["metadata"]
        uid, mirror_of = meta["uid"], (meta.get("annotations") or {}).get(CONFIG_MIRROR)
        if mirror_of is not None:
            static = self.harness.static_present_since(mirror_of)
            created = self.created_at.get(uid)
            if static is not None and created is not None and static <= created:
                self.harness.violate(f"mirror pod {write.name} deleted while its static pod was there, "
                                     f"unchanged since before the mirror pod was made")
            return
        if not meta.get("deletionTimestamp"):
            self.harness.violate(f"the kubelet deleted API pod {write.name} ({uid[:8]}), which nobody deleted")
        running = self.harness.runtime.running(uid)
        if any(running.values()):
            self.harness.violate(f"API pod {write.name} ({uid[:8]}) removed while containers still ran: "
                                 f"{sorted(running)}")

    # -- invariants once converged ---------------------------------------------------------

    async def wait_faults_used_up(self, *, limit: float) -> None:
        """Until no injected API fault is active any more (a count not yet used up, a window
        not yet over), or until `limit` (trio time)."""
        while any(f.active() for f in self.server.faults.faults) and trio.current_time() < limit:
            await trio.sleep(1.0)

    def problems(self, statuses) -> list[str]:
        """What still differs between the API and the kubelet (empty once converged)."""
        model = self.harness.model
        pods = self.server.pods()
        by_uid = {p["metadata"]["uid"]: p for p in pods}
        mirrors: dict[str, list[dict]] = {}
        for p in pods:
            mirror_of = ((p["metadata"].get("annotations") or {}).get(CONFIG_MIRROR))
            if mirror_of is not None:
                mirrors.setdefault(mirror_of, []).append(p)
        out = []
        wanted_static = set()
        for pod in model.pods.values():
            if pod.spec.api:
                obj = by_uid.get(pod.uid)
                if obj is None:
                    out.append(f"API pod {pod.spec.name} ({pod.uid[:8]}) is gone from the API server")
                    continue
            else:
                wanted_static.add(pod.uid)
                found = mirrors.get(pod.uid, [])
                if len(found) != 1:
                    out.append(f"static pod {pod.spec.name} ({pod.uid[:8]}) has {len(found)} mirror pods")
                    continue
                obj = found[0]
            kubelet = statuses.get(pod.uid)
            differs = status_difference(obj.get("status") or {}, kubelet)
            if differs:
                out.append(f"the API's status of {pod.spec.name} ({pod.uid[:8]}) is not the kubelet's: {differs}")
        for mirror_of, found in sorted(mirrors.items()):
            if mirror_of not in wanted_static:
                out.append(f"{len(found)} mirror pods of static pod {mirror_of[:8]}, which is gone")
        for uid, name in sorted(self.deleted.items()):
            if uid in by_uid:
                out.append(f"deleted API pod {name} ({uid[:8]}) is still in the API server")
        return out + self._node_problems()

    def _node_problems(self) -> list[str]:
        """The Node is registered and Ready; its Lease is held and was renewed within its
        duration (the node controller would call the node dead otherwise)."""
        out = []
        node = self.server.store.get("nodes", "", self.node_name)
        ready = [c for c in ((node or {}).get("status") or {}).get("conditions", []) if c.get("type") == "Ready"]
        if node is None or not ready or ready[0].get("status") != "True":
            out.append(f"node {self.node_name} is not registered Ready: {ready or node}")
        lease = self.server.store.get("leases", "kube-node-lease", self.node_name)
        spec = (lease or {}).get("spec") or {}
        renewed = _unix(spec["renewTime"]) if spec.get("renewTime") else None
        now = time.time()
        if spec.get("holderIdentity") != self.node_name or renewed is None or now - renewed > spec.get("leaseDurationSeconds", 0):
            out.append(f"the node lease is not held or not renewed in time (now {now:.0f}): {spec}")
        return out


def status_difference(api: dict[str, Any], kubelet: PodStatus | None) -> str:
    """'' when the API's status says what the kubelet's does; else the first difference.
    Only the fields the kubelet writes count; conditions by type, for the types it sets."""
    if kubelet is None:
        return "the kubelet has no status"
    mine = _normal(msgspec.to_builtins(kubelet))
    theirs = _normal({k: v for k, v in api.items() if k in _KUBELET_STATUS_FIELDS})
    my_conditions = {c["type"]: c for c in mine.pop("conditions", [])}
    their_conditions = {c["type"]: c for c in theirs.pop("conditions", []) if c["type"] in my_conditions}
    if my_conditions != their_conditions:
        return f"conditions: API {their_conditions} kubelet {my_conditions}"
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            return f"{key}: API {theirs.get(key)!r} kubelet {mine.get(key)!r}"
    return ""


def _unix(rfc3339: str) -> float:
    return datetime.datetime.strptime(rfc3339.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _normal(value: Any) -> Any:
    """Without what the API server drops (nulls, empty lists and maps) or the kubelet does
    not compare (lastProbeTime)."""
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items() if k != "lastProbeTime"}
        return {k: v for k, v in out.items() if v not in (None, [], {}, "")}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _edit_patch(old, new) -> dict[str, Any]:
    """The strategic merge patch an administrator sends for an edit of mutable fields."""
    spec: dict[str, Any] = {}
    changed = [c for c, o in zip(new.containers, old.containers) if c.image != o.image]
    if changed:
        images = {c["name"]: c["image"] for c in new.manifest()["spec"]["containers"]}
        spec["containers"] = [{"name": c.name, "image": images[c.name]} for c in changed]
    if new.deadline != old.deadline:
        spec["activeDeadlineSeconds"] = new.deadline
    patch: dict[str, Any] = {"spec": spec} if spec else {}
    if new.label != old.label:
        patch["metadata"] = {"labels": {"revision": str(new.label)}}
    return patch

