"""CPU of one PLEG relist, and of one /pods and one /debug/actors answer, at N pods, in-process
(no containerd): how each grows with the pods a node runs.

    python bench/relist.py [--pods 110,250,500] [--relists 300] [--answers 100] [--rounds 3]
                           [--port] [--http]

The relist is the PLEG's own loop (actors/pleg.py, _Pleg.relist_forever: the CRI port's
conversion, the RuntimeIndex, the diff, the gauges, RuntimePods) on trio's mock clock, fed
by a runtime whose ListPodSandbox and ListContainers answers are real CRI protobuf messages
of N pods (one sandbox and one container each, with the labels and annotations pykubelet
writes and containerd adds), parsed from their wire bytes at every call as grpc does. Two
cases: "unchanged" (the same answers at every relist, a steady node) and "changing" (at
every relist --changes pods each see their container exit and a new one start, as a crash
loop does). The "parse" line is the protobuf parse alone (grpc's share, on its loop thread).

The answers are the admin socket's routes (actors/server/routes.py) over a real PodStatuses
board of N pods (decoded from manifests, statuses from compute_pod_status) and a real
supervision tree with one pod worker per pod; with --http also through the admin socket's
server (h11, the socket's writes) to a client in a child process.

--port relists through the real CriClient and grpc too, against a runtime in a child
process serving the same wire bytes: the port's share, and its wall time for context.

Figures: process CPU time (time.process_time) per relist or answer, median of --rounds,
and the ratio of the largest N to the smallest (linear in the pods: 500/110 = 4.5x).
To measure another checkout: PYTHONPATH=DIR python bench/relist.py, where
DIR/pykubelet/{actors,ports,...} link to that checkout's folders (see docs/performance.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import trio  # noqa: E402
import trio.testing  # noqa: E402
from cri_api.v1 import api_pb2  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from pykubelet.actors import pleg as pleg_module  # noqa: E402
from pykubelet.actors.health import HealthBoard  # noqa: E402
from pykubelet.actors.pod_statuses import PodStatuses  # noqa: E402
from pykubelet.actors.runtime_link import RuntimeHandle  # noqa: E402
from pykubelet.actors.runtime_pods import RuntimePods  # noqa: E402
from pykubelet.actors.server import http as server_http  # noqa: E402
from pykubelet.actors.server.http import Request, open_unix, serve_listeners  # noqa: E402
from pykubelet.actors.server.routes import AdminRoutes  # noqa: E402
from pykubelet.messages.pod import Pod  # noqa: E402
from pykubelet.messages.runtime import ContainerRuntimeStatus, PodRuntimeStatus, SandboxRuntimeStatus  # noqa: E402
from pykubelet.pods import labels  # noqa: E402
from pykubelet.pods.manifest import decode_manifests  # noqa: E402
from pykubelet.pods.status import compute_pod_status, rfc3339  # noqa: E402
from pykubelet.ports.cri import CriClient, RuntimeVersion  # noqa: E402
from pykubelet.supervisor import ChildSpec, MailboxSpec, Supervisor  # noqa: E402
from tests.support.pods import TRAPPING_LOOP, container, pod_manifest  # noqa: E402

NODE = "bench-node"
STARTED = 1_800_000_000.0  # the pods' start, Unix seconds
WARMUP = 3  # relists before the measured ones (the first reports every container)


# -- N pods: the specs, and the runtime's answers about them ----------------------------


def make_pods(n: int) -> list[Pod]:
    pods = []
    for i in range(n):
        manifest = json.dumps(pod_manifest(f"loop-{i:04d}", [container("loop", TRAPPING_LOOP)])).encode()
        pods.extend(decode_manifests(manifest, origin=f"/etc/kubernetes/manifests/loop-{i:04d}.json",
                                     source="file", node_name=NODE))
    return pods


def _id(*parts: object) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def sandbox(pod: Pod) -> api_pb2.PodSandbox:
    meta = pod.metadata
    return api_pb2.PodSandbox(
        id=_id("sandbox", meta.uid),
        metadata=api_pb2.PodSandboxMetadata(name=meta.name, uid=meta.uid, namespace=meta.namespace, attempt=0),
        state=api_pb2.SANDBOX_READY, created_at=int(STARTED * 1e9),
        labels={**labels.sandbox_labels(pod), "io.cri-containerd.kind": "sandbox"},
        annotations=labels.sandbox_annotations(pod), runtime_handler="",
    )


def container_of(pod: Pod, attempt: int, state: int) -> api_pb2.Container:
    spec = pod.spec.containers[0]
    return api_pb2.Container(
        id=_id("container", pod.metadata.uid, attempt), pod_sandbox_id=_id("sandbox", pod.metadata.uid),
        metadata=api_pb2.ContainerMetadata(name=spec.name, attempt=attempt),
        image=api_pb2.ImageSpec(image=spec.image), image_ref="sha256:" + _id("image"),
        state=state, created_at=int((STARTED + attempt) * 1e9),
        labels={**labels.container_labels(pod, spec), "io.cri-containerd.kind": "container"},
        annotations=labels.container_annotations(pod, spec, attempt),
    )


def answers(pods: list[Pod], *, rounds: int, changes: int) -> list[tuple[bytes, bytes]]:
    """The wire bytes of (ListPodSandbox, ListContainers) for `rounds` relists in a row. With
    changes, at each relist `changes` more pods see their running container exit and a new
    attempt start (the exited one stays, as the runtime keeps it until it is removed)."""
    sandboxes = api_pb2.ListPodSandboxResponse(items=[sandbox(p) for p in pods]).SerializeToString()
    attempts = [0] * len(pods)
    made: dict[tuple[int, int, int], api_pb2.Container] = {}

    def made_once(i: int, attempt: int, state: int) -> api_pb2.Container:
        key = (i, attempt, state)
        if key not in made:
            made[key] = container_of(pods[i], attempt, state)
        return made[key]

    out, turn = [], 0
    for _ in range(rounds):
        for _ in range(changes):
            attempts[turn % len(pods)] += 1
            turn += 1
        containers = []
        for i, attempt in enumerate(attempts):
            if attempt:
                containers.append(made_once(i, attempt - 1, api_pb2.CONTAINER_EXITED))
            containers.append(made_once(i, attempt, api_pb2.CONTAINER_RUNNING))
        out.append((sandboxes, api_pb2.ListContainersResponse(containers=containers).SerializeToString()))
    return out


class ListingRuntime:
    """The list calls of the CRI port, answered from wire bytes (parsed at each call as grpc
    parses them); after `stop_after` relists it ends the run."""

    def __init__(self, wire: list[tuple[bytes, bytes]], stop_after: int, done: trio.CancelScope) -> None:
        self.wire, self.stop_after, self.done = wire, stop_after, done
        self.relists = 0
        self.clock: list[float] = []  # process CPU time at the start of each relist

    async def list_pod_sandbox(self, filter=None):
        self.clock.append(time.process_time())
        if self.relists == self.stop_after:
            self.done.cancel()
        await trio.lowlevel.checkpoint()
        sandboxes, _ = self.wire[self.relists % len(self.wire)]
        return list(api_pb2.ListPodSandboxResponse.FromString(sandboxes).items)

    async def list_containers(self, filter=None):
        await trio.lowlevel.checkpoint()
        _, containers = self.wire[self.relists % len(self.wire)]
        self.relists += 1
        return list(api_pb2.ListContainersResponse.FromString(containers).containers)

    async def list_pod_sandbox_and_containers(self, sandbox_filter, container_filter):
        # CriClient's two list calls in one trip (the PLEG's relist since it has it), which
        # answers with the repeated fields themselves.
        self.clock.append(time.process_time())
        if self.relists == self.stop_after:
            self.done.cancel()
        await trio.lowlevel.checkpoint()
        sandboxes, containers = self.wire[self.relists % len(self.wire)]
        self.relists += 1
        return (api_pb2.ListPodSandboxResponse.FromString(sandboxes).items,
                api_pb2.ListContainersResponse.FromString(containers).containers)


class CountingSyncLoop:
    def __init__(self) -> None:
        self.events = 0

    async def send(self, event) -> None:
        self.events += 1


def relist_cpu(wire: list[tuple[bytes, bytes]], relists: int, warmup: int = WARMUP) -> tuple[float, int]:
    """CPU seconds per relist of the PLEG's own loop over `relists` relists (after `warmup`
    relists: the first one reports every container), and the events it sent."""
    sync_loop = CountingSyncLoop()
    runtime: ListingRuntime | None = None

    async def main() -> None:
        nonlocal runtime
        with trio.CancelScope() as done:
            runtime = ListingRuntime(wire, warmup + relists, done)
            handle = RuntimeHandle("unix:///bench.sock")
            handle.attach(runtime, RuntimeVersion("bench", "1", "v1", "0.1.0"))
            settings = pleg_module.PlegSettings(container_events=False)
            pleg = pleg_module._Pleg(settings, handle, HealthBoard(), pleg_module.PlegMetrics(CollectorRegistry()),
                                     RuntimePods(), sync_loop)
            await pleg.relist_forever()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert runtime is not None and runtime.relists == warmup + relists
    return (runtime.clock[-1] - runtime.clock[warmup]) / relists, sync_loop.events


# -- the same relist through the real CRI port (--port) ---------------------------------


class CountedPort:
    """The real CriClient, noting the process CPU and wall time at each relist's start;
    after `stop_after` relists it ends the run."""

    def __init__(self, cri: CriClient, stop_after: int, done: trio.CancelScope) -> None:
        self.cri, self.stop_after, self.done = cri, stop_after, done
        self.relists = 0
        self.clock: list[tuple[float, float]] = []

    def _begin(self) -> None:
        self.clock.append((time.process_time(), time.perf_counter()))
        if self.relists == self.stop_after:
            self.done.cancel()
        self.relists += 1

    async def list_pod_sandbox(self, filter=None):
        self._begin()
        return await self.cri.list_pod_sandbox(filter)

    async def list_containers(self, filter=None):
        return await self.cri.list_containers(filter)

    async def list_pod_sandbox_and_containers(self, sandbox_filter, container_filter):
        self._begin()
        return await self.cri.list_pod_sandbox_and_containers(sandbox_filter, container_filter)


def port_relist_cpu(wire: list[tuple[bytes, bytes]], relists: int, warmup: int = WARMUP) -> tuple[float, float]:
    """(CPU, wall) seconds per relist of the PLEG's own loop through the real CriClient and
    grpc, against a runtime in a child process (its CPU is not counted) answering `wire`."""
    directory = Path(tempfile.mkdtemp(prefix="bench-relist-", dir="/tmp"))
    wire_file, socket_path = directory / "wire.pickle", directory / "cri.sock"
    wire_file.write_bytes(pickle.dumps(wire))
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(wire_file), str(socket_path)],
                              stdout=subprocess.PIPE, text=True)
    port: CountedPort | None = None
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"

        async def main() -> None:
            nonlocal port
            async with CriClient(f"unix://{socket_path}", request_timeout=30) as cri:
                with trio.CancelScope() as done:
                    port = CountedPort(cri, warmup + relists, done)
                    handle = RuntimeHandle(cri.endpoint)
                    handle.attach(port, cri.runtime_version)
                    settings = pleg_module.PlegSettings(relist_period=0.0, container_events=False)
                    pleg = pleg_module._Pleg(settings, handle, HealthBoard(),
                                             pleg_module.PlegMetrics(CollectorRegistry()), RuntimePods(),
                                             CountingSyncLoop())
                    await pleg.relist_forever()

        trio.run(main)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)
    assert port is not None
    (cpu0, wall0), (cpu1, wall1) = port.clock[warmup], port.clock[-1]
    return (cpu1 - cpu0) / relists, (wall1 - wall0) / relists


def serve(wire_file: str, socket_path: str) -> None:
    """The child of port_relist_cpu: ListPodSandbox and ListContainers answered with the
    next listing's wire bytes each (each relist makes one of both), Version for connect()."""
    import grpc

    wire = pickle.loads(Path(wire_file).read_bytes())
    lock = threading.Lock()
    served = {"ListPodSandbox": 0, "ListContainers": 0}

    def answer(method: str, which: int):
        def handle(request: bytes, context) -> bytes:
            with lock:
                n = served[method]
                served[method] += 1
            return wire[n % len(wire)][which]
        return grpc.unary_unary_rpc_method_handler(handle)

    version = api_pb2.VersionResponse(version="0.1.0", runtime_name="bench", runtime_version="1",
                                      runtime_api_version="v1").SerializeToString()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(4),
                         options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", {
        "Version": grpc.unary_unary_rpc_method_handler(lambda request, context: version),
        "ListPodSandbox": answer("ListPodSandbox", 0),
        "ListContainers": answer("ListContainers", 1),
    }),))
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def parse_cpu(wire: list[tuple[bytes, bytes]], relists: int) -> float:
    started = time.process_time()
    for i in range(relists):
        sandboxes, containers = wire[i % len(wire)]
        list(api_pb2.ListPodSandboxResponse.FromString(sandboxes).items)
        list(api_pb2.ListContainersResponse.FromString(containers).containers)
    return (time.process_time() - started) / relists


