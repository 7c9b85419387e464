"""Eviction: what the eviction manager costs while it only observes, and how soon it evicts
once the node runs short of disk, measured in the same run.

    python bench/eviction.py [--pods 110] [--seconds 60] [--settle 10] [--rounds 3]
    python bench/eviction.py --pods 20 --seconds 20 --rounds 1          # a quick run
    python bench/eviction.py --only reaction                            # part 2 alone

Needs root, containerd, runc, busybox-static and gcc (as the integration tests), the `test`
extra (the test API server) and `mount -t tmpfs`; starts its own private containerd, test
API server (tests/support/apiserver, 127.0.0.1) and daemons under /tmp and ends them all,
and unmounts its tmpfs, whatever happens.

1. The cost of observing. One standalone daemon (--max-pods) with --pods busybox pods
   (hostNetwork, one container looping and exiting at once on SIGTERM, as density.py's),
   watched --seconds after --settle seconds in each of three configurations, in turn, --cycles
   times; before each window the daemon is restarted (SIGTERM, configuration file rewritten,
   started again on the same root dir: it takes the same running pods back), so that every
   window sees the same pods, the same runtime and the same start-up behind it:
     (a) manager idle: `evictionHard: {}` and `localStorageCapacityIsolation: false`. With
         neither thresholds nor local storage isolation, EvictionManager.synchronize returns
         at once: the actor only wakes every 10 s. This is the baseline: eviction really off.
     (b) no thresholds: `evictionHard: {}` alone, what the issue calls eviction turned off.
         It is NOT off in pykubelet: synchronize skips its work only when there are no
         thresholds AND localStorageCapacityIsolation is false (Go's default is true), so
         every 10 s it still asks CRI ImageFsInfo, observes every signal (/proc/meminfo, the
         root memory cgroup, statvfs of the root dir and the image filesystem, pid limits and
         /proc/loadavg), keeps its bookkeeping and publishes the board; only the ranking and
         reclaim of an acting threshold are left out (and the per-pod disk walk of local
         storage eviction, which only measures pods with an emptyDir sizeLimit or an
         ephemeral-storage limit: these pods have none).
     (c) Go's default evictionHard (memory.available 100Mi, nodefs.available 10%,
         nodefs.inodesFree 5%, imagefs.available 15%, imagefs.inodesFree 5%), none met on
         this machine (checked: no "attempting to reclaim" line in the log).
   CPU as % of one core from utime+stime in /proc/<pid>/stat over each window (density.py's
   watch; the mean of a configuration's windows). Printed: each, its ratio against (a) and
   its difference from (a) in % of a core, and (c) against (b), the comparison the issue
   asks for. Target from the issue: observing
   costs <= 1 % of a core with 110 pods (judged on (c) - (a)). A window of 60 s holds six
   passes only and the pods' own PLEG relists and probes dominate the daemon's CPU, so the
   differences are small against the noise of a loaded machine: the CPU one observation
   costs is also measured in this process (NodeSignalReader.observe on the daemon's root
   dir, 200 calls, process CPU time; no cgroup manager, so allocatableMemory.available is
   not read, and no CRI call) and given per 10 s period as % of a core.

2. The reaction time. Per round, a fresh test API server and a cluster-mode daemon (node
   node1) whose --root-dir is a 64 MiB tmpfs (so nodefs, where emptyDirs live, is small)
   and `evictionHard: {nodefs.available: "50%"}`, as tests/integration/test_eviction.py
   does: static pods are critical (pods/eviction_ranking.py is_critical_pod) and never
   evicted, hence an API pod. Once the Node is Ready, and a random 0-10 s later (node status
   and the eviction manager both run every 10 s from the daemon's start, so without it the
   filler would start at the same point of the eviction period in every round: measured,
   crossed->observed was 9.75 s in all of three rounds), a BestEffort pod is created that
   writes 40 MB into its emptyDir and then prints "done". Times, all unix:
     crossed   this process polls statvfs of the root dir every 20 ms: the first sample with
               less than 50 % available (the filler's "done" line in its CRI container log,
               stamped by the runtime, is printed beside it as a check);
     observed  the eviction manager's "attempting to reclaim" line: written once per
               pressure episode, in the pass that first found the threshold met, right
               after that pass's observations (a few ms after it took them);
     decided   the eviction manager's "evicting pod default/filler (nodefs.available)";
     acted     the pod worker's "evicting pod: ..." (it starts killing the pod).
   Printed per round: crossed -> observed (up to the 10 s monitoring period, by design),
   observed -> decided and observed -> acted (target: <= 2 s after the observation), and
   whether the API shows the pod Failed/Evicted; then the medians over --rounds.

No timing is asserted: the figures are printed, with "target met"/"TARGET MISSED".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import (  # noqa: E402
    BUSYBOX_IMAGE,
    BenchDaemon,
    _uninterruptible,
    met,
    private_containerd,
    running_daemon,
)
from cluster import NODE, USER, node_ready, sweep, wait  # noqa: E402
from density import Window, start_pods, watch  # noqa: E402

from pykubelet.ports.node_signals import NodeSignalReader  # noqa: E402
from tests.support.apiserver.handle import LocalApiServer  # noqa: E402
from tests.support.containerd import PrivateContainerd  # noqa: E402

PODS = "/api/v1/namespaces/default/pods"
PERIOD = 10.0  # the eviction monitoring period (Go's evictionMonitoringPeriod, not configurable)
REACTION_TARGET = 2.0
OBSERVING_TARGET = 1.0  # % of one core

CONFIGS = [
    ("(a) manager idle", ("evictionHard: {}", "localStorageCapacityIsolation: false")),
    ("(b) evictionHard: {}", ("evictionHard: {}",)),
    ("(c) Go's default thresholds", ()),
]

TMPFS_SIZE = "64m"
THRESHOLD = 0.5
SHORT_OF_DISK = ('evictionHard: {nodefs.available: "50%"}',)
FILL_MB = 40
SLEEP = "trap 'exit 0' TERM; while true; do sleep 0.1; done"
FILLER = f"dd if=/dev/zero of=/scratch/fill bs=1M count={FILL_MB} 2>/dev/null; echo done; {SLEEP}"


# -- 1. the cost of observing -------------------------------------------------------------------


@dataclass
class Observing:
    label: str
    lines: tuple[str, ...]
    windows: list[Window]
    reclaim_lines: int  # "attempting to reclaim" lines while the configuration was in force
    still_running: list[int]

    @property
    def cpu(self) -> float:
        """% of one core, the mean of the cycles' windows."""
        return statistics.mean(w.cpu_percent for w in self.windows)


