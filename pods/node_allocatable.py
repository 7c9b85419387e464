"""Node allocatable (Go: pkg/kubelet/cm/node_container_manager_linux.go GetNodeAllocatableReservation
and validateNodeAllocatable, cm/helpers.go hardEvictionReservation, nodestatus MachineInfo,
cmd/kubelet/app/server.go parseResourceList, config validation of enforceNodeAllocatable): what the
node offers pods once kubeReserved, systemReserved and the hard eviction thresholds are set aside.
Pure; the node status and admission read it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from pykubelet.pods.eviction_thresholds import (
    Quantity,
    QuantityFormat,
    Signal,
    Threshold,
    format_quantity,
    threshold_quantity,
)

RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")  # Go's parseResourceList accepts only these

ENFORCE_PODS = "pods"
ENFORCE_SYSTEM_RESERVED = "system-reserved"
ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE = "system-reserved-compressible"
ENFORCE_KUBE_RESERVED = "kube-reserved"
ENFORCE_KUBE_RESERVED_COMPRESSIBLE = "kube-reserved-compressible"
ENFORCE_NONE = "none"
ENFORCE_OPTIONS = (ENFORCE_PODS, ENFORCE_SYSTEM_RESERVED, ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
                   ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE, ENFORCE_NONE)  # fmt: skip
DEFAULT_ENFORCE_NODE_ALLOCATABLE = (ENFORCE_PODS,)

# Which capacity a hard threshold sets aside (Go's hardEvictionReservation).
_EVICTION_RESERVES = {Signal.MEMORY_AVAILABLE: "memory", Signal.NODEFS_AVAILABLE: "ephemeral-storage"}


class ReservationError(ValueError):
    """kubeReserved/systemReserved the Go kubelet refuses at start; the message names field, figures and fix."""


def parse_reserved(field: str, reserved: Mapping[str, str]) -> dict[str, int]:
    """Go's parseResourceList for kubeReserved or systemReserved (`field`): cpu in millicores (rounded
    to the nearest), the others in whole units (rounded up)."""
    parsed: dict[str, int] = {}
    for name, text in reserved.items():
        where = f"{field}[{json.dumps(name)}]"
        if name not in RESERVABLE:
            choices = ", ".join(RESERVABLE)
            raise ReservationError(f"{where}: cannot reserve {json.dumps(name)}; reserve one of {choices}")
        try:
            quantity = Quantity.parse(text)
        except ValueError:
            hint = 'give one such as "500m" or "1Gi"'
            raise ReservationError(f"{where}: {json.dumps(text)} is not a quantity; {hint}") from None
        if quantity.value < 0:
            raise ReservationError(f"{where}: {json.dumps(text)} must not be negative")
        if name == "cpu":
            micro = math.ceil(quantity.value * 1_000_000)
            parsed[name] = (micro + 500) // 1000
        else:
            parsed[name] = math.ceil(quantity.value)
    return parsed


def _eviction_reservation(hard_thresholds: Iterable[Threshold], capacity: Mapping[str, int]) -> dict[str, int]:
    reserve: dict[str, int] = {}
    for threshold in hard_thresholds:
        resource = _EVICTION_RESERVES.get(threshold.signal)
        if resource is not None and threshold.hard and threshold.operator == "LessThan":
            reserve[resource] = math.ceil(threshold_quantity(threshold.value, capacity.get(resource, 0)).value)
    return reserve


def _parts(capacity: Mapping[str, int], kube_reserved: Mapping[str, str], system_reserved: Mapping[str, str],
           hard_thresholds: Iterable[Threshold]) -> dict[str, dict[str, int]]:  # fmt: skip
    # {resource: {where it comes from: amount}} for the resources of the node's capacity.
    kube = parse_reserved("kubeReserved", kube_reserved)
    system = parse_reserved("systemReserved", system_reserved)
    thresholds = [t for t in hard_thresholds if t.hard]
    eviction = _eviction_reservation(thresholds, capacity)
    signal_of = {resource: signal for signal, resource in _EVICTION_RESERVES.items()}
    parts: dict[str, dict[str, int]] = {}
    for resource in capacity:
        named = {
            f'kubeReserved["{resource}"]': kube.get(resource, 0),
            f'systemReserved["{resource}"]': system.get(resource, 0),
            f'evictionHard["{signal_of.get(resource, "")}"]': eviction.get(resource, 0),
        }
        if any(named.values()):
            parts[resource] = {where: amount for where, amount in named.items() if amount}
    return parts


def reservation(
    capacity: Mapping[str, int],
    kube_reserved: Mapping[str, str],
    system_reserved: Mapping[str, str],
    hard_thresholds: Iterable[Threshold] = (),
) -> dict[str, int]:
    """Go's GetNodeAllocatableReservation: per resource of the capacity, kubeReserved + systemReserved +
    the hard memory.available (memory) or nodefs.available (ephemeral-storage) threshold; a percentage
    is of that capacity. Resources with nothing reserved are left out."""
    parts = _parts(capacity, kube_reserved, system_reserved, hard_thresholds)
    return {resource: sum(amounts.values()) for resource, amounts in parts.items()}


def allocatable(
    capacity: Mapping[str, int],
    kube_reserved: Mapping[str, str],
    system_reserved: Mapping[str, str],
    hard_thresholds: Iterable[Threshold] = (),
) -> dict[str, int]:
    """Node status allocatable (Go's MachineInfo setter): capacity less the reservation, floored at 0,
    and memory further less every hugepages-* capacity. Units are capacity's: cpu in millicores,
    memory and ephemeral-storage in bytes, pods a count."""
    reserved = reservation(capacity, kube_reserved, system_reserved, hard_thresholds)
    result = {resource: max(0, amount - reserved.get(resource, 0)) for resource, amount in capacity.items()}
    for resource, amount in capacity.items():
        if resource.startswith("hugepages-") and "memory" in result:
            result["memory"] = max(0, result["memory"] - amount)
    return result


def _figure(resource: str, amount: int) -> str:
    if resource == "cpu":
        return format_quantity(Decimal(amount) / 1000, QuantityFormat.DECIMAL_SI)
    bytes_like = resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")
    return format_quantity(amount, QuantityFormat.BINARY_SI if bytes_like else QuantityFormat.DECIMAL_SI)


def validate_reservation(
    capacity: Mapping[str, int],
    kube_reserved: Mapping[str, str],
    system_reserved: Mapping[str, str],
    hard_thresholds: Iterable[Threshold] = (),
) -> None:
    """Go's validateNodeAllocatable, run at start: refuse reservations larger than the capacity (Go
    fails with "invalid Node Allocatable configuration"), and names Go refuses to reserve."""
    problems = []
    for resource, amounts in _parts(capacity, kube_reserved, system_reserved, hard_thresholds).items():
        total = sum(amounts.values())
        if total > capacity[resource]:
            terms = " + ".join(f"{where} {_figure(resource, amount)}" for where, amount in amounts.items())
            shown = f"{terms} = {_figure(resource, total)}" if len(amounts) > 1 else terms
            has = _figure(resource, capacity[resource])
            problems.append(f"{resource}: {shown} reserved, but the node's capacity is {has}")
    if problems:
        raise ReservationError(
            "invalid Node Allocatable configuration: " + "; ".join(problems)
            + ". Lower kubeReserved, systemReserved or evictionHard so that they fit the node's capacity"
        )


def validate_enforce_node_allocatable(
    values: Sequence[str],
    *,
    system_reserved_cgroup: str = "",
    kube_reserved_cgroup: str = "",
    cgroups_per_qos: bool = True,
) -> list[str]:
    """Go's checks of enforceNodeAllocatable (ValidateKubeletConfiguration), every problem found."""
    where = "enforceNodeAllocatable"
    problems = []
    for plain, compressible in ((ENFORCE_SYSTEM_RESERVED, ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE),
                                (ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE)):  # fmt: skip
        if plain in values and compressible in values:
            both = f"{json.dumps(plain)} and {json.dumps(compressible)}"
            problems.append(f"{where}: {both} cannot be given together; keep one")
    seen: set[str] = set()
    for value in values:
        if value in seen:
            problems.append(f"{where}: {json.dumps(value)} is given twice")
            continue
        seen.add(value)
        if value not in ENFORCE_OPTIONS:
            options = ", ".join(json.dumps(o) for o in ENFORCE_OPTIONS)
            problems.append(f"{where}: unknown option {json.dumps(value)}; valid options are {options}")
            continue
        if value == ENFORCE_NONE:
            if len(values) > 1:
                problems.append(f'{where}: "none" may not be given with other enforcements')
            continue
        if value in (ENFORCE_SYSTEM_RESERVED, ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE) and not system_reserved_cgroup:
            problems.append(f"{where}: {json.dumps(value)} needs systemReservedCgroup, the cgroup to enforce it on")
        if value in (ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE) and not kube_reserved_cgroup:
            problems.append(f"{where}: {json.dumps(value)} needs kubeReservedCgroup, the cgroup to enforce it on")
        if not cgroups_per_qos:
            problems.append(f"{where}: {json.dumps(value)} needs cgroupsPerQOS: true")
    return problems
