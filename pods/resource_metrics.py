"""/metrics/resource: the Go kubelet's resource metrics (what metrics-server scrapes in
newer versions) from the cpu-and-memory Summary, in Prometheus text with each sample's
own timestamp. Pure; actors/server/stats/ collects the Summary."""

from __future__ import annotations

import datetime

from .stats_summary import CpuJSON, MemoryJSON, SummaryJSON

_FAMILIES = (
    ("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the container in core-seconds"),
    ("container_memory_working_set_bytes", "gauge", "Current working set of the container in bytes"),
    ("container_start_time_seconds", "gauge", "Start time of the container since unix epoch in seconds"),
    ("node_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the node in core-seconds"),
    ("node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes"),
    ("pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time consumed by the pod in core-seconds"),
    ("pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes"),
    ("resource_scrape_error", "gauge", "1 if there was an error while getting container metrics, 0 otherwise"),
)


def _ms(rfc3339: str) -> int:
    return round(datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


def _labels(**labels: str) -> str:
    inner = ",".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                     for k, v in labels.items())
    return "{" + inner + "}" if inner else ""


def resource_metrics(summary: SummaryJSON | None) -> bytes:
    """The text of /metrics/resource; None (the summary failed): only resource_scrape_error 1."""
    samples: dict[str, list[str]] = {name: [] for name, _, _ in _FAMILIES}

    def cpu(name: str, value: CpuJSON | None, labels: str) -> None:
        if value is not None and value.usage_core_nano_seconds is not None:
            samples[name].append(f"{name}{labels} {value.usage_core_nano_seconds / 1e9!r} {_ms(value.time)}")

    def memory(name: str, value: MemoryJSON | None, labels: str) -> None:
        if value is not None and value.working_set_bytes is not None:
            samples[name].append(f"{name}{labels} {value.working_set_bytes} {_ms(value.time)}")

    if summary is None:
        samples["resource_scrape_error"].append("resource_scrape_error 1")
    else:
        samples["resource_scrape_error"].append("resource_scrape_error 0")
        cpu("node_cpu_usage_seconds_total", summary.node.cpu, "")
        memory("node_memory_working_set_bytes", summary.node.memory, "")
        for pod in summary.pods:
            ref = pod.pod_ref
            pod_labels = _labels(namespace=ref.namespace, pod=ref.name)
            cpu("pod_cpu_usage_seconds_total", pod.cpu, pod_labels)
            memory("pod_memory_working_set_bytes", pod.memory, pod_labels)
            for container in pod.containers:
                labels = _labels(container=container.name, namespace=ref.namespace, pod=ref.name)
                cpu("container_cpu_usage_seconds_total", container.cpu, labels)
                memory("container_memory_working_set_bytes", container.memory, labels)
                started = _ms(container.start_time) / 1000
                samples["container_start_time_seconds"].append(
                    f"container_start_time_seconds{labels} {started!r} {_ms(container.start_time)}")
    lines: list[str] = []
    for name, kind, help_text in _FAMILIES:
        if samples[name]:
            lines += [f"# HELP {name} [STABLE] {help_text}", f"# TYPE {name} {kind}", *samples[name]]
    return ("\n".join(lines) + "\n").encode()