def observing_cost(containerd: PrivateContainerd, args: argparse.Namespace) -> tuple[list[Observing], float]:
    results = [Observing(label, lines, [], 0, []) for label, lines in CONFIGS]
    with running_daemon(containerd, f"--max-pods={args.max_pods}", config_lines=CONFIGS[0][1]) as daemon:
        print(f"starting {args.pods} pods on a standalone daemon ...", flush=True)
        started = start_pods(daemon, args.pods, timeout=max(120.0, 3.0 * args.pods))
        print(f"  all Running after {started:.1f} s", flush=True)
        for cycle in range(1, args.cycles + 1):
            for result in results:
                # Every window follows a restart, (a)'s too: the same start-up behind each.
                print(f"cycle {cycle}/{args.cycles}: restarting the daemon with "
                      f"{', '.join(result.lines) or 'no eviction lines (Go defaults)'} ...", flush=True)
                daemon.restart(result.lines)
                wait(lambda: running(daemon) >= args.pods, "the daemon to take its pods back", daemon=daemon)
                since = time.time()
                time.sleep(args.settle)
                print(f"  {result.label}: window of {args.seconds:g} s (daemon pid {daemon.pid}) ...", flush=True)
                result.windows.append(watch(daemon, args.seconds))
                result.reclaim_lines += sum(
                    1 for e in daemon.log_events()
                    if float(e.get("ts", 0)) >= since
                    and str(e.get("msg", "")).startswith("eviction manager: attempting")
                )
                result.still_running.append(running(daemon))
        per_call = observe_cpu(daemon)
        print("cleaning up (containerd removes every sandbox) ...", flush=True)
    sweep(containerd)
    return results, per_call


