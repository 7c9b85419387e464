"""The Go kubelet's runtime operation metrics, recorded by CriClient for every CRI call.

Names, help texts, the operation_type label and the histogram buckets are those of
pkg/kubelet/metrics (kubelet_runtime_operations_*), so existing dashboards read them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# metrics.ExponentialBuckets(.005, 2.5, 14) in the Go kubelet: 5 ms up to about 745 s.
RUNTIME_OPERATION_BUCKETS = tuple(0.005 * 2.5**i for i in range(14))


class RuntimeOperationMetrics:
    """kubelet_runtime_operations_total / _errors_total / _duration_seconds{operation_type}."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.operations = Counter(
            "kubelet_runtime_operations_total",
            "Cumulative number of runtime operations by operation type.",
            ["operation_type"],
            registry=registry,
        )
        self.errors = Counter(
            "kubelet_runtime_operations_errors_total",
            "Cumulative number of runtime operation errors by operation type.",
            ["operation_type"],
            registry=registry,
        )
        self.duration = Histogram(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations. Broken down by operation type.",
            ["operation_type"],
            buckets=RUNTIME_OPERATION_BUCKETS,
            registry=registry,
        )
        self._series: dict[str, tuple[Counter, Histogram]] = {}

    def record(self, operation: str, seconds: float, *, failed: bool) -> None:
        # The labelled series are looked up once per operation: every CRI call records. (An
        # errors series appears with the first error, as the Go kubelet's.)
        series = self._series.get(operation)
        if series is None:
            series = self._series[operation] = (self.operations.labels(operation), self.duration.labels(operation))
        series[0].inc()
        series[1].observe(seconds)
        if failed:
            self.errors.labels(operation).inc()
