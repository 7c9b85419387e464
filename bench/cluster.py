"""Cluster mode: pods bound through the test API server against the same pods as static
pods, and the daemon's API traffic, memory and CPU with the pods steady.

    python bench/cluster.py [--pods 110] [--start-rounds 3] [--seconds 120] [--settle 10]
    python bench/cluster.py --pods 20 --start-rounds 1 --seconds 30          # a quick run

Needs root, containerd, runc, busybox-static and gcc (as the integration tests) and the
`test` extra (the test API server); starts its own private containerd, test API server
(tests/support/apiserver, 127.0.0.1) and daemons under /tmp and ends them all, whatever
happens. Every pod is a host-network busybox pod whose one container loops and exits at
once on SIGTERM, image from the private containerd (imagePullPolicy IfNotPresent).

1. Start. (a) Static: a standalone daemon (--pod-manifest-path); --pods manifests written
   at once; time until its /pods shows all Running (/pods polled every 100 ms). Then the
   manifests are removed, /pods waited empty, the daemon stopped and the runtime swept.
   (b) API: a fresh test API server and a daemon with --kubeconfig (node1, defaults:
   nodeStatusUpdateFrequency 10 s, nodeStatusReportFrequency 5 m, Lease renewed every
   10 s); once the Node is Ready, --pods pods with spec.nodeName=node1 are created through
   the admin client (one POST after another, as fast as the server answers); time from the
   first POST until an API *watch* (opened before it) has shown every pod Running.
   (a) and (b) alternate for --start-rounds rounds, so that both see the same machine (a
   shared machine drifts by more than the difference measured: one static start took
   13 s in one run and 23 s in another). Printed: each round's times and API/static, and
   the ratio of the medians (target <= 1.2x).
2. Steady: everything from 1 is cleaned up (pods deleted through the API and their objects
   gone, daemon stopped, API server stopped, runtime swept); a fresh API server and daemon,
   --pods API pods started and left --settle seconds, the request log cleared, then
   --seconds watched: the node's API requests per minute by verb and resource from the
   server's request log, and the daemon's RSS (1 s samples of /proc VmRSS) and CPU (% of one
   core, utime+stime over the window) as density.py measures them.
   Targets: no pods/status writes while nothing changes; node status writes only on change
   or every 5 m; lease updates once per 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import (  # noqa: E402
    BUSYBOX_IMAGE,
    BenchDaemon,
    _uninterruptible,
    loop_pod,
    met,
    private_containerd,
    running_daemon,
    write_manifest,
)
from density import watch as watch_daemon  # noqa: E402

from tests.support.apiserver.handle import LocalApiServer  # noqa: E402
from tests.support.containerd import PrivateContainerd, remove_all_pods  # noqa: E402

NODE = "node1"
USER = f"system:node:{NODE}"
LABEL = "pykubelet-bench=cluster"
PODS = "/api/v1/namespaces/default/pods"
POLL = 0.1
MB = 1024 * 1024
TIMEOUT = 300.0


def bench_pod(name: str, node: str | None = None) -> dict:
    pod = loop_pod(name)
    pod["metadata"]["labels"] = {"pykubelet-bench": "cluster"}
    pod["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    assert pod["spec"]["containers"][0]["image"] == BUSYBOX_IMAGE
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


def names(count: int) -> list[str]:
    return [f"cluster-{i}" for i in range(count)]


# -- the static pods -----------------------------------------------------------------------


def static_start(containerd: PrivateContainerd, count: int) -> float:
    """Seconds from writing the manifests until /pods shows them all Running; cleaned up."""
    with running_daemon(containerd) as daemon:
        assert daemon.client is not None
        wanted = set(names(count))
        started = time.perf_counter()
        for name in sorted(wanted):
            write_manifest(daemon.manifests, bench_pod(name))
        while True:
            running = {n for n, p in daemon.client.pods().items() if p.get("status", {}).get("phase") == "Running"}
            if wanted <= running:
                elapsed = time.perf_counter() - started
                break
            if time.perf_counter() - started > TIMEOUT:
                raise RuntimeError(f"{len(wanted - running)} static pods not Running after {TIMEOUT:g}s\n"
                                   f"{daemon.log()[-4000:]}")
            time.sleep(POLL)
        for name in wanted:
            (daemon.manifests / f"{name}.json").unlink()
        wait(lambda: not daemon.client.pods(), "the static pods to leave /pods")
    sweep(containerd)
    return elapsed


# -- the API pods --------------------------------------------------------------------------


class ClusterDaemon(BenchDaemon):
    """BenchDaemon in cluster mode: --kubeconfig, node name node1, no manifests."""

    def __init__(self, containerd: PrivateContainerd, kubeconfig: Path, *extra: str) -> None:
        super().__init__(containerd, f"--kubeconfig={kubeconfig}", *extra)
        self.argv = [a for a in self.argv if not a.startswith(("--hostname-override=", "--pod-manifest-path="))]
        self.argv.append(f"--hostname-override={NODE}")


@contextlib.contextmanager
def cluster(containerd: PrivateContainerd) -> Iterator[tuple[LocalApiServer, ClusterDaemon]]:
    """A fresh test API server and a cluster-mode daemon whose Node is Ready; at the end the
    bench pods are deleted through the API (and waited gone), the daemon and the server
    stopped and the runtime swept, also on an error or Ctrl-C."""
    server = LocalApiServer()
    daemon: ClusterDaemon | None = None
    clean = False
    try:
        server.start()
        daemon = ClusterDaemon(containerd, server.kubeconfig(USER)).start()
        daemon.wait_for(lambda: node_ready(server), "the Node to be Ready", timeout=60)
        yield server, daemon
        clean = True
    finally:
        with _uninterruptible():
            try:
                if clean and daemon is not None:
                    delete_api_pods(server, daemon)
            finally:
                if daemon is not None:
                    daemon.close()
                server.stop()
                sweep(containerd)


def node_ready(server: LocalApiServer) -> bool:
    answer = server.admin.get(f"/api/v1/nodes/{NODE}")
    if answer.status_code != 200:
        return False
    conditions = answer.json().get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def api_pods(server: LocalApiServer) -> list[dict]:
    answer = server.admin.get(PODS, params={"labelSelector": LABEL})
    answer.raise_for_status()
    return answer.json()["items"]


def delete_api_pods(server: LocalApiServer, daemon: ClusterDaemon) -> None:
    for pod in api_pods(server):
        server.admin.request("DELETE", f"{PODS}/{pod['metadata']['name']}", json={"gracePeriodSeconds": 10})
    wait(lambda: not api_pods(server), "the kubelet to delete the pod objects", daemon=daemon)
    wait(lambda: not daemon.client.pods(), "the pods to leave the daemon's /pods", daemon=daemon)


class PodWatch:
    """A watch of the bench pods in a thread: the perf_counter time each first was Running."""

    def __init__(self, server: LocalApiServer) -> None:
        self._client = server.client("admin", timeout=TIMEOUT)
        listed = self._client.get(PODS, params={"labelSelector": LABEL}).json()
        self._version = listed["metadata"]["resourceVersion"]
        self.running: dict[str, float] = {}
        self.error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._opened = threading.Event()
        self._thread.start()
        if not self._opened.wait(10):
            raise RuntimeError("the pod watch did not open")

    def _run(self) -> None:
        params = {"watch": "1", "resourceVersion": self._version, "labelSelector": LABEL}
        try:
            with self._client.stream("GET", PODS, params=params) as response:
                response.raise_for_status()
                self._opened.set()
                for line in response.iter_lines():
                    if self._stop:
                        return
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    pod = event["object"]
                    if event["type"] in ("ADDED", "MODIFIED") and pod.get("status", {}).get("phase") == "Running":
                        self.running.setdefault(pod["metadata"]["name"], time.perf_counter())
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            if not self._stop:
                self.error = error
            self._opened.set()

    def close(self) -> None:
        self._stop = True
        self._client.close()


@dataclass
class ApiStart:
    seconds: float  # first POST -> the watch has shown every pod Running
    posted: float  # seconds the POSTs took
    started_wall: float  # unix time of the first POST
    done_wall: float  # unix time the watch showed the last pod Running
    each: list[float]  # per pod, seconds from the first POST until the watch showed it Running


def api_start(server: LocalApiServer, daemon: ClusterDaemon, count: int, make_pod=bench_pod) -> ApiStart:
    """`make_pod(name, node)`: the pod to create (bench_pod: one looping container)."""
    watcher = PodWatch(server)
    try:
        wanted = names(count)
        started_wall = time.time()
        started = time.perf_counter()
        for name in wanted:
            created = server.admin.post(PODS, json=make_pod(name, NODE))
            if created.status_code != 201:
                raise RuntimeError(f"creating pod {name}: {created.status_code} {created.text}")
        posted = time.perf_counter() - started
        while not set(wanted) <= watcher.running.keys():
            if watcher.error is not None:
                raise RuntimeError(f"the pod watch failed: {watcher.error!r}")
            if daemon.process is not None and daemon.process.poll() is not None:
                raise RuntimeError(f"the daemon exited\n{daemon.log()[-4000:]}")
            if time.perf_counter() - started > TIMEOUT:
                missing = len(set(wanted) - watcher.running.keys())
                raise RuntimeError(f"{missing} API pods not Running after {TIMEOUT:g}s\n{daemon.log()[-4000:]}")
            time.sleep(0.01)
        seconds = max(watcher.running[name] for name in wanted) - started
        each = sorted(watcher.running[name] - started for name in wanted)
        return ApiStart(seconds, posted, started_wall, started_wall + seconds, each)
    finally:
        watcher.close()


# -- helpers -------------------------------------------------------------------------------


def wait(condition, what: str, timeout: float = 120.0, daemon: BenchDaemon | None = None) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            tail = f"\n{daemon.log()[-4000:]}" if daemon is not None else ""
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}{tail}")
        time.sleep(0.2)


def sweep(containerd: PrivateContainerd) -> None:
    """Whatever a stopped daemon left in the runtime (SIGTERM leaves containers running)."""
    with contextlib.suppress(Exception):
        remove_all_pods(containerd.socket)


# -- report ----------------------------------------------------------------------------------


def start_diagnostics(server: LocalApiServer, daemon: ClusterDaemon, start: ApiStart) -> None:
    """Where the API start's time went: the kubelet's own view (its log) against the API's,
    and the node's requests in the start window."""
    running = [
        float(e["ts"]) for e in daemon.log_events()
        if e.get("msg") == "pod phase Running" and str(e.get("pod", "")).startswith("default/cluster-")
    ]
    added = [
        float(e["ts"]) for e in daemon.log_events()
        if e.get("msg") == "pod added from api" and str(e.get("pod", "")).startswith("default/cluster-")
    ]
    records = [r for r in server.requests(user=USER, since=start.started_wall) if r.time <= start.done_wall]
    by_kind = Counter((r.verb, r.resource) for r in records)
    print("  where the API start's time went (unix times from the first POST):")
    if added:
        print(f"    kubelet 'pod added from api': first {min(added) - start.started_wall:6.2f} s, "
              f"last {max(added) - start.started_wall:6.2f} s")
    if running:
        print(f"    kubelet 'pod phase Running' (its /pods): first {min(running) - start.started_wall:6.2f} s, "
              f"last {max(running) - start.started_wall:6.2f} s")
    status_writes = sorted(r.time for r in records if r.resource == "pods/status" and r.verb == "patch")
    if status_writes:
        print(f"    pods/status patches: {len(status_writes)}, first {status_writes[0] - start.started_wall:6.2f} s, "
              f"last {status_writes[-1] - start.started_wall:6.2f} s")
    print(f"    API watch: all Running at {start.done_wall - start.started_wall:6.2f} s")
    print("    the node's requests in the window: " + ", ".join(
        f"{verb} {resource} {n}" for (verb, resource), n in sorted(by_kind.items(), key=lambda i: -i[1])))


