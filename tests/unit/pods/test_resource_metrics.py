"""/metrics/resource from a Summary: the Go kubelet's metric names, labels and per-sample
timestamps, parseable Prometheus text; a failed scrape says so."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pykubelet.pods.resource_metrics import resource_metrics
from pykubelet.pods.stats_summary import (
    ContainerJSON,
    CpuJSON,
    MemoryJSON,
    NodeJSON,
    PodJSON,
    PodRefJSON,
    SummaryJSON,
)

T = "2026-11-24T12:00:00Z"


def samples(text: bytes) -> dict[tuple[str, tuple], tuple[float, object]]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): (s.value, s.timestamp)
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_node_pod_and_container_usage_with_their_own_timestamps():
    summary = SummaryJSON(
        node=NodeJSON(node_name="node1", start_time=T, cpu=CpuJSON(time=T, usage_core_nano_seconds=2_500_000_000),
                      memory=MemoryJSON(time=T, working_set_bytes=1024)),
        pods=[PodJSON(
            pod_ref=PodRefJSON(name="web", namespace="shop", uid="u"), start_time=T,
            cpu=CpuJSON(time=T, usage_core_nano_seconds=1_000_000_000),
            memory=MemoryJSON(time=T, working_set_bytes=512),
            containers=[ContainerJSON(name="app", start_time=T, cpu=CpuJSON(time=T, usage_core_nano_seconds=500_000_000),
                                      memory=MemoryJSON(time=T, working_set_bytes=256))],
        )],
    )
    got = samples(resource_metrics(summary))
    app = (("container", "app"), ("namespace", "shop"), ("pod", "web"))
    assert got[("container_cpu_usage_seconds_total", app)][0] == 0.5
    assert got[("container_memory_working_set_bytes", app)][0] == 256
    assert got[("pod_memory_working_set_bytes", (("namespace", "shop"), ("pod", "web")))][0] == 512
    assert got[("node_cpu_usage_seconds_total", ())][0] == 2.5
    assert got[("resource_scrape_error", ())][0] == 0
    assert float(got[("node_memory_working_set_bytes", ())][1]) == 1795521600.0  # the sample's own time


def test_a_failed_scrape_reports_resource_scrape_error_and_nothing_else():
    got = samples(resource_metrics(None))
    assert got == {("resource_scrape_error", ()): (1.0, None)}
