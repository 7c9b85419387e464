"""Probes, pure: defaults, validation messages, port resolution and the threshold state machine."""

from __future__ import annotations

import msgspec
import pytest

from pykubelet.messages.pod import Container, Pod, Probe
from pykubelet.pods.probes import (
    INITIAL_RESULT,
    InvalidProbe,
    ProbeState,
    container_path,
    is_gated,
    resolve_port,
    resolve_probe,
    validate_probe,
    with_defaulted_probe,
)


def container(**fields) -> Container:
    return msgspec.convert({"name": "web", "image": "busybox", **fields}, Container)


def probe(**fields) -> Probe:
    return msgspec.convert(fields, Probe)


DEFAULTED = {"periodSeconds": 10, "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3}


# -- defaults ----------------------------------------------------------------------------------


def test_omitted_timings_get_the_go_defaults():
    resolved = resolve_probe(probe(tcpSocket={"port": 80}))
    assert (resolved.handler, resolved.initial_delay, resolved.timeout, resolved.period) == ("tcpSocket", 0, 1, 10)
    assert (resolved.success_threshold, resolved.failure_threshold) == (1, 3)
    assert resolved.action.port == 80


def test_given_timings_are_kept():
    resolved = resolve_probe(probe(exec={"command": ["true"]}, initialDelaySeconds=5, timeoutSeconds=3,
                                   periodSeconds=2, successThreshold=2, failureThreshold=7))
    assert (resolved.initial_delay, resolved.timeout, resolved.period) == (5, 3, 2)
    assert (resolved.success_threshold, resolved.failure_threshold) == (2, 7)


@pytest.mark.parametrize("fields", [{}, {"exec": {"command": ["true"]}, "tcpSocket": {"port": 1}}])
def test_a_probe_without_exactly_one_handler_cannot_be_resolved(fields):
    with pytest.raises(InvalidProbe, match="exactly one handler"):
        resolve_probe(probe(**fields))


def test_initial_results_are_gos():
    assert INITIAL_RESULT == {"readiness": "failure", "liveness": "success", "startup": "unknown"}


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, spec, ports, expected",
    [
        ("liveness", {}, [], ["spec.containers[0].livenessProbe: must have exactly one handler (exec, httpGet, tcpSocket, grpc)"]),
        ("readiness", {"exec": {"command": ["true"]}, "httpGet": {"port": 80}}, [],
         ["spec.containers[0].readinessProbe: must have exactly one handler (exec, httpGet, tcpSocket, grpc); it has exec, httpGet"]),
        ("readiness", {"tcpSocket": {"port": 80}, "periodSeconds": 0}, [],
         ["spec.containers[0].readinessProbe.periodSeconds: must be greater than 0, not 0"]),
        ("readiness", {"tcpSocket": {"port": 80}, "periodSeconds": -5}, [],
         ["spec.containers[0].readinessProbe.periodSeconds: must be greater than 0, not -5"]),
        ("startup", {"exec": {"command": []}}, [], ["spec.containers[0].startupProbe.exec.command: must not be empty"]),
        ("readiness", {"httpGet": {"port": "http"}}, [{"containerPort": 8080, "name": "metrics"}],
         ['spec.containers[0].readinessProbe.httpGet.port: no port named "http" in container "web" (named ports: "metrics")']),
        ("liveness", {"tcpSocket": {"port": "admin"}}, [],
         ['spec.containers[0].livenessProbe.tcpSocket.port: no port named "admin" in container "web" (named ports: none)']),
        ("liveness", {"grpc": {"port": 70000}}, [], ["spec.containers[0].livenessProbe.grpc.port: 70000 is not a port number (1-65535)"]),
        ("liveness", {"exec": {"command": ["true"]}, "successThreshold": 2}, [],
         ["spec.containers[0].livenessProbe.successThreshold: must be 1 for a liveness probe, not 2"]),
        ("startup", {"exec": {"command": ["true"]}, "successThreshold": 3}, [],
         ["spec.containers[0].startupProbe.successThreshold: must be 1 for a startup probe, not 3"]),
        ("readiness", {"exec": {"command": ["true"]}, "successThreshold": 3}, [], []),
        ("readiness", {"httpGet": {"port": "http"}}, [{"containerPort": 8080, "name": "http"}], []),
        ("liveness", {"initialDelaySeconds": -1, "exec": {"command": ["true"]}}, [],
         ["spec.containers[0].livenessProbe.initialDelaySeconds: must be greater than or equal to 0"]),
    ],
)
def test_validation_names_the_container_and_field(kind, spec, ports, expected):
    field = {"liveness": "livenessProbe", "readiness": "readinessProbe", "startup": "startupProbe"}[kind]
    c = container(ports=ports, **{field: {**DEFAULTED, **spec}})
    assert validate_probe(c, kind) == expected


def test_validation_of_a_container_without_that_probe_is_empty():
    assert validate_probe(container(), "liveness") == []