def report_start(count: int, static_seconds: float, api_seconds: float, posted: float) -> None:
    ratio = api_seconds / static_seconds
    print(f"\nstart of {count} pods, until all Running:")
    print(f"  static pods (standalone daemon, /pods polled every {POLL * 1000:.0f} ms): {static_seconds:7.2f} s")
    print(f"  API pods (created through the admin client, seen by an API watch):  {api_seconds:7.2f} s"
          f" (of which the {count} POSTs: {posted:.2f} s)")
    print(f"  API/static {ratio:.2f}x; target <= 1.2x: {met(ratio <= 1.2)}", flush=True)


def report_steady(count: int, records: list, window, still_running: int) -> None:
    minutes = window.seconds / 60
    mine = [r for r in records if r.user == USER]
    by_kind = Counter((r.verb, r.resource) for r in mine)
    print(f"\nsteady state, {count} pods, {window.seconds:.1f} s window: requests of {USER} per minute")
    print(f"  {'verb':<8}{'resource':<16}{'count':>7}{'per min':>10}")
    for (verb, resource), n in sorted(by_kind.items(), key=lambda item: (str(item[0][1]), str(item[0][0]))):
        print(f"  {verb or '-':<8}{resource or '-':<16}{n:>7}{n / minutes:>10.2f}")
    print(f"  {'all':<24}{len(mine):>7}{len(mine) / minutes:>10.2f}")
    others = len(records) - len(mine)
    if others:
        print(f"  (other users' requests in the window, not counted: {others})")
    writes = ("create", "update", "patch", "delete")
    pod_status = sum(n for (v, r), n in by_kind.items() if r == "pods/status" and v in writes)
    node_status = sum(n for (v, r), n in by_kind.items() if r in ("nodes", "nodes/status") and v in writes)
    leases = sum(n for (v, r), n in by_kind.items() if r == "leases" and v in ("update", "patch"))
    expected_leases = window.seconds / 10
    print(f"  target no pods/status writes: {pod_status}, {met(pod_status == 0)}")
    print(f"  target node status writes only on change or every 5 m: {node_status} "
          f"(at most {int(window.seconds // 300)} expected with nothing changing), "
          f"{met(node_status <= window.seconds // 300)}")
    print(f"  target lease updates once per 10 s: {leases} ({leases / minutes:.2f}/min; "
          f"{expected_leases:.1f} expected), {met(abs(leases - expected_leases) <= 1)}")
    print(f"  daemon RSS median {statistics.median(window.rss) / MB:.1f} MB, max {max(window.rss) / MB:.1f} MB; "
          f"CPU {window.cpu_percent:.2f} % of one core; "
          f"PLEG relist mean {window.relist_mean * 1000:.1f} ms")
    print(f"  {still_running}/{count} pods still Running in the API after the window", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--start-rounds", type=int, default=3, help="alternating start rounds (default 3)")
    parser.add_argument("--seconds", type=float, default=120.0, help="steady window (default 120)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before the steady window (default 10)")
    args = parser.parse_args()
    if args.start_rounds < 1:
        parser.error("--start-rounds must be at least 1")
    if not 1 <= args.pods <= 110:
        parser.error("--pods must be 1..110 (the daemon's default --max-pods is 110)")
    with private_containerd() as containerd:
        print(f"cluster: private containerd, {args.pods} pods", flush=True)
        static_times, api_times = [], []
        for number in range(1, args.start_rounds + 1):
            print(f"round {number}/{args.start_rounds}", flush=True)
            print("1a. static pods on a standalone daemon ...", flush=True)
            static_times.append(static_start(containerd, args.pods))
            print(f"    {static_times[-1]:.2f} s; cleaned up", flush=True)
            print("1b. API pods on a cluster-mode daemon ...", flush=True)
            with cluster(containerd) as (server, daemon):
                start = api_start(server, daemon, args.pods)
                api_times.append(start.seconds)
                print(f"    {start.seconds:.2f} s; cleaning up ...", flush=True)
                report_start(args.pods, static_times[-1], start.seconds, start.posted)
                start_diagnostics(server, daemon, start)
        if args.start_rounds > 1:
            static_median, api_median = statistics.median(static_times), statistics.median(api_times)
            ratio = api_median / static_median
            print(f"\nstart over {args.start_rounds} rounds: static median {static_median:.2f} s, API median "
                  f"{api_median:.2f} s; API/static {ratio:.2f}x (per round: "
                  + ", ".join(f"{a / s:.2f}x" for a, s in zip(api_times, static_times))
                  + f"); target <= 1.2x: {met(ratio <= 1.2)}", flush=True)

        print(f"\n2. steady state: fresh API server and daemon, {args.pods} API pods ...", flush=True)
        with cluster(containerd) as (server, daemon):
            api_start(server, daemon, args.pods)
            time.sleep(args.settle)
            print(f"   all Running; watching {args.seconds:g} s (daemon pid {daemon.pid}) ...", flush=True)
            since = time.time()
            server.clear_requests()
            window = watch_daemon(daemon, args.seconds)
            records = [r for r in server.requests(since=since) if r.time <= since + window.seconds]
            still = sum(p.get("status", {}).get("phase") == "Running" for p in api_pods(server))
            report_steady(args.pods, records, window, still)
            print("cleaning up ...", flush=True)
    print("done (API server, daemons and containerd stopped)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (everything started was cleaned up)")
