"""A seeded schedule of workload and faults for the simulation: plain data, one line a step.

generate(seed) draws it from random.Random(seed): pods written to the manifest directory,
edited and removed; containers that exit (their restart policy decides what follows);
actor crashes through the supervisor; CRI errors (the call failing before the runtime
acted, or after: a lost answer); the runtime going away; a stop that hangs; kill -9 of
the daemon. Every fault happens before `faults_end`; after it the schedule only waits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

POD_NAMES = ("web", "db", "job", "cache", "batch")
CONTAINER_NAMES = ("main", "side", "helper")
POLICIES = ("Always", "Always", "OnFailure", "Never")
ACTOR_PATHS = (
    "root/runtime-link", "root/pleg", "root/pod-workers", "root/sync-loop", "root/pod-config",
    "root/sources", "root/sources/file", "root/gc", "root/probes", "root/log-rotation",
)
CRI_OPERATIONS = (
    "run_podsandbox", "create_container", "start_container", "stop_container", "remove_container",
    "stop_podsandbox", "remove_podsandbox", "list_podsandbox", "list_containers", "container_status",
    "podsandbox_status", "image_status", "pull_image", "status",
)
CRI_CODES = ("UNKNOWN", "DEADLINE_EXCEEDED", "UNAVAILABLE", "INTERNAL")


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    ignore_term: bool = False  # SIGTERM ignored: a stop takes the whole grace period

    def render(self) -> str:
        return self.name + ("!" if self.ignore_term else "")


@dataclass(frozen=True)
class PodSpec:
    name: str
    containers: tuple[ContainerSpec, ...]
    restart_policy: str = "Always"
    host_network: bool = True
    grace: int = 2
    version: int = 1  # an edit bumps it: a new image tag, so a new static pod (new UID)

    def render(self) -> str:
        cs = ",".join(c.render() for c in self.containers)
        net = "host" if self.host_network else "pod"
        return f"{self.name}[{cs}] restart={self.restart_policy} net={net} grace={self.grace} v{self.version}"

    def manifest(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": "default"},
            "spec": {
                "restartPolicy": self.restart_policy,
                "hostNetwork": self.host_network,
                "terminationGracePeriodSeconds": self.grace,
                "containers": [
                    {
                        "name": c.name,
                        "image": f"registry.local/{c.name}:{self.version}",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/app", *(["ignore-term"] if c.ignore_term else [])],
                    }
                    for c in self.containers
                ],
            },
        }


@dataclass(frozen=True)
class Step:
    at: float  # virtual seconds since the first daemon started
    kind: str  # add | edit | delete | exit | crash | cri-error | runtime-down | hang-stop | kill-daemon
    pod: PodSpec | None = None
    pod_name: str = ""
    container: str = ""
    code: int = 0
    path: str = ""
    operation: str = ""
    after: bool = False
    duration: float = 0.0

    def render(self) -> str:
        head = f"t={self.at:7.2f} {self.kind}"
        if self.kind in ("add", "edit"):
            return f"{head} {self.pod.render()}"
        if self.kind == "delete":
            return f"{head} {self.pod_name}"
        if self.kind == "exit":
            return f"{head} {self.pod_name}/{self.container} code={self.code}"
        if self.kind == "crash":
            return f"{head} {self.path}"
        if self.kind == "cri-error":
            return f"{head} {self.operation} {self.code_name} {'after' if self.after else 'before'}"
        if self.kind == "runtime-down":
            return f"{head} for {self.duration:.1f}s"
        return head

    @property
    def code_name(self) -> str:
        return self.operation and CRI_CODES[self.code % len(CRI_CODES)]


@dataclass(frozen=True)
class Schedule:
    seed: int
    steps: tuple[Step, ...]
    faults_end: float  # the last step's time; convergence is judged after it
    label: str = field(default="", compare=False)

    def render(self) -> str:
        lines = [f"schedule seed={self.seed} ({len(self.steps)} steps)"]
        lines += ["  " + s.render() for s in self.steps]
        return "\n".join(lines)

    def without(self, indexes: set[int]) -> Schedule:
        steps = tuple(s for i, s in enumerate(self.steps) if i not in indexes)
        return replace(self, steps=steps, faults_end=max((s.at for s in steps), default=0.0))


def generate(seed: int, *, length: int | None = None, stop_faults: bool = True) -> Schedule:
    """`stop_faults` False: no fault aimed at StopContainer (hang-stop, an injected
    stop_container error), the kind that hits BUG 1 (see test_simulation.py)."""
    rng = random.Random(seed)
    operations = CRI_OPERATIONS if stop_faults else tuple(o for o in CRI_OPERATIONS if o != "stop_container")
    n = length if length is not None else rng.randint(6, 22)
    t = 0.0
    pods: dict[str, PodSpec] = {}
    steps: list[Step] = []
    for _ in range(n):
        t += round(rng.expovariate(1 / 6.0), 2) + 0.05
        choices = ["add"] * (4 if len(pods) < 3 else 1)
        if pods:
            choices += ["exit"] * 5 + ["edit", "delete"] + ["crash"] * 3 + ["cri-error"] * 3
            choices += ["runtime-down", "kill-daemon"] + (["hang-stop"] if stop_faults else [])
        kind = rng.choice(choices)
        if kind == "add":
            free = [p for p in POD_NAMES if p not in pods]
            if not free:
                kind = "exit"
            else:
                name = rng.choice(free)
                count = rng.choice((1, 1, 2, 3))
                containers = tuple(
                    ContainerSpec(c, ignore_term=rng.random() < 0.2) for c in CONTAINER_NAMES[:count]
                )
                pod = PodSpec(
                    name=name, containers=containers, restart_policy=rng.choice(POLICIES),
                    host_network=rng.random() < 0.7, grace=rng.choice((2, 3, 5, 10)),
                )
                pods[name] = pod
                steps.append(Step(t, "add", pod=pod))
                continue
        if kind == "edit":
            old = pods[rng.choice(sorted(pods))]
            pod = replace(old, version=old.version + 1, restart_policy=rng.choice(POLICIES))
            pods[pod.name] = pod
            steps.append(Step(t, "edit", pod=pod))
        elif kind == "delete":
            name = rng.choice(sorted(pods))
            del pods[name]
            steps.append(Step(t, "delete", pod_name=name))
        elif kind == "exit":
            pod = pods[rng.choice(sorted(pods))]
            c = rng.choice(pod.containers)
            steps.append(Step(t, "exit", pod_name=pod.name, container=c.name, code=rng.choice((0, 1, 1, 137))))
        elif kind == "crash":
            path = rng.choice(ACTOR_PATHS + ("worker",) * 3)
            if path == "worker":
                path = "root/pod-workers/" + rng.choice(sorted(pods))  # resolved to its UID when run
            steps.append(Step(t, "crash", path=path))
        elif kind == "cri-error":
            op = rng.choice(operations)
            steps.append(Step(t, "cri-error", operation=op, code=rng.randrange(len(CRI_CODES)),
                              after=rng.random() < 0.4))
        elif kind == "runtime-down":
            steps.append(Step(t, "runtime-down", duration=round(rng.uniform(0.5, 20.0), 1)))
        elif kind == "hang-stop":
            steps.append(Step(t, "hang-stop"))
        elif kind == "kill-daemon":
            steps.append(Step(t, "kill-daemon"))
    return Schedule(seed=seed, steps=tuple(steps), faults_end=t)
