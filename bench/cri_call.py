"""CPU per unary CRI call: ways of calling grpcio from trio, against raw blocking grpcio.

    python bench/cri_call.py [--calls 2000] [--rounds 5] [--method Version|ListPodSandbox|ExecSync]
                             [--candidates a,b,...] [--concurrency 1] [--period 0] [--embedded]
    python bench/cri_call.py --method ExecSync --calls 200 --candidates client,aio-thread
    python bench/cri_call.py --method ExecSync --calls 600 --concurrency 30 --period 1 \
        --candidates client                 # 30 exec liveness probes a second, as the daemon runs them

Needs what the integration tests need for containerd; starts its own private containerd
under /tmp and ends it, whatever happens. --embedded measures against the embedded
runtime's CRI server instead. --method ExecSync first imports the test images
(tests/support/images.py, built locally, nothing pulled) and starts one host-network busybox
container that every call execs `true` in, with a command timeout as an exec liveness probe
sends one (30 s here, so that a loaded machine does not fail the bench; the value changes
nothing on the client's side); the CPU figures are the client process's only (containerd's
exec, runc and its shim are other processes).

Each round starts one child process per candidate (in a shuffled order), so that no
candidate inherits another's grpc threads or asyncio poller. A child makes --calls calls of
--method, from --concurrency trio tasks at once (1: one after the other; with --period S,
each task calls once every S seconds, woken at the 50 ms marks the daemon's probe workers
wake at, as --concurrency probes of period S would), and measures the process's CPU time
(time.process_time: all threads, user + system) over them: first raw blocking grpcio calls in a plain loop (the
baseline), then the candidate, then the baseline again; its figure is the candidate's CPU
per call over the mean of its two baselines. Wall time is printed for context only: the
machine is shared, CPU time is the figure. Figures: median over rounds.

Candidates (all on one channel to the unix socket, wait_for_ready=False, with a deadline):
  trio-asyncio   grpc.aio driven through trio-asyncio (the CRI port before this bench)
  to-thread      blocking stub call in trio.to_thread.run_sync (trio's thread cache)
  to-thread-lim  the same under a CapacityLimiter(8)
  worker         blocking stub call on two threads of the bench's own (a SimpleQueue in,
                 the trio token out): no trio.to_thread overhead, but no way to cancel
  future         stub.Method.future(); its done-callback wakes the task through the trio
                 token (one wake-up per result); cancellation = future.cancel(). grpc starts
                 a channel spin thread for every call made while none is in flight
  future-kept    the same with one call kept pending for the whole run, so that the spin
                 thread lives on (a measurement of that cost, not a way to ship)
  aio-thread     grpc.aio on an asyncio loop in a thread of its own; call started with
                 call_soon_threadsafe, its done-callback wakes the trio task (the mechanism
                 ports/grpc_loop.py shipped before ports/grpc_client)
  trio-h2        ports/grpc_client's Channel alone: HTTP/2 driven by trio on the socket, no
                 thread (the mechanism CriClient ships)
  aio-plain      grpc.aio awaited in a plain asyncio loop, no trio: the floor of aio-thread
  client         CriClient as shipped (metrics, typed errors): the product figure. To
                 measure another checkout's port, run with PYTHONPATH at a folder whose
                 `pykubelet` entry links to that checkout (the checkout's own root on
                 PYTHONPATH loses to the editable install of this one)
  client-cq      the same with GRPC_EXPERIMENTS=-event_engine_client: client sockets
                 read and written by the completion-queue poller instead of grpc's
                 EventEngine threads (measured, not shipped: docs/performance.md)
  period-only    no call at all, only the callers' waits: with --period, what the probe
                 workers' period wake-ups cost alone. client's figure less this one is the
                 calls' own share of the paced run

Every child runs with grpc's defaults (this process's environment), its baseline included,
but client-cq's, whose child and baseline run with that experiment turned off. Each row's
ratio is against the baseline of its own children.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from _interpreter import interpreter_line  # noqa: E402

CANDIDATES = (
    "trio-asyncio", "to-thread", "to-thread-lim", "worker", "future", "future-kept", "aio-thread", "aio-plain",
    "client", "client-cq", "trio-h2", "period-only",
)
TIMEOUT = 60.0  # a deadline only: a loaded machine makes ExecSync slow
EXEC_COMMAND = ["true"]
EXEC_TIMEOUT = 30  # seconds: the command's own timeout, as an exec probe sends its timeoutSeconds
# The options the CRI port gave grpcio's channel while it ran on grpcio (before
# ports/grpc_client): the baseline and the grpcio candidates use them.
GRPCIO_OPTIONS = [
    ("grpc.default_authority", "localhost"),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 3000),
    ("grpc.min_reconnect_backoff_ms", 5000),
    ("grpc.use_local_subchannel_pool", 1),
]
CONTAINER = ""  # --container: the running container ExecSync execs in (set in the child)


# -- the child: one candidate ----------------------------------------------------------


def _request(method: str):
    from cri_api.v1 import api_pb2

    if method == "Version":
        return api_pb2.VersionRequest(version="0.1.0")
    if method == "ListPodSandbox":
        return api_pb2.ListPodSandboxRequest()
    if method == "ExecSync":
        return api_pb2.ExecSyncRequest(container_id=CONTAINER, cmd=EXEC_COMMAND, timeout=EXEC_TIMEOUT)
    raise SystemExit(f"--method {method!r}: Version, ListPodSandbox or ExecSync")


def _warm_up(calls: int) -> int:
    return min(calls // 5, 200)


def _baseline(endpoint: str, method: str, calls: int) -> float:
    import grpc
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    with grpc.insecure_channel(endpoint, options=GRPCIO_OPTIONS) as channel:
        rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)
        for _ in range(_warm_up(calls)):
            rpc(request, timeout=TIMEOUT, wait_for_ready=False)
        started = time.process_time()
        for _ in range(calls):
            rpc(request, timeout=TIMEOUT, wait_for_ready=False)
        return (time.process_time() - started) / calls


CONCURRENCY = 1  # --concurrency: trio tasks calling at once (the baseline stays one loop)
PERIOD = 0.0  # --period: seconds between one task's calls (0: back to back)


async def _timed(call, calls: int) -> tuple[float, float]:
    import trio

    async def caller(count: int) -> None:
        if not PERIOD:
            for _ in range(count):
                await call()
            return
        from pykubelet.actors.probes.worker import PROBE_TIMER_SLACK, coalesced

        next_at = trio.current_time() + random.uniform(0, PERIOD)  # the probe workers' jitter
        for _ in range(count):
            await trio.sleep_until(coalesced(next_at, PROBE_TIMER_SLACK))
            await call()
            next_at += PERIOD

    for _ in range(_warm_up(calls)):
        await call()
    started, wall = time.process_time(), time.perf_counter()
    async with trio.open_nursery() as nursery:
        for task in range(CONCURRENCY):
            nursery.start_soon(caller, calls // CONCURRENCY + (task < calls % CONCURRENCY))
    return (time.process_time() - started) / calls, (time.perf_counter() - wall) / calls


async def _trio_asyncio(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    import grpc
    import trio_asyncio
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    async with trio_asyncio.open_loop():
        async def open_channel():
            return grpc.aio.insecure_channel(endpoint, options=GRPCIO_OPTIONS)

        channel = await trio_asyncio.aio_as_trio(open_channel)()
        rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)

        async def invoke():
            return await rpc(request, timeout=TIMEOUT, wait_for_ready=False)

        call = trio_asyncio.aio_as_trio(invoke)
        try:
            return await _timed(call, calls)
        finally:
            await trio_asyncio.aio_as_trio(channel.close)()


async def _to_thread(endpoint: str, method: str, calls: int, limited: bool) -> tuple[float, float]:
    import grpc
    import trio
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    limiter = trio.CapacityLimiter(8) if limited else None
    with grpc.insecure_channel(endpoint, options=GRPCIO_OPTIONS) as channel:
        rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)

        def blocking():
            return rpc(request, timeout=TIMEOUT, wait_for_ready=False)

        async def call():
            return await trio.to_thread.run_sync(blocking, limiter=limiter, abandon_on_cancel=True)

        return await _timed(call, calls)


async def _await_future(future, token):
    import trio

    task = trio.lowlevel.current_task()
    waiting = [True]

    def resume():
        if waiting[0]:
            waiting[0] = False
            trio.lowlevel.reschedule(task)

    def abort(_raise_cancel):
        waiting[0] = False
        future.cancel()
        return trio.lowlevel.Abort.SUCCEEDED

    future.add_done_callback(lambda _f: token.run_sync_soon(resume))
    await trio.lowlevel.wait_task_rescheduled(abort)
    return future.result()


async def _future(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    import grpc
    import trio
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    with grpc.insecure_channel(endpoint, options=GRPCIO_OPTIONS) as channel:
        rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)
        token = trio.lowlevel.current_trio_token()

        async def call():
            return await _await_future(rpc.future(request, timeout=TIMEOUT, wait_for_ready=False), token)

        return await _timed(call, calls)


async def _worker(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    import queue
    import threading

    import grpc
    import outcome
    import trio
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    token = trio.lowlevel.current_trio_token()

    def work():
        while (job := jobs.get()) is not None:
            fn, deliver = job
            result = outcome.capture(fn)
            token.run_sync_soon(deliver, result)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    with grpc.insecure_channel(endpoint, options=GRPCIO_OPTIONS) as channel:
        rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)

        def blocking():
            return rpc(request, timeout=TIMEOUT, wait_for_ready=False)

        async def call():
            task = trio.lowlevel.current_task()
            waiting = [True]

            def deliver(result):
                if waiting[0]:
                    waiting[0] = False
                    trio.lowlevel.reschedule(task, result)

            def abort(_raise_cancel):
                waiting[0] = False
                return trio.lowlevel.Abort.SUCCEEDED

            jobs.put((blocking, deliver))
            return await trio.lowlevel.wait_task_rescheduled(abort)

        try:
            return await _timed(call, calls)
        finally:
            for _ in threads:
                jobs.put(None)


async def _future_kept(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    """The future API with one call kept pending for the whole run, so that grpc's channel
    spin thread lives on instead of starting anew for every call (a measurement only)."""
    import threading

    import grpc
    import trio
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    with grpc.insecure_channel(endpoint, options=GRPCIO_OPTIONS) as channel:
        never = threading.Event()

        def no_request():
            never.wait()
            return iter(())

        keeper = channel.stream_unary("/runtime.v1.RuntimeService/Version").future(
            iter(no_request, None), timeout=None
        )
        rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)
        token = trio.lowlevel.current_trio_token()

        async def call():
            return await _await_future(rpc.future(request, timeout=TIMEOUT, wait_for_ready=False), token)

        try:
            return await _timed(call, calls)
        finally:
            keeper.cancel()
            never.set()


async def _aio_thread(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    import asyncio
    import threading

    import grpc
    import trio
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)
    # A plain selector loop (trio-asyncio's policy refuses new_event_loop() in trio).
    loop = asyncio.SelectorEventLoop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def open_channel():
        return grpc.aio.insecure_channel(endpoint, options=GRPCIO_OPTIONS)

    channel = asyncio.run_coroutine_threadsafe(open_channel(), loop).result()
    rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)
    token = trio.lowlevel.current_trio_token()

    async def call():
        task = trio.lowlevel.current_task()
        waiting = [True]
        box: list = []

        def resume():
            if waiting[0]:
                waiting[0] = False
                trio.lowlevel.reschedule(task)

        async def invoke():
            return await rpc(request, timeout=TIMEOUT, wait_for_ready=False)

        def start():
            aio_task = loop.create_task(invoke())
            box.append(aio_task)
            aio_task.add_done_callback(lambda _t: token.run_sync_soon(resume))

        def abort(_raise_cancel):
            waiting[0] = False
            loop.call_soon_threadsafe(lambda: box[0].cancel())
            return trio.lowlevel.Abort.SUCCEEDED

        loop.call_soon_threadsafe(start)
        await trio.lowlevel.wait_task_rescheduled(abort)
        return box[0].result()

    try:
        return await _timed(call, calls)
    finally:
        asyncio.run_coroutine_threadsafe(channel.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


async def _client(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    from prometheus_client import CollectorRegistry

    from pykubelet.ports.cri import CriClient, RuntimeOperationMetrics
    from pykubelet.ports.cri import client as client_module

    metrics = RuntimeOperationMetrics(CollectorRegistry())
    async with contextlib.AsyncExitStack() as stack:
        if hasattr(client_module, "trio_asyncio"):  # the port before it left trio-asyncio
            await stack.enter_async_context(client_module.trio_asyncio.open_loop())
        cri = await stack.enter_async_context(CriClient(endpoint, request_timeout=TIMEOUT, metrics=metrics))
        if method == "ExecSync":
            async def call():
                return await cri.exec_sync(CONTAINER, EXEC_COMMAND, EXEC_TIMEOUT)
        else:
            call = cri.version if method == "Version" else cri.list_pod_sandbox
        return await _timed(call, calls)


async def _trio_h2(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    """ports/grpc_client's Channel alone: HTTP/2 driven by trio on the socket, no thread."""
    from cri_api.v1 import api_pb2

    from pykubelet.ports.grpc_client import Channel

    request = _request(method).SerializeToString()
    answer = getattr(api_pb2, f"{method}Response")
    path = f"/runtime.v1.RuntimeService/{method}".encode()
    channel = Channel(endpoint[len("unix://"):], max_message=16 * 1024 * 1024)
    try:
        async def call():
            return answer.FromString(await channel.unary(path, request, TIMEOUT))

        return await _timed(call, calls)
    finally:
        channel.close()


