"""Density: the daemon's memory, CPU and PLEG relist time with 110 steady pods, against the
same daemon idle (0 pods) over a window of the same length, in the same run.

    python bench/density.py [--pods 110] [--seconds 60] [--max-pods 110] [--settle 10]
    python bench/density.py --pods 20 --seconds 10          # a quick run
    python bench/density.py --config-line "enableServer: false"   # without the kubelet API port

Needs root, containerd, runc, busybox-static and gcc (as the integration tests); starts its
own private containerd and daemon under /tmp and ends both, whatever happens.

1. Idle: the daemon started with --max-pods and an empty manifest dir, left --settle
   seconds, then watched for --seconds.
2. Steady: --pods busybox pods (hostNetwork, one container sleeping and exiting at once on
   SIGTERM: no load of their own) written as manifests; once /pods shows them all Running, --settle seconds more,
   then watched for --seconds (and /pods read once after the window: all still Running?).

Each window: RSS from /proc/<pid>/status VmRSS sampled every second (median and max); CPU
as % of one core from utime+stime in /proc/<pid>/stat over the window; PLEG relist p50/p99
estimated from the kubelet_pleg_relist_duration_seconds histogram gathered during the
window (Prometheus histogram_quantile interpolation inside Go's default buckets, so never
finer than a bucket: 5, 10, 25, 50, 100 ms ...), with its exact mean from _sum/_count.
Nothing but /proc is read during a window; /metrics is scraped just before and after it,
which also gives the CRI calls a minute in the window (kubelet_runtime_operations_total, by
operation_type: a pod worker's read of its pod is a ListPodSandbox, a ListContainers, and a
PodSandboxStatus and a ContainerStatus per sandbox and container).
After each window, GET /pods and GET /debug/actors are timed over the admin socket
(--requests each, one after the other; p50 and max), idle against steady.
Targets from the issue: RSS <= --rss-target-mb (100; 200 at 500 pods, 60 at 110 at rest),
CPU <= --cpu-target (3 % of a core; 1 % at 110 at rest) with the pods steady; at 500 pods
PLEG relist p99 <= 100 ms and /pods and /debug/actors in <= 100 ms.

--config-line "key: value" (repeatable) appends that line to the KubeletConfiguration file
the daemon is started with (e.g. "enableServer: false" to measure the daemon without its
kubelet API port); the lines are printed at the start of the run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _interpreter import interpreter_line  # noqa: E402
from _support import (  # noqa: E402
    BenchDaemon,
    cpu_seconds,
    histogram,
    histogram_delta,
    histogram_quantile,
    sleeping_pod,
    met,
    private_containerd,
    rss_bytes,
    running_daemon,
    write_manifest,
)

RELIST = "kubelet_pleg_relist_duration_seconds"
RELIST_INTERVAL = "kubelet_pleg_relist_interval_seconds"
CRI_OPERATIONS = "kubelet_runtime_operations_total"
MB = 1024 * 1024
ENDPOINTS = ("/pods", "/debug/actors")


@dataclass
class Window:
    seconds: float
    rss: list[int]
    cpu_percent: float
    relist_p50: float
    relist_p99: float
    relist_mean: float
    relists: int
    intervals: int
    late_intervals: int  # relist intervals over 2.5 s (the bucket above 1 s ends there)
    cri_calls: dict[str, float]  # operation_type -> calls in the window


def cri_operations(metrics_text: str) -> dict[str, float]:
    """kubelet_runtime_operations_total by operation_type."""
    calls = {}
    for line in metrics_text.splitlines():
        if line.startswith(f"{CRI_OPERATIONS}{{"):
            operation = line.split('operation_type="', 1)[1].split('"', 1)[0]
            calls[operation] = float(line.rsplit(" ", 1)[1])
    return calls


def watch(daemon: BenchDaemon, seconds: float) -> Window:
    """/proc only during the window; /metrics just before and after it."""
    assert daemon.client is not None
    metrics = daemon.client.get("/metrics").text
    relist_before, interval_before = histogram(metrics, RELIST), histogram(metrics, RELIST_INTERVAL)
    calls_before = cri_operations(metrics)
    started, cpu_started = time.perf_counter(), cpu_seconds(daemon.pid)
    rss = []
    tick = started
    while True:
        rss.append(rss_bytes(daemon.pid))
        tick += 1.0
        if tick > started + seconds:
            break
        time.sleep(max(0.0, tick - time.perf_counter()))
    time.sleep(max(0.0, started + seconds - time.perf_counter()))
    cpu, elapsed = cpu_seconds(daemon.pid) - cpu_started, time.perf_counter() - started
    metrics = daemon.client.get("/metrics").text
    relists, total, count = histogram_delta(relist_before, histogram(metrics, RELIST))
    intervals, _, _ = histogram_delta(interval_before, histogram(metrics, RELIST_INTERVAL))
    within = dict(intervals)
    calls_after = cri_operations(metrics)
    return Window(
        seconds=elapsed,
        rss=rss,
        cpu_percent=100 * cpu / elapsed,
        relist_p50=histogram_quantile(0.5, relists),
        relist_p99=histogram_quantile(0.99, relists),
        relist_mean=total / count if count else float("nan"),
        relists=int(count),
        intervals=int(within.get(float("inf"), 0)),
        late_intervals=int(within.get(float("inf"), 0) - within.get(2.5, 0)),
        cri_calls={op: n - calls_before.get(op, 0.0) for op, n in calls_after.items() if n > calls_before.get(op, 0.0)},
    )


def request_seconds(daemon: BenchDaemon, path: str, count: int) -> list[float]:
    """Seconds each of `count` GETs of `path` took, one after the other."""
    assert daemon.client is not None
    seconds = []
    for _ in range(count):
        asked = time.perf_counter()
        response = daemon.client.get(path)
        seconds.append(time.perf_counter() - asked)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code}")
    return seconds


def start_pods(daemon: BenchDaemon, count: int, timeout: float) -> float:
    """Write the manifests; seconds until /pods shows every pod Running."""
    assert daemon.client is not None
    names = {f"density-{i}" for i in range(count)}
    started = time.perf_counter()
    for name in sorted(names):
        write_manifest(daemon.manifests, sleeping_pod(name))
    while True:
        running = {name for name, pod in daemon.client.pods().items() if pod.get("status", {}).get("phase") == "Running"}
        if names <= running:
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            raise RuntimeError(
                f"{len(names - running)} of {count} pods not Running after {timeout:g}s\n{daemon.log()[-4000:]}"
            )
        time.sleep(0.5)


def running_count(daemon: BenchDaemon) -> int:
    assert daemon.client is not None
    return sum(pod.get("status", {}).get("phase") == "Running" for pod in daemon.client.pods().values())


def report(pods: int, idle: Window, steady: Window, start_seconds: float, still_running: int,
           requests: dict[str, tuple[list[float], list[float]]], rss_target_mb: float, cpu_target: float) -> None:
    def mb(value: float) -> str:
        return f"{value / MB:6.1f} MB"

    def milli(value: float) -> str:
        return f"{value * 1000:6.1f} ms"

    print(f"\n{'':34}{'idle (0 pods)':>16}{f'steady ({pods} pods)':>20}{'steady/idle':>14}")
    rows = [
        ("RSS, median of 1 s samples", mb(statistics.median(idle.rss)), mb(statistics.median(steady.rss)),
         statistics.median(steady.rss) / statistics.median(idle.rss)),
        ("RSS, max", mb(max(idle.rss)), mb(max(steady.rss)), max(steady.rss) / max(idle.rss)),
        ("CPU, % of one core", f"{idle.cpu_percent:7.2f} %", f"{steady.cpu_percent:7.2f} %",
         steady.cpu_percent / idle.cpu_percent if idle.cpu_percent else float("nan")),
        ("PLEG relist p50 (bucket estimate)", milli(idle.relist_p50), milli(steady.relist_p50),
         steady.relist_p50 / idle.relist_p50),
        ("PLEG relist p99 (bucket estimate)", milli(idle.relist_p99), milli(steady.relist_p99),
         steady.relist_p99 / idle.relist_p99),
        ("PLEG relist mean (_sum/_count)", milli(idle.relist_mean), milli(steady.relist_mean),
         steady.relist_mean / idle.relist_mean),
    ]
    for label, a, b, ratio in rows:
        print(f"  {label:<32}{a:>16}{b:>20}{ratio:>13.2f}x")
    print(f"  relists in the window: idle {idle.relists}, steady {steady.relists} "
          f"(windows {idle.seconds:.1f} s and {steady.seconds:.1f} s; relist period 1 s); relist intervals "
          f"over 2.5 s: idle {idle.late_intervals}/{idle.intervals}, steady {steady.late_intervals}/{steady.intervals}")
    print(f"  {pods} pods Running {start_seconds:.1f} s after their manifests were written; "
          f"{still_running}/{pods} still Running after the window")
    for name, window in (("idle", idle), ("steady", steady)):
        per_minute = {op: 60 * n / window.seconds for op, n in sorted(window.cri_calls.items(), key=lambda kv: -kv[1])}
        detail = ", ".join(f"{op} {n:.0f}" for op, n in per_minute.items())
        print(f"  CRI calls a minute, {name}: {sum(per_minute.values()):.0f} ({detail})")
    for path, (idle_s, steady_s) in requests.items():
        print(f"  GET {path:<14} p50 {milli(statistics.median(idle_s))} -> {milli(statistics.median(steady_s))}, "
              f"max {milli(max(idle_s))} -> {milli(max(steady_s))} (idle -> steady, {len(steady_s)} requests)")
    rss, cpu = max(steady.rss), steady.cpu_percent
    print(f"  target RSS <= {rss_target_mb:g} MB: max {rss / MB:.1f} MB, {met(rss <= rss_target_mb * MB)}")
    print(f"  target CPU <= {cpu_target:g} %:    {cpu:.2f} %, {met(cpu <= cpu_target)}")
    print(f"  target PLEG relist p99 <= 100 ms: {steady.relist_p99 * 1000:.1f} ms, {met(steady.relist_p99 <= 0.1)}")
    slowest = max(max(steady_s) for _, steady_s in requests.values())
    print(f"  target /pods and /debug/actors <= 100 ms: slowest {slowest * 1000:.1f} ms, {met(slowest <= 0.1)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each window (default 60)")
    parser.add_argument("--max-pods", type=int, default=110)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before each window (default 10)")
    parser.add_argument("--requests", type=int, default=20, help="GETs of /pods and of /debug/actors timed after each window")
    parser.add_argument("--rss-target-mb", type=float, default=100.0)
    parser.add_argument("--cpu-target", type=float, default=3.0, help="%% of one core")
    parser.add_argument("--keep-log", type=Path, help="copy the daemon's log here at the end")
    parser.add_argument("--config-line", action="append", default=[], metavar="'KEY: VALUE'",
                        help="append this line to the daemon's KubeletConfiguration (repeatable)")
    args = parser.parse_args()
    print(interpreter_line(), flush=True)
    if args.pods > args.max_pods:
        parser.error(f"--pods {args.pods} is more than --max-pods {args.max_pods}: the rest would be refused")
    with private_containerd() as containerd, running_daemon(
        containerd, f"--max-pods={args.max_pods}", keep_log=args.keep_log, config_lines=tuple(args.config_line)
    ) as daemon:
        print(f"density: private containerd, daemon pid {daemon.pid}, --max-pods={args.max_pods}, "
              f"windows of {args.seconds:g} s after {args.settle:g} s settling", flush=True)
        if args.config_line:
            print(f"  KubeletConfiguration lines added: {', '.join(args.config_line)}", flush=True)
        time.sleep(args.settle)
        print("idle window ...", flush=True)
        idle = watch(daemon, args.seconds)
        idle_requests = {path: request_seconds(daemon, path, args.requests) for path in ENDPOINTS}
        print(f"starting {args.pods} pods ...", flush=True)
        start_seconds = start_pods(daemon, args.pods, timeout=max(120.0, 3.0 * args.pods))
        time.sleep(args.settle)
        print("steady window ...", flush=True)
        steady = watch(daemon, args.seconds)
        requests = {path: (idle_requests[path], request_seconds(daemon, path, args.requests)) for path in ENDPOINTS}
        still_running = running_count(daemon)
        report(args.pods, idle, steady, start_seconds, still_running, requests, args.rss_target_mb, args.cpu_target)
        print("cleaning up (containerd removes every sandbox) ...", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (everything started was cleaned up)")
