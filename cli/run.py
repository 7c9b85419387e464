"""`pykubelet run`: read the configuration, then run the actor tree until SIGTERM/SIGINT.

Exit codes: 0 after a signal (the tree stopped in order; containers keep running),
1 when the root supervisor gave up, 2 for a configuration error.
"""

from __future__ import annotations

import logging
import signal
import sys
from importlib.metadata import version
from typing import Sequence

import trio

from pykubelet.actors.root import Daemon, DaemonSettings
from pykubelet.actors.runtime_link import RuntimeLinkSettings
from pykubelet.supervisor import RestartIntensityExceeded

from .config import (
    ConfigurationError,
    build_configuration,
    exit_on_configuration_error,
    prepare_root_dir,
)
from .logs import configure_logging

log = logging.getLogger("pykubelet")

USAGE = """usage: pykubelet run [flags]      run the node agent (pykubelet run --help lists the flags)
       pykubelet --version"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["version"]):
        print(f"pykubelet {version('pykubelet')}")
        return 0
    if not args or args[0] != "run":
        print(USAGE, file=sys.stderr)
        return 2
    try:
        loaded = build_configuration(args[1:])
        settings = daemon_settings(loaded.flags, loaded.config)
        prepare_root_dir(settings.root_dir)
    except ConfigurationError as error:
        exit_on_configuration_error(error)
    configure_logging(loaded.config.logging.format, loaded.config.logging.verbosity)
    for warning in loaded.warnings:
        log.warning("%s", warning)
    return trio.run(serve, settings)


def daemon_settings(flags, config) -> DaemonSettings:
    endpoint = config.container_runtime_endpoint
    if endpoint == "embedded":
        raise ConfigurationError(
            "--container-runtime-endpoint embedded: the embedded runtime is not part of this "
            "version yet; point it at containerd's socket (unix:///run/containerd/containerd.sock)"
        )
    return DaemonSettings(
        root_dir=flags.root_dir,
        runtime=RuntimeLinkSettings(endpoint=endpoint, request_timeout=config.runtime_request_timeout),
        healthz_bind_address=config.healthz_bind_address,
        healthz_port=config.healthz_port,
        enable_fault_injection=flags.enable_fault_injection,
    )


async def serve(settings: DaemonSettings) -> int:
    """Run the daemon; return its exit code."""
    daemon = Daemon(settings)
    log.info(
        "pykubelet %s starting",
        version("pykubelet"),
        extra={"root_dir": settings.root_dir, "runtime_endpoint": settings.runtime.endpoint},
    )
    gave_up: RestartIntensityExceeded | None = None
    stop = trio.CancelScope()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, stop)
            with stop:
                try:
                    await daemon.run()
                except RestartIntensityExceeded as exc:
                    gave_up = exc
            nursery.cancel_scope.cancel()
    if gave_up is not None:
        log.critical("stopping: %s", gave_up)
        return 1
    log.info("stopped; containers keep running in the runtime")
    return 0


async def _stop_on_signal(signals, stop: trio.CancelScope) -> None:
    async for signum in signals:
        log.info("received %s: stopping the actor tree in order", signal.Signals(signum).name)
        stop.cancel()
        return
