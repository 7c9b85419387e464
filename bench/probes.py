"""Probes: what 110 pods' readiness and liveness probes, every second, cost the daemon, and
how much slower a probe is than the same call made directly, in the same run.

    python bench/probes.py [--pods 110] [--seconds 60] [--max-pods 110] [--settle 5]
    python bench/probes.py --pods 10 --seconds 15          # a quick run
    python bench/probes.py --liveness tcp                  # tcpSocket liveness instead of exec
    python bench/probes.py --pods 30 --readiness none      # exec liveness alone: CPU per exec probe

Needs root, containerd, runc, busybox-static and gcc (as the integration tests); starts its
own private containerd and daemon (--node-ip=127.0.0.1) under /tmp and ends both, whatever
happens. Nothing but 127.0.0.1 is addressed.

Each pod is hostNetwork busybox running `httpd` on 127.0.0.1:<a port of its own> (from
--base-port up, below the ephemeral range) serving /www/ready. Two phases, one after the
other, on the same daemon:

1. Without probes (the baseline): --pods such pods; once /pods shows them all Ready,
   --settle seconds, then a window of --seconds.
2. With probes: those pods removed (gone from /pods), then --pods new ones (other ports)
   whose container has a readiness probe `httpGet /ready port <its port>` and a liveness
   probe `exec cat /www/ready` (with --liveness tcp: `tcpSocket <its port>`), both
   periodSeconds 1 (timeout 1 s, the default; with --readiness none no readiness probe, so
   that the CPU per probe run is the liveness probe's alone); once /pods
   shows them all Ready (condition Ready True, i.e. the readiness probe passed), --settle
   seconds, then a window of --seconds; after it, /pods read again: all still Ready, no
   restarts?

In each window, from this process, nothing is asked of the daemon (only /proc read):
- the daemon's RSS (VmRSS, sampled every second: median, max) and CPU as % of one core
  (utime+stime over the window), as bench/density.py measures them; the daemon's main
  thread (its event loop) on a CPU and runnable-but-waiting for one (/proc schedstat: a
  loop that waits a lot is starved of CPU, and every probe's latency grows with it); for
  context, containerd's CPU (with its shims and what they ran: runc, the exec'd commands)
  and the whole machine's busy %, since the machine may be shared;
- the direct calls, sequentially, round robin over the pods for the whole window: the
  same HTTP GET as the readiness probe (httpx, one client, a new connection per request as
  the probe's `Connection: close` asks, the probe's headers) and the same ExecSync as the
  liveness probe (CriClient.exec_sync on the same container, same command, timeout 1 s; with
  --liveness tcp a TCP connect to the pod's port, closed at once, as the probe does);
  plus, as a diagnostic, the daemon's own httpGet handler (ports.probers.probe_http, one
  GET on a connection of its own, ports/http_get.py) called in this process, off the
  daemon's event loop.
The direct calls are made in the baseline window too, so both windows carry the same
outside load and the direct figures show what the probes' load does to the runtime.

Probe latency comes from the daemon's /metrics, scraped just before and after the probe
window: prober_probe_duration_seconds{probe_type="Readiness"|"Liveness"} summed over all
its series (one per container). p50/p99 are bucket estimates (Prometheus histogram_quantile
interpolation within prometheus-client's default buckets: 5, 10, 25, 50, 75, 100, 250 ms
...), never finer than a bucket; the mean from _sum/_count is exact. The direct calls'
p50/p99 are given both exact and as the same bucket estimate over the same bounds; the
probe/direct ratios are taken like for like (buckets with buckets, mean with mean). The
daemon's own CRI ExecSync time (kubelet_runtime_operations_duration_seconds{exec_sync})
splits the liveness probe into the runtime call and the rest.

Targets from the issue: probe latency <= 1.5x the direct call at p99; daemon CPU <= 15 %
of one core with the probes running.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _probes_support import (  # noqa: E402
    CPUS,
    bucketed,
    cpu_of,
    free_ports,
    load_average,
    machine_cpu,
    main_thread_schedstat,
    pids_with_arg,
    series_count,
    summed_counter,
    summed_histogram,
)
from _interpreter import interpreter_line  # noqa: E402
from _support import (  # noqa: E402
    BenchDaemon,
    cpu_seconds,
    histogram_delta,
    histogram_quantile,
    met,
    p50_p99,
    private_containerd,
    rss_bytes,
    running_daemon,
    sums_by_label,
    write_manifest,
)

import httpx  # noqa: E402
import trio  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from pykubelet.ports.cri import CriClient, CriError, RuntimeOperationMetrics  # noqa: E402
from pykubelet.ports.probers import http_headers, probe_http  # noqa: E402
from tests.support.pods import container, pod_manifest  # noqa: E402

PROBE_DURATION = "prober_probe_duration_seconds"
PROBES = "prober_probe"
CRI_OPERATIONS = "kubelet_runtime_operations_duration_seconds"
LIVENESS_COMMAND = ["cat", "/www/ready"]
PROBE_TIMEOUT = 1.0  # timeoutSeconds: the default
MB = 1024 * 1024
# The bucket bounds of prometheus-client's default histogram (the daemon's); taken from the
# scrape when it has them.
DEFAULT_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, math.inf]


# -- the pods ------------------------------------------------------------------------------------


def web_pod(name: str, port: int, probes: bool, liveness: str, readiness: str = "http") -> dict:
    """busybox httpd on 127.0.0.1:<port> serving /www/ready; stops at once on SIGTERM."""
    script = (
        f"mkdir -p /www; echo ok > /www/ready; httpd -f -p 127.0.0.1:{port} -h /www & pid=$!; "
        "trap 'kill $pid; exit 0' TERM; wait"
    )
    extra = {}
    if probes:
        extra = {
            **({"readinessProbe": {"httpGet": {"path": "/ready", "port": port}, "periodSeconds": 1}}
               if readiness == "http" else {}),
            "livenessProbe": {
                **({"exec": {"command": LIVENESS_COMMAND}} if liveness == "exec" else {"tcpSocket": {"port": port}}),
                "periodSeconds": 1,
            },
        }
    return pod_manifest(name, [container("web", ["sh", "-c", script], **extra)])


@dataclass
class Target:
    name: str
    port: int
    url: str
    container_id: str


def _ready(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _restarts(pod: dict) -> int:
    return sum(s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses", []))


def start_pods(
    daemon: BenchDaemon, prefix: str, ports: list[int], probes: bool, timeout: float, liveness: str,
    readiness: str = "http",
) -> tuple[list[Target], float]:
    """Write the manifests; wait until /pods shows every pod Ready. Returns the targets and
    the seconds that took."""
    assert daemon.client is not None
    names = {f"{prefix}-{i}": port for i, port in enumerate(ports)}
    started = time.perf_counter()
    for name, port in names.items():
        write_manifest(daemon.manifests, web_pod(name, port, probes, liveness, readiness))
    while True:
        listed = daemon.client.pods()
        ready = {name for name in names if name in listed and _ready(listed[name])}
        if ready == names.keys():
            break
        if time.perf_counter() - started > timeout:
            missing = sorted(names.keys() - ready)
            sample = {name: listed.get(name, {}).get("status") for name in missing[:2]}
            raise RuntimeError(
                f"{len(missing)} of {len(names)} pods not Ready after {timeout:g}s (e.g. {sample})\n"
                f"{daemon.log()[-4000:]}"
            )
        time.sleep(0.5)
    took = time.perf_counter() - started
    targets = []
    for name, port in names.items():
        (status,) = listed[name]["status"]["containerStatuses"]
        targets.append(Target(name, port, f"http://127.0.0.1:{port}/ready", status["containerID"].split("://", 1)[1]))
    return targets, took


def remove_pods(daemon: BenchDaemon, targets: list[Target], timeout: float) -> None:
    assert daemon.client is not None
    for target in targets:
        (daemon.manifests / f"{target.name}.json").unlink()
    names = {target.name for target in targets}
    deadline = time.perf_counter() + timeout
    while names & daemon.client.pods().keys():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"pods still in /pods {timeout:g}s after their manifests went")
        time.sleep(0.5)


# -- a window ------------------------------------------------------------------------------------


@dataclass
class Window:
    seconds: float = 0.0
    rss: list[int] = field(default_factory=list)
    cpu_percent: float = 0.0
    containerd_percent: float = 0.0  # containerd + shims + what they ran, of one core
    machine_percent: float = 0.0  # all CPUs busy, of one core (so up to 100 x CPUS)
    loop_run_percent: float = 0.0  # the daemon's main thread (its event loop) on a CPU, % of the window
    loop_wait_percent: float = 0.0  # ... runnable but waiting for a CPU
    load: str = ""
    http: list[float] = field(default_factory=list)  # direct GET
    handler: list[float] = field(default_factory=list)  # ports.probers.probe_http in this process
    liveness: list[float] = field(default_factory=list)  # direct ExecSync (or TCP connect, --liveness tcp)
    failed: list[str] = field(default_factory=list)  # direct calls that did not succeed
    metrics_before: str = ""
    metrics_after: str = ""


async def watch(daemon: BenchDaemon, containerd, targets: list[Target], seconds: float, liveness: str) -> Window:
    """/proc only, and the direct calls, during the window; /metrics just before and after."""
    assert daemon.client is not None
    window = Window()
    registry = CollectorRegistry()  # the bench's CRI calls stay out of the daemon's metrics
    limits = httpx.Limits(max_keepalive_connections=0)  # as Connection: close: a new connection each
    headers = http_headers([])
    async with CriClient(containerd.endpoint, request_timeout=10, metrics=RuntimeOperationMetrics(registry)) as cri, \
            httpx.AsyncClient(trust_env=False, verify=False, timeout=5, limits=limits) as client:
        window.metrics_before = daemon.client.get("/metrics").text
        runtime_pids = [containerd.pid, *pids_with_arg(containerd.socket)]
        busy0, _ = machine_cpu()
        runtime0 = cpu_of(runtime_pids)
        run0, wait0 = main_thread_schedstat(daemon.pid)
        started, cpu0 = time.perf_counter(), cpu_seconds(daemon.pid)
        deadline = started + seconds

        async def sample_rss() -> None:
            tick = started
            while tick <= deadline:
                window.rss.append(rss_bytes(daemon.pid))
                tick += 1.0
                await trio.sleep_until(_trio_at(tick))

        async def direct_calls() -> None:
            i = 0
            while time.perf_counter() < deadline:
                target = targets[i % len(targets)]
                i += 1
                began = time.perf_counter()
                try:
                    response = await client.get(target.url, headers=headers)
                except httpx.HTTPError as error:
                    window.failed.append(f"GET {target.url}: {error!r}")
                else:
                    window.http.append(time.perf_counter() - began)
                    if response.status_code != 200:
                        window.failed.append(f"GET {target.url}: {response.status_code}")
                began = time.perf_counter()
                outcome, message = await probe_http(httpx.URL(target.url), [], PROBE_TIMEOUT)
                window.handler.append(time.perf_counter() - began)
                if outcome != "success":
                    window.failed.append(f"probe_http {target.url}: {outcome} {message}")
                began = time.perf_counter()
                if liveness == "tcp":
                    try:
                        with trio.fail_after(PROBE_TIMEOUT):
                            stream = await trio.open_tcp_stream("127.0.0.1", target.port)
                        await stream.aclose()
                    except (OSError, trio.TooSlowError) as error:
                        window.failed.append(f"connect to {target.name}: {error!r}")
                    else:
                        window.liveness.append(time.perf_counter() - began)
                    continue
                try:
                    result = await cri.exec_sync(target.container_id, LIVENESS_COMMAND, PROBE_TIMEOUT)
                except CriError as error:
                    window.failed.append(f"exec in {target.name}: {error}")
                else:
                    window.liveness.append(time.perf_counter() - began)
                    if result.exit_code != 0:
                        window.failed.append(f"exec in {target.name}: exit {result.exit_code}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_rss)
            nursery.start_soon(direct_calls)
        await trio.sleep_until(_trio_at(deadline))
        cpu, elapsed = cpu_seconds(daemon.pid) - cpu0, time.perf_counter() - started
        runtime = cpu_of(runtime_pids) - runtime0
        run1, wait1 = main_thread_schedstat(daemon.pid)
        busy1, _ = machine_cpu()
        window.metrics_after = daemon.client.get("/metrics").text
    window.seconds = elapsed
    window.cpu_percent = 100 * cpu / elapsed
    window.containerd_percent = 100 * runtime / elapsed
    window.machine_percent = 100 * (busy1 - busy0) / elapsed
    window.loop_run_percent = 100 * (run1 - run0) / elapsed
    window.loop_wait_percent = 100 * (wait1 - wait0) / elapsed
    window.load = load_average()
    return window


def _trio_at(perf: float) -> float:
    """A perf_counter instant on trio's clock."""
    return trio.current_time() + (perf - time.perf_counter())


