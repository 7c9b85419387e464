"""Probe results and the probe manager's protocol (Go: pkg/kubelet/prober).

Pod workers tell the probe manager which containers run (ProbeTargets); probe workers
report each change of a result to the sync loop (ProbeResult), which re-syncs the pod.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .pod import Pod

ProbeKind = Literal["liveness", "readiness", "startup"]
ProbeOutcome = Literal["success", "failure", "unknown"]


class ProbeResult(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    pod_uid: str
    container_name: str
    container_id: str
    probe: ProbeKind
    result: ProbeOutcome
    message: str = ""  # why it failed, for events and the log


class ProbeTargets(msgspec.Struct, tag=True, tag_field="kind", frozen=True):
    """The containers of a pod that run now (name -> runtime container id). Sent by the
    pod worker after each sync; an empty map (or pod=None) stops every probe of the pod."""

    pod_uid: str
    pod: Pod | None
    running: dict[str, str] = {}
    started_at: dict[str, float] = {}  # name -> Unix seconds the container started


ProbeManagerMessage = ProbeTargets
