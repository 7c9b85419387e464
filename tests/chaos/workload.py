"""The chaos tests' workload: static pods that are added, edited and removed at random
(seeded), and what the daemon and containerd say of them, read from outside."""

from __future__ import annotations

import os
import random
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from tests.support.pods import TRAPPING_LOOP, container, phase, pod_manifest, pods, write_manifest


def manifest(name: str, revision: int) -> dict:
    env = [{"name": "REVISION", "value": str(revision)}]  # an edit: a new config hash, a new pod
    return pod_manifest(name, [container("c", TRAPPING_LOOP, env=env)], terminationGracePeriodSeconds=1)


class Churn:
    """The wanted pods (name -> revision) of a manifest directory, and random changes to it."""

    def __init__(self, manifests: Path, rng: random.Random, pods: int) -> None:
        self.manifests = manifests
        self.rng = rng
        self.revisions: dict[str, int] = {}
        self._next = 0
        for _ in range(pods):
            self.add()

    def add(self, prefix: str = "p") -> str:
        name, self._next = f"{prefix}{self._next}", self._next + 1
        self.revisions[name] = 0
        write_manifest(self.manifests, manifest(name, 0))
        return name

    def step(self) -> str:
        """Add, edit or remove one pod; the name of the pod changed."""
        action = self.rng.choice(["add", "edit", "remove"] if len(self.revisions) > 2 else ["add"])
        if action == "add":
            return self.add()
        name = self.rng.choice(sorted(self.revisions))
        if action == "edit":
            self.revisions[name] += 1
            write_manifest(self.manifests, manifest(name, self.revisions[name]))
        else:
            del self.revisions[name]
            os.unlink(self.manifests / f"{name}.json")
        return name

    def steps(self, most: int = 3) -> set[str]:
        return {self.step() for _ in range(self.rng.randint(1, most))}


def containers_by_pod(daemon) -> dict[str, tuple[str, str, int]]:
    """Running pods: name -> (container ID, started at, restart count)."""
    found = {}
    for name, pod in pods(daemon).items():
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if phase("Running")(pod) and statuses and statuses[0].get("state", {}).get("running"):
            status = statuses[0]
            found[name] = (status["containerID"], status["state"]["running"]["startedAt"], status["restartCount"])
    return found


def running_in_containerd(containerd) -> list[str]:
    out = containerd.ctr("containers", "list", "-q", 'labels."io.cri-containerd.kind"==container')
    ids = [line.strip() for line in out.splitlines() if line.strip()]
    tasks = containerd.ctr("tasks", "list", "-q")
    running = {line.split()[0] for line in tasks.splitlines() if line.strip()}
    return [cid for cid in ids if cid in running]


def runtime_pods(containerd) -> dict[str, tuple[int, int]]:
    """What containerd runs, by the pod's name (node suffix removed): (ready sandboxes,
    running containers)."""
    found: dict[str, list[int]] = {}
    with grpc.insecure_channel(containerd.endpoint) as channel:
        runtime = api_pb2_grpc.RuntimeServiceStub(channel)
        ready = api_pb2.PodSandboxStateValue(state=api_pb2.SANDBOX_READY)
        for sandbox in runtime.ListPodSandbox(api_pb2.ListPodSandboxRequest(
                filter=api_pb2.PodSandboxFilter(state=ready)), timeout=10).items:
            found.setdefault(sandbox.metadata.name.rsplit("-", 1)[0], [0, 0])[0] += 1
        running = api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING)
        for item in runtime.ListContainers(api_pb2.ListContainersRequest(
                filter=api_pb2.ContainerFilter(state=running)), timeout=10).containers:
            pod = item.labels.get("io.kubernetes.pod.name", "?").rsplit("-", 1)[0]
            found.setdefault(pod, [0, 0])[1] += 1
    return {name: (sandboxes, containers) for name, (sandboxes, containers) in found.items()}
