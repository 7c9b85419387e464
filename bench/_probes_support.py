"""What bench/probes.py needs beyond bench/_support.py: labelled series summed out of a
/metrics text, ports to serve on, more /proc readings (a process tree's CPU, the whole
machine's), and a histogram built from exact samples with the daemon's own bucket bounds
(so that a bucket estimate is compared with a bucket estimate).

Only 127.0.0.1 is ever bound or addressed.
"""

from __future__ import annotations

import bisect
import math
import os
import socket
from pathlib import Path

from _support import CLOCK_TICKS


# -- /metrics: labelled series, summed ------------------------------------------------------


def _labels(line: str) -> dict[str, str]:
    """The labels of one exposition line `name{a="x",b="y"} value` (values without quotes
    or backslashes inside, which is all the series read here carry)."""
    inside = line.split("{", 1)[1].rsplit("}", 1)[0]
    found = {}
    for part in inside.split('",'):
        if "=" in part:
            key, value = part.split("=", 1)
            found[key.strip().strip(",")] = value.strip().strip('"')
    return found


def _matches(line: str, prefix: str, wanted: dict[str, str]) -> dict[str, str] | None:
    if not line.startswith(prefix + "{"):
        return None
    labels = _labels(line)
    return labels if all(labels.get(k) == v for k, v in wanted.items()) else None


def summed_histogram(metrics_text: str, name: str, **wanted: str) -> tuple[list[tuple[float, float]], float, float]:
    """The sum of every series of a labelled histogram whose labels include `wanted`, in the
    shape of _support.histogram: ([(le, cumulative count)], sum, count). (Summing cumulative
    buckets of series that share bucket bounds is what Prometheus' sum by (le) does.)"""
    buckets: dict[float, float] = {}
    total = count = 0.0
    for line in metrics_text.splitlines():
        value = line.rsplit(" ", 1)[-1]
        if (labels := _matches(line, f"{name}_bucket", wanted)) is not None:
            le = labels["le"]
            bound = math.inf if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
        elif _matches(line, f"{name}_sum", wanted) is not None:
            total += float(value)
        elif _matches(line, f"{name}_count", wanted) is not None:
            count += float(value)
    return sorted(buckets.items()), total, count


def summed_counter(metrics_text: str, name: str, **wanted: str) -> float:
    """The sum of every series of a counter (its _total samples) whose labels include `wanted`."""
    total = 0.0
    for line in metrics_text.splitlines():
        if _matches(line, f"{name}_total", wanted) is not None:
            total += float(line.rsplit(" ", 1)[-1])
    return total


def series_count(metrics_text: str, name: str, **wanted: str) -> int:
    """How many series of a histogram match (one per probe worker, for the prober's)."""
    return sum(_matches(line, f"{name}_count", wanted) is not None for line in metrics_text.splitlines())


def bucketed(samples: list[float], bounds: list[float]) -> list[tuple[float, float]]:
    """Exact samples as a cumulative histogram with the given upper bounds (+Inf included),
    for _support.histogram_quantile."""
    ordered = sorted(samples)
    return [(bound, float(len(ordered) if math.isinf(bound) else bisect.bisect_right(ordered, bound)))
            for bound in bounds]


# -- ports on 127.0.0.1 --------------------------------------------------------------------------


def free_ports(count: int, start: int) -> list[int]:
    """`count` ports from `start` up that can be bound on 127.0.0.1 now (the ones taken are
    skipped). Keep `start` below the ephemeral range, so that the probes' own outgoing
    connections never hold one of them."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    port = start
    while len(ports) < count:
        if port >= low:
            raise RuntimeError(f"not {count} free ports between {start} and the ephemeral range ({low})")
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                pass
            else:
                ports.append(port)
        port += 1
    return ports


# -- /proc -----------------------------------------------------------------------------------------


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and of its reaped children (cutime + cstime): for a
    containerd shim, the runc and exec processes it ran and waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / CLOCK_TICKS


def pids_with_arg(arg: str) -> list[int]:
    """Processes with `arg` among their arguments (the shims of one containerd: its socket)."""
    wanted = arg.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if wanted in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def cpu_of(pids: list[int]) -> float:
    """tree_cpu_seconds summed over the processes still there."""
    total = 0.0
    for pid in pids:
        try:
            total += tree_cpu_seconds(pid)
        except OSError:
            continue
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy, total) seconds of all CPUs since boot, from /proc/stat (idle + iowait are idle)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return (total - fields[3] - fields[4]) / CLOCK_TICKS, total / CLOCK_TICKS


def main_thread_schedstat(pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of the process's main thread
    (the daemon's event loop), from /proc/<pid>/task/<pid>/schedstat."""
    run, wait, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(run) / 1e9, int(wait) / 1e9


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


CPUS = os.cpu_count() or 1
