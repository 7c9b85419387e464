"""pykubelet-inspect pods: -o wide's columns (kubectl's IP and NODE; pykubelet's QOS, CPU,
MEMORY and LAST STATE), the AGE of a static pod, and the table in a narrow terminal. Each test
feeds PodList JSON as the daemon serves it; no daemon."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import msgspec
import pytest
from rich.console import Console

from pykubelet.cli import inspect
from pykubelet.messages.pod import PodList
from pykubelet.cli.inspect._pods import columns_that_fit

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
BASE = ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
WIDE = ["IP", "NODE", "QOS", "CPU", "MEMORY", "LAST STATE"]


def stamp(ago: timedelta) -> str:
    return (NOW - ago).isoformat().replace("+00:00", "Z")


def pod(name="web", *, namespace="default", created=timedelta(minutes=5), started=None, node="node1",
        ip="10.88.0.5", qos="Burstable", containers=None, init_containers=(), overhead=None, statuses=None,
        init_statuses=()):
    meta = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = stamp(created)
    spec = {"containers": list(containers if containers is not None else [{"name": "app"}])}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if overhead:
        spec["overhead"] = overhead
    if node:
        spec["nodeName"] = node
    status = {"phase": "Running",
              "containerStatuses": list(statuses if statuses is not None else [running("app")])}
    if init_statuses:
        status["initContainerStatuses"] = list(init_statuses)
    if ip:
        status["podIP"] = ip
    if qos:
        status["qosClass"] = qos
    if started is not None:
        status["startTime"] = stamp(started)
    return {"metadata": meta, "spec": spec, "status": status}


def running(name, *, restarts=0, last=None):
    status = {"name": name, "ready": True, "restartCount": restarts, "state": {"running": {}}}
    if last is not None:
        status["lastState"] = {"terminated": last}
    return status


def ended(exit_code, reason=None, ago=None, finished=None):
    term = {"exitCode": exit_code}
    if reason:
        term["reason"] = reason
    if ago is not None:
        term["finishedAt"] = stamp(ago)
    if finished is not None:
        term["finishedAt"] = finished
    return term


def container(name="app", *, requests=None, limits=None, restart_policy=None):
    spec = {"name": name, "resources": {}}
    if requests:
        spec["resources"]["requests"] = requests
    if limits:
        spec["resources"]["limits"] = limits
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def decode(*items) -> PodList:
    return msgspec.json.decode(json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(items)}),
                               type=PodList)


def printed(renderable, width=300) -> list[str]:
    """The lines as main() prints them to a terminal `width` wide: crop=False."""
    console = Console(record=True, width=width)
    console.print(renderable, crop=False)
    return [line.rstrip() for line in console.export_text().splitlines()]


def columns(header: str) -> list[str]:
    return header.replace("LAST STATE", "LAST_STATE").split()


# -- -o wide ---------------------------------------------------------------------------------


def test_wide_adds_kubectls_ip_and_node_then_qos_cpu_memory_and_last_state():
    pods = decode(
        pod("hello-node1", created=None, started=timedelta(hours=2),
            containers=[container(requests={"cpu": "100m", "memory": "64Mi"},
                                  limits={"cpu": "200m", "memory": "128Mi"})],
            statuses=[running("app", restarts=2, last=ended(137, "OOMKilled", timedelta(minutes=5)))]),
        pod("idle", namespace="kube-system", ip="", node="", qos="BestEffort"),
    )
    lines = printed(inspect.render_pods(pods, NOW, wide=True))
    assert columns(lines[0]) == BASE + ["IP", "NODE", "QOS", "CPU", "MEMORY", "LAST_STATE"]
    assert lines[1].split() == ["default", "hello-node1", "1/1", "Running", "2", "120m", "10.88.0.5", "node1",
                                "Burstable", "100m/200m", "64Mi/128Mi", "OOMKilled", "(137)", "5m", "ago"]
    assert lines[2].split() == ["kube-system", "idle", "1/1", "Running", "0", "5m", "<none>", "<none>",
                                "BestEffort", "-/-", "-/-", "<none>"]


def test_without_wide_the_columns_stay_kubectls():
    lines = printed(inspect.render_pods(decode(pod()), NOW))
    assert lines[0].split() == BASE
    assert lines[1].split() == ["default", "web", "1/1", "Running", "0", "5m"]


@pytest.mark.parametrize(
    "statuses, init_statuses, expected",
    [
        pytest.param([running("app")], (), "<none>", id="no_container_ended_before"),
        pytest.param([running("app", last=ended(1, "Error", timedelta(seconds=42)))], (), "Error (1) 42s ago",
                     id="reason_exit_code_and_age"),
        pytest.param([running("app", last=ended(0, "Completed", timedelta(hours=3)))], (), "Completed (0) 3h ago",
                     id="a_clean_exit"),
        pytest.param([running("app", last=ended(137, "OOMKilled", timedelta(minutes=30))),
                      running("sidecar", last=ended(2, "Error", timedelta(minutes=2)))], (),
                     "Error (2) 2m ago", id="the_most_recent_of_any_container"),
        pytest.param([running("app", last=ended(2, "Error", timedelta(minutes=2))),
                      running("sidecar", last=ended(137, "OOMKilled", timedelta(minutes=30)))], (),
                     "Error (2) 2m ago", id="the_most_recent_whatever_the_order"),
        pytest.param([running("app", last=ended(1, "Error", timedelta(hours=1)))],
                     [running("proxy", last=ended(143, "Error", timedelta(seconds=10)))],
                     "Error (143) 10s ago", id="init_containers_count_too"),
        pytest.param([running("app", last=ended(3))], (), "Terminated (3)", id="no_reason_and_no_finish_time"),
        pytest.param([running("app", last=ended(4, "Error", finished="yesterday")),
                      running("sidecar", last=ended(5, "Error", timedelta(days=3)))], (),
                     "Error (5) 3d ago", id="an_unreadable_time_counts_as_oldest"),
    ],
)
def test_last_state(statuses, init_statuses, expected):
    assert inspect.last_state(decode(pod(statuses=statuses, init_statuses=init_statuses)).items[0], NOW) == expected


@pytest.mark.parametrize(
    "containers, init_containers, overhead, cpu, memory",
    [
        pytest.param([container()], (), None, "-/-", "-/-", id="best_effort_sets_nothing"),
        pytest.param([container(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"})],
                     (), None, "100m/200m", "64Mi/128Mi", id="requests_and_limits"),
        pytest.param([container("a", requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "1", "memory": "1Gi"}),
                      container("b", requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "500m", "memory": "1Gi"})],
                     (), None, "350m/1500m", "128Mi/2Gi", id="summed_over_containers"),
        pytest.param([container(limits={"cpu": "2", "memory": "1G"})], (), None, "2/2", "1G/1G",
                     id="a_missing_request_is_its_limit"),
        pytest.param([container(requests={"cpu": "100m", "memory": "100M"})], (), None, "100m/-", "100M/-",
                     id="requests_only"),
        pytest.param([container("a", requests={"cpu": "100m"}, limits={"cpu": "200m", "memory": "128Mi"}),
                      container("b", requests={"cpu": "100m"}, limits={"cpu": "200m"})],
                     (), None, "200m/400m", "128Mi/-", id="one_container_without_a_limit_leaves_the_pod_unbounded"),
        pytest.param([container(requests={"cpu": "100m", "memory": "64Mi"})],
                     [container("setup", requests={"cpu": "500m", "memory": "32Mi"})], None, "500m/-", "64Mi/-",
                     id="an_init_container_needing_more_wins"),
        pytest.param([container(requests={"cpu": "100m"})],
                     [container("proxy", requests={"cpu": "50m"}, restart_policy="Always")], None, "150m/-", "-/-",
                     id="a_sidecar_adds_up"),
        pytest.param([container(limits={"cpu": "100m", "memory": "64Mi"})], (), {"cpu": "250m", "memory": "64Mi"},
                     "350m/350m", "128Mi/128Mi", id="overhead_added"),
        pytest.param([container(requests={"cpu": "lots"})], (), None, "<invalid>", "<invalid>",
                     id="not_a_quantity"),
    ],
)
def test_cpu_and_memory_are_the_pod_cgroups_request_slash_limit(containers, init_containers, overhead,
                                                                       cpu, memory):
    item = decode(pod(containers=containers, init_containers=init_containers, overhead=overhead)).items[0]
    assert inspect.pod_resources(item) == (cpu, memory)


# -- AGE -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "created, started, expected",
    [
        pytest.param(timedelta(minutes=5), None, "5m", id="since_creation"),
        pytest.param(timedelta(minutes=5), timedelta(hours=2), "5m", id="creation_wins_over_start"),
        pytest.param(None, timedelta(hours=2), "120m", id="static_pod_since_the_kubelet_started_it"),
        pytest.param(None, None, "<unknown>", id="neither"),
    ],
)
def test_age_of_a_pod_and_of_a_static_pod(created, started, expected):
    item = decode(pod(created=created, started=started)).items[0]
    assert inspect.pod_age(item, NOW) == expected
    assert printed(inspect.render_pods(decode(pod(created=created, started=started)), NOW))[1].split()[-1] == expected


# -- a narrow terminal -------------------------------------------------------------------------

NARROW = decode(
    pod("a-static-pod-with-a-rather-long-name-node1", created=None, started=timedelta(hours=2),
        containers=[container(requests={"cpu": "100m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"})],
        statuses=[running("app", restarts=12345, last=ended(137, "OOMKilled", timedelta(minutes=5)))]),
    pod("crashy", statuses=[{"name": "app", "ready": False, "restartCount": 4,
                              "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
)
FULL_ROW = ["default", "a-static-pod-with-a-rather-long-name-node1", "1/1", "Running", "12345", "120m", "10.88.0.5",
            "node1", "Burstable", "100m/200m", "64Mi/128Mi", "OOMKilled", "(137)", "5m", "ago"]
# name 42, header widths: NAMESPACE 9, READY 5, STATUS 16 (CrashLoopBackOff), RESTARTS 8, AGE 4
BASE_WIDTH = 9 + 42 + 5 + 16 + 8 + 4 + 2 * 5
WIDE_WIDTHS = [9, 5, 9, 9, 10, 22]  # IP, NODE, QOS, CPU, MEMORY, LAST STATE (+ 2 each between)


def shown_up_to(n):
    return BASE_WIDTH + sum(w + 2 for w in WIDE_WIDTHS[:n])


@pytest.mark.parametrize(
    "width, shown",
    [
        pytest.param(None, 6, id="a_pipe_gets_every_column"),
        pytest.param(shown_up_to(6), 6, id="everything_fits"),
        pytest.param(shown_up_to(6) - 1, 5, id="one_short_leaves_out_last_state"),
        pytest.param(shown_up_to(4), 4, id="cpu_fits_memory_not"),
        pytest.param(shown_up_to(1) + 1, 1, id="only_ip"),
        pytest.param(BASE_WIDTH, 0, id="kubectls_columns_exactly"),
        pytest.param(40, 0, id="narrower_than_kubectls_columns"),
    ],
)
def test_a_narrow_terminal_leaves_out_trailing_wide_columns_and_cuts_nothing(width, shown):
    lines = printed(inspect.render_pods(NARROW, NOW, wide=True, width=width), width=width or 300)
    assert columns(lines[0]) == BASE + [c.replace(" ", "_") for c in WIDE[:shown]]
    row = lines[1].split()
    assert row[:6] == FULL_ROW[:6]  # the name, the status and the counts whole
    assert row == FULL_ROW[:6 + shown] + (FULL_ROW[12:] if shown == 6 else [])
    assert lines[2].split()[:6] == ["default", "crashy", "0/1", "CrashLoopBackOff", "4", "5m"]
    assert not any("…" in line for line in lines)
    if width is not None and width >= BASE_WIDTH:
        assert max(len(line) for line in lines[:3]) <= width
    if shown < 6:
        left_out = ", ".join(WIDE[shown:])
        assert " ".join(lines[3:]).startswith(f"({left_out} left out: the terminal is {width} columns wide;")
    else:
        assert len(lines) == 3


@pytest.mark.parametrize("width", [20, 60, 80])
def test_the_plain_table_never_cuts_a_name_or_a_status(width):
    lines = printed(inspect.render_pods(NARROW, NOW, width=width), width=width)
    assert [line.split() for line in lines] == [
        BASE, FULL_ROW[:6], ["default", "crashy", "0/1", "CrashLoopBackOff", "4", "5m"],
    ]


@pytest.mark.parametrize(
    "widths, width, shown",
    [
        ([5, 5, 5, 5], None, 4),
        ([5, 5, 5, 5], 26, 4),
        ([5, 5, 5, 5], 25, 3),
        ([5, 5, 5, 5], 19, 3),
        ([5, 5, 5, 5], 18, 2),
        ([5, 5, 5, 5], 1, 2),
    ],
)
def test_columns_that_fit_drop_from_the_right_down_to_the_kept_ones(widths, width, shown):
    assert columns_that_fit(widths, width, keep=2) == shown