async def _period_only(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    async def call():
        pass

    return await _timed(call, calls)


def _aio_plain(endpoint: str, method: str, calls: int) -> tuple[float, float]:
    """grpc.aio awaited in a plain asyncio loop, no trio at all: the floor of aio-thread."""
    import asyncio

    import grpc
    from cri_api.v1 import api_pb2_grpc


    request = _request(method)

    async def main() -> tuple[float, float]:
        async with grpc.aio.insecure_channel(endpoint, options=GRPCIO_OPTIONS) as channel:
            rpc = getattr(api_pb2_grpc.RuntimeServiceStub(channel), method)
            for _ in range(_warm_up(calls)):
                await rpc(request, timeout=TIMEOUT, wait_for_ready=False)
            started, wall = time.process_time(), time.perf_counter()
            for _ in range(calls):
                await rpc(request, timeout=TIMEOUT, wait_for_ready=False)
            return (time.process_time() - started) / calls, (time.perf_counter() - wall) / calls

    loop = asyncio.SelectorEventLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def _baseline_apart(endpoint: str, method: str, calls: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "baseline", "--endpoint", endpoint, "--method", method,
         "--calls", str(calls), "--container", CONTAINER],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["cpu"]


def child(
    candidate: str, endpoint: str, method: str, calls: int, concurrency: int, container: str, period: float
) -> dict:
    import trio

    global CONCURRENCY, CONTAINER, PERIOD
    CONCURRENCY = concurrency
    PERIOD = period
    CONTAINER = container

    if candidate == "baseline":
        return {"candidate": candidate, "cpu": _baseline(endpoint, method, calls)}
    # The baseline in a process of its own: grpcio's threads, once started, would stay in
    # this one and bill their idle wake-ups to a candidate that has none of its own.
    before = _baseline_apart(endpoint, method, calls)
    if candidate == "trio-asyncio":
        cpu, wall = trio.run(_trio_asyncio, endpoint, method, calls)
    elif candidate in ("to-thread", "to-thread-lim"):
        cpu, wall = trio.run(_to_thread, endpoint, method, calls, candidate == "to-thread-lim")
    elif candidate == "future":
        cpu, wall = trio.run(_future, endpoint, method, calls)
    elif candidate == "worker":
        cpu, wall = trio.run(_worker, endpoint, method, calls)
    elif candidate == "future-kept":
        cpu, wall = trio.run(_future_kept, endpoint, method, calls)
    elif candidate == "aio-plain":
        cpu, wall = _aio_plain(endpoint, method, calls)
    elif candidate == "aio-thread":
        cpu, wall = trio.run(_aio_thread, endpoint, method, calls)
    elif candidate == "trio-h2":
        cpu, wall = trio.run(_trio_h2, endpoint, method, calls)
    elif candidate == "period-only":
        cpu, wall = trio.run(_period_only, endpoint, method, calls)
    elif candidate in ("client", "client-cq"):
        cpu, wall = trio.run(_client, endpoint, method, calls)
    else:
        raise SystemExit(f"unknown candidate {candidate!r}; one of {', '.join(CANDIDATES)}")
    after = _baseline_apart(endpoint, method, calls)
    return {"candidate": candidate, "cpu": cpu, "wall": wall, "baseline": (before + after) / 2}


# -- the parent: containerd, rounds, the table ------------------------------------------


def exec_target(endpoint: str, *, embedded: bool) -> str:
    """A running container to exec in: a host-network pod with one busybox container (the
    embedded runtime runs the command on the host, no image). Removed with the runtime."""
    import uuid

    import trio
    from cri_api.v1 import api_pb2

    from pykubelet.ports.cri import CriClient
    from tests.support.containerd import BUSYBOX_IMAGE
    from tests.support.pods import TRAPPING_LOOP

    sandbox = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name="exec-bench", namespace="default", uid=str(uuid.uuid4())),
        linux=api_pb2.LinuxPodSandboxConfig(security_context=api_pb2.LinuxSandboxSecurityContext(
            namespace_options=api_pb2.NamespaceOption(network=api_pb2.NODE))),
    )
    container = api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name="main"),
        image=api_pb2.ImageSpec(image="" if embedded else BUSYBOX_IMAGE),
        command=TRAPPING_LOOP,
    )

    async def start() -> str:
        async with CriClient(endpoint, request_timeout=60) as cri:
            sandbox_id = await cri.run_pod_sandbox(sandbox)
            container_id = await cri.create_container(sandbox_id, container, sandbox)
            await cri.start_container(container_id)
            result = await cri.exec_sync(container_id, EXEC_COMMAND, EXEC_TIMEOUT)
            if result.exit_code != 0:
                raise SystemExit(f"exec {EXEC_COMMAND} in the bench container exited {result.exit_code}")
            return container_id

    return trio.run(start)


