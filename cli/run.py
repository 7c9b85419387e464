"""`pykubelet run`: read the configuration, then run the actor tree until SIGTERM/SIGINT.

Exit codes: 0 after a signal (the tree stopped in order; containers keep running),
1 when the root supervisor gave up, 2 for a configuration error. --runonce (cli/runonce.py)
exits with its pods' result instead.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from typing import Sequence

import msgspec
import trio

from pykubelet.actors.container_manager import ContainerManager
from pykubelet.actors.gc import GcSettings
from pykubelet.actors.log_rotation import LogRotationSettings
from pykubelet.actors.pod_workers import NodeSettings
from pykubelet.actors.node_lease import NodeLeaseSettings
from pykubelet.actors.node_status import NodeStatusSettings
from pykubelet.actors.root import ClusterSettings, Daemon, DaemonSettings
from pykubelet.actors.runtime_link import RuntimeLinkSettings
from pykubelet.actors.server import KubeletApiSettings
from pykubelet.actors.server.auth import AuthConfigurationError, load_client_ca
from pykubelet.actors.sync_loop import NodeView, SyncLoopSettings
from pykubelet.pods.node import node_labels, resource_quantities
from pykubelet.embedded_runtime.launcher import EmbeddedRuntimeError
from pykubelet.embedded_runtime.launcher import endpoint as embedded_endpoint
from pykubelet.embedded_runtime.launcher import ensure_running as ensure_embedded_runtime
from pykubelet.messages.config import EMBEDDED_RUNTIME
from pykubelet.messages.config_validation import parse_byte_quantity
from pykubelet.messages.duration import enc_hook
from pykubelet.messages.version import VERSION
from pykubelet.ports import malloc
from pykubelet.ports.systemd_notify import NotifySocket
from pykubelet.ports.serving_cert import ServingCertError, TlsSettings, server_context
from pykubelet.supervisor import RestartIntensityExceeded

from .config import (
    ConfigurationError,
    build_configuration,
    exit_on_configuration_error,
    prepare_root_dir,
)
from . import runonce, systemd
from .logs import configure_daemon_logging
from .resources import (
    NodeBudget,
    container_manager_settings,
    eviction_settings,
    node_budget,
    start_container_manager,
)
from .node import node_ip, node_name

log = logging.getLogger("pykubelet")

USAGE = """usage: pykubelet run [flags]      run the node agent (pykubelet run --help lists the flags)
       pykubelet --version"""


def main(argv: Sequence[str] | None = None) -> int:
    malloc.limit_arenas()  # before any thread: grpc's, the grpc loop's, trio's workers
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["version"]):
        print(f"pykubelet {VERSION}")
        return 0
    if not args or args[0] != "run":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        loaded = build_configuration(args[1:])
        configure_daemon_logging(loaded.config.logging)
        expected = runonce.prepare(loaded) if loaded.flags.run_once else None  # before anything starts
        prepare_root_dir(loaded.flags.root_dir)
        for warning in loaded.warnings:
            log.warning("%s", warning)
        # Read before anything starts: a bad $WATCHDOG_USEC is a configuration error.
        notify, watchdog = systemd.notifier_socket() if expected is None else (None, None)
        settings = daemon_settings(loaded.flags, loaded.config, loaded.explicit)
        containers = start_container_manager(settings.containers) if settings.containers is not None else None
    except ConfigurationError as error:
        exit_on_configuration_error(error)
    if expected is not None:
        run_once = functools.partial(runonce.run_once, expected=expected)
        return trio.run(run_once, runonce.runonce_settings(settings), containers)
    return trio.run(functools.partial(serve, notify=notify, watchdog=watchdog), settings, containers)


def daemon_settings(flags, config, explicit: frozenset[str] = frozenset()) -> DaemonSettings:
    root_dir = os.path.abspath(flags.root_dir)
    budget = node_budget(config, root_dir)
    endpoint = runtime_endpoint(flags, config, explicit, root_dir)
    containers = container_manager_settings(config, budget, embedded_runtime=is_embedded(endpoint, root_dir))
    return DaemonSettings(
        root_dir=root_dir,
        runtime=RuntimeLinkSettings(
            endpoint=endpoint,
            request_timeout=config.runtime_request_timeout,
        ),
        parallel_image_pulls=1 if config.serialize_image_pulls else config.max_parallel_image_pulls,
        containers=containers,
        eviction=eviction_settings(config, budget, containers, root_dir=root_dir),
        node=NodeSettings(
            name=node_name(flags.hostname_override),
            host_ip=node_ip(flags.node_ip),
            root_dir=root_dir,
            pod_logs_dir=config.pod_logs_dir,
            cluster_dns=tuple(config.cluster_dns),
            cluster_domain=config.cluster_domain,
            resolv_conf=config.resolv_conf,
            allocatable=resource_quantities({k: budget.allocatable[k] for k in ("cpu", "memory")}),
        ),
        healthz_bind_address=config.healthz_bind_address,
        healthz_port=config.healthz_port,
        enable_fault_injection=flags.enable_fault_injection,
        pod_manifest_path=config.static_pod_path,
        file_check_frequency=config.file_check_frequency,
        manifest_url=config.static_pod_url,
        manifest_url_header=dict(config.static_pod_url_header),
        http_check_frequency=config.http_check_frequency,
        sync=SyncLoopSettings(
            sync_frequency=config.sync_frequency, max_pods=config.max_pods,
            node=node_view(flags, budget),
        ),
        cluster=cluster_settings(flags, config, root_dir),
        kubelet_api=kubelet_api_settings(flags, config, root_dir, explicit),
        configz=msgspec.to_builtins(config, enc_hook=enc_hook),
        gc=GcSettings(
            image_high=config.image_gc_high_threshold_percent,
            image_low=config.image_gc_low_threshold_percent,
            image_min_age=config.image_minimum_gc_age,
        ),
        log_rotation=LogRotationSettings(
            max_size=parse_byte_quantity(config.container_log_max_size),  # validated with the config
            max_files=config.container_log_max_files,
            monitor_interval=config.container_log_monitor_interval,
            max_workers=config.container_log_max_workers,
        ),
    )


def kubelet_api_settings(flags, config, root_dir: str, explicit: frozenset[str] = frozenset()) -> KubeletApiSettings | None:
    """The kubelet API on address:port (enableServer), with its TLS and authentication."""
    if not config.enable_server:
        return None
    address = config.address
    open_to_all = config.authentication.anonymous.enabled and config.authorization.mode == "AlwaysAllow"
    if flags.kubeconfig is None and open_to_all and "address" not in explicit:
        # Standalone with Go's command-line defaults, anyone who reaches the port may run
        # commands in containers (and the embedded runtime's are host processes): unless
        # the operator chose an address, only this machine may.
        address = "127.0.0.1"
        log.warning("kubelet API on 127.0.0.1:%d only: it allows anonymous requests (standalone defaults); "
                    "pass --address to serve elsewhere, with authentication configured", config.port)
    if config.authentication.x509.client_ca_file:
        try:
            load_client_ca(config.authentication.x509.client_ca_file)
        except AuthConfigurationError as error:
            raise ConfigurationError(str(error)) from None
    if config.tls_cert_file or config.tls_private_key_file:
        try:
            server_context(TlsSettings(min_version=config.tls_min_version, cipher_suites=tuple(config.tls_cipher_suites)),
                           config.tls_cert_file, config.tls_private_key_file)
        except ServingCertError as error:
            raise ConfigurationError(str(error)) from None
    return KubeletApiSettings(
        node_name=node_name(flags.hostname_override),
        node_ips=tuple(flags.node_ip) or (node_ip(()),),
        address=address,
        port=config.port,
        read_only_port=config.read_only_port,
        enable_debugging_handlers=config.enable_debugging_handlers,
        tls=TlsSettings(
            cert_file=config.tls_cert_file,
            key_file=config.tls_private_key_file,
            cert_dir=flags.cert_dir or os.path.join(root_dir, "pki"),
            client_ca_file=config.authentication.x509.client_ca_file,
            min_version=config.tls_min_version,
            cipher_suites=tuple(config.tls_cipher_suites),
        ),
        config=config,
    )


def cluster_settings(flags, config, root_dir: str) -> ClusterSettings | None:
    """Cluster mode when --kubeconfig is given; a broken kubeconfig is a configuration error."""
    if flags.kubeconfig is None:
        return None
    from pykubelet.ports.apiserver import KubeconfigError, load_kubeconfig  # cluster mode only

    try:
        credentials = load_kubeconfig(flags.kubeconfig)
    except KubeconfigError as error:
        raise ConfigurationError(str(error)) from None
    return ClusterSettings(
        credentials=credentials,
        node_status=NodeStatusSettings(
            node_ip=flags.node_ip or (node_ip(()),),
            hostname=(flags.hostname_override or "").strip().lower(),
            node_labels=dict(flags.node_labels),
            register_node=config.register_node,
            max_pods=config.max_pods,
            kubelet_port=config.port,
            update_frequency=config.node_status_update_frequency,
            report_frequency=config.node_status_report_frequency,
            root_dir=root_dir,
            kube_reserved=dict(config.kube_reserved),
            system_reserved=dict(config.system_reserved),
            eviction_hard=dict(config.eviction_hard),
        ),
        lease=NodeLeaseSettings(duration=config.node_lease_duration_seconds),
        api_qps=config.kube_api_qps,
        api_burst=config.kube_api_burst,
        event_record_qps=config.event_record_qps,
        event_burst=config.event_burst,
    )


def node_view(flags, budget: NodeBudget) -> NodeView:
    """The node as admission sees it: labels as registered, its allocatable cpu and memory."""
    name = node_name(flags.hostname_override)
    return NodeView(
        name=name,
        labels=node_labels(name, budget.facts.machine, flags.node_labels),
        allocatable={"cpu": budget.allocatable["cpu"], "memory": budget.allocatable["memory"]},
    )


def is_embedded(endpoint: str, root_dir: str) -> bool:
    return endpoint == embedded_endpoint(root_dir)


def runtime_endpoint(flags, config, explicit: frozenset[str], root_dir: str) -> str:
    """The CRI endpoint to use; starts the embedded runtime when it is the one chosen.

    "embedded" chooses it; so does standalone mode (no --kubeconfig) when the endpoint was
    left at its default and nothing listens there. Cluster mode never falls back to it.
    """
    endpoint = config.container_runtime_endpoint
    chosen = endpoint == EMBEDDED_RUNTIME
    if not chosen and flags.kubeconfig is None and "containerRuntimeEndpoint" not in explicit:
        if not _socket_exists(endpoint):
            log.warning(
                "no container runtime at %s: standalone mode uses the embedded runtime, which runs "
                "containers as plain host processes (no isolation, no images); install containerd "
                "or pass --container-runtime-endpoint to use a real one",
                endpoint,
            )
            chosen = True
    if not chosen:
        return endpoint
    try:
        return ensure_embedded_runtime(root_dir)
    except EmbeddedRuntimeError as error:
        raise ConfigurationError(f"--container-runtime-endpoint embedded: {error}") from None


def _socket_exists(endpoint: str) -> bool:
    return os.path.exists(endpoint.removeprefix("unix://"))


async def serve(
    settings: DaemonSettings, containers: ContainerManager | None = None, *,
    notify: NotifySocket | None = None, watchdog: float | None = None,
) -> int:
    """Run the daemon; return its exit code. `notify`: systemd's socket (cli/systemd.py)."""
    daemon = Daemon(settings, containers=containers)
    log.info(
        "pykubelet %s starting",
        VERSION,
        extra={"root_dir": settings.root_dir, "runtime_endpoint": settings.runtime.endpoint},
    )
    gave_up: RestartIntensityExceeded | None = None
    stop = trio.CancelScope()
    notifier, tree_started = None, systemd.TreeStarted()
    if notify is not None:
        notifier = systemd.ServiceNotifier(
            notify, root=daemon.root, health=daemon.health, statuses=daemon.statuses,
            runtime_answered=daemon.runtime.wait_connected, watchdog=watchdog,
        )
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, stop, notifier)
            nursery.start_soon(malloc.release_free_memory)  # what start-up bursts leave in malloc
            if notifier is not None:
                nursery.start_soon(notifier.run, tree_started)
            with stop:
                try:
                    await daemon.run(task_status=tree_started)
                except RestartIntensityExceeded as exc:
                    gave_up = exc
            nursery.cancel_scope.cancel()
    if gave_up is not None:
        log.critical("stopping: %s", gave_up)
        if notifier is not None:
            notifier.failed(f"the root supervisor gave up: {gave_up}")
        return 1
    log.info("stopped; containers keep running in the runtime")
    return 0


async def _stop_on_signal(signals, stop: trio.CancelScope, notifier: systemd.ServiceNotifier | None = None) -> None:
    async for signum in signals:
        name = signal.Signals(signum).name
        log.info("received %s: stopping the actor tree in order", name)
        if notifier is not None:
            notifier.stopping(f"received {name}")
        stop.cancel()
        return
