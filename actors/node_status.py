"""The node status actor: registers this kubelet's Node with the API server and keeps its
status current (Go: kubelet_node_status.go, registerWithAPIServer and updateNodeStatus).

Every --node-status-update-frequency it reads the Node, computes the status from the
machine, the health board (runtime, PLEG) and the runtime's network condition
(pods/node.py decides), and patches nodes/{name}/status only when the status changed or
--node-status-report-frequency has passed. An API error is logged once and retried; the
port's message names the request, the identity and the fix (401, 403 included).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from pykubelet.actors.health import HealthBoard
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.pods.backoff import ExponentialBackoff
from pykubelet.pods.eviction_thresholds import parse_thresholds
from pykubelet.pods.node import (
    DISK_PRESSURE,
    MEMORY_PRESSURE,
    PID_PRESSURE,
    NodeFacts,
    initial_node,
    kubelet_version,
    merge_status,
    needs_report,
    node_capacity,
    node_conditions,
    node_labels,
    owned_status,
    reconcile_existing,
    status_changed,
    status_patch,
)
from pykubelet.pods.network import RUNTIME_NETWORK_NOT_READY
from pykubelet.messages.version import VERSION
from pykubelet.pods.node_allocatable import allocatable
from pykubelet.ports.apiserver.objects import PatchType
from pykubelet.ports.apiserver.errors import AlreadyExists, ApiError, NotFound
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.node_status")

NODES_PATH = "/api/v1/nodes"
STRATEGIC_MERGE_PATCH: PatchType = "strategic"  # as Go's PatchNodeStatus
RUNTIME_CHECK = "runtime"  # actors/runtime_link.py
PLEG_CHECK = "pleg"  # actors/pleg.py
_PLEG_PREFIX = "PLEG is not healthy: "


class NodeApi(Protocol):
    """The API client calls this actor makes (ports/apiserver ApiClient has them)."""

    async def get(self, path: str) -> dict[str, Any]: ...

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch(self, path: str, body: dict[str, Any], patch_type: PatchType) -> dict[str, Any]: ...


@dataclass(frozen=True)
class NodeStatusSettings:
    """Go kubelet names: --register-node, --hostname-override (hostname), --node-ip,
    --node-labels, --max-pods, --port, --node-status-update-frequency,
    --node-status-report-frequency (KubeletConfiguration nodeStatusReportFrequency)."""

    node_ip: tuple[str, ...]
    hostname: str = ""  # the Hostname address and kubernetes.io/hostname; "" = the node name
    node_labels: dict[str, str] = field(default_factory=dict)
    register_node: bool = True
    max_pods: int = 110
    kubelet_port: int = 10250
    update_frequency: float = 10.0
    report_frequency: float = 300.0
    root_dir: str = "/var/lib/pykubelet"  # its filesystem is the node's ephemeral-storage
    kubelet_version: str = field(default_factory=lambda: kubelet_version(VERSION))
    # Node allocatable: capacity less these (pods/node_allocatable.py), and the hard memory
    # and nodefs thresholds of evictionHard.
    kube_reserved: dict[str, str] = field(default_factory=dict)
    system_reserved: dict[str, str] = field(default_factory=dict)
    eviction_hard: dict[str, str] = field(default_factory=dict)
    register_backoff_initial: float = 0.1  # Go: registerWithAPIServer, 100ms doubling to 7s
    register_backoff_max: float = 7.0


class RegisteredNode:
    """What this kubelet last saw of its Node in the API; the lease actor reads the uid
    for the Lease's owner reference."""

    def __init__(self) -> None:
        self.uid: str | None = None

    def observe(self, node: Mapping[str, Any] | None) -> None:
        uid = ((node or {}).get("metadata") or {}).get("uid")
        if uid:
            self.uid = uid

    def get_uid(self) -> str | None:
        return self.uid


# --- reading the machine -----------------------------------------------------------------


def read_node_facts(root_dir: str, *, host: str = "/") -> NodeFacts:
    """The machine as cAdvisor reports it to the Go kubelet. `host` prefixes /proc, /etc and
    /sys (tests); `root_dir` is measured where it exists, or at its nearest parent."""

    def read(path: str) -> str:
        try:
            with open(os.path.join(host, path), encoding="utf-8", errors="replace") as f:
                return f.read().strip()
        except OSError:
            return ""

    uname = os.uname()
    return NodeFacts(
        cpu_count=os.cpu_count() or 1,
        memory_bytes=_mem_total(read("proc/meminfo")),
        ephemeral_storage_bytes=_fs_capacity(root_dir),
        os_image=_os_release_field(read("etc/os-release"), "PRETTY_NAME") or "Linux",
        kernel_version=uname.release,
        machine=uname.machine,
        machine_id=read("etc/machine-id") or read("var/lib/dbus/machine-id"),
        boot_id=read("proc/sys/kernel/random/boot_id"),
        system_uuid=read("sys/class/dmi/id/product_uuid"),
    )