def child_env(candidate: str) -> dict[str, str]:
    env = dict(os.environ)
    if candidate == "client-cq":
        env["GRPC_EXPERIMENTS"] = "-event_engine_client"
    return env


def run_rounds(endpoint: str, args: argparse.Namespace, container: str = "") -> dict[str, list[dict]]:
    candidates = [c for c in args.candidates.split(",") if c]
    results: dict[str, list[dict]] = {c: [] for c in candidates}
    for round_number in range(args.rounds):
        order = random.sample(candidates, len(candidates))
        for candidate in order:
            out = subprocess.run(
                [sys.executable, __file__, "--child", candidate, "--endpoint", endpoint,
                 "--method", args.method, "--calls", str(args.calls), "--concurrency", str(args.concurrency),
                 "--period", str(args.period), "--container", container],
                capture_output=True, text=True, env=child_env(candidate),
            )
            if out.returncode:
                raise SystemExit(f"candidate {candidate} failed:\n{out.stderr}")
            figure = json.loads(out.stdout.strip().splitlines()[-1])
            results[candidate].append(figure)
            print(
                f"  round {round_number + 1}: {candidate:14} {figure['cpu'] * 1e3:6.3f} ms CPU/call "
                f"(baseline {figure['baseline'] * 1e3:6.3f}, x{figure['cpu'] / figure['baseline']:.2f}) "
                f"wall {figure['wall'] * 1e3:6.3f} ms",
                flush=True,
            )
    return results


