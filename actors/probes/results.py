"""The probe results board: the last published result of every probe, per container.

Probe workers write it (Go's results managers for liveness, readiness and startup); pod
workers read it when they compute a pod's status and actions. Every entry carries the
container id it is about, so a result never outlives its container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pykubelet.messages.probes import ProbeKind, ProbeOutcome

Key = tuple[str, str, ProbeKind]  # (pod uid, container name, kind)


@dataclass(frozen=True)
class BoardEntry:
    container_id: str
    result: ProbeOutcome
    message: str = ""


class ProbeResults:
    def __init__(self) -> None:
        self._entries: dict[Key, BoardEntry] = {}

    # -- written by probe workers and the probe manager ------------------------------------

    def set(
        self, pod_uid: str, container_name: str, kind: ProbeKind, container_id: str,
        result: ProbeOutcome, message: str = "",
    ) -> bool:
        """Publish a result; whether it changed (a new container always counts as a change)."""
        key = (pod_uid, container_name, kind)
        old = self._entries.get(key)
        self._entries[key] = BoardEntry(container_id, result, message)
        return old is None or old.container_id != container_id or old.result != result

    def remove(self, pod_uid: str, container_name: str, kind: ProbeKind) -> None:
        self._entries.pop((pod_uid, container_name, kind), None)

    def remove_pod(self, pod_uid: str) -> None:
        for key in [key for key in self._entries if key[0] == pod_uid]:
            del self._entries[key]

    # -- read by pod workers ------------------------------------------------------------------

    def get(self, pod_uid: str, container_name: str, kind: ProbeKind) -> BoardEntry | None:
        return self._entries.get((pod_uid, container_name, kind))

    def keys(self) -> list[Key]:
        return list(self._entries)

    def ready(self, pod_uid: str, running: Mapping[str, str] | None = None) -> dict[str, bool]:
        """Container name -> readiness, for the containers that have a readiness result.

        `running` (name -> current container id), when given, leaves out results about
        other containers (an earlier incarnation of the same name). A container absent
        here has no result yet: ready if it has no readiness probe, else not ready
        (pods.status.compute_pod_status reads it that way)."""
        return {name: e.result == "success" for name, e in self._of(pod_uid, "readiness", running).items()}

    def started(self, pod_uid: str, running: Mapping[str, str] | None = None) -> dict[str, bool]:
        """Container name -> started, as ready() for the startup probe."""
        return {name: e.result == "success" for name, e in self._of(pod_uid, "startup", running).items()}

    def failed_liveness(self, pod_uid: str, running: Mapping[str, str] | None = None) -> dict[str, str]:
        """Container name -> why, for containers whose liveness probe failed: to be killed
        and restarted by their restart policy (Go: "Container x failed liveness probe")."""
        return self._failed(pod_uid, "liveness", running)

    def failed_startup(self, pod_uid: str, running: Mapping[str, str] | None = None) -> dict[str, str]:
        """Container name -> why, for containers whose startup probe failed (restart them)."""
        return self._failed(pod_uid, "startup", running)

    def _failed(self, pod_uid: str, kind: ProbeKind, running: Mapping[str, str] | None) -> dict[str, str]:
        return {name: e.message for name, e in self._of(pod_uid, kind, running).items() if e.result == "failure"}

    def _of(self, pod_uid: str, kind: ProbeKind, running: Mapping[str, str] | None) -> dict[str, BoardEntry]:
        return {
            name: entry
            for (uid, name, k), entry in self._entries.items()
            if uid == pod_uid and k == kind and (running is None or running.get(name) == entry.container_id)
        }

    def __len__(self) -> int:
        return len(self._entries)
