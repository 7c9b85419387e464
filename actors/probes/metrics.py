"""The Go kubelet's prober metrics, fed by the probe workers."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from pykubelet.messages.probes import ProbeKind, ProbeOutcome

# The label values Go uses (prober_manager.go: probeType.String(), probeResult*).
PROBE_TYPE = {"liveness": "Liveness", "readiness": "Readiness", "startup": "Startup"}
RESULT = {"success": "successful", "failure": "failed", "unknown": "unknown"}


class ProbeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.probes = Counter(
            "prober_probe_total",
            "Cumulative number of a liveness, readiness or startup probe for a container by result.",
            ["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
            registry=registry,
        )
        self.duration = Histogram(
            "prober_probe_duration_seconds",
            "Duration in seconds for a probe response.",
            ["probe_type", "container", "pod", "namespace"],
            registry=registry,
        )
        # The series' children by label values: labels() locks and validates on every call,
        # and 110 pods probed every second call it hundreds of times a second.
        self._counters: dict[tuple[str, ...], Any] = {}
        self._histograms: dict[tuple[str, ...], Any] = {}

    def observe(
        self, kind: ProbeKind, outcome: ProbeOutcome, seconds: float, *,
        container: str, pod: str, namespace: str, pod_uid: str,
    ) -> None:
        counted = (PROBE_TYPE[kind], RESULT[outcome], container, pod, namespace, pod_uid)
        _child(self._counters, self.probes, counted).inc()
        # As Go: failures are left out of the durations, since most of them are timeouts.
        if outcome != "failure":
            _child(self._histograms, self.duration, (PROBE_TYPE[kind], container, pod, namespace)).observe(seconds)

    def forget(self, kind: ProbeKind, *, container: str, pod: str, namespace: str, pod_uid: str) -> None:
        """Drop a stopped worker's series, as Go does when a worker ends."""
        for result in RESULT.values():
            key = (PROBE_TYPE[kind], result, container, pod, namespace, pod_uid)
            self._counters.pop(key, None)
            try:
                self.probes.remove(*key)
            except KeyError:
                pass
        key = (PROBE_TYPE[kind], container, pod, namespace)
        self._histograms.pop(key, None)
        try:
            self.duration.remove(*key)
        except KeyError:
            pass


def _child(cache: dict[tuple[str, ...], Any], metric: Any, key: tuple[str, ...]) -> Any:
    """The metric's child for these label values, from `cache` once it has been made."""
    child = cache.get(key)
    if child is None:
        child = cache[key] = metric.labels(*key)
    return child
