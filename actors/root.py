"""The daemon's actor tree: what runs under the root supervisor, in start order.

root (rest_for_one)
├── runtime-link   CRI connection, health check "runtime"
├── pleg           relists the runtime, PlegEvents to the sync loop, health check "pleg"
├── pod-workers    one_for_one, a dynamic child per pod UID
├── sync-loop      the desired pod set; admission, dispatch, housekeeping
├── pod-config     merges the sources into PodUpdates
├── sources        one_for_one: file (--pod-manifest-path), http (--manifest-url)
├── gc             container GC every minute, image GC every 5 minutes
├── server         healthz port and admin socket
├── probes         one_for_one: manager + one worker per running container x probe kind
└── log-rotation   rotates, compresses and prunes container logs (containerLogMaxSize ...)

rest_for_one: an actor that fails restarts the ones started after it, since later actors
rely on earlier ones; a restarted sync loop is fed again from scratch by pod config and
the sources, which restart with it.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio
from prometheus_client import CollectorRegistry

from pykubelet.actors.container_manager import ContainerManager, ContainerManagerSettings
from pykubelet.actors.events import EventRecorder
from pykubelet.actors.eviction_manager import EvictionSettings, eviction_manager_actor
from pykubelet.actors.gc import GarbageCollector, GcMetrics, GcSettings, gc_actor
from pykubelet.actors.health import HealthBoard
from pykubelet.actors.log_rotation import LogRotationMetrics, LogRotationSettings, log_rotation_actor
from pykubelet.actors.node_lease import NodeLeaseSettings, node_lease_actor
from pykubelet.actors.node_pressure import NodePressure
from pykubelet.actors.node_status import NodeStatusSettings, RegisteredNode, node_status_actor
from pykubelet.actors.pleg import PlegMetrics, PlegSettings, RuntimePods, pleg_actor
from pykubelet.actors.pod_config import pod_config_actor
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.pod_workers import (
    PARALLEL_POD_STARTS,
    NodeSettings,
    PodMetrics,
    PodWorkerDeps,
    pod_worker_actor,
)
from pykubelet.actors.probes import ProbeMetrics, ProbeResults, probes_supervisor_spec
from pykubelet.actors.runtime_link import RuntimeHandle, RuntimeLinkMetrics, RuntimeLinkSettings, runtime_link_actor
from pykubelet.actors.server import KubeletApiSettings, ServerSettings, server_actor
from pykubelet.actors.server.auth import KubeletAuth
from pykubelet.actors.server.debugging import DebuggingHandlers
from pykubelet.actors.server.stats import StatsProvider
from pykubelet.actors.server.kubelet_api import KubeletApiSources, running_pods_from
from pykubelet.actors.server.metrics import ActorTreeCollector
from pykubelet.actors.sources.file import file_source_actor
from pykubelet.actors.sources.http import http_source_actor
from pykubelet.actors.volumes import ObjectCache, TokenManager, VolumeManager, object_watches_actor
from pykubelet.messages.pod import Pod
from pykubelet.messages.api_server import ApiServerAnswersAgain, MirrorPodsMessage
from pykubelet.messages.pod_status_reports import StatusManagerMessage
from pykubelet.actors.sync_loop import DesiredPods, SyncLoopSettings, sync_loop_actor
from pykubelet.messages.pod_updates import ObjectsChanged, SourcePods, SyncLoopMessage
from pykubelet.pods.backoff import CrashLoopBackOff
from pykubelet.pods.eviction_thresholds import NodeReclaim
from pykubelet.ports.apiserver import ApiReachability, RestClientMetrics
from pykubelet.supervisor import (
    ChildSpec,
    MailboxFull,
    MailboxSpec,
    RestartBackoff,
    RestartIntensity,
    Supervisor,
    UnknownAddress,
)

if TYPE_CHECKING:
    from pykubelet.ports.apiserver import ApiClient as Client
    from pykubelet.ports.apiserver import Credentials

ADMIN_SOCKET_NAME = "pykubelet.sock"

# The API client class, imported by the first cluster-mode Daemon (api_client()): it brings
# httpx, which a standalone kubelet never needs. tests/simulation sets its own here.
ApiClient: Callable[..., Client] | None = None


def api_client() -> Callable[..., Client]:
    global ApiClient
    if ApiClient is None:
        from pykubelet.ports.apiserver import ApiClient
    return ApiClient


@dataclass(frozen=True)
class ClusterSettings:
    """Cluster mode (--kubeconfig): who we are to the API server and how we report."""

    credentials: Credentials
    node_status: NodeStatusSettings
    lease: NodeLeaseSettings = NodeLeaseSettings()
    api_qps: int = 50  # kubeAPIQPS
    api_burst: int = 100  # kubeAPIBurst
    event_record_qps: float = 50  # eventRecordQPS
    event_burst: int = 100  # eventBurst


@dataclass(frozen=True)
class DaemonSettings:
    root_dir: str
    runtime: RuntimeLinkSettings
    node: NodeSettings | None = None  # None: derived from root_dir with defaults (tests)
    healthz_bind_address: str = "127.0.0.1"
    healthz_port: int = 10248
    enable_fault_injection: bool = False
    pod_manifest_path: str = ""
    file_check_frequency: float = 20.0
    manifest_url: str = ""
    manifest_url_header: dict[str, list[str]] = field(default_factory=dict)
    http_check_frequency: float = 20.0
    sync: SyncLoopSettings = SyncLoopSettings()
    gc: GcSettings = GcSettings()
    log_rotation: LogRotationSettings = LogRotationSettings()
    pleg: PlegSettings = PlegSettings()
    cluster: ClusterSettings | None = None  # None: standalone mode
    kubelet_api: KubeletApiSettings | None = None  # None: no kubelet API port (enableServer false)
    # The cgroups the daemon keeps (made before the tree starts, cli/resources.py); None: none.
    containers: ContainerManagerSettings | None = None
    parallel_image_pulls: int | None = None  # 1: serializeImagePulls; None: unbounded
    eviction: EvictionSettings | None = None  # None: no eviction manager (tests)
    configz: dict = field(default_factory=dict)  # the effective KubeletConfiguration, for /configz

    @property
    def admin_socket(self) -> str:
        return os.path.join(self.root_dir, ADMIN_SOCKET_NAME)


# The root's and the sources' children are distinct subsystems: each may need up to ten
# restarts in 30 s before its supervisor gives up, so isolated crashes of several of them
# never add up to an escalation, while any one of them crash-looping still does.
SUBSYSTEMS_INTENSITY = RestartIntensity(per_child=True)
# A pod worker that keeps crashing is slowed by back-off (up to 30s between restarts), so
# only many pods failing at once, which is systemic, exhausts this and escalates.
WORKERS_INTENSITY = RestartIntensity(max_restarts=100, period=60.0)
WORKERS_BACKOFF = RestartBackoff(initial=0.1, maximum=30.0, reset_after=60.0)


class Daemon:
    """Holds what the actors share (health board, metrics, runtime handle, pod statuses)
    and the root supervisor."""

    def __init__(self, settings: DaemonSettings, *, containers: ContainerManager | None = None) -> None:
        """`containers`: the node's cgroups, set up (None: pods get no cgroups, no resources)."""
        self.settings = settings
        self.health = HealthBoard()
        self.metrics = CollectorRegistry()
        self.runtime = RuntimeHandle(settings.runtime.endpoint)
        self.statuses = PodStatuses()
        self.runtime_pods = RuntimePods()
        self.desired = DesiredPods()
        self.probe_results = ProbeResults()
        self.registered_node = RegisteredNode()
        self.api: Client | None = None
        self.heartbeat: Client | None = None
        self.events_api: Client | None = None
        self.objects: ObjectCache | None = None
        tokens: TokenManager | None = None
        if settings.cluster is not None:
            new_client = api_client()
            cluster = settings.cluster
            rest_metrics = RestClientMetrics(self.metrics)
            # One view of whether the API server answers, fed by all three clients: the
            # first of them to be answered after an outage tells the actors that wait.
            reachability = ApiReachability(on_answers_again=self._api_server_answers_again)
            self.api = new_client(
                cluster.credentials, qps=cluster.api_qps, burst=cluster.api_burst, metrics=rest_metrics,
                reachability=reachability,
            )
            # Events go through a client of their own, limited by eventRecordQPS/eventBurst
            # in the sink, so that they do not use up kubeAPIQPS (as Go).
            self.events_api = new_client(cluster.credentials, qps=None, metrics=rest_metrics, reachability=reachability)
            # The lease has its own client, with a timeout no longer than a renewal
            # period's worth of waiting (Go: min(lease duration, status update frequency)).
            self.heartbeat = new_client(
                cluster.credentials, qps=None,
                timeout=min(cluster.lease.duration, cluster.node_status.update_frequency),
                reachability=reachability,
            )
            self.objects = ObjectCache(on_change=self._objects_changed)
            tokens = TokenManager(self.api)
        node = settings.node or NodeSettings(
            name="localhost", host_ip="127.0.0.1", root_dir=settings.root_dir,
            pod_logs_dir=os.path.join(settings.root_dir, "pod-logs"),
        )
        self.node = node
        self.events = EventRecorder(self.metrics, host=node.name)
        self.volumes = VolumeManager(node.root_dir, tokens=tokens)
        deps = PodWorkerDeps(
            runtime=self.runtime,
            statuses=self.statuses,
            crash_backoff=CrashLoopBackOff(),
            image_backoff=CrashLoopBackOff(),
            metrics=PodMetrics(self.metrics),
            node=node,
            events=self.events,
            probe_results=self.probe_results,
            runtime_pods=self.runtime_pods,
            resync_period=settings.sync.sync_frequency,
            volumes=self.volumes,
            objects=self.objects,
            containers=containers,
            image_pulls=trio.CapacityLimiter(settings.parallel_image_pulls) if settings.parallel_image_pulls else None,
            pod_starts=trio.CapacityLimiter(PARALLEL_POD_STARTS),
        )
        self.containers = containers
        self.pressure = NodePressure()
        self.gc: GarbageCollector | None = None  # the gc actor's current collector (node-level reclaim)
        if containers is not None:
            containers.burstable_cpu_requests = self.statuses.burstable_cpu_requests
        self.root = Supervisor("root", self._children(deps), strategy="rest_for_one", intensity=SUBSYSTEMS_INTENSITY)
        self.metrics.register(ActorTreeCollector(self.root.snapshot, fold=["root/pod-workers", "root/probes"]))

    def _children(self, deps: PodWorkerDeps) -> list[ChildSpec]:
        settings = self.settings
        sources = self._sources()
        return [
            ChildSpec(
                "runtime-link",
                runtime_link_actor(
                    settings.runtime, health=self.health, metrics=RuntimeLinkMetrics(self.metrics), handle=self.runtime
                ),
            ),
            ChildSpec(
                "pleg",
                pleg_actor(
                    settings.pleg, runtime=self.runtime, health=self.health,
                    metrics=PlegMetrics(self.metrics), cache=self.runtime_pods,
                ),
            ),
            Supervisor.child_spec("pod-workers", [], intensity=WORKERS_INTENSITY, backoff=WORKERS_BACKOFF),
            ChildSpec(
                "sync-loop",
                sync_loop_actor(
                    settings.sync, tree=lambda: self.root,
                    worker_actor=lambda uid, pod: pod_worker_actor(uid, pod, deps),
                    statuses=self.statuses, runtime_pods=self.runtime_pods, published=self.desired,
                    events=self.events, health=self.health, pressure=lambda: self.pressure.conditions,
                ),
                mailbox=MailboxSpec(capacity=1024, durable=True, accepts=SyncLoopMessage.__args__),
            ),
            ChildSpec(
                "pod-config",
                pod_config_actor(sources=[spec.name for spec in sources]),
                mailbox=MailboxSpec(capacity=64, durable=True, accepts=(SourcePods,)),
            ),
            Supervisor.child_spec("sources", sources, intensity=SUBSYSTEMS_INTENSITY),
            ChildSpec(
                "gc",
                gc_actor(
                    functools.partial(
                        GarbageCollector, settings.gc, runtime=self.runtime, desired=self.desired.current,
                        metrics=GcMetrics(self.metrics), pod_logs_dir=self.node.pod_logs_dir, volumes=self.volumes,
                        containers=self.containers,
                    ),
                    on_start=self._gc_started,
                ),
            ),
            ChildSpec(
                "server",
                server_actor(
                    ServerSettings(
                        admin_socket=settings.admin_socket,
                        healthz_bind_address=settings.healthz_bind_address,
                        healthz_port=settings.healthz_port,
                        enable_fault_injection=settings.enable_fault_injection,
                        kubelet_api=settings.kubelet_api,
                    ),
                    tree=lambda: self.root, health=self.health, metrics=self.metrics, pods=self.statuses.pod_list,
                    events=self.events.events,
                    api_sources=KubeletApiSources(
                        health=self.health, metrics=self.metrics, pods=self.statuses.pod_list,
                        running_pods=lambda: running_pods_from(self.runtime_pods.latest),
                        configz=settings.configz,
                        stats=StatsProvider(
                            runtime=self.runtime, pods=self.statuses.pod_list,
                            relist=lambda: self.runtime_pods.latest, root_dir=self.node.root_dir,
                            node_name=self.node.name, pod_logs_dir=self.node.pod_logs_dir,
                        ),
                        debugging=DebuggingHandlers(
                            runtime=self.runtime, pods=self.statuses.pod_list,
                            relist=lambda: self.runtime_pods.latest, pod_logs_dir=self.node.pod_logs_dir,
                        ).handlers(),
                    ),
                    auth=self._kubelet_auth,
                ),
            ),
            *self._cluster_children(),
            # Late: nothing depends on it but through its mailbox and the results board, so
            # a probes escalation restarts only the probes (and the stateless log rotation).
            probes_supervisor_spec(
                tree=lambda: self.root, results=self.probe_results, metrics=ProbeMetrics(self.metrics),
                runtime=self.runtime, host_ip=self.node.host_ip, events=self.events,
            ),
            # After the probes: nothing depends on it, and it keeps no state but the files,
            # so a crash of it restarts only itself.
            ChildSpec(
                "log-rotation",
                log_rotation_actor(
                    settings.log_rotation, runtime=self.runtime, metrics=LogRotationMetrics(self.metrics),
                    pod_logs_dir=self.node.pod_logs_dir,
                ),
            ),
            # Last: it only observes, and tells the sync loop whom to evict through its mailbox.
            *self._eviction_children(),
        ]

    def _eviction_children(self) -> list[ChildSpec]:
        settings = self.settings.eviction
        if settings is None:
            return []
        containers = self.containers
        return [ChildSpec("eviction-manager", eviction_manager_actor(
            settings, pressure=self.pressure, runtime=self.runtime, active_pods=self._active_pods,
            pod_cgroup=lambda pod: containers.pod_cgroup(pod) or None if containers is not None else None,
            cgroups=containers.cgroups if containers is not None else None,
            reclaim=self._reclaim, metrics=self.metrics,
        ))]

    def _active_pods(self) -> list[Pod]:
        """The pods eviction may pick from: wanted by a source and not finished (Go: the pod
        manager's active pods)."""
        desired = self.desired.uids
        return [p for p in self.statuses.pod_list().items
                if p.metadata.uid in desired and p.status.phase not in ("Succeeded", "Failed")]

    def _gc_started(self, collector: GarbageCollector) -> None:
        self.gc = collector

    async def _reclaim(self, action: NodeReclaim) -> None:
        """Node-level reclaim under disk pressure (Go: containerGC.DeleteAllUnusedContainers,
        imageGC.DeleteUnusedImages), through the garbage collector's own rounds."""
        if self.gc is None:
            return
        if action == NodeReclaim.DELETE_ALL_UNUSED_CONTAINERS:
            await self.gc.collect_containers()
        elif action == NodeReclaim.DELETE_UNUSED_IMAGES:
            await self.gc.collect_images(every_unused=True)

    def _cluster_children(self) -> list[ChildSpec]:
        """Node status, node lease, the event sink, the status manager and mirror pods:
        cluster mode only."""
        cluster = self.settings.cluster
        if cluster is None:
            return []
        # Imported here, the one place that starts them: a standalone kubelet never loads them.
        from pykubelet.actors.event_sink import EventSinkMetrics, event_sink_actor
        from pykubelet.actors.mirror_pods import mirror_pods_actor
        from pykubelet.actors.status_manager import status_manager_actor

        return [
            ChildSpec("object-watches", object_watches_actor(client=self.api, cache=self.objects)),
            ChildSpec(
                "node-status",
                node_status_actor(
                    cluster.node_status, client=self.api, health=self.health, runtime=self.runtime,
                    node_name=self.node.name, registered=self.registered_node,
                    pressure=lambda: self.pressure.conditions,
                ),
            ),
            ChildSpec(
                "node-lease",
                node_lease_actor(
                    cluster.lease, client=self.heartbeat, node_name=self.node.name,
                    node_uid=self.registered_node.get_uid,
                ),
            ),
            ChildSpec(
                "event-sink",
                event_sink_actor(
                    client=self.events_api, recorder=self.events, qps=cluster.event_record_qps,
                    burst=cluster.event_burst, metrics=EventSinkMetrics(self.metrics),
                ),
            ),
            ChildSpec(
                "status-manager",
                status_manager_actor(client=self.api, statuses=self.statuses),
                mailbox=MailboxSpec(capacity=1024, durable=True, accepts=StatusManagerMessage.__args__),
            ),
            ChildSpec(
                "mirror-pods",
                mirror_pods_actor(
                    client=self.api, statuses=self.statuses, node_name=self.node.name,
                    registered_node_uid=self.registered_node.get_uid, desired=self.desired.current,
                    status_manager="root/status-manager",
                ),
                # Not durable: a new incarnation starts with a round of its own.
                mailbox=MailboxSpec(capacity=4, accepts=(MirrorPodsMessage,)),
            ),
        ]

    def _sources(self) -> list[ChildSpec]:
        settings, node_name = self.settings, self.node.name
        sources = []
        if settings.pod_manifest_path:
            sources.append(ChildSpec("file", file_source_actor(
                settings.pod_manifest_path, node_name=node_name, check_frequency=settings.file_check_frequency,
            )))
        if settings.cluster is not None:
            from pykubelet.actors.sources.api import api_source_actor  # cluster mode only

            # The name is the source's: pod config counts sources by child name.
            sources.append(ChildSpec("api", api_source_actor(client=self.api, node_name=node_name)))
        if settings.manifest_url:
            sources.append(ChildSpec("http", http_source_actor(
                settings.manifest_url, settings.manifest_url_header, node_name=node_name,
                check_frequency=settings.http_check_frequency,
            )))
        return sources

    def _kubelet_auth(self) -> KubeletAuth:
        """Who may use the kubelet API: the configuration's authentication and authorization,
        reviewed by the API server with the node's own credentials (cluster mode)."""
        api = self.settings.kubelet_api
        assert api is not None and api.config is not None
        return KubeletAuth(api.config, node_name=self.node.name, api=self.api)

    def _api_server_answers_again(self) -> None:
        """The API server answered after a request that got none: the status manager and the
        mirror pod actor try now what they held back, not after their back-off or period
        (the node lease keeps its back-off, as Go's lease controller does). An actor whose
        mailbox is full misses the word and retries at its next back-off or period."""
        for address in ("root/status-manager", "root/mirror-pods"):
            with contextlib.suppress(UnknownAddress, MailboxFull):
                self.root.registry.lookup(address).send_nowait(ApiServerAnswersAgain())

    def _objects_changed(self, pod_uids: set[str]) -> None:
        """A watched object changed: the sync loop syncs the pods that read it. A full
        mailbox loses nothing: every pod resyncs every --sync-frequency anyway."""
        with contextlib.suppress(UnknownAddress, MailboxFull):
            self.root.registry.lookup("root/sync-loop").send_nowait(ObjectsChanged(pod_uids=sorted(pod_uids)))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the tree until cancelled; raises RestartIntensityExceeded if the root gives up."""
        try:
            await self.root.run(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                for client in (self.api, self.heartbeat, self.events_api):
                    if client is not None:
                        await client.aclose()