def _mem_total(meminfo: str) -> int:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            return int(fields[1]) * (1024 if fields[-1] == "kB" else 1)
    return 0


def _os_release_field(text: str, key: str) -> str:
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            return value
    return ""


def _fs_capacity(path: str) -> int:
    path = os.path.abspath(path)
    while True:
        try:
            fs = os.statvfs(path)
            return fs.f_blocks * fs.f_frsize
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return 0
            path = parent


class _ProblemLog:
    """One warning per change of problem, one info line when it clears: no spam per period."""

    def __init__(self) -> None:
        self.current: str | None = None

    def failed(self, message: str) -> None:
        if message != self.current:
            log.warning("%s", message)
            self.current = message

    def cleared(self, message: str) -> None:
        if self.current is not None:
            log.info("%s", message)
            self.current = None


# --- the actor ---------------------------------------------------------------------------


def node_status_actor(
    settings: NodeStatusSettings,
    *,
    client: NodeApi,
    health: HealthBoard,
    runtime: RuntimeHandle,
    node_name: str,
    registered: RegisteredNode | None = None,
    facts: Callable[[], NodeFacts] | None = None,
    wall_clock: Callable[[], float] = time.time,
    pressure: Callable[[], frozenset[str]] = frozenset,
):
    """`wall_clock` dates the conditions (Unix seconds); the periods run on trio's clock.
    `facts` reads the machine once per incarnation (default: read_node_facts). `pressure`:
    the eviction manager's conditions now (MemoryPressure, DiskPressure, PIDPressure)."""
    registered = registered if registered is not None else RegisteredNode()
    read_facts = facts or (lambda: read_node_facts(settings.root_dir))

    async def run(ctx: ActorContext) -> None:
        node = _NodeStatus(settings, client, health, runtime, node_name, registered, read_facts(), wall_clock)
        node.pressure = pressure
        while True:
            if settings.register_node and not node.registered:
                await node.register()
            await node.update()
            await trio.sleep(settings.update_frequency)

    return run