async def _watch_in_loop(daemon: BenchDaemon, containerd, targets: list[Target], seconds: float,
                         liveness: str) -> Window:
    return await watch(daemon, containerd, targets, seconds, liveness)


def run_window(daemon: BenchDaemon, containerd, targets: list[Target], seconds: float, liveness: str) -> Window:
    return trio.run(_watch_in_loop, daemon, containerd, targets, seconds, liveness)


# -- figures -------------------------------------------------------------------------------------


@dataclass
class ProbeFigures:
    kind: str  # Readiness | Liveness
    buckets: list[tuple[float, float]]
    mean: float
    count: int
    series: int
    successes: float
    failures: float
    unknowns: float


def probe_figures(window: Window, kind: str) -> ProbeFigures:
    before = summed_histogram(window.metrics_before, PROBE_DURATION, probe_type=kind)
    after = summed_histogram(window.metrics_after, PROBE_DURATION, probe_type=kind)
    buckets, total, count = histogram_delta(before, after)

    def outcomes(result: str) -> float:
        return (summed_counter(window.metrics_after, PROBES, probe_type=kind, result=result)
                - summed_counter(window.metrics_before, PROBES, probe_type=kind, result=result))

    return ProbeFigures(
        kind, buckets, total / count if count else math.nan, int(count),
        series_count(window.metrics_after, PROBE_DURATION, probe_type=kind),
        outcomes("successful"), outcomes("failed"), outcomes("unknown"),
    )


