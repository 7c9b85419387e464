"""The Go kubelet's prober metrics, fed by the probe workers."""

from __future__ import annotations

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

    def observe(
        self, kind: ProbeKind, outcome: ProbeOutcome, seconds: float, *,
        container: str, pod: str, namespace: str, pod_uid: str,
    ) -> None:
        self.probes.labels(PROBE_TYPE[kind], RESULT[outcome], container, pod, namespace, pod_uid).inc()
        # As Go: failures are left out of the durations, since most of them are timeouts.
        if outcome != "failure":
            self.duration.labels(PROBE_TYPE[kind], container, pod, namespace).observe(seconds)

    def forget(self, kind: ProbeKind, *, container: str, pod: str, namespace: str, pod_uid: str) -> None:
        """Drop a stopped worker's series, as Go does when a worker ends."""
        for result in RESULT.values():
            try:
                self.probes.remove(PROBE_TYPE[kind], result, container, pod, namespace, pod_uid)
            except KeyError:
                pass
        try:
            self.duration.remove(PROBE_TYPE[kind], container, pod, namespace)
        except KeyError:
            pass
