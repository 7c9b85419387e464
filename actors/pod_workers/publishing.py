"""Publishing a pod's state, for the pod worker (a mixin, as container_start.py and
termination.py): the status computed from spec and runtime onto the status board (and a
word to the status manager when it changed), the running containers to the probe manager."""

from __future__ import annotations

import contextlib
import logging
import time

from pykubelet.messages.pod import Pod, PodCondition, PodStatus
from pykubelet.messages.pod_status_reports import PodStatusChanged
from pykubelet.messages.probes import ProbeTargets
from pykubelet.messages.runtime import PodRuntimeStatus
from pykubelet.pods.active_deadline import (
    DEADLINE_EXCEEDED,
    DEADLINE_EXCEEDED_MESSAGE,
    past_active_deadline,
    start_time_of,
)
from pykubelet.pods.eviction import DISRUPTION_TARGET, TERMINATION_BY_KUBELET
from pykubelet.pods.status import KubeletFailure, compute_pod_status, rfc3339
from pykubelet.supervisor import MailboxFull, UnknownAddress
from pykubelet.supervisor.verbosity import V

from . import termination_message
from .resize import running_containers

log = logging.getLogger("pykubelet.podworker")


class PodPublishing:
    """Needs the worker's uid, deps, fields, registry, `waiting`, `eviction`,
    `resize_pending`, `deadline_reported`, `running_reported`, `first_seen` and record()."""

    async def _tell_probes(self, pod: Pod | None, runtime: PodRuntimeStatus | None) -> None:
        """The running containers, for the probe manager (None: stop every probe)."""
        targets = ProbeTargets(pod_uid=self.uid, pod=None)
        if pod is not None and runtime is not None:
            running = running_containers(runtime)
            started = {c.name: c.started_at or c.created_at for c in runtime.containers if c.id in running.values()}
            targets = ProbeTargets(pod_uid=self.uid, pod=pod, running=running, started_at=started)
        if self.registry is None:
            return  # driven outside a tree (tests): no probe manager to tell
        with contextlib.suppress(UnknownAddress, MailboxFull):
            self.registry.lookup(self.deps.probe_manager).send_nowait(targets)

    def _tell_status_manager(self, message: PodStatusChanged) -> None:
        """Cluster mode: the status manager writes a changed status at once rather than at
        its next poll. A full mailbox loses nothing: the board holds the status."""
        if self.registry is None or self.deps.status_manager not in self.registry:
            return
        with contextlib.suppress(UnknownAddress, MailboxFull):
            self.registry.lookup(self.deps.status_manager).send_nowait(message)

    def _publish(self, pod: Pod, runtime: PodRuntimeStatus) -> None:
        deps = self.deps
        previous = deps.statuses.get(self.uid)
        runtime = termination_message.with_messages(
            pod, runtime, root_dir=deps.node.root_dir, pod_logs_dir=deps.node.pod_logs_dir
        )
        running = running_containers(runtime)
        exceeded = past_active_deadline(pod, time.time(), start_time_of(pod, previous))
        status: PodStatus = compute_pod_status(
            pod,
            runtime,
            waiting=self.waiting,
            runtime_name=deps.runtime.runtime_name,
            now=rfc3339(time.time()),
            host_ip=deps.node.host_ip,
            previous=previous,
            ready=deps.probe_results.ready(self.uid, running),
            started=deps.probe_results.started(self.uid, running),
            active_deadline_exceeded=exceeded,
            evicted=self._kubelet_failure(),
            resize_pending=self.resize_pending,
        )
        if exceeded and status.reason == DEADLINE_EXCEEDED and not self.deadline_reported:
            self.deadline_reported = True
            self.record(pod, None, "Normal", DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE)
        deps.statuses.set(pod, status)
        if status != previous:
            self._tell_status_manager(PodStatusChanged(pod_uid=self.uid))
        if status.phase == "Running" and not self.running_reported:
            self.running_reported = True
            deps.metrics.pod_start_duration.observe(time.time() - self.first_seen)
        if previous is None or previous.phase != status.phase:
            log.log(V(2), "pod phase %s", status.phase, extra=self.fields)

    def _kubelet_failure(self) -> KubeletFailure | None:
        eviction = self.eviction
        if eviction is None:
            return None
        condition = PodCondition(type=DISRUPTION_TARGET, status="True", reason=TERMINATION_BY_KUBELET,
                                 message=eviction.message) if eviction.disruption_target else None
        return KubeletFailure(reason=eviction.reason, message=eviction.message, condition=condition)