def cri_exec_mean(window: Window) -> tuple[float, int]:
    before = sums_by_label(window.metrics_before, CRI_OPERATIONS, "operation_type").get("exec_sync", (0.0, 0))
    after = sums_by_label(window.metrics_after, CRI_OPERATIONS, "operation_type").get("exec_sync", (0.0, 0))
    count = after[1] - before[1]
    return ((after[0] - before[0]) / count if count else math.nan), count


def milli(value: float) -> str:
    return f"{value * 1000:7.1f} ms" if not math.isnan(value) else "    n/a   "


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def report(pods: int, base: Window, probed: Window, ready_seconds: float, after: dict[str, dict],
           targets: list[Target], liveness: str, readiness: str = "http") -> None:
    print(f"\n== daemon cost ({pods} pods; windows {base.seconds:.1f} s and {probed.seconds:.1f} s) ==")
    per_pod = 2 if readiness == "http" else 1
    print(f"{'':36}{'no probes':>14}{f'{per_pod} probes/pod/s':>16}{'with/without':>14}")
    rows = [
        ("RSS, median of 1 s samples", f"{statistics.median(base.rss) / MB:7.1f} MB",
         f"{statistics.median(probed.rss) / MB:7.1f} MB", statistics.median(probed.rss) / statistics.median(base.rss)),
        ("RSS, max", f"{max(base.rss) / MB:7.1f} MB", f"{max(probed.rss) / MB:7.1f} MB",
         max(probed.rss) / max(base.rss)),
        ("daemon CPU, % of one core", f"{base.cpu_percent:7.2f} %", f"{probed.cpu_percent:7.2f} %",
         ratio(probed.cpu_percent, base.cpu_percent)),
        ("daemon main thread on a CPU, %", f"{base.loop_run_percent:7.2f} %", f"{probed.loop_run_percent:7.2f} %",
         ratio(probed.loop_run_percent, base.loop_run_percent)),
        ("... runnable, waiting for a CPU, %", f"{base.loop_wait_percent:7.2f} %", f"{probed.loop_wait_percent:7.2f} %",
         ratio(probed.loop_wait_percent, base.loop_wait_percent)),
        ("containerd+shims CPU, % of one core", f"{base.containerd_percent:7.1f} %",
         f"{probed.containerd_percent:7.1f} %", ratio(probed.containerd_percent, base.containerd_percent)),
        (f"machine busy, % of one core (x{CPUS})", f"{base.machine_percent:7.1f} %", f"{probed.machine_percent:7.1f} %",
         ratio(probed.machine_percent, base.machine_percent)),
    ]
    for label, a, b, r in rows:
        print(f"  {label:<34}{a:>14}{b:>16}{r:>13.2f}x")
    print(f"  load average after each window: {base.load} / {probed.load} (both windows also carry this "
          "process's direct calls)")
    runs = sum(f.count + f.failures + f.unknowns for f in (probe_figures(probed, k) for k in ("Readiness", "Liveness")))
    extra = (probed.cpu_percent - base.cpu_percent) / 100 * probed.seconds
    if runs:
        print(f"  daemon CPU per probe run: {1000 * extra / runs:.2f} ms ({runs:.0f} probes run; the CPU with probes "
              "less the CPU without)")

    print(f"\n== probe latency against the same call made directly ({probed.seconds:.1f} s window) ==")
    bounds = [le for le, _ in probe_figures(probed, "Liveness").buckets] or DEFAULT_BOUNDS
    for kind, direct, direct_base, what in (
        ("Readiness", probed.http, base.http, "httpGet /ready vs httpx GET of the same URL"),
        ("Liveness", probed.liveness, base.liveness,
         "exec cat /www/ready vs CriClient.exec_sync, same container" if liveness == "exec"
         else "tcpSocket vs a TCP connect to the same port, closed at once"),
    ):
        f = probe_figures(probed, kind)
        if not f.count:
            print(f"{kind}: no probes of this kind")
            continue
        d50, d99 = p50_p99(direct)
        direct_buckets = bucketed(direct, bounds)
        b50, b99 = histogram_quantile(0.5, direct_buckets), histogram_quantile(0.99, direct_buckets)
        p50, p99 = histogram_quantile(0.5, f.buckets), histogram_quantile(0.99, f.buckets)
        dmean = statistics.fmean(direct)
        print(f"{kind} ({what}):")
        print(f"  {'':30}{'probe (daemon)':>16}{'direct':>14}{'probe/direct':>14}")
        print(f"  {'p50, bucket estimate':<30}{milli(p50):>16}{milli(b50):>14}{ratio(p50, b50):>13.2f}x")
        print(f"  {'p99, bucket estimate':<30}{milli(p99):>16}{milli(b99):>14}{ratio(p99, b99):>13.2f}x")
        print(f"  {'mean, exact (_sum/_count)':<30}{milli(f.mean):>16}{milli(dmean):>14}{ratio(f.mean, dmean):>13.2f}x")
        print(f"  direct, exact: p50 {milli(d50).strip()}, p99 {milli(d99).strip()} ({len(direct)} calls); "
              f"probe p50/p99 against these exact figures: {ratio(p50, d50):.2f}x / {ratio(p99, d99):.2f}x")
        if direct_base:
            e50, e99 = p50_p99(direct_base)
            print(f"  direct in the no-probes window: p50 {milli(e50).strip()}, p99 {milli(e99).strip()} "
                  f"(the probes' load makes it {ratio(d50, e50):.2f}x / {ratio(d99, e99):.2f}x)")
        expected = pods * probed.seconds
        print(f"  probes run: {f.count} timed ({f.count / probed.seconds:.1f}/s; {pods}/s due, "
              f"{100 * f.count / expected:.0f} %; a probe slower than its period skips the ticks it missed), "
              f"{f.series} series; outcomes: {f.successes:.0f} successful, {f.failures:.0f} failed, "
              f"{f.unknowns:.0f} unknown")
        if f.failures:
            print(f"  (the {f.failures:.0f} failed probes, mostly timeouts, are left out of the durations, as Go "
                  "does: the latency figures above are biased low)")
        print(f"  target probe p99 <= 1.5x direct: {ratio(p99, b99):.2f}x, {met(ratio(p99, b99) <= 1.5)}")
    handler50, handler99 = p50_p99(probed.handler)
    d50, d99 = p50_p99(probed.http)
    print(f"diagnostic: the daemon's httpGet handler (ports.probers.probe_http) "
          f"in this process: p50 {milli(handler50).strip()}, p99 {milli(handler99).strip()} = "
          f"{ratio(handler50, d50):.2f}x / {ratio(handler99, d99):.2f}x the direct GET")
    cri_mean, cri_count = cri_exec_mean(probed)
    live = probe_figures(probed, "Liveness")
    if liveness == "exec":
        print(f"diagnostic: the daemon's own CRI ExecSync (kubelet_runtime_operations_duration_seconds): mean "
              f"{milli(cri_mean).strip()} over {cri_count} calls; the liveness probe's mean "
              f"{milli(live.mean).strip()} spends {milli(live.mean - cri_mean).strip()} around it")
    if probed.failed or base.failed:
        print(f"direct calls that failed: {len(base.failed)} + {len(probed.failed)}, e.g. "
              f"{(base.failed + probed.failed)[:3]}")

    ready_after = sum(_ready(after[t.name]) for t in targets if t.name in after)
    restarts = sum(_restarts(after[t.name]) for t in targets if t.name in after)
    print(f"\n{pods} pods with probes Ready {ready_seconds:.1f} s after their manifests were written; after the "
          f"window {ready_after}/{pods} Ready, {restarts} container restarts")
    cpu = probed.cpu_percent
    print(f"target daemon CPU <= 15 % of one core: {cpu:.2f} %, {met(cpu <= 15.0)}")


