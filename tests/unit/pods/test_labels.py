"""CRI labels and annotations: what the Go kubelet writes, and reading it back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pykubelet.messages.pod import (
    Container,
    ContainerPort,
    EnvVar,
    ExecAction,
    Lifecycle,
    LifecycleHandler,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
)
from pykubelet.pods import labels as L


def make_pod(**spec) -> Pod:
    return Pod(
        metadata=ObjectMeta(
            name="web",
            namespace="default",
            uid="uid-1",
            labels={"app": "web"},
            annotations={"note": "x"},
        ),
        spec=PodSpec(**spec),
    )


C = Container(name="nginx", image="nginx:1.25")


def test_sandbox_labels_carry_pod_labels_identity_and_the_managed_mark():
    assert L.sandbox_labels(make_pod(containers=[C])) == {
        "app": "web",
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": "uid-1",
        "io.pykubelet.managed": "true",
    }


def test_sandbox_annotations_are_the_pods_own():
    pod = make_pod(containers=[C])
    annotations = L.sandbox_annotations(pod)
    assert annotations == {"note": "x"}
    annotations["mutated"] = "1"
    assert pod.metadata.annotations == {"note": "x"}


def test_container_labels_name_pod_and_container_only():
    assert L.container_labels(make_pod(containers=[C]), C) == {
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": "uid-1",
        "io.kubernetes.container.name": "nginx",
        "io.pykubelet.managed": "true",
    }


PRESTOP = Lifecycle(pre_stop=LifecycleHandler(exec=ExecAction(command=["sh", "-c", "sleep 1"])))


@pytest.mark.parametrize(
    "behaviour, pod, container, restart_count, expected",
    [
        (
            "minimal container: hash, restart count, defaulted termination message, type",
            make_pod(containers=[C]),
            C,
            0,
            {
                "io.kubernetes.container.hash": L.container_hash(C),
                "io.kubernetes.container.restartCount": "0",
                "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                "io.kubernetes.container.terminationMessagePolicy": "File",
                "io.kubernetes.container.type": "container",
            },
        ),
        (
            "grace period, preStop handler and ports as JSON, init container type",
            make_pod(
                init_containers=[
                    Container(
                        name="init",
                        image="busybox",
                        lifecycle=PRESTOP,
                        ports=[ContainerPort(container_port=80, name="http")],
                        termination_message_policy="FallbackToLogsOnError",
                    )
                ],
                termination_grace_period_seconds=30,
            ),
            Container(
                name="init",
                image="busybox",
                lifecycle=PRESTOP,
                ports=[ContainerPort(container_port=80, name="http")],
                termination_message_policy="FallbackToLogsOnError",
            ),
            3,
            {
                "io.kubernetes.container.hash": L.container_hash(Container(name="init", image="busybox")),
                "io.kubernetes.container.restartCount": "3",
                "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                "io.kubernetes.container.terminationMessagePolicy": "FallbackToLogsOnError",
                "io.kubernetes.pod.terminationGracePeriod": "30",
                "io.kubernetes.container.preStopHandler": '{"exec":{"command":["sh","-c","sleep 1"]}}',
                "io.kubernetes.container.ports": '[{"name":"http","containerPort":80,"protocol":"TCP"}]',
                "io.kubernetes.container.type": "init",
            },
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_container_annotations(behaviour, pod, container, restart_count, expected):
    assert L.container_annotations(pod, container, restart_count) == expected


def test_ports_annotation_reads_back_as_the_go_kubelet_wrote_it():
    ports = [ContainerPort(container_port=53, protocol="UDP", host_port=5353, host_ip="127.0.0.1")]
    annotations = L.container_annotations(make_pod(containers=[C]), Container(name="dns", ports=ports), 0)
    assert json.loads(annotations[L.CONTAINER_PORTS_ANNOTATION]) == [
        {"hostPort": 5353, "containerPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1"}
    ]


@pytest.mark.parametrize(
    "behaviour, container, expected",
    [
        # The value Go's own TestHashContainer pins for this container (helpers_test.go).
        ("matches the Go kubelet bit for bit", Container(name="test_container", image="foo/image:v1",
                                                         args=["/bin/sh", "-c", "echo abc"],
                                                         ports=[ContainerPort(container_port=8001)]), "8e45cbd0"),
    ],
)
def test_container_hash_matches_go(behaviour, container, expected):
    assert L.container_hash(container) == expected


@pytest.mark.parametrize(
    "behaviour, changed, same_hash",
    [
        ("a new image changes the hash", Container(name="nginx", image="nginx:1.26"), False),
        ("a new name changes the hash", Container(name="nginx2", image="nginx:1.25"), False),
        ("command, env and resources do not (immutable in the API)",
         Container(name="nginx", image="nginx:1.25", command=["x"], env=[EnvVar(name="A", value="1")],
                   resources=ResourceRequirements(limits={"cpu": "1"})), True),
    ],
)
def test_container_hash_covers_name_and_image(behaviour, changed, same_hash):
    assert (L.container_hash(changed) == L.container_hash(C)) is same_hash


def test_container_hash_is_stable_across_processes():
    code = (
        "from pykubelet.messages.pod import Container; from pykubelet.pods.labels import container_hash;"
        "print(container_hash(Container(name='nginx', image='nginx:1.25')))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == L.container_hash(C)


@pytest.mark.parametrize(
    "behaviour, labels, managed, identity",
    [
        ("sandbox written by pykubelet", L.sandbox_labels(make_pod(containers=[C])), True, ("uid-1", "web", "default")),
        ("container written by pykubelet", L.container_labels(make_pod(containers=[C]), C), True,
         ("uid-1", "web", "default")),
        ("a Go kubelet's container: identity but not ours",
         {"io.kubernetes.pod.uid": "u", "io.kubernetes.pod.name": "n", "io.kubernetes.pod.namespace": "ns"},
         False, ("u", "n", "ns")),
        ("something else entirely", {"other": "x", "io.pykubelet.managed": "yes"}, False, None),
    ],
)
def test_reading_labels_back(behaviour, labels, managed, identity):
    assert L.is_managed(labels) is managed
    assert L.pod_identity(labels) == identity


def test_pod_labels_strip_what_the_kubelet_added():
    assert L.pod_labels(L.sandbox_labels(make_pod(containers=[C]))) == {"app": "web"}


@pytest.mark.parametrize(
    "behaviour, annotations, expected",
    [
        ("present", {L.RESTART_COUNT_ANNOTATION: "4"}, 4),
        ("missing", {}, 0),
        ("malformed", {L.RESTART_COUNT_ANNOTATION: "x"}, 0),
    ],
)
def test_restart_count_annotation(behaviour, annotations, expected):
    assert L.restart_count(annotations) == expected
