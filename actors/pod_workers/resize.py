"""In-place resize, for the pod worker (a mixin, as container_start.py and termination.py):
a running container whose spec's resources differ from what it runs with gets them through
CRI UpdateContainerResources, the pod's cgroup its new limits, unless the new requests do
not fit the node (PodResizePending). Go: doPodResizeAction and the allocation manager."""

from __future__ import annotations

import logging

from pykubelet.messages.pod import Pod, PodCondition
from pykubelet.messages.runtime import PodRuntimeStatus
from pykubelet.pods.actions import PodActions
from pykubelet.pods.admission import node_allocatable, resize_pending
from pykubelet.ports.cgroups import CgroupError
from pykubelet.ports.cri import CriError

log = logging.getLogger("pykubelet.podworker")


class PodResize:
    """Needs the worker's deps, fields, `applied` (container id -> the CRI resources it runs
    with) and `resize_pending`."""

    async def _resize(self, pod: Pod, runtime: PodRuntimeStatus, actions: PodActions) -> None:
        """In-place resize (Go: doPodResizeAction): running containers whose spec's resources
        differ from what they run with get UpdateContainerResources, and the pod's cgroup
        its new limits — before the containers when it grows, after them when it shrinks
        (a memory limit below what is in use is refused until the containers are smaller)."""
        manager = self.deps.containers
        if manager is None:
            return
        killed = {c.container_id for c in actions.containers_to_kill}
        specs = {c.name: c for c in [*pod.spec.init_containers, *pod.spec.containers]}
        changed = []
        for name, cid in running_containers(runtime).items():
            if name not in specs or cid in killed:
                continue
            wanted = manager.container_resources(pod, specs[name])
            if self.applied.get(cid) != wanted:
                changed.append((name, cid, wanted))
        if not changed:
            self.resize_pending = None
            return
        self.resize_pending = self._resize_fits(pod)
        if self.resize_pending is not None:
            log.info("resize pending: %s", self.resize_pending.message, extra=self.fields)
            return
        cri = self.deps.runtime.client
        try:
            await manager.resize_pod(pod)
            pod_first = True
        except CgroupError:
            pod_first = False  # shrinking below what is in use: the containers first
        for name, cid, wanted in changed:
            try:
                await cri.update_container_resources(cid, wanted)
            except CriError as exc:
                log.warning("resizing container %s failed: %s", name, exc, extra={**self.fields, "container": name})
                continue
            if cid in self.applied:
                log.info("container resized in place", extra={**self.fields, "container": name})
            self.applied[cid] = wanted
        if not pod_first:
            try:
                await manager.resize_pod(pod)
            except CgroupError as exc:
                log.warning("resizing the pod's cgroup failed: %s", exc, extra=self.fields)

    def _resize_fits(self, pod: Pod) -> PodCondition | None:
        allocatable = node_allocatable(self.deps.node.allocatable)
        others = [p for p in self.deps.statuses.pod_list().items if p.status.phase not in ("Succeeded", "Failed")]
        return resize_pending(pod, allocatable=allocatable, running_pods=others)


def running_containers(runtime: PodRuntimeStatus) -> dict[str, str]:
    """Container name -> id of its running container."""
    return {c.name: c.id for c in reversed(runtime.containers) if c.state == "running"}