# -- the run -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each window (default 60)")
    parser.add_argument("--max-pods", type=int, default=110)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after all are Ready (default 5)")
    parser.add_argument("--base-port", type=int, default=21000, help="the pods' ports from here up (default 21000)")
    parser.add_argument("--keep-log", type=Path, help="copy the daemon's log here at the end")
    parser.add_argument("--liveness", choices=("exec", "tcp"), default="exec",
                        help="the liveness probe: exec cat (default) or tcpSocket on the pod's port")
    parser.add_argument("--readiness", choices=("http", "none"), default="http",
                        help="the readiness probe: httpGet (default) or none (the liveness probe alone)")
    args = parser.parse_args()
    print(interpreter_line(), flush=True)
    if args.pods > args.max_pods:
        parser.error(f"--pods {args.pods} is more than --max-pods {args.max_pods}: the rest would be refused")
    ports = free_ports(2 * args.pods, args.base_port)
    timeout = max(180.0, 3.0 * args.pods)
    with private_containerd() as containerd, running_daemon(
        containerd, f"--max-pods={args.max_pods}", keep_log=args.keep_log
    ) as daemon:
        print(f"probes: private containerd, daemon pid {daemon.pid}, {args.pods} httpd pods on 127.0.0.1:"
              f"{ports[0]}-{ports[-1]}, windows of {args.seconds:g} s after {args.settle:g} s settling", flush=True)
        print(f"without probes: starting {args.pods} pods ...", flush=True)
        targets, _ = start_pods(daemon, "plain", ports[: args.pods], probes=False, timeout=timeout,
                                liveness=args.liveness)
        time.sleep(args.settle)
        print("without probes: window ...", flush=True)
        base = run_window(daemon, containerd, targets, args.seconds, args.liveness)
        print("removing them ...", flush=True)
        remove_pods(daemon, targets, timeout)
        print(f"with probes: starting {args.pods} pods, waiting for all Ready ...", flush=True)
        targets, ready_seconds = start_pods(daemon, "probed", ports[args.pods :], probes=True, timeout=timeout,
                                            liveness=args.liveness, readiness=args.readiness)
        time.sleep(args.settle)
        print("with probes: window ...", flush=True)
        probed = run_window(daemon, containerd, targets, args.seconds, args.liveness)
        assert daemon.client is not None
        after = daemon.client.pods()
        report(args.pods, base, probed, ready_seconds, after, targets, args.liveness, args.readiness)
        print("cleaning up (containerd removes every sandbox) ...", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (everything started was cleaned up)")
