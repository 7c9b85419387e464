"""What the containerd benchmarks share: a private containerd with the test images, the
daemon as a subprocess on it, the admin socket, /proc readings and percentiles.

Everything started here is ended by the context managers, also on Ctrl-C, SIGTERM or an
error; the daemon also dies with the benchmark if the benchmark is killed (PDEATHSIG).
Addresses are 127.0.0.1 and unix sockets only.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # for tests.support, when run as `python bench/x.py`
    sys.path.insert(0, str(REPO))


from tests.support.containerd import (  # noqa: E402
    BUSYBOX_IMAGE,
    PrivateContainerd,
    build_and_import_images,
    check_prerequisites,
)
from tests.support.daemon import TEST_CGROUP_ROOT, DaemonProcess, remove_test_cgroups  # noqa: E402
from tests.support.pods import TRAPPING_LOOP, container, pod_manifest, write_manifest  # noqa: E402

__all__ = [
    "BUSYBOX_IMAGE",
    "AdminClient",
    "BenchDaemon",
    "NODE",
    "cpu_seconds",
    "die_with_parent",
    "histogram",
    "histogram_quantile",
    "sums_by_label",
    "loop_pod",
    "sleeping_pod",
    "met",
    "ms",
    "percentile",
    "polling_pods",
    "private_containerd",
    "rss_bytes",
    "write_manifest",
]

NODE = "benchnode"  # --hostname-override: no dash, so "<pod>-<node>" splits unambiguously
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1


# -- figures ---------------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    """Nearest rank: the smallest sample with at least q of all samples at or below it."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def p50_p99(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), percentile(samples, 0.99)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def met(ok: bool) -> str:
    return "target met" if ok else "TARGET MISSED"


# -- a private containerd --------------------------------------------------------------