def running(daemon: BenchDaemon) -> int:
    assert daemon.client is not None
    return sum(pod.get("status", {}).get("phase") == "Running" for pod in daemon.client.pods().values())


def observe_cpu(daemon: BenchDaemon, calls: int = 200) -> float:
    """CPU seconds of one NodeSignalReader.observe in this process, on the daemon's root dir."""
    reader = NodeSignalReader(root_dir=str(daemon.root_dir), pod_logs_dir=str(daemon.base / "pod-logs"))
    reader.observe(image_fs=str(daemon.root_dir), now=0.0)  # the cgroup mounts, read once
    started = time.process_time()
    for _ in range(calls):
        observed = reader.observe(image_fs=str(daemon.root_dir), now=0.0)
    if not observed:
        raise RuntimeError("NodeSignalReader observed nothing")
    return (time.process_time() - started) / calls


def report_observing(pods: int, results: list[Observing], per_call: float) -> None:
    base = results[0].cpu
    windows = results[0].windows
    print(f"\nthe cost of observing, {pods} steady pods, {len(windows)} window(s) of {windows[0].seconds:.1f} s "
          "per configuration (mean of the windows):")
    print(f"  {'configuration':<32}{'CPU, % of one core':>20}{'vs (a)':>10}{'minus (a)':>14}   each window")
    for r in results:
        ratio = r.cpu / base if base else float("nan")
        each = ", ".join(f"{w.cpu_percent:.2f}" for w in r.windows)
        print(f"  {r.label:<32}{r.cpu:>18.2f} %{ratio:>9.2f}x{r.cpu - base:>+11.2f} pp   {each}")
    for r in results:
        print(f"    {r.label}: {', '.join(r.lines) or '(evictionHard not set: Go defaults)'}; pods Running after "
              f"each window: {', '.join(f'{n}/{pods}' for n in r.still_running)}; "
              f"'attempting to reclaim' lines: {r.reclaim_lines}")
    b, c = results[1].cpu, results[2].cpu
    print(f"  (c) against (b), the issue's comparison: {c:.2f} % / {b:.2f} % = "
          f"{c / b if b else float('nan'):.2f}x, difference {c - b:+.2f} % of a core")
    print(f"  one observation of the node's signals in this process: {per_call * 1000:.3f} ms of CPU, "
          f"{100 * per_call / PERIOD:.4f} % of a core at one per {PERIOD:g} s")
    cost = c - base
    print(f"  target observing <= {OBSERVING_TARGET:g} % of a core with {pods} pods: (c) - (a) = {cost:+.2f} %, "
          f"{met(cost <= OBSERVING_TARGET)}", flush=True)


# -- 2. the reaction time -----------------------------------------------------------------------


class EvictionDaemon(BenchDaemon):
    """BenchDaemon in cluster mode (--kubeconfig, node1, no manifests) whose root dir is a small
    tmpfs, mounted by start() and unmounted by close(), however the round ends."""

    def __init__(self, containerd: PrivateContainerd, kubeconfig: Path) -> None:
        super().__init__(containerd, f"--kubeconfig={kubeconfig}", config_lines=SHORT_OF_DISK)
        self.argv = [a for a in self.argv if not a.startswith(("--hostname-override=", "--pod-manifest-path="))]
        self.argv.append(f"--hostname-override={NODE}")
        self.mounted = False

    def start(self) -> EvictionDaemon:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(self.root_dir)], check=True)
        self.mounted = True
        super().start()
        return self

    def close(self) -> None:
        try:
            super().close()  # the files on the tmpfs go; its mount point stays until unmounted
        finally:
            if self.mounted:
                subprocess.run(["umount", "-l", str(self.root_dir)], check=False)
                self.mounted = False
            subprocess.run(["rm", "-rf", str(self.base)], check=False)


@contextlib.contextmanager
def short_of_disk(containerd: PrivateContainerd) -> Iterator[tuple[LocalApiServer, EvictionDaemon]]:
    server = LocalApiServer()
    daemon: EvictionDaemon | None = None
    try:
        server.start()
        daemon = EvictionDaemon(containerd, server.kubeconfig(USER))
        daemon.start()
        daemon.wait_for(lambda: node_ready(server), "the Node to be Ready", timeout=60)
        yield server, daemon
    finally:
        with _uninterruptible():
            try:
                if daemon is not None:
                    daemon.close()
            finally:
                server.stop()
                sweep(containerd)


