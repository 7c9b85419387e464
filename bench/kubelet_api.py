"""The kubelet API's costs, each against a baseline measured in the same run: a big log
read through /containerLogs against `cat` of the same file, the latency of a followed
log, and an exec round trip through the kubelet's upgrade proxy against the same CRI
Exec streamed directly.

    python bench/kubelet_api.py [--log-mib 100] [--follow-lines 300] [--exec-rounds 40]
    python bench/kubelet_api.py --log-mib 20 --follow-lines 100 --exec-rounds 10   # quick

Needs what the integration tests need (root, containerd, runc, busybox-static, gcc);
starts its own private containerd and a standalone daemon (kubelet API on 127.0.0.1,
standalone defaults: anonymous, AlwaysAllow) and ends them.

1. Logs: a container writes --log-mib MiB of lines, then idles; once its CRI log file is
   complete, the file is read once (page cache), then GET /containerLogs is read to the
   end and `cat FILE > /dev/null` run, alternately, 3 times. Printed: MB/s of each, and
   the API's throughput as a fraction of cat's (target >= 0.5x).
2. Follow: a container prints a line every 10 ms; /containerLogs?follow=true&timestamps=true
   is read for --follow-lines lines; latency = arrival - the line's CRI timestamp
   (containerd's write time). Target p99 <= 50 ms.
3. Exec: `true` in a running container over WebSocket (v4.channel.k8s.io) through the
   kubelet (TLS, authentication, CRI Exec, the proxy) and through the CRI Exec URL
   directly, alternating, --exec-rounds each. Target p50 ratio <= 1.2x.
"""

from __future__ import annotations

import argparse
import datetime
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import NODE, BenchDaemon, met, p50_p99, private_containerd, write_manifest  # noqa: E402

from pykubelet.ports.cri import CriClient  # noqa: E402
from tests.support.pods import container, pod_manifest  # noqa: E402
from tests.support.websocket import websocket  # noqa: E402

IDLE = "trap 'exit 0' TERM; while true; do sleep 1; done"


def wait(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def pod_running(daemon, name: str) -> bool:
    pod = daemon.client.pods().get(name)
    return bool(pod) and pod.get("status", {}).get("phase") == "Running"


def log_file(daemon, name: str, container_name: str) -> Path:
    pod = daemon.client.pods()[name]
    meta = pod["metadata"]
    return daemon.base / "pod-logs" / f"default_{meta['name']}_{meta['uid']}" / container_name / "0.log"


def kubelet_client(daemon) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(daemon.root_dir / "pki" / "kubelet.crt"))
    return httpx.Client(base_url=f"https://127.0.0.1:{daemon.port}", verify=context, timeout=300)


def bench_logs(daemon, mib: int) -> None:
    lines = "a line of log text, about as long as an application writes: 0123456789 abcdefghij"
    write_manifest(daemon.manifests, pod_manifest("writer", [container(
        "writer", ["sh", "-c", f"yes '{lines}' | head -c {mib * 1024 * 1024}; {IDLE}"])]))
    wait(lambda: pod_running(daemon, "writer"), "the writer pod")
    path = log_file(daemon, "writer", "writer")
    wait(path.exists, f"the log file {path}", timeout=30)
    size = -1
    while size != (size := path.stat().st_size) or size < mib * 1024 * 1024:
        time.sleep(1)  # complete once it stops growing
    path.read_bytes()  # into the page cache
    api_times, cat_times = [], []
    with kubelet_client(daemon) as client:
        for _ in range(3):
            started = time.perf_counter()
            received = 0
            with client.stream("GET", "/containerLogs/default/writer-" + NODE + "/writer") as answer:
                for chunk in answer.iter_raw(1 << 20):
                    received += len(chunk)
            api_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
            cat_times.append(time.perf_counter() - started)
    api, cat = min(api_times), min(cat_times)
    print(f"\nlogs: {size / 1e6:.0f} MB CRI log, {received / 1e6:.0f} MB served (prefixes removed)")
    print(f"  /containerLogs {size / api / 1e6:8.0f} MB/s of log ({api:.2f} s, best of 3)")
    print(f"  cat            {size / cat / 1e6:8.0f} MB/s ({cat:.3f} s)")
    ratio = cat / api
    print(f"  /containerLogs / cat throughput {ratio:.3f}x; target >= 0.5x: {met(ratio >= 0.5)}", flush=True)


