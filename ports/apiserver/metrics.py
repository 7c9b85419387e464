"""client-go's REST client metrics, recorded by ApiClient for every request.

Names, help texts, labels and buckets are client-go's (k8s.io/client-go/tools/metrics as
registered by component-base), so the Go kubelet's dashboards read them. Create one per
registry and pass it to every ApiClient of the process (the main and the heartbeat client).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REQUEST_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class RestClientMetrics:
    """rest_client_requests_total{code,method,host},
    rest_client_request_duration_seconds{verb,host},
    rest_client_rate_limiter_duration_seconds{verb,host}.

    As in client-go, verb is the HTTP method and code is "<error>" when no answer came.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        )
        self.duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=REQUEST_DURATION_BUCKETS,
            registry=registry,
        )
        self.rate_limiter = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=REQUEST_DURATION_BUCKETS,
            registry=registry,
        )

    def record(self, method: str, host: str, code: str, seconds: float) -> None:
        self.requests.labels(code, method, host).inc()
        self.duration.labels(method, host).observe(seconds)

    def record_wait(self, method: str, host: str, seconds: float) -> None:
        self.rate_limiter.labels(method, host).observe(seconds)