def filler_pod() -> dict:
    container = {"name": "filler", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                 "command": ["sh", "-c", FILLER], "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}
    spec = {"nodeName": NODE, "terminationGracePeriodSeconds": 1, "containers": [container],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "filler", "namespace": "default"}, "spec": spec}


@dataclass
class Reaction:
    crossed: float
    done: float | None  # the filler's "done" line, stamped by the runtime
    observed: float | None
    decided: float | None
    acted: float | None
    api: str  # phase/reason the API shows at the end
    why: str  # the eviction manager's line


def short_of_disk_round(containerd: PrivateContainerd, timeout: float = 90.0) -> Reaction:
    with short_of_disk(containerd) as (server, daemon):
        root = str(daemon.root_dir)
        free = available_fraction(root)
        if free <= THRESHOLD:
            raise RuntimeError(f"the tmpfs is {100 * (1 - free):.0f} % used before the filler started")
        # The node status and the eviction manager both run every 10 s from the daemon's start,
        # so "Node Ready" comes at the same point of the eviction period every round: a random
        # wait spreads the crossing over the period, as a real pod's would be.
        time.sleep(random.uniform(0.0, PERIOD))
        created = server.admin.post(PODS, json=filler_pod())
        if created.status_code != 201:
            raise RuntimeError(f"creating the filler: {created.status_code} {created.text}")
        posted = time.time()
        crossed: float | None = None
        next_log_read = 0.0
        while True:
            now = time.time()
            if crossed is None and available_fraction(root) < THRESHOLD:
                crossed = now
            if now >= next_log_read:
                next_log_read = now + 0.25
                if any(str(e.get("msg", "")).startswith("evicting pod:") for e in daemon.log_events()):
                    break
                if daemon.process is not None and daemon.process.poll() is not None:
                    raise RuntimeError(f"the daemon exited\n{daemon.log()[-4000:]}")
            if now - posted > timeout:
                raise RuntimeError(f"no eviction {timeout:g} s after the filler was created "
                                   f"(disk crossed: {crossed is not None})\n{daemon.log()[-4000:]}")
            time.sleep(0.02)
        if crossed is None:
            raise RuntimeError("evicted before this process saw the disk cross the threshold")
        events = daemon.log_events()
        observed = first(events, "eviction manager: attempting to reclaim")
        decided = first(events, "eviction manager: evicting pod default/filler")
        acted = first(events, "evicting pod:")
        why = next((str(e["msg"]) for e in events if str(e.get("msg", "")).startswith("eviction manager: evicting")), "")
        wait(lambda: status(server).get("reason") == "Evicted", "the API to show the filler Evicted",
             timeout=30, daemon=daemon)
        shown = status(server)
        return Reaction(crossed, done_line(daemon), observed, decided, acted,
                        f"{shown.get('phase')}/{shown.get('reason')}", why)


def available_fraction(path: str) -> float:
    fs = os.statvfs(path)
    return fs.f_bavail / fs.f_blocks


def first(events: list[dict], prefix: str) -> float | None:
    return next((float(e["ts"]) for e in events if str(e.get("msg", "")).startswith(prefix)), None)


def status(server: LocalApiServer) -> dict:
    return server.admin.get(f"{PODS}/filler").json().get("status", {})


def done_line(daemon: BenchDaemon) -> float | None:
    """The runtime's timestamp on the filler's "done" line (CRI log: "<RFC3339Nano> stdout F done")."""
    for path in (daemon.base / "pod-logs").glob("default_filler_*/filler/*.log"):
        for line in path.read_text(errors="replace").splitlines():
            stamp, _, rest = line.partition(" ")
            if rest.endswith(" done"):
                return rfc3339(stamp)
    return None