# -- /pods and /debug/actors ------------------------------------------------------------


def board(pods: list[Pod]) -> PodStatuses:
    statuses = PodStatuses()
    for pod in pods:
        spec = pod.spec.containers[0]
        runtime = PodRuntimeStatus(
            uid=pod.metadata.uid, name=pod.metadata.name, namespace=pod.metadata.namespace,
            sandboxes=[SandboxRuntimeStatus(id=_id("sandbox", pod.metadata.uid), state="ready",
                                            created_at=STARTED, ip="127.0.0.1")],
            containers=[ContainerRuntimeStatus(
                id=_id("container", pod.metadata.uid, 0), name=spec.name, state="running", created_at=STARTED,
                started_at=STARTED + 0.1, image=spec.image, image_ref="sha256:" + _id("image"),
                hash=labels.container_hash(spec),
            )],
        )
        status = compute_pod_status(pod, runtime, waiting={}, runtime_name="containerd", now=rfc3339(STARTED + 1),
                                    host_ip="127.0.0.1")
        statuses.set(pod, status)
    return statuses


def answer_cpu(pods: list[Pod], answers_per_route: int, *, http: bool = False) -> dict[str, tuple[float, int]]:
    """CPU seconds per answer and the answer's size, for /pods and /debug/actors (with http,
    also through the admin socket's server)."""
    statuses = board(pods)
    figures: dict[str, tuple[float, int]] = {}

    async def idle_worker(ctx) -> None:
        await trio.sleep_forever()

    async def main() -> None:
        workers = Supervisor.child_spec("pod-workers", [])
        tree = Supervisor("root", [workers])
        async with trio.open_nursery() as nursery:
            await nursery.start(tree.run)
            owner, name = tree.locate("root/pod-workers")
            pod_workers = owner.find_supervisor("root/pod-workers")
            for pod in pods:
                await pod_workers.start_child(ChildSpec(
                    pod.metadata.uid, idle_worker, restart="transient", mailbox=MailboxSpec(capacity=16, durable=True),
                ))
            routes = AdminRoutes(tree=lambda: tree, health=HealthBoard(), metrics=CollectorRegistry(),
                                 fault_injection=False, own_path="root/server", pods=statuses.pod_list)
            for path in ("/pods", "/debug/actors"):
                request = Request(method="GET", path=path, query={}, headers={})
                response = await routes(request)  # warm-up
                started = time.process_time()
                for _ in range(answers_per_route):
                    response = await routes(request)
                figures[path] = ((time.process_time() - started) / answers_per_route, len(response.body))
            if http:
                await _answer_over_the_socket(routes, answers_per_route, figures)
            nursery.cancel_scope.cancel()

    trio.run(main)
    return figures