def bench_follow(daemon, count: int) -> None:
    write_manifest(daemon.manifests, pod_manifest("ticker", [container(
        "ticker", ["sh", "-c", "trap 'exit 0' TERM; while true; do echo tick; usleep 10000; done"])]))
    wait(lambda: pod_running(daemon, "ticker"), "the ticker pod")
    latencies = []
    with kubelet_client(daemon) as client:
        with client.stream("GET", f"/containerLogs/default/ticker-{NODE}/ticker",
                           params={"follow": "true", "timestamps": "true", "tailLines": "0"}) as answer:
            for line in answer.iter_lines():
                arrived = time.time()
                stamp = line.split(" ", 1)[0]
                written = datetime.datetime.fromisoformat(stamp[:26] + "+00:00").timestamp()
                latencies.append(arrived - written)
                if len(latencies) >= count:
                    break
    p50, p99 = p50_p99(latencies)
    print(f"\nfollow: {len(latencies)} lines, latency p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; "
          f"target p99 <= 50 ms: {met(p99 <= 0.05)}", flush=True)


async def bench_exec(daemon, endpoint: str, rounds: int) -> None:
    context = ssl.create_default_context(cafile=str(daemon.root_dir / "pki" / "kubelet.crt"))
    pod = daemon.client.pods()["ticker"]
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]

    async def through_kubelet() -> None:
        async with websocket(daemon.port, f"/exec/default/ticker-{NODE}/ticker?command=true&stdout=1",
                             ssl_context=context) as ws:
            assert ws.status_line.split()[1] == "101", ws.head
            await ws.channels()

    async def direct(cri: CriClient) -> None:
        url = await cri.exec(container_id, ["true"], stdin=False, stdout=True, stderr=False, tty=False)
        rest = url.split("://", 1)[1]
        host_port, path = rest.split("/", 1)
        async with websocket(int(host_port.rsplit(":", 1)[1]), "/" + path) as ws:
            assert ws.status_line.split()[1] == "101", ws.head
            await ws.channels()

    kubelet_times, direct_times = [], []
    async with CriClient(endpoint) as cri:
        for _ in range(rounds):
            started = time.perf_counter()
            await through_kubelet()
            kubelet_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            await direct(cri)
            direct_times.append(time.perf_counter() - started)
    k50, k99 = p50_p99(kubelet_times)
    d50, d99 = p50_p99(direct_times)
    ratio = k50 / d50
    print(f"\nexec `true`, {rounds} rounds each, alternating:")
    print(f"  through the kubelet (TLS, auth, CRI Exec, proxy) p50 {k50 * 1000:.1f} ms  p99 {k99 * 1000:.1f} ms")
    print(f"  CRI Exec streamed directly                        p50 {d50 * 1000:.1f} ms  p99 {d99 * 1000:.1f} ms")
    print(f"  kubelet/direct p50 {ratio:.2f}x; target <= 1.2x: {met(ratio <= 1.2)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-mib", type=int, default=100)
    parser.add_argument("--follow-lines", type=int, default=300)
    parser.add_argument("--exec-rounds", type=int, default=40)
    args = parser.parse_args()
    with private_containerd() as containerd:
        daemon = BenchDaemon(containerd)
        try:
            # The big log must stay one file for the read (rotation would cut it at 10Mi).
            with open(daemon.base / "kubelet.yaml", "a") as config:
                config.write(f"containerLogMaxSize: {2 * args.log_mib}Mi\n")
            daemon.start()
            print(f"kubelet API bench: standalone daemon, kubelet API https://127.0.0.1:{daemon.port}", flush=True)
            bench_logs(daemon, args.log_mib)
            bench_follow(daemon, args.follow_lines)
            trio.run(bench_exec, daemon, containerd.endpoint, args.exec_rounds)
        finally:
            daemon.close()
    print("done (daemon and containerd stopped)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (everything started was cleaned up)")
