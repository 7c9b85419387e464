"""The table of `pykubelet-inspect pods`: kubectl get pods' columns, -o wide's IP and NODE,
and pykubelet's QOS, CPU, MEMORY and LAST STATE. It fits a narrow terminal by leaving out
trailing wide columns, never by cutting a cell. Pure: the caller prints."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from decimal import Decimal

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pykubelet.messages.pod import Pod, PodList
from pykubelet.pods.container_resources import pod_limits, pod_requests, pod_resource_config
from pykubelet.pods.eviction_thresholds import QuantityFormat, format_quantity
from pykubelet.pods.node import binary_quantity

from ._render import age, human_age, parse_time

COLUMNS = ("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE")
# Left out from the right when the terminal is too narrow: the least needed last.
WIDE_COLUMNS = ("IP", "NODE", "QOS", "CPU", "MEMORY", "LAST STATE")
NONE = "<none>"
UNSET = "-"
# rich's Table with box=None and pad_edge=False: a space of padding on either side of a
# cell, none at the table's edges.
_GAP = 2
_LONG_AGO = datetime.min.replace(tzinfo=timezone.utc)


def pod_status(pod: Pod) -> str:
    """The STATUS column, as kubectl computes it: a container's waiting or terminated
    reason wins over the phase, and a pod being deleted is Terminating."""
    reason = pod.status.reason or pod.status.phase or "Unknown"
    for status in reversed(pod.status.container_statuses):
        state = status.state
        if state.waiting is not None and state.waiting.reason:
            reason = state.waiting.reason
        elif state.terminated is not None:
            term = state.terminated
            if term.reason:
                reason = term.reason
            elif term.signal:
                reason = f"Signal:{term.signal}"
            else:
                reason = f"ExitCode:{term.exit_code}"
    if pod.metadata.deletion_timestamp is not None:
        reason = "Terminating"
    return reason


def pod_age(pod: Pod, now: datetime) -> str:
    """AGE: since creationTimestamp. A static pod has none (no API server created it), so
    since status.startTime, when the kubelet first started it."""
    return age(pod.metadata.creation_timestamp or pod.status.start_time, now)


def last_state(pod: Pod, now: datetime) -> str:
    """LAST STATE: of the containers' lastState.terminated (init containers' too), the one
    that finished last, as "<reason> (<exit code>) <age> ago"; "<none>" when none ended."""
    ended = [
        (parse_time(term.finished_at or ""), term)
        for status in (*pod.status.init_container_statuses, *pod.status.container_statuses)
        if (term := status.last_state.terminated) is not None
    ]
    if not ended:
        return NONE
    finished, term = max(ended, key=lambda ending: ending[0] or _LONG_AGO)
    text = f"{term.reason or 'Terminated'} ({term.exit_code})"
    return text if finished is None else f"{text} {human_age((now - finished).total_seconds())} ago"


def pod_resources(pod: Pod) -> tuple[str, str]:
    """CPU and MEMORY, each "<request>/<limit>": what the kubelet computes for the pod's
    cgroup (pods/container_resources.py). Containers and sidecars add up, an init container
    counts when it alone needs more, overhead is added, a missing request is its limit. A
    limit shows only when the node sets one on the pod, which takes every container having
    one: a single unbounded container leaves the pod unbounded. "-" where there is none."""
    try:
        requests, limits, cgroup = pod_requests(pod), pod_limits(pod), pod_resource_config(pod)
    except ValueError:  # a quantity that is none; the daemon admitted it all the same
        return "<invalid>", "<invalid>"
    cpu_limit = limits.get("cpu") if cgroup.cpu_quota is not None else None
    memory_limit = limits.get("memory") if cgroup.memory_limit is not None else None
    return (
        f"{_cpu(requests.get('cpu'))}/{_cpu(cpu_limit)}",
        f"{_bytes(requests.get('memory'))}/{_bytes(memory_limit)}",
    )


def _cpu(millicores: int | None) -> str:
    if millicores is None:
        return UNSET
    return format_quantity(Decimal(millicores) / 1000, QuantityFormat.DECIMAL_SI)  # 100m, 1, 1500m


def _bytes(amount: int | None) -> str:
    return UNSET if amount is None else binary_quantity(amount)  # 64Mi, 100M


def pod_row(pod: Pod, now: datetime, *, wide: bool = False) -> list[str]:
    statuses = pod.status.container_statuses
    total = max(len(pod.spec.containers), len(statuses))
    ready = sum(1 for s in statuses if s.ready)
    row = [
        pod.metadata.namespace,
        pod.metadata.name,
        f"{ready}/{total}",
        pod_status(pod),
        str(sum(s.restart_count for s in statuses)),
        pod_age(pod, now),
    ]
    if wide:
        cpu, memory = pod_resources(pod)
        row += [
            pod.status.pod_ip or NONE,
            pod.spec.node_name or NONE,
            pod.status.qos_class or NONE,
            cpu,
            memory,
            last_state(pod, now),
        ]
    return row


def table_width(widths: Sequence[int]) -> int:
    """The cells a row takes, its columns this wide."""
    return sum(widths) + _GAP * (len(widths) - 1)


def columns_that_fit(widths: Sequence[int], width: int | None, *, keep: int) -> int:
    """How many columns, from the left, to show in a terminal `width` cells wide: all when
    they fit or the width is unknown (a pipe); else trailing ones are left out until they
    fit, but never the first `keep`: those print whole, and the terminal wraps the line."""
    shown = len(widths)
    while width is not None and shown > keep and table_width(widths[:shown]) > width:
        shown -= 1
    return shown


def render_pods(pods: PodList, now: datetime, *, wide: bool = False, width: int | None = None) -> RenderableType:
    """kubectl get pods -A (-o wide) with pykubelet's wide columns; `width` is the
    terminal's (None: no limit). The table is exactly as wide as its cells, so that rich
    cuts none: print it with crop=False."""
    if not pods.items:
        return Text("No pods.")
    header = COLUMNS + (WIDE_COLUMNS if wide else ())
    rows = [pod_row(pod, now, wide=wide) for pod in pods.items]
    widths = [max(cell_len(cell) for cell in column) for column in zip(header, *rows)]
    shown = columns_that_fit(widths, width, keep=len(COLUMNS))
    table = Table(box=None, pad_edge=False, header_style="bold", width=table_width(widths[:shown]))
    for column in header[:shown]:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row[:shown]))  # Text: a name is no markup
    left_out = header[shown:]
    if not left_out:
        return table
    note = f"({', '.join(left_out)} left out: the terminal is {width} columns wide; widen it, or use -o json)"
    return Group(table, Text(note, style="dim"))