class _NodeStatus:
    def __init__(self, settings, client, health, runtime, node_name, record, facts, wall_clock) -> None:
        self.settings = settings
        self.client = client
        self.health = health
        self.runtime = runtime
        self.name = node_name
        self.record = record
        self.facts = facts
        self.wall_clock = wall_clock
        self.hostname = (settings.hostname or node_name).strip().lower()
        self.path = f"{NODES_PATH}/{node_name}"
        self.registered = False
        self.last_report_at: float | None = None  # trio clock
        self.problem = _ProblemLog()
        self.pressure: Callable[[], frozenset[str]] = frozenset

    # -- what the status says ----------------------------------------------------------

    def owned(self) -> dict[str, Any]:
        version = self.runtime.version
        return owned_status(
            self.facts, hostname=self.hostname, node_ip=self.settings.node_ip, max_pods=self.settings.max_pods,
            kubelet_port=self.settings.kubelet_port, kubelet_version=self.settings.kubelet_version,
            runtime_name=version.runtime_name if version else None,
            runtime_version=version.runtime_version if version else None,
            allocatable=self.allocatable(),
        )  # fmt: skip

    def allocatable(self) -> dict[str, int]:
        s = self.settings
        hard = parse_thresholds(s.eviction_hard, {}, {}, {})  # validated with the configuration
        return allocatable(node_capacity(self.facts, s.max_pods), s.kube_reserved, s.system_reserved, hard)

    def conditions(self, previous: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        checks = {check.name: check for check in self.health.checks()}
        runtime = checks.get(RUNTIME_CHECK)
        if runtime is None:
            runtime_ok, runtime_detail = False, "container runtime status check may not have completed yet"
        else:
            runtime_ok, runtime_detail = runtime.ok, runtime.detail
        pleg = checks.get(PLEG_CHECK)
        pleg_ok = pleg is None or pleg.ok
        pleg_detail = pleg.detail.removeprefix(_PLEG_PREFIX) if pleg is not None else ""
        network_ok, network_detail = self.network() if runtime_ok else (True, "")
        pressure = self.pressure()
        return node_conditions(
            previous, now=self.wall_clock(), runtime_ok=runtime_ok, runtime_detail=runtime_detail,
            network_ok=network_ok, network_detail=network_detail, pleg_ok=pleg_ok, pleg_detail=pleg_detail,
            memory_pressure=MEMORY_PRESSURE in pressure, disk_pressure=DISK_PRESSURE in pressure,
            pid_pressure=PID_PRESSURE in pressure,
        )  # fmt: skip

    def network(self) -> tuple[bool, str]:
        """The runtime's network error as the runtime link last saw it: the same fact that
        holds pod-network pods (Go: both read runtimeState.networkErrors)."""
        error = self.runtime.network_error
        if error is None:
            return True, ""
        return False, error.removeprefix(f"{RUNTIME_NETWORK_NOT_READY}: ")

    # -- registration ------------------------------------------------------------------

    async def register(self) -> None:
        """Until the Node exists: create it, or reconcile the one already there."""
        backoff = ExponentialBackoff(self.settings.register_backoff_initial, self.settings.register_backoff_max)
        while True:
            if await self.try_register():
                self.registered = True
                return
            await trio.sleep(backoff.next_delay())

    async def try_register(self) -> bool:
        node = initial_node(
            self.name,
            labels=node_labels(self.hostname, self.facts.machine, self.settings.node_labels),
            status=self.owned(),
            conditions=self.conditions(None),
        )
        try:
            created = await self.client.create(NODES_PATH, node)
        except AlreadyExists:
            return await self.reconcile(node)
        except ApiError as exc:  # the port's messages name the request, the identity and the fix
            self.problem.failed(f"unable to register node {self.name}: {exc}")
            return False
        self.record.observe(created)
        self.last_report_at = trio.current_time()  # the new Node carries a full status
        self.problem.cleared(f"node {self.name}: the API server answers again")
        log.info("registered node %s", self.name, extra={"node": self.name})
        return True

    async def reconcile(self, node: dict[str, Any]) -> bool:
        try:
            existing = await self.client.get(self.path)
            patch = reconcile_existing(existing, node) or {}
            # Labels through the Node itself, status through its status subresource: every
            # API server applies each there (NodeRestriction allows both for the own Node).
            if "metadata" in patch:
                await self.client.patch(self.path, {"metadata": patch["metadata"]}, STRATEGIC_MERGE_PATCH)
            if "status" in patch:
                await self.client.patch(f"{self.path}/status", {"status": patch["status"]}, STRATEGIC_MERGE_PATCH)
        except ApiError as exc:
            self.problem.failed(f"unable to reconcile existing node {self.name}: {exc}")
            return False
        self.record.observe(existing)
        self.problem.cleared(f"node {self.name}: the API server answers again")
        log.info(
            "node %s was already registered%s", self.name,
            "; reconciled its labels and status" if patch is not None else "", extra={"node": self.name},
        )  # fmt: skip
        return True

    # -- the periodic update -----------------------------------------------------------

    async def update(self) -> None:
        """One status update: read the Node, patch its status if changed or due."""
        try:
            node = await self.client.get(self.path)
        except NotFound:
            self.registered = False
            if self.settings.register_node:
                self.problem.failed(f"node {self.name} is gone from the API server; registering it again")
            else:
                self.problem.failed(f"node {self.name} does not exist and --register-node=false: "
                                    "waiting for someone to create it")  # fmt: skip
            return
        except ApiError as exc:
            self.problem.failed(f"error getting node {self.name}: {exc}")
            return
        self.record.observe(node)
        old = node.get("status") or {}
        new = merge_status(old, self.owned(), self.conditions(old.get("conditions")))
        now = trio.current_time()
        changed = status_changed(old, new)
        if changed:
            log.log(V(4), "node status changed: %s", ", ".join(sorted(k for k in {*old, *new} if old.get(k) != new.get(k))))
        if not needs_report(self.last_report_at, now, changed, self.settings.report_frequency):
            self.problem.cleared(f"node {self.name}: the API server answers again")
            return
        patch = status_patch(old, new, heartbeat=True)
        try:
            if patch is not None:
                await self.client.patch(f"{self.path}/status", patch, STRATEGIC_MERGE_PATCH)
        except ApiError as exc:
            self.problem.failed(f"error updating node {self.name} status: {exc}")
            return
        self.last_report_at = now
        self.problem.cleared(f"node {self.name}: status updated again")
        if changed:
            _log_ready_change(self.name, old, new)


def _ready(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition
    return {}


def _log_ready_change(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    before, after = _ready(old), _ready(new)
    if before.get("status") != after.get("status"):
        if after.get("status") == "True":
            log.info("node %s is ready", name, extra={"node": name})
        else:
            log.warning("node %s is not ready: %s", name, after.get("message", ""), extra={"node": name})