def report(results: dict[str, list[dict]], args: argparse.Namespace, target: str) -> None:
    baselines = [f["baseline"] for figures in results.values() for f in figures]
    print()
    print(f"{args.method} against {target}, {args.calls} calls x {args.rounds} rounds, "
          f"{args.concurrency} caller(s) at once" + (f", each once every {args.period:g} s " if args.period else " ") +
          "(median over rounds; CPU = process time, all threads)")
    print(f"  {'raw grpcio blocking':22} {statistics.median(baselines) * 1e3:6.3f} ms CPU/call   x1.00 (baseline)")
    for candidate, figures in results.items():
        cpu = statistics.median(f["cpu"] for f in figures)
        ratio = statistics.median(f["cpu"] / f["baseline"] for f in figures)
        wall = statistics.median(f["wall"] for f in figures)
        own = statistics.median(f["baseline"] for f in figures)
        print(f"  {candidate:22} {cpu * 1e3:6.3f} ms CPU/call   x{ratio:.2f}   (wall {wall * 1e3:.3f} ms; "
              f"its children's baseline {own * 1e3:.3f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--method", default="Version")
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--period", type=float, default=0.0,
                        help="seconds between one caller's calls, at the probe workers' 50 ms marks (default 0: "
                        "back to back; trio candidates only, the baseline stays back to back)")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="trio tasks calling at once (default 1; aio-plain stays sequential)")
    parser.add_argument("--embedded", action="store_true", help="the embedded runtime, not containerd")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--container", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(
            args.child, args.endpoint, args.method, args.calls, args.concurrency, args.container, args.period
        )))
        return
    print(interpreter_line(), flush=True)
    if args.embedded:
        from tests.support.embedded import EmbeddedRuntimeInstance

        runtime = EmbeddedRuntimeInstance()
        try:
            endpoint = runtime.start()
            container = exec_target(endpoint, embedded=True) if args.method == "ExecSync" else ""
            report(run_rounds(endpoint, args, container), args, "the embedded runtime")
        finally:
            runtime.cleanup()
        return
    from tests.support.containerd import PrivateContainerd, build_and_import_images, check_prerequisites

    check_prerequisites()
    containerd = PrivateContainerd()
    try:
        containerd.start()
        container = ""
        if args.method == "ExecSync":
            build_and_import_images(containerd)
            container = exec_target(containerd.endpoint, embedded=False)
        report(run_rounds(containerd.endpoint, args, container), args, "containerd")
    finally:
        containerd.stop()


if __name__ == "__main__":
    main()