@contextlib.contextmanager
def private_containerd() -> Iterator[PrivateContainerd]:
    """A private containerd with BUSYBOX_IMAGE and the pause image imported; stopped (every
    sandbox removed, shims killed, cgroups and temp dir gone) however the block ends."""
    check_prerequisites()
    print(memory_cgroups_line("at the start"), flush=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    instance = PrivateContainerd()
    try:
        instance.start()
        build_and_import_images(instance)
        yield instance
    finally:
        with _uninterruptible():
            instance.stop()
            # The daemons' and the raw starts' cgroups (tests.support.daemon.cgroup_root_for):
            # a benchmark leaves none behind, as a test session does not.
            problem = remove_test_cgroups()
            if problem is not None:
                print(f"bench cgroups under {TEST_CGROUP_ROOT} not removed: {problem}", file=sys.stderr)
            print(memory_cgroups_line("at the end"), flush=True)
        signal.signal(signal.SIGTERM, previous)


def memory_cgroups() -> int | None:
    """The memory cgroups the kernel holds (/proc/cgroups), removed ones included: a
    container's memory cgroup outlives its folder while page cache is charged to it."""
    try:
        with open("/proc/cgroups") as table:
            for line in table:
                fields = line.split()
                if fields and fields[0] == "memory":
                    return int(fields[2])
    except (OSError, ValueError, IndexError):
        pass
    return None


def memory_cgroups_line(when: str) -> str:
    count = memory_cgroups()
    if count is None:
        return f"memory cgroups in the kernel {when}: unknown"
    note = ("; thousands of removed ones slow every start down, machine-wide: "
            "`sync; echo 1 > /proc/sys/vm/drop_caches` frees them (docs/performance.md)") if count > 2000 else ""
    return f"memory cgroups in the kernel {when}, removed ones included: {count}{note}"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _uninterruptible() -> Iterator[None]:
    """Cleanup that a second Ctrl-C does not cut short."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, term)


# -- the daemon ------------------------------------------------------------------------


def loop_pod(name: str) -> dict:
    """A host-network busybox pod whose one container loops and exits at once on SIGTERM."""
    return pod_manifest(name, [container("loop", TRAPPING_LOOP)])


# Sleeps until SIGTERM, then exits at once: no process started while it runs (the loop
# above starts a sleep ten times a second: 5,000 processes a second at 500 pods, which
# saturates a small machine by itself and measures that instead of the daemon).
SLEEPING = ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]


def sleeping_pod(name: str) -> dict:
    """A host-network busybox pod whose one container sleeps and exits at once on SIGTERM."""
    return pod_manifest(name, [container("sleep", SLEEPING)])


class BenchDaemon(DaemonProcess):
    """`pykubelet run` on a private containerd, standalone, with its own root dir, manifest
    dir and pod logs dir under one temp dir (removed by close()); JSON logs, so that the
    benchmarks can read event times from them. config_lines ("key: value") are appended to
    its KubeletConfiguration file."""

    def __init__(self, containerd: PrivateContainerd, *extra: str, config_lines: tuple[str, ...] = ()) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="pykubelet-bench-", dir="/tmp"))
        self.manifests = self.base / "manifests"
        self.manifests.mkdir()
        config = self.config_path = self.base / "kubelet.yaml"
        self.write_config(config_lines)
        super().__init__(
            self.base / "root",
            f"--config={config}",
            f"--container-runtime-endpoint={containerd.endpoint}",
            f"--pod-manifest-path={self.manifests}",
            f"--hostname-override={NODE}",
            "--node-ip=127.0.0.1",
            "--logging-format=json",
            *extra,
        )
        self.client: AdminClient | None = None

    def start(self) -> BenchDaemon:
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        self.wait_for(lambda: os.path.exists(self.admin_socket), "the admin socket to appear")
        self.client = AdminClient(self.admin_socket)
        self.wait_for(self._healthz_ok, "healthz ok (runtime connected)")
        return self

    def write_config(self, config_lines: tuple[str, ...] = ()) -> None:
        """The KubeletConfiguration file: podLogsDir under the temp dir, then config_lines."""
        self.config_path.write_text(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            f"podLogsDir: {self.base / 'pod-logs'}\n" + "".join(f"{line}\n" for line in config_lines)
        )

    def restart(self, config_lines: tuple[str, ...] | None = None) -> BenchDaemon:
        """SIGTERM (the pods' containers and mounts stay, as with the Go kubelet), the
        configuration file rewritten when config_lines are given, and the daemon started
        again on the same root dir, manifests and runtime: it takes its running pods back."""
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.process is not None and self.process.poll() is None:
            self.terminate(timeout=20)
        self._log.close()
        if config_lines is not None:
            self.write_config(config_lines)
        return self.start()

    def _healthz_ok(self) -> bool:
        try:
            return self.client.get("/healthz").status_code == 200
        except (http.client.HTTPException, OSError):  # the socket's file is there before its listener
            return False

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log_events(self) -> list[dict]:
        """The daemon's JSON log lines (others, e.g. a traceback's, skipped)."""
        events = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        return events

    def close(self) -> None:
        """SIGTERM (containers stay in the runtime, as with the Go kubelet), else SIGKILL."""
        if self.client is not None:
            self.client.close()
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.terminate(timeout=20)
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def running_daemon(
    containerd: PrivateContainerd, *extra: str, keep_log: Path | None = None, config_lines: tuple[str, ...] = ()
) -> Iterator[BenchDaemon]:
    daemon = BenchDaemon(containerd, *extra, config_lines=config_lines)
    try:
        yield daemon.start()
    finally:
        with _uninterruptible():
            if keep_log is not None and daemon.log_path.exists():
                shutil.copyfile(daemon.log_path, keep_log)
            daemon.close()


def die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class AdminClient:
    """HTTP over the admin socket on one kept-alive connection, with the standard library's
    http.client: a poll every few ms should cost the daemon a request, not a connection, and
    cost this process (on the same CPUs as the runtime under test) as little as possible
    (measured: 0.42 ms of CPU per request against httpx's 1.17 ms)."""

    def __init__(self, socket_path: str) -> None:
        self._connection = _UnixHTTPConnection(socket_path, timeout=10)

    def get(self, path: str) -> AdminResponse:
        try:
            return self._get(path)
        except (http.client.HTTPException, OSError):
            self._connection.close()  # the daemon closed the kept-alive connection: once more
            return self._get(path)

    def _get(self, path: str) -> AdminResponse:
        self._connection.request("GET", path)
        response = self._connection.getresponse()
        return AdminResponse(response.status, response.read())

    def pods(self) -> dict[str, dict]:
        """/pods by the manifest's name (the node suffix removed)."""
        items = self.get("/pods").json()["items"]
        return {pod["metadata"]["name"].removesuffix(f"-{NODE}"): pod for pod in items}

    def close(self) -> None:
        self._connection.close()


class AdminResponse:
    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self):
        return json.loads(self.content)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("admin", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._socket_path)


_POLLER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from _support import AdminClient
client, period = AdminClient(sys.argv[2]), float(sys.argv[3])
next_at, first = time.perf_counter(), True
while True:
    client.pods()
    if first:
        print("polling", flush=True)
        first = False
    next_at += period
    time.sleep(max(0.0, next_at - time.perf_counter()))
"""


@contextlib.contextmanager
def polling_pods(socket_path: str, period: float) -> Iterator[None]:
    """/pods polled every `period` seconds, as a timed pykubelet start polls it, by a
    process of its own for as long as the block runs: so that a start the bench times
    some other way (the raw CRI sequence) runs under the same instrument load."""
    process = subprocess.Popen(
        [sys.executable, "-c", _POLLER, str(Path(__file__).parent), socket_path, str(period)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        assert process.stdout is not None
        if process.stdout.readline() != b"polling\n":  # its first answer came back
            raise RuntimeError("the /pods poller did not start")
        yield
    finally:
        process.kill()
        process.wait()


# -- /proc and /metrics ----------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of stat(5)


def histogram(metrics_text: str, name: str) -> tuple[list[tuple[float, float]], float, float]:
    """A Prometheus histogram from a text exposition: ([(le, cumulative count)], sum, count)."""
    buckets: list[tuple[float, float]] = []
    total = count = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(f"{name}_bucket{{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((math.inf if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
        elif line.startswith(f"{name}_sum "):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith(f"{name}_count "):
            count = float(line.rsplit(" ", 1)[1])
    return sorted(buckets), total, count


def sums_by_label(metrics_text: str, name: str, label: str) -> dict[str, tuple[float, int]]:
    """{label value: (sum, count)} of a labelled histogram in a text exposition."""
    found: dict[str, list[float]] = {}
    for line in metrics_text.splitlines():
        for suffix, index in (("_sum{", 0), ("_count{", 1)):
            if line.startswith(name + suffix) and f'{label}="' in line:
                value = line.split(f'{label}="', 1)[1].split('"', 1)[0]
                found.setdefault(value, [0.0, 0.0])[index] = float(line.rsplit(" ", 1)[1])
    return {value: (total, int(count)) for value, (total, count) in found.items()}


def histogram_delta(before: tuple, after: tuple) -> tuple[list[tuple[float, float]], float, float]:
    """What a histogram gathered between two scrapes."""
    earlier = dict(before[0])
    return [(le, c - earlier.get(le, 0.0)) for le, c in after[0]], after[1] - before[1], after[2] - before[2]


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket that holds the
    q-th observation (so an estimate, never finer than the bucket bounds)."""
    if not buckets or buckets[-1][1] == 0:
        return math.nan
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # in the +Inf bucket: the highest finite bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def wall() -> float:
    """Wall-clock seconds, the clock of the daemon's log timestamps."""
    return time.time()
