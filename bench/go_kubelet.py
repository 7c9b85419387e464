"""pykubelet beside the Go kubelet: the same pods on the same private containerd, one
kubelet after the other, in one run (issue 15's "x the Go kubelet" figures).

    python bench/go_kubelet.py --kubelet /path/to/kubelet [--scenarios rest,probes,exec,start]
        [--pods 110] [--exec-pods 30] [--start-pods 30] [--start-rounds 3] [--seconds 60]
        [--keep-logs DIR]

--kubelet is a Go kubelet binary, run as it is: this project neither builds nor ships one
(docs/performance.md says which one was measured and where it came from). Both kubelets run
standalone on static pods from a manifest directory of their own, on the bench's private
containerd (tests/support/containerd.py), with the cgroupfs driver. The Go kubelet gets a
cgroup root of its own (--cgroup-root), so that its housekeeping, which removes pod cgroups
it does not know, never touches another process's pods; its ports are 20250 (API),
20255 (read-only: /pods, no authentication) and 20248 (healthz) on 127.0.0.1.

Scenarios, each run for pykubelet and then for the Go kubelet (a fresh kubelet each time;
every sandbox is removed through CRI between runs, so both start from an empty runtime):
  rest    --pods sleeping busybox pods (bench/_support.sleeping_pod): once every pod is
          Running in the kubelet's /pods, --settle seconds, then a --seconds window: the
          kubelet's CPU (% of one core, utime+stime of all its threads) and RSS (VmRSS
          sampled every second, max). Issue 15 item 5.
  probes  --pods busybox httpd pods (bench/probes.web_pod) with an httpGet readiness and a
          tcpSocket liveness probe every second each; the same window, once every pod is
          Ready. Issue 15 item 2.
  exec    --exec-pods httpd pods with an httpGet readiness and an exec liveness probe
          (cat /www/ready) every second each. Issue 15 item 2.
  start   --start-pods sleeping pods written at once into an idle kubelet's manifest
          directory (--start-settle seconds after it answered its healthz): seconds until every
          pod is Running in its /pods, polled every --poll seconds. --start-rounds rounds,
          the two kubelets alternating and the first one changing each round. Issue 15
          item 4.
Nothing but /proc is read during a window. Every figure is printed with its ratio
pykubelet / Go kubelet; the machine's load average is printed beside each run.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _probes_support import free_ports, load_average, tree_cpu_seconds  # noqa: E402
from _raw_start import remove_sandbox  # noqa: E402
from _support import (  # noqa: E402
    NODE,
    BenchDaemon,
    die_with_parent,
    private_containerd,
    rss_bytes,
    sleeping_pod,
    write_manifest,
)
from probes import web_pod  # noqa: E402

from pykubelet.ports.cri import CriClient  # noqa: E402
from tests.support.containerd import PAUSE_IMAGE, cgroup_mount_points, unmount_under  # noqa: E402

GO_PORTS = {"port": 20250, "read-only-port": 20255, "healthz-port": 20248}
MB = 1024 * 1024


# -- the two kubelets, behind one face ----------------------------------------------------


class Pykubelet:
    name = "pykubelet"

    def __init__(self, containerd, max_pods: int) -> None:
        self.daemon = BenchDaemon(containerd, f"--max-pods={max_pods}")
        self.manifests = self.daemon.manifests

    def start(self) -> None:
        self.daemon.start()

    @property
    def pid(self) -> int:
        return self.daemon.pid

    def pods(self) -> dict[str, dict]:
        assert self.daemon.client is not None
        return self.daemon.client.pods()

    def log_tail(self) -> str:
        return self.daemon.log()[-3000:]

    def close(self) -> None:
        self.daemon.close()


class GoKubelet:
    """The Go kubelet binary, standalone, with everything it writes under one temp dir
    (but /var/log/pods, which Go kubelets before 1.29 do not let one move: its pods' folders
    there are removed by close())."""

    name = "Go kubelet"

    def __init__(self, binary: str, containerd, max_pods: int) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="go-kubelet-bench-", dir="/tmp"))
        self.manifests = self.base / "manifests"
        self.manifests.mkdir()
        self.root_dir = self.base / "root"
        self.cgroup_root = f"/{self.base.name}"
        self.log_path = self.base / "kubelet.log"
        self.argv = [
            binary,
            "--container-runtime=remote",
            f"--container-runtime-endpoint={containerd.endpoint}",
            f"--pod-manifest-path={self.manifests}",
            f"--root-dir={self.root_dir}",
            f"--cert-dir={self.base / 'pki'}",
            f"--volume-plugin-dir={self.base / 'volume-plugins'}",
            f"--hostname-override={NODE}",
            "--node-ip=127.0.0.1",
            "--address=127.0.0.1",
            "--healthz-bind-address=127.0.0.1",
            *(f"--{flag}={port}" for flag, port in GO_PORTS.items()),
            "--fail-swap-on=false",
            "--cgroup-driver=cgroupfs",
            f"--cgroup-root={self.cgroup_root}",
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            f"--max-pods={max_pods}",
            "--v=0",
        ]
        self.process: subprocess.Popen | None = None
        self._log = None

    def start(self) -> None:
        for folder in self._cgroup_folders():  # --cgroup-root must exist in every hierarchy
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # cgroup v1 starts a cpuset empty
                if (folder / name).exists():
                    (folder / name).write_text((folder.parent / name).read_text())
        self._log = open(self.log_path, "ab")
        # Go's mount library gives up when /proc/self/mountinfo (or /proc/mounts) changes
        # under it three reads in a row, as it does while other containers start on a busy
        # machine: at start the kubelet then exits, or logs that its container manager did
        # not start and never syncs a pod. Either way it is started again.
        for attempt in range(5):
            offset = self.log_path.stat().st_size
            self.process = subprocess.Popen(
                self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
            outcome = self._started(offset)
            if outcome == "started":
                return
            if outcome != "mounts changed" or attempt == 4:
                raise RuntimeError(f"the Go kubelet did not start ({outcome}):\n{self.log_tail()}")
            print("  (the Go kubelet gave up reading the mount table at start; started again)", flush=True)
            self.close()

    def _started(self, offset: int) -> str:
        """Wait until the kubelet has started its container manager (its plugin manager
        starts right after), or failed to."""
        assert self.process is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            this_attempt = self.log_path.read_bytes()[offset:].decode(errors="replace")
            if "consistent content of /proc/" in this_attempt:
                return "mounts changed"
            if self.process.poll() is not None:
                return f"exited with {self.process.returncode}"
            if "Starting Kubelet Plugin Manager" in this_attempt and self._healthz_ok():
                return "started"
            time.sleep(0.2)
        return "no container manager after 120 s"

    def _healthz_ok(self) -> bool:
        try:
            return self._get(GO_PORTS["healthz-port"], "/healthz") == b"ok"
        except (OSError, http.client.HTTPException):
            return False

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def pods(self) -> dict[str, dict]:
        """The read-only port's /pods, by the manifest's name (the node suffix removed)."""
        items = json.loads(self._get(GO_PORTS["read-only-port"], "/pods"))["items"] or []  # null when none
        return {pod["metadata"]["name"].removesuffix(f"-{NODE}"): pod for pod in items}

    def _get(self, port: int, path: str) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path)
            return connection.getresponse().read()
        finally:
            connection.close()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def close(self) -> None:
        """SIGTERM (its containers stay in the runtime, as pykubelet's), else SIGKILL; its
        files, its pods' log folders and (once the runtime's sandboxes are gone:
        remove_everything) its cgroups are removed by cleanup()."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
        unmount_under(self.base)  # the Go kubelet bind-mounts its root dir onto itself
        for folder in self._cgroup_folders():
            for path, _, _ in os.walk(folder, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(path)
        for folder in Path("/var/log/pods").glob(f"default_*-{NODE}_*"):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def _cgroup_folders(self) -> list[Path]:
        return [Path(mount) / self.cgroup_root.lstrip("/") for mount in cgroup_mount_points()]


Kubelet = Pykubelet | GoKubelet


KEEP_LOGS: Path | None = None  # --keep-logs


@contextlib.contextmanager
def running(make: Callable[[], Kubelet], containerd) -> Iterator[Kubelet]:
    """A kubelet started on an empty runtime; stopped, and every sandbox it left removed
    through CRI, however the block ends."""
    kubelet = make()
    try:
        kubelet.start()
        yield kubelet
    finally:
        if KEEP_LOGS is not None:
            log = kubelet.daemon.log_path if isinstance(kubelet, Pykubelet) else kubelet.log_path
            if log.exists():
                shutil.copyfile(log, KEEP_LOGS / f"{time.strftime('%H%M%S')}-{kubelet.name.replace(' ', '-')}.log")
        kubelet.close()
        try:
            trio.run(remove_everything, containerd.endpoint)
        finally:
            if isinstance(kubelet, GoKubelet):
                kubelet.cleanup()


async def remove_everything(endpoint: str) -> None:
    async with CriClient(endpoint) as cri:
        for sandbox in await cri.list_pod_sandbox():
            await remove_sandbox(cri, sandbox.id)


# -- what is measured ------------------------------------------------------------------------


def wait_pods(kubelet: Kubelet, names: set[str], condition: Callable[[dict], bool], timeout: float,
              poll: float) -> float:
    """Seconds from now until every named pod meets `condition` in the kubelet's /pods."""
    started = time.perf_counter()
    while True:
        try:
            listed = kubelet.pods()
        except (OSError, http.client.HTTPException, ValueError):
            listed = {}
        if all(name in listed and condition(listed[name]) for name in names):
            return time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            missing = sorted(name for name in names if not (name in listed and condition(listed[name])))
            raise RuntimeError(
                f"{kubelet.name}: {len(missing)} of {len(names)} pods not there after {timeout:g}s "
                f"(e.g. {missing[:3]})\n{kubelet.log_tail()}"
            )
        time.sleep(poll)


def running_pod(pod: dict) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return pod.get("status", {}).get("phase") == "Running" and bool(statuses) and all(
        "running" in s.get("state", {}) for s in statuses
    )


def ready_pod(pod: dict) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class Steady:
    kubelet: str
    up_seconds: float
    cpu_percent: float
    rss_max_mb: float
    rss_median_mb: float
    load: str


def steady(make: Callable[[], Kubelet], containerd, manifests: list[dict], condition: Callable[[dict], bool],
           args: argparse.Namespace) -> Steady:
    with running(make, containerd) as kubelet:
        for manifest in manifests:
            write_manifest(kubelet.manifests, manifest)
        names = {manifest["metadata"]["name"] for manifest in manifests}
        up = wait_pods(kubelet, names, condition, timeout=args.timeout, poll=0.5)
        time.sleep(args.settle)
        load = load_average()
        cpu_before, started = tree_cpu_seconds(kubelet.pid), time.perf_counter()
        samples = []
        while time.perf_counter() - started < args.seconds:
            samples.append(rss_bytes(kubelet.pid))
            time.sleep(1.0)
        cpu = (tree_cpu_seconds(kubelet.pid) - cpu_before) / (time.perf_counter() - started)
        still = kubelet.pods()
        lost = sorted(name for name in names if not (name in still and condition(still[name])))
        if lost:
            raise RuntimeError(f"{kubelet.name}: pods no longer up after the window: {lost[:5]}")
        return Steady(kubelet.name, up, 100 * cpu, max(samples) / MB, statistics.median(samples) / MB, load)


def start_round(make: Callable[[], Kubelet], containerd, count: int, args: argparse.Namespace, tag: str) -> float:
    with running(make, containerd) as kubelet:
        time.sleep(args.start_settle)
        manifests = [sleeping_pod(f"start-{tag}-{i}") for i in range(count)]
        started = time.perf_counter()
        for manifest in manifests:
            write_manifest(kubelet.manifests, manifest)
        names = {manifest["metadata"]["name"] for manifest in manifests}
        wait_pods(kubelet, names, running_pod, timeout=args.timeout, poll=args.poll)
        return time.perf_counter() - started


# -- the run -----------------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def steady_pair(title: str, makers: tuple, containerd, manifests: list[dict], condition: Callable[[dict], bool],
                args: argparse.Namespace) -> None:
    """The scenario for pykubelet, then for the Go kubelet; each line printed when measured."""
    print(f"\n{title}", flush=True)
    pair = []
    for make in makers:
        figures = steady(make, containerd, manifests, condition, args)
        pair.append(figures)
        print(f"  {figures.kubelet:<10} up in {figures.up_seconds:6.1f} s   CPU {figures.cpu_percent:5.2f} % of a core"
              f"   RSS max {figures.rss_max_mb:6.1f} MB (median {figures.rss_median_mb:.1f})   load {figures.load}",
              flush=True)
    py, go = pair
    print(f"  pykubelet / Go kubelet: CPU {ratio(py.cpu_percent, go.cpu_percent)}, "
          f"RSS {ratio(py.rss_max_mb, go.rss_max_mb)}, up {ratio(py.up_seconds, go.up_seconds)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubelet", required=True, help="a Go kubelet binary")
    parser.add_argument("--scenarios", default="rest,probes,exec,start")
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--exec-pods", type=int, default=30)
    parser.add_argument("--start-pods", type=int, default=30)
    parser.add_argument("--start-rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--settle", type=float, default=10)
    parser.add_argument("--start-settle", type=float, default=30,
                        help="seconds an idle kubelet is left before a start round (the Go kubelet goes on "
                             "starting for several seconds after its healthz answers)")
    parser.add_argument("--poll", type=float, default=0.1, help="/pods poll period of a start round")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--keep-logs", type=Path, help="a folder to copy each kubelet's log into")
    args = parser.parse_args()
    global KEEP_LOGS
    KEEP_LOGS = args.keep_logs
    scenarios = [s for s in args.scenarios.split(",") if s]
    binary = str(Path(args.kubelet).resolve())
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    max_pods = max(args.pods, args.exec_pods, args.start_pods, 110)
    print(f"pykubelet beside {version} ({binary}); load average {load_average()}", flush=True)

    with private_containerd() as containerd:
        def makers() -> tuple[Callable[[], Kubelet], Callable[[], Kubelet]]:
            return (lambda: Pykubelet(containerd, max_pods)), (lambda: GoKubelet(binary, containerd, max_pods))

        py_kubelet, go_kubelet = makers()
        if "rest" in scenarios:
            manifests = [sleeping_pod(f"rest-{i}") for i in range(args.pods)]
            steady_pair(f"{args.pods} pods at rest, a {args.seconds:g} s window", (py_kubelet, go_kubelet),
                        containerd, manifests, running_pod, args)
        for scenario, count, liveness in (("probes", args.pods, "tcp"), ("exec", args.exec_pods, "exec")):
            if scenario not in scenarios:
                continue
            ports = free_ports(count, 21000)
            manifests = [web_pod(f"{scenario}-{i}", port, True, liveness) for i, port in enumerate(ports)]
            kind = "tcpSocket" if liveness == "tcp" else "exec"
            steady_pair(f"{count} pods, httpGet readiness + {kind} liveness every second, a {args.seconds:g} s window",
                        (py_kubelet, go_kubelet), containerd, manifests, ready_pod, args)
        if "start" in scenarios:
            times: dict[str, list[float]] = {"pykubelet": [], "Go kubelet": []}
            for round_ in range(args.start_rounds):
                order = [("pykubelet", py_kubelet), ("Go kubelet", go_kubelet)]
                if round_ % 2:
                    order.reverse()
                for name, make in order:
                    load = load_average()
                    took = start_round(make, containerd, args.start_pods, args, f"{round_}")
                    times[name].append(took)
                    print(f"  start round {round_ + 1}: {name:<10} {args.start_pods} pods Running in {took:6.2f} s"
                          f"   load {load}", flush=True)
            py_median, go_median = statistics.median(times["pykubelet"]), statistics.median(times["Go kubelet"])
            each = ", ".join(ratio(p, g) for p, g in zip(times["pykubelet"], times["Go kubelet"]))
            print(f"\n{args.start_pods} pods at once, told -> all Running (median of {args.start_rounds} rounds):"
                  f" pykubelet {py_median:.2f} s, Go kubelet {go_median:.2f} s:"
                  f" {ratio(py_median, go_median)} (each round: {each})")


if __name__ == "__main__":
    main()
