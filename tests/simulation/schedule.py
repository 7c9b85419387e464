"""A seeded schedule of workload and faults for the simulation: plain data, one line a step.

generate(seed) draws it from random.Random(seed): pods written to the manifest directory,
edited and removed; containers that exit (their restart policy decides what follows);
actor crashes through the supervisor; CRI errors (the call failing before the runtime
acted, or after: a lost answer); the runtime going away; a stop that hangs; kill -9 of
the daemon. Every fault happens before `faults_end`; after it the schedule only waits.

generate(seed, cluster=True) plays cluster mode: beside the static pods (now with mirror
pods), pods created in the API server bound to the node, edited in their mutable fields
(a container's image, activeDeadlineSeconds, labels) and deleted gracefully; and API
faults: errors (500, 503, 429), 409 conflicts on writes, latency, requests held unanswered
(hang), connection resets (open watches cut), lost answers (the server acted, the client
saw a reset) and watch history compacted (410 Gone, a re-list).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

POD_NAMES = ("web", "db", "job", "cache", "batch")
API_POD_NAMES = ("front", "queue", "report", "proxy", "worker")
CONTAINER_NAMES = ("main", "side", "helper")
POLICIES = ("Always", "Always", "OnFailure", "Never")
ACTOR_PATHS = (
    "root/runtime-link", "root/pleg", "root/pod-workers", "root/sync-loop", "root/pod-config",
    "root/sources", "root/sources/file", "root/gc", "root/probes", "root/log-rotation",
)
CLUSTER_ACTOR_PATHS = (
    "root/sources/api", "root/node-status", "root/node-lease", "root/event-sink", "root/status-manager",
    "root/mirror-pods", "root/object-watches",
)
API_FAULT_STATUSES = (500, 503, 429)
API_FAULT_RESOURCES = (None, "pods", "pods/status", "leases", "nodes/status", "events")
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
    image: int = 0  # an API pod's edit of this container's image bumps it

    def render(self) -> str:
        return self.name + ("!" if self.ignore_term else "") + (f"@{self.image}" if self.image else "")


@dataclass(frozen=True)
class PodSpec:
    name: str
    containers: tuple[ContainerSpec, ...]
    restart_policy: str = "Always"
    host_network: bool = True
    grace: int = 2
    version: int = 1  # an edit bumps it: a new image tag, so a new static pod (new UID)
    api: bool = False  # created in the API server (bound to the node), not a manifest file
    token: bool = False  # an API pod: the service account token is mounted (a projected volume)
    deadline: int | None = None  # activeDeadlineSeconds (only ever set long: no pod reaches it)
    label: int = 0  # an edit of the labels only

    def render(self) -> str:
        cs = ",".join(c.render() for c in self.containers)
        net = "host" if self.host_network else "pod"
        extra = " api" * self.api + " token" * self.token + (f" deadline={self.deadline}" if self.deadline else "")
        extra += f" label={self.label}" if self.label else ""
        return f"{self.name}[{cs}] restart={self.restart_policy} net={net} grace={self.grace} v{self.version}{extra}"

    def manifest(self, node_name: str = "") -> dict:
        """The manifest file (a static pod), or with node_name the API object bound to it."""
        metadata: dict = {"name": self.name, "namespace": "default"}
        if self.label:
            metadata["labels"] = {"revision": str(self.label)}
        extra: dict = {}
        if self.api:
            extra = {"nodeName": node_name, "automountServiceAccountToken": self.token}
        if self.deadline is not None:
            extra["activeDeadlineSeconds"] = self.deadline
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                **extra,
                "restartPolicy": self.restart_policy,
                "hostNetwork": self.host_network,
                "terminationGracePeriodSeconds": self.grace,
                "containers": [
                    {
                        "name": c.name,
                        "image": f"registry.local/{c.name}:{self.version}" + (f".{c.image}" if c.image else ""),
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
    # add | edit | delete | exit | crash | cri-error | runtime-down | hang-stop | kill-daemon
    # | restart-daemon; cluster mode: api-add | api-edit | api-delete | api-fail | api-conflict
    # | api-latency | api-reset | api-hang | api-lose | api-expire
    kind: str
    pod: PodSpec | None = None
    pod_name: str = ""
    container: str = ""
    code: int = 0
    path: str = ""
    operation: str = ""
    after: bool = False
    duration: float = 0.0
    resource: str = ""  # api-fail, api-conflict: the resource it hits ("": every one)
    count: int = 0  # api-fail, api-conflict, api-lose: how many requests it hits

    def render(self) -> str:
        head = f"t={self.at:7.2f} {self.kind}"
        if self.kind in ("add", "edit", "api-add", "api-edit"):
            return f"{head} {self.pod.render()}"
        if self.kind in ("delete", "api-delete"):
            return f"{head} {self.pod_name}"
        if self.kind in ("api-fail", "api-conflict"):
            return f"{head} {self.code} x{self.count} {self.resource or 'all'}"
        if self.kind in ("api-latency", "api-reset", "api-hang"):
            return f"{head} for {self.duration:.1f}s" + (f" ({self.code}ms)" if self.code else "")
        if self.kind == "api-lose":
            return f"{head} x{self.count}"
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
    cluster: bool = False  # cluster mode: the daemon has a (simulated) API server

    def render(self) -> str:
        mode = " cluster" if self.cluster else ""
        lines = [f"schedule seed={self.seed}{mode} ({len(self.steps)} steps)"]
        lines += ["  " + s.render() for s in self.steps]
        return "\n".join(lines)

    def without(self, indexes: set[int]) -> Schedule:
        steps = tuple(s for i, s in enumerate(self.steps) if i not in indexes)
        return replace(self, steps=steps, faults_end=max((s.at for s in steps), default=0.0))


def generate(seed: int, *, length: int | None = None, stop_faults: bool = True, cluster: bool = False) -> Schedule:
    """`stop_faults` False: no fault aimed at StopContainer (hang-stop, an injected
    stop_container error), the kind that hits BUG 1 (see test_simulation.py). `cluster`:
    cluster mode, with API pods and API faults beside the static pods."""
    rng = random.Random(seed)
    operations = CRI_OPERATIONS if stop_faults else tuple(o for o in CRI_OPERATIONS if o != "stop_container")
    n = length if length is not None else rng.randint(6, 22)
    t = 0.0
    pods: dict[str, PodSpec] = {}
    api_bases: dict[str, str] = {}  # an API pod's base name -> its current name
    api_lives: Counter[str] = Counter()
    steps: list[Step] = []
    for _ in range(n):
        t += round(rng.expovariate(1 / 6.0), 2) + 0.05
        statics = [p for p in pods.values() if not p.api]
        apis = [p for p in pods.values() if p.api]
        choices = ["add"] * (4 if len(statics) < (2 if cluster else 3) else 1)
        if cluster:
            choices += ["api-add"] * (4 if len(apis) < 3 else 1)
            choices += ["api-fail", "api-conflict", "api-latency", "api-reset", "api-lose", "api-expire", "api-hang"]
        if pods:  # (this order keeps a standalone seed's schedule as it always was)
            choices += ["exit"] * 5 + ["edit", "delete"] * bool(statics) + ["crash"] * 3 + ["cri-error"] * 3
            choices += ["runtime-down", "kill-daemon"] + (["hang-stop"] if stop_faults else [])
        if apis:
            choices += ["api-edit"] * 2 + ["api-delete"]
        kind = rng.choice(choices)
        if kind in ("add", "api-add"):
            api = kind == "api-add"
            free = [p for p in (API_POD_NAMES if api else POD_NAMES) if p not in pods and p not in api_bases]
            if not free:
                kind = "exit"
            else:
                name = rng.choice(free)
                if api:  # a deleted API pod's name may be held a while: a new name each time
                    api_lives[name] += 1
                    api_bases[name] = name if api_lives[name] == 1 else f"{name}-{api_lives[name]}"
                    name = api_bases[name]
                count = rng.choice((1, 1, 2, 3))
                containers = tuple(
                    ContainerSpec(c, ignore_term=rng.random() < 0.2) for c in CONTAINER_NAMES[:count]
                )
                pod = PodSpec(
                    name=name, containers=containers, restart_policy=rng.choice(POLICIES),
                    host_network=rng.random() < 0.7, grace=rng.choice((2, 3, 5, 10)),
                    api=api, token=api and rng.random() < 0.3,
                )
                pods[name] = pod
                steps.append(Step(t, kind, pod=pod))
                continue
        if kind == "edit":
            old = rng.choice(sorted(statics, key=lambda p: p.name))
            pod = replace(old, version=old.version + 1, restart_policy=rng.choice(POLICIES))
            pods[pod.name] = pod
            steps.append(Step(t, "edit", pod=pod))
        elif kind == "api-edit":
            pod = _api_edit(rng, rng.choice(sorted(apis, key=lambda p: p.name)))
            pods[pod.name] = pod
            steps.append(Step(t, "api-edit", pod=pod))
        elif kind in ("delete", "api-delete"):
            name = rng.choice(sorted(p.name for p in (statics if kind == "delete" else apis)))
            del pods[name]
            api_bases = {base: current for base, current in api_bases.items() if current != name}
            steps.append(Step(t, kind, pod_name=name))
        elif kind == "exit":
            pod = pods[rng.choice(sorted(pods))]
            c = rng.choice(pod.containers)
            steps.append(Step(t, "exit", pod_name=pod.name, container=c.name, code=rng.choice((0, 1, 1, 137))))
        elif kind == "crash":
            paths = ACTOR_PATHS + (CLUSTER_ACTOR_PATHS if cluster else ())
            path = rng.choice(paths + ("worker",) * 3)
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
        elif kind == "api-fail":
            steps.append(Step(t, kind, code=rng.choice(API_FAULT_STATUSES), count=rng.randint(1, 30),
                              resource=rng.choice(API_FAULT_RESOURCES) or ""))
        elif kind == "api-conflict":
            steps.append(Step(t, kind, code=409, count=rng.randint(1, 5),
                              resource=rng.choice(("leases", "pods/status", "nodes/status", "pods"))))
        elif kind == "api-latency":
            steps.append(Step(t, kind, code=rng.choice((50, 200, 1000, 5000)), duration=round(rng.uniform(1.0, 30.0), 1)))
        elif kind == "api-reset":
            steps.append(Step(t, kind, duration=round(rng.uniform(0.0, 10.0), 1)))
        elif kind == "api-hang":  # longer than the client's 60 s timeout, at times
            steps.append(Step(t, kind, duration=round(rng.uniform(1.0, 90.0), 1)))
        elif kind == "api-lose":
            steps.append(Step(t, kind, count=rng.randint(1, 3)))
        elif kind == "api-expire":
            steps.append(Step(t, kind))
    return Schedule(seed=seed, steps=tuple(steps), faults_end=t, cluster=cluster)


def _api_edit(rng: random.Random, old: PodSpec) -> PodSpec:
    """A change of a mutable field: one container's image, activeDeadlineSeconds (set, or
    shortened, but never so short that a pod reaches it), or the labels."""
    # Not an image under restartPolicy Never: Go kills the container and starts the new
    # one in one sync; should the start fail, a Never container stays dead (by design), an
    # outcome the model cannot tell in advance.
    what = rng.choice(("image", "image", "deadline", "label") if old.restart_policy != "Never" else ("deadline", "label"))
    if what == "image":
        i = rng.randrange(len(old.containers))
        c = old.containers[i]
        containers = old.containers[:i] + (replace(c, image=c.image + 1),) + old.containers[i + 1:]
        return replace(old, containers=containers)
    if what == "deadline":
        return replace(old, deadline=(old.deadline or 100_000) - rng.randint(1, 1000))
    return replace(old, label=old.label + 1)
