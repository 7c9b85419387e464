"""The Go kubelet's pod and container start metrics, fed by the pod workers."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# The Go kubelet's buckets for kubelet_pod_start_duration_seconds.
POD_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600)


class PodMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.pod_start_duration = Histogram(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            buckets=POD_START_BUCKETS,
            registry=registry,
        )
        self.pod_worker_duration = Histogram(
            "kubelet_pod_worker_duration_seconds",
            "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
            ["operation"],
            registry=registry,
        )
        self.started_pods = Counter(
            "kubelet_started_pods", "Cumulative number of pods started", registry=registry
        )
        self.started_pods_errors = Counter(
            "kubelet_started_pods_errors", "Cumulative number of errors when starting pods", registry=registry
        )
        self.started_containers = Counter(
            "kubelet_started_containers",
            "Cumulative number of containers started",
            ["container_type"],
            registry=registry,
        )
        self.started_containers_errors = Counter(
            "kubelet_started_containers_errors",
            "Cumulative number of errors when starting containers",
            ["code", "container_type"],
            registry=registry,
        )
