"""Probes, pure: defaults, validation, port resolution and the threshold state machine.

The probe workers (actors/probes/) feed ProbeState the raw outcome of each probe and
publish what it returns; the handlers that produce those outcomes are in ports/probers.py.
Semantics are the Go kubelet's (pkg/kubelet/prober/worker.go).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from pykubelet.messages.pod import Container, ExecAction, GRPCAction, HTTPGetAction, Pod, Probe, TCPSocketAction
from pykubelet.messages.probes import ProbeKind, ProbeOutcome

# The API server's defaults for a probe (pkg/apis/core/v1/defaults.go): a 0 means "omitted".
DEFAULT_TIMEOUT_SECONDS = 1
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_SUCCESS_THRESHOLD = 1
DEFAULT_FAILURE_THRESHOLD = 3

PROBE_KINDS: tuple[ProbeKind, ...] = ("startup", "liveness", "readiness")
FIELD: dict[ProbeKind, str] = {"liveness": "livenessProbe", "readiness": "readinessProbe", "startup": "startupProbe"}
_ATTR: dict[ProbeKind, str] = {"liveness": "liveness_probe", "readiness": "readiness_probe", "startup": "startup_probe"}

# What a container's probe reads before it has been probed (Go's worker.initialValue): not
# ready until proven ready, alive until proven dead, not known to have started.
INITIAL_RESULT: dict[ProbeKind, ProbeOutcome] = {"liveness": "success", "readiness": "failure", "startup": "unknown"}

Handler = Literal["exec", "httpGet", "tcpSocket", "grpc"]
HANDLERS: tuple[Handler, ...] = ("exec", "httpGet", "tcpSocket", "grpc")
_HANDLER_ATTR: dict[Handler, str] = {"exec": "exec", "httpGet": "http_get", "tcpSocket": "tcp_socket", "grpc": "grpc"}


class InvalidProbe(ValueError):
    """A probe that cannot run; the message names the field and what is wrong."""


@dataclass(frozen=True)
class ResolvedProbe:
    """A probe with the API defaults applied and its one handler picked out (seconds)."""

    handler: Handler
    action: ExecAction | HTTPGetAction | TCPSocketAction | GRPCAction
    initial_delay: float
    timeout: float
    period: float
    success_threshold: int
    failure_threshold: int


def probe_of(container: Container, kind: ProbeKind) -> Probe | None:
    return getattr(container, _ATTR[kind])


def handlers_of(probe: Probe) -> list[Handler]:
    return [h for h in HANDLERS if getattr(probe, _HANDLER_ATTR[h]) is not None]


def default_probe(probe: Probe) -> Probe:
    """The probe as the API server stores it: omitted (0) timings get their defaults."""
    return msgspec.structs.replace(
        probe,
        timeout_seconds=probe.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
        period_seconds=probe.period_seconds or DEFAULT_PERIOD_SECONDS,
        success_threshold=probe.success_threshold or DEFAULT_SUCCESS_THRESHOLD,
        failure_threshold=probe.failure_threshold or DEFAULT_FAILURE_THRESHOLD,
    )


def with_defaulted_probe(container: Container, kind: ProbeKind) -> Container:
    """The container with its probe of this kind defaulted (as stored by the API server)."""
    probe = probe_of(container, kind)
    if probe is None:
        return container
    return msgspec.structs.replace(container, **{_ATTR[kind]: default_probe(probe)})


def resolve_probe(probe: Probe) -> ResolvedProbe:
    """Defaults applied; InvalidProbe if the probe has no handler or more than one."""
    handlers = handlers_of(probe)
    if len(handlers) != 1:
        raise InvalidProbe(f"a probe must have exactly one handler ({', '.join(HANDLERS)}), not {len(handlers)}")
    probe = default_probe(probe)
    return ResolvedProbe(
        handler=handlers[0],
        action=getattr(probe, _HANDLER_ATTR[handlers[0]]),
        initial_delay=float(probe.initial_delay_seconds),
        timeout=float(probe.timeout_seconds),
        period=float(probe.period_seconds),
        success_threshold=probe.success_threshold,
        failure_threshold=probe.failure_threshold,
    )


def container_path(pod: Pod, name: str) -> str:
    """"spec.containers[i]" or "spec.initContainers[i]" for the container called name."""
    for field, containers in (("containers", pod.spec.containers), ("initContainers", pod.spec.init_containers)):
        for index, container in enumerate(containers):
            if container.name == name:
                return f"spec.{field}[{index}]"
    return f"spec.containers[name={name}]"


def validate_probe(container: Container, kind: ProbeKind, path: str = "spec.containers[0]") -> list[str]:
    """Why this container's probe of this kind cannot run, as "<field path>: <problem>".

    Expects the probe as stored (defaulted: a 0 period or threshold is refused here, since
    the API server turns an omitted one into its default). `path` names the container.
    """
    probe = probe_of(container, kind)
    if probe is None:
        return []
    where = f"{path}.{FIELD[kind]}"
    errors = []
    handlers = handlers_of(probe)
    if len(handlers) != 1:
        has = f"; it has {', '.join(handlers)}" if handlers else ""
        errors.append(f"{where}: must have exactly one handler ({', '.join(HANDLERS)}){has}")
    if probe.initial_delay_seconds < 0:
        errors.append(f"{where}.initialDelaySeconds: must be greater than or equal to 0")
    for field, value in (
        ("periodSeconds", probe.period_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ):
        if value <= 0:
            errors.append(f"{where}.{field}: must be greater than 0, not {value}")
    if kind in ("liveness", "startup") and probe.success_threshold > 0 and probe.success_threshold != 1:
        errors.append(f"{where}.successThreshold: must be 1 for a {kind} probe, not {probe.success_threshold}")
    if probe.exec is not None and not probe.exec.command:
        errors.append(f"{where}.exec.command: must not be empty")
    for field, action in (("httpGet", probe.http_get), ("tcpSocket", probe.tcp_socket), ("grpc", probe.grpc)):
        if action is None:
            continue
        try:
            resolve_port(action.port, container)
        except InvalidProbe as problem:
            errors.append(f"{where}.{field}.port: {problem}")
    return errors


def resolve_port(port: int | str, container: Container) -> int:
    """A probe's port as a number: a name is looked up in the container's ports (a string
    of digits is taken as a number, as Go's last resort). InvalidProbe if neither."""
    if isinstance(port, str):
        for declared in container.ports:
            if declared.name == port:
                return _port_number(declared.container_port)
        if port.isdigit():
            return _port_number(int(port))
        names = ", ".join(f'"{p.name}"' for p in container.ports if p.name) or "none"
        raise InvalidProbe(f'no port named "{port}" in container "{container.name}" (named ports: {names})')
    return _port_number(port)


def _port_number(port: int) -> int:
    if not 0 < port < 65536:
        raise InvalidProbe(f"{port} is not a port number (1-65535)")
    return port


class ProbeState:
    """Consecutive outcomes against the thresholds (Go's lastResult/resultRun).

    feed() takes one raw outcome and returns the published result: a success or failure
    becomes the result once it has come successThreshold / failureThreshold times in a
    row. An unknown outcome (the probe could not be run) is thrown away, as Go discards a
    probe that errored: it changes neither the result nor the counters.
    """

    def __init__(
        self,
        kind: ProbeKind,
        success_threshold: int = DEFAULT_SUCCESS_THRESHOLD,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        result: ProbeOutcome | None = None,
    ) -> None:
        self.kind = kind
        self.success_threshold = success_threshold
        self.failure_threshold = failure_threshold
        self.result: ProbeOutcome = result if result is not None else INITIAL_RESULT[kind]
        self.last: ProbeOutcome | None = None
        self.run = 0

    @property
    def on_hold(self) -> bool:
        """A failed liveness or startup probe: the container is to be restarted, so the
        worker stops probing it until there is a new container."""
        return self.kind in ("liveness", "startup") and self.result == "failure"

    @property
    def done(self) -> bool:
        """A startup probe that succeeded is not run again for this container."""
        return self.kind == "startup" and self.result == "success"

    def feed(self, outcome: ProbeOutcome) -> ProbeOutcome:
        if outcome == "unknown":
            return self.result
        if outcome == self.last:
            self.run += 1
        else:
            self.last, self.run = outcome, 1
        threshold = self.success_threshold if outcome == "success" else self.failure_threshold
        if self.run >= threshold:
            self.result = outcome
            if self.on_hold:
                self.run = 0  # as Go: a new streak is needed after the hold
        return self.result


def is_gated(kind: ProbeKind, container: Container, started: bool) -> bool:
    """Liveness and readiness wait for a container with a startup probe to have started."""
    return kind != "startup" and container.startup_probe is not None and not started


__all__ = [
    "DEFAULT_FAILURE_THRESHOLD",
    "DEFAULT_PERIOD_SECONDS",
    "DEFAULT_SUCCESS_THRESHOLD",
    "DEFAULT_TIMEOUT_SECONDS",
    "FIELD",
    "HANDLERS",
    "INITIAL_RESULT",
    "PROBE_KINDS",
    "InvalidProbe",
    "ProbeState",
    "ResolvedProbe",
    "container_path",
    "default_probe",
    "handlers_of",
    "is_gated",
    "probe_of",
    "resolve_port",
    "resolve_probe",
    "validate_probe",
    "with_defaulted_probe",
]