async def _answer_over_the_socket(routes: AdminRoutes, answers: int, figures: dict[str, tuple[float, int]]) -> None:
    """The same answers through the admin socket's real server (h11, the socket writes) to
    a client in a child process (its CPU not counted), one kept-alive connection."""
    directory = tempfile.mkdtemp(prefix="bench-relist-", dir="/tmp")
    socket_path = os.path.join(directory, "admin.sock")
    try:
        listener = await open_unix(socket_path)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_listeners, [listener], routes)
            for path in ("/pods", "/debug/actors"):
                figures[f"{path} over the socket"] = await _fetched(socket_path, path, answers)
            if hasattr(server_http, "queue_whole_answers"):  # the baseline: the default send buffer
                queue_whole_answers = server_http.queue_whole_answers
                server_http.queue_whole_answers = lambda stream: None
                try:
                    figures["/pods over the socket, default send buffer"] = await _fetched(socket_path, "/pods", answers)
                finally:
                    server_http.queue_whole_answers = queue_whole_answers
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _fetched(socket_path: str, path: str, answers: int) -> tuple[float, int]:
    started = time.process_time()
    done = await trio.run_process(
        [sys.executable, __file__, "--fetch", socket_path, path, str(answers)], capture_stdout=True)
    return (time.process_time() - started) / answers, int(done.stdout)