def test_validation_path_names_the_container_by_its_place_in_the_pod():
    pod = msgspec.convert({"spec": {"containers": [{"name": "a"}, {"name": "b", "livenessProbe": DEFAULTED}],
                                    "initContainers": [{"name": "side", "restartPolicy": "Always"}]}}, Pod)
    assert container_path(pod, "b") == "spec.containers[1]"
    assert container_path(pod, "side") == "spec.initContainers[0]"
    problems = validate_probe(pod.spec.containers[1], "liveness", container_path(pod, "b"))
    assert problems == ["spec.containers[1].livenessProbe: must have exactly one handler (exec, httpGet, tcpSocket, grpc)"]


# -- ports -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "port, expected",
    [(8080, 8080), ("http", 80), ("metrics", 9090), ("8443", 8443)],
)
def test_ports_resolve_by_number_name_or_digits(port, expected):
    c = container(ports=[{"containerPort": 80, "name": "http"}, {"containerPort": 9090, "name": "metrics"}])
    assert resolve_port(port, c) == expected


@pytest.mark.parametrize("port, message", [(0, "0 is not a port number"), (65536, "65536 is not a port number"),
                                           ("nope", 'no port named "nope"')])
def test_bad_ports_are_refused_with_why(port, message):
    with pytest.raises(InvalidProbe, match=message):
        resolve_port(port, container(ports=[{"containerPort": 80, "name": "http"}]))


# -- the state machine -------------------------------------------------------------------------

S, F, U = "success", "failure", "unknown"


@pytest.mark.parametrize(
    "kind, success_threshold, failure_threshold, outcomes, published",
    [
        # readiness starts failed; one success is enough with the default threshold
        ("readiness", 1, 3, [S], [S]),
        ("readiness", 1, 3, [S, F, F, F], [S, S, S, F]),
        ("readiness", 1, 3, [S, F, F, S, F, F, F], [S, S, S, S, S, S, F]),
        # successThreshold 3: three in a row, a failure in between starts over
        ("readiness", 3, 3, [S, S, F, S, S, S], [F, F, F, F, F, S]),
        # liveness starts alive; failureThreshold 3 means the third failure in a row
        ("liveness", 1, 3, [F, F, F], [S, S, F]),
        ("liveness", 1, 3, [F, F, S, F, F], [S, S, S, S, S]),
        ("liveness", 1, 1, [F], [F]),
        # startup starts unknown
        ("startup", 1, 3, [F, F], [U, U]),
        ("startup", 1, 3, [F, S], [U, S]),
        ("startup", 1, 2, [F, F], [U, F]),
        # unknown outcomes are thrown away: they neither count nor break a streak
        ("liveness", 1, 3, [F, U, F, U, U, F], [S, S, S, S, S, F]),
        ("readiness", 2, 3, [S, U, S], [F, F, S]),
        ("readiness", 1, 3, [U, U, U], [F, F, F]),
        ("startup", 1, 3, [U], [U]),
    ],
)
def test_thresholds(kind, success_threshold, failure_threshold, outcomes, published):
    state = ProbeState(kind, success_threshold, failure_threshold)
    assert [state.feed(outcome) for outcome in outcomes] == published


def test_a_failed_liveness_probe_holds_and_needs_a_new_streak():
    state = ProbeState("liveness", 1, 2)
    state.feed(F)
    assert not state.on_hold
    state.feed(F)
    assert state.on_hold and state.run == 0


def test_a_readiness_failure_does_not_hold():
    state = ProbeState("readiness", 1, 1)
    assert state.feed(F) == F and not state.on_hold


def test_a_succeeded_startup_probe_is_done():
    state = ProbeState("startup", 1, 3)
    assert not state.done
    state.feed(S)
    assert state.done and not state.on_hold


def test_a_resumed_state_starts_from_the_published_result():
    assert ProbeState("readiness", 1, 3, result=S).result == S


@pytest.mark.parametrize(
    "kind, has_startup, started, gated",
    [
        ("liveness", True, False, True),
        ("readiness", True, False, True),
        ("liveness", True, True, False),
        ("readiness", False, False, False),
        ("startup", True, False, False),
    ],
)
def test_startup_probe_gates_liveness_and_readiness(kind, has_startup, started, gated):
    c = container(startupProbe={"exec": {"command": ["true"]}} if has_startup else None)
    assert is_gated(kind, c, started) is gated


def test_a_container_gets_its_probe_defaulted_and_keeps_the_rest():
    c = with_defaulted_probe(container(livenessProbe={"tcpSocket": {"port": 80}}), "liveness")
    assert (c.liveness_probe.period_seconds, c.liveness_probe.timeout_seconds) == (10, 1)
    assert (c.liveness_probe.success_threshold, c.liveness_probe.failure_threshold) == (1, 3)
    assert validate_probe(c, "liveness") == []
    assert with_defaulted_probe(container(), "readiness") == container()