def rfc3339(stamp: str) -> float:
    """2006-01-02T15:04:05.999999999Z07:00 to unix seconds (nanoseconds cut to what a float holds)."""
    head, dot, tail = stamp.partition(".")
    if dot:
        digits = "".join(ch for ch in tail if ch.isdigit())
        zone = tail[len(digits):]
        stamp = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def gap(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else later - earlier


def secs(value: float | None) -> str:
    return "      -" if value is None else f"{value:6.2f} s"


def report_reaction(rounds: list[Reaction]) -> None:
    print(f"\nthe reaction time: 64 MiB tmpfs root dir, nodefs.available < 50 %, filler writes {FILL_MB} MB; "
          f"monitoring period {PERIOD:g} s")
    print(f"  {'round':<7}{'done-crossed':>14}{'crossed->observed':>19}{'observed->decided':>19}"
          f"{'observed->acted':>17}{'crossed->acted':>16}   API")
    for number, r in enumerate(rounds, 1):
        print(f"  {number:<7}{secs(gap(r.done, r.crossed)):>14}{secs(gap(r.observed, r.crossed)):>19}"
              f"{secs(gap(r.decided, r.observed)):>19}{secs(gap(r.acted, r.observed)):>17}"
              f"{secs(gap(r.acted, r.crossed)):>16}   {r.api}")
    for r in rounds[:1]:
        print(f"  the manager's line: {r.why}")

    def median(pairs) -> float | None:
        values = [v for v in pairs if v is not None]
        return statistics.median(values) if values else None

    to_observe = median(gap(r.observed, r.crossed) for r in rounds)
    to_decide = median(gap(r.decided, r.observed) for r in rounds)
    to_act = median(gap(r.acted, r.observed) for r in rounds)
    total = median(gap(r.acted, r.crossed) for r in rounds)
    print(f"  median over {len(rounds)} round(s): crossed->observed {secs(to_observe)}, observed->decided "
          f"{secs(to_decide)}, observed->acted {secs(to_act)}, crossed->acted {secs(total)}")
    worst = max((g for g in (gap(r.acted, r.observed) for r in rounds) if g is not None), default=None)
    print(f"  target eviction <= {REACTION_TARGET:g} s after the observation: worst observed->acted "
          f"{secs(worst)}, {met(worst is not None and worst <= REACTION_TARGET)}")
    late = [g for g in (gap(r.observed, r.crossed) for r in rounds) if g is not None and g > PERIOD + 0.5]
    print(f"  crossed->observed within one monitoring period ({PERIOD:g} s): "
          f"{len(rounds) - len(late)}/{len(rounds)}", flush=True)


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each CPU window (default 60)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before each window (default 10)")
    parser.add_argument("--max-pods", type=int, default=110)
    parser.add_argument("--cycles", type=int, default=1,
                        help="times the three CPU windows are taken, in turn (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="reaction rounds (default 3)")
    parser.add_argument("--only", choices=("observing", "reaction"), help="run one part only")
    args = parser.parse_args()
    if args.pods > args.max_pods:
        parser.error(f"--pods {args.pods} is more than --max-pods {args.max_pods}: the rest would be refused")
    if args.rounds < 1 or args.cycles < 1:
        parser.error("--rounds and --cycles must be at least 1")
    load = os.getloadavg()
    with private_containerd() as containerd:
        print(f"eviction: private containerd; {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} "
              f"{load[2]:.2f} at the start", flush=True)
        if args.only != "reaction":
            print(f"\n1. the cost of observing: {args.pods} pods, --max-pods={args.max_pods}, windows of "
                  f"{args.seconds:g} s after {args.settle:g} s settling", flush=True)
            results, per_call = observing_cost(containerd, args)
            report_observing(args.pods, results, per_call)
        if args.only != "observing":
            print(f"\n2. the reaction time: {args.rounds} round(s), each on a fresh API server and daemon", flush=True)
            rounds = []
            for number in range(1, args.rounds + 1):
                print(f"round {number}/{args.rounds} ...", flush=True)
                rounds.append(short_of_disk_round(containerd))
            report_reaction(rounds)
        load = os.getloadavg()
        print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end "
              f"(other work on the machine makes the CPU figures noisy)", flush=True)
    print("done (API servers, daemons and containerd stopped, tmpfs unmounted)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted (everything started was cleaned up)")