def fetch(socket_path: str, path: str, answers: int) -> None:
    """The child of _answer_over_the_socket: one GET to warm up, then `answers` GETs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import AdminClient

    client = AdminClient(socket_path)
    body = client.get(path).content
    for _ in range(answers):
        body = client.get(path).content
    print(len(body))


# -- the report -------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="110,250,500", help="comma-separated pod counts")
    parser.add_argument("--relists", type=int, default=300, help="relists measured per case and round")
    parser.add_argument("--answers", type=int, default=100, help="answers measured per route and round")
    parser.add_argument("--changes", type=int, default=2, help="pods changing at each relist (changing case)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", action="store_true",
                        help="also relist through the real CriClient and grpc, against a runtime in a child process")
    parser.add_argument("--http", action="store_true",
                        help="also answer through the admin socket's server, to a client in a child process")
    parser.add_argument("--serve", nargs=2, metavar=("WIRE", "SOCKET"), help=argparse.SUPPRESS)
    parser.add_argument("--fetch", nargs=3, metavar=("SOCKET", "PATH", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if args.fetch:
        fetch(args.fetch[0], args.fetch[1], int(args.fetch[2]))
        return
    counts = [int(n) for n in args.pods.split(",")]
    print(f"pykubelet from {Path(pleg_module.__file__).resolve().parent.parent}; "
          f"{args.rounds} rounds, median; CPU ms per relist / answer")

    rows: dict[str, dict[int, float]] = {}
    for n in counts:
        pods = make_pods(n)
        steady = answers(pods, rounds=1, changes=0)
        # One listing per relist, so that the changes never wrap around within a run.
        changing = answers(pods, rounds=WARMUP + args.relists + 1, changes=args.changes)
        samples: dict[str, list[float]] = {}
        events, sizes = 0, {}
        for _ in range(args.rounds):
            samples.setdefault("protobuf parse, both lists", []).append(parse_cpu(steady, args.relists))
            samples.setdefault("relist, unchanged", []).append(relist_cpu(steady, args.relists)[0])
            per_relist, events = relist_cpu(changing, args.relists)
            samples.setdefault(f"relist, {args.changes} pods changing", []).append(per_relist)
            if args.port:
                cpu, wall = port_relist_cpu(steady, args.relists)
                samples.setdefault("relist via CriClient, unchanged", []).append(cpu)
                samples.setdefault("  (its wall time, context)", []).append(wall)
            for path, (cpu, size) in answer_cpu(pods, args.answers, http=args.http).items():
                samples.setdefault(f"GET {path}", []).append(cpu)
                if path in ("/pods", "/debug/actors"):
                    sizes[path] = size
        for name, values in samples.items():
            rows.setdefault(name, {})[n] = statistics.median(values)
        answered = ", ".join(f"{path} {size / 1024:.0f} kB" for path, size in sizes.items())
        print(f"  {n} pods: {events} events in the changing case; {answered}", flush=True)

    low, high = min(counts), max(counts)
    width = max(len(name) for name in rows)
    print(f"\n{'':{width}}  " + "  ".join(f"{n:>7} pods" for n in counts) + f"  {high}/{low}")
    for name, by_n in rows.items():
        cells = "  ".join(f"{by_n[n] * 1000:9.3f} ms" for n in counts)
        print(f"{name:{width}}  {cells}  {by_n[high] / by_n[low]:5.2f}x")
    print(f"(linear in the pods: {high}/{low} = {high / low:.2f}x)")


if __name__ == "__main__":
    main()
