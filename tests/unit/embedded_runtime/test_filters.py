"""ListPodSandbox and ListContainers filters: id (or unambiguous prefix), state, sandbox,
labels."""

from __future__ import annotations

import pytest
from cri_api.v1 import api_pb2

from pykubelet.embedded_runtime.filters import (
    filter_containers,
    filter_sandboxes,
    labels_match,
    resolve_id,
)

IDS = ["abc123", "abd456", "ffff00"]


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [("abc123", "abc123"), ("abc", "abc123"), ("ab", None), ("f", "ffff00"), ("zz", None), ("", None)],
)
def test_resolve_id_takes_a_full_id_or_an_unambiguous_prefix(wanted, expected) -> None:
    assert resolve_id(wanted, IDS) == expected


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {"a": "1"}, True),
        ({"a": "1"}, {"a": "1", "b": "2"}, True),
        ({"a": "1", "b": "3"}, {"a": "1", "b": "2"}, False),
        ({"c": ""}, {"a": "1"}, False),
    ],
)
def test_every_label_of_the_selector_must_match(selector, labels, matches) -> None:
    assert labels_match(selector, labels) is matches


def sandbox(ident: str, state: int, **labels: str) -> api_pb2.PodSandbox:
    return api_pb2.PodSandbox(id=ident, state=state, labels=labels)


SANDBOXES = [
    sandbox("abc123", api_pb2.SANDBOX_READY, app="web"),
    sandbox("abd456", api_pb2.SANDBOX_NOTREADY, app="web"),
    sandbox("ffff00", api_pb2.SANDBOX_READY, app="db"),
]


def sandbox_state(state: int) -> api_pb2.PodSandboxStateValue:
    return api_pb2.PodSandboxStateValue(state=state)


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (None, ["abc123", "abd456", "ffff00"]),
        (api_pb2.PodSandboxFilter(), ["abc123", "abd456", "ffff00"]),
        (api_pb2.PodSandboxFilter(id="abd"), ["abd456"]),
        (api_pb2.PodSandboxFilter(id="ab"), []),
        (api_pb2.PodSandboxFilter(state=sandbox_state(api_pb2.SANDBOX_READY)), ["abc123", "ffff00"]),
        # SANDBOX_READY is 0: a state set to it still filters (HasField, not truthiness).
        (api_pb2.PodSandboxFilter(state=sandbox_state(api_pb2.SANDBOX_NOTREADY)), ["abd456"]),
        (api_pb2.PodSandboxFilter(label_selector={"app": "web"}), ["abc123", "abd456"]),
        (
            api_pb2.PodSandboxFilter(
                state=sandbox_state(api_pb2.SANDBOX_READY), label_selector={"app": "web"}
            ),
            ["abc123"],
        ),
    ],
)
def test_sandbox_filter(flt, expected) -> None:
    assert [s.id for s in filter_sandboxes(SANDBOXES, flt)] == expected


def container(ident: str, sandbox_id: str, state: int, **labels: str) -> api_pb2.Container:
    return api_pb2.Container(id=ident, pod_sandbox_id=sandbox_id, state=state, labels=labels)


CONTAINERS = [
    container("c1aaaa", "abc123", api_pb2.CONTAINER_RUNNING, name="web"),
    container("c2bbbb", "abc123", api_pb2.CONTAINER_EXITED, name="init"),
    container("c3cccc", "ffff00", api_pb2.CONTAINER_CREATED, name="db"),
]


def container_state(state: int) -> api_pb2.ContainerStateValue:
    return api_pb2.ContainerStateValue(state=state)


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (None, ["c1aaaa", "c2bbbb", "c3cccc"]),
        (api_pb2.ContainerFilter(id="c2"), ["c2bbbb"]),
        (api_pb2.ContainerFilter(pod_sandbox_id="abc123"), ["c1aaaa", "c2bbbb"]),
        (api_pb2.ContainerFilter(pod_sandbox_id="ff"), ["c3cccc"]),  # a sandbox id prefix
        (api_pb2.ContainerFilter(pod_sandbox_id="nothere"), []),
        # CONTAINER_CREATED is 0: a state set to it still filters.
        (api_pb2.ContainerFilter(state=container_state(api_pb2.CONTAINER_CREATED)), ["c3cccc"]),
        (api_pb2.ContainerFilter(state=container_state(api_pb2.CONTAINER_RUNNING)), ["c1aaaa"]),
        (api_pb2.ContainerFilter(label_selector={"name": "init"}), ["c2bbbb"]),
        (
            api_pb2.ContainerFilter(
                pod_sandbox_id="abc123", state=container_state(api_pb2.CONTAINER_EXITED)
            ),
            ["c2bbbb"],
        ),
    ],
)
def test_container_filter(flt, expected) -> None:
    assert [c.id for c in filter_containers(CONTAINERS, flt, IDS)] == expected
