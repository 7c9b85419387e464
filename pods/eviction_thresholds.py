"""Eviction thresholds (Go: pkg/kubelet/eviction/api/types.go, helpers.go, defaults_linux.go): the
signals, evictionHard/evictionSoft parsed and validated, which thresholds the node's observations
meet, how long they must hold, and the node conditions they raise. Pure; the eviction manager feeds
it an observation per signal each pass, pods/eviction_ranking.py picks the pod to evict.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from enum import StrEnum

from pykubelet.messages.config import DEFAULT_EVICTION_HARD as KUBELET_DEFAULT_EVICTION_HARD
from pykubelet.messages.duration import DurationError, parse_duration


class Signal(StrEnum):
    MEMORY_AVAILABLE = "memory.available"
    NODEFS_AVAILABLE = "nodefs.available"
    NODEFS_INODES_FREE = "nodefs.inodesFree"
    IMAGEFS_AVAILABLE = "imagefs.available"
    IMAGEFS_INODES_FREE = "imagefs.inodesFree"
    CONTAINERFS_AVAILABLE = "containerfs.available"
    CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
    ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
    PID_AVAILABLE = "pid.available"


MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"

# Go's signalToResource: what a signal starves, as the eviction message names it.
SIGNAL_RESOURCE: dict[Signal, str] = {
    Signal.MEMORY_AVAILABLE: "memory", Signal.ALLOCATABLE_MEMORY_AVAILABLE: "memory",
    Signal.NODEFS_AVAILABLE: "ephemeral-storage", Signal.IMAGEFS_AVAILABLE: "ephemeral-storage",
    Signal.CONTAINERFS_AVAILABLE: "ephemeral-storage", Signal.NODEFS_INODES_FREE: "inodes",
    Signal.IMAGEFS_INODES_FREE: "inodes", Signal.CONTAINERFS_INODES_FREE: "inodes", Signal.PID_AVAILABLE: "pids",
}  # fmt: skip
SIGNAL_CONDITION: dict[Signal, str] = {
    signal: MEMORY_PRESSURE if resource == "memory" else PID_PRESSURE if resource == "pids" else DISK_PRESSURE
    for signal, resource in SIGNAL_RESOURCE.items()
}
CONDITION_ORDER = (MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)

# Go's DefaultEvictionHard on Linux. A config file that sets evictionHard replaces the whole map
# unless mergeDefaultEvictionSettings is true (cmd/kubelet/app/server.go loadConfigFile).
DEFAULT_EVICTION_HARD: Mapping[str, str] = KUBELET_DEFAULT_EVICTION_HARD  # Go's eviction/defaults_linux.go
DEFAULT_PRESSURE_TRANSITION_PERIOD = 300.0  # evictionPressureTransitionPeriod, seconds


# --- Go quantities ------------------------------------------------------------------------


class QuantityFormat(StrEnum):
    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE])?")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


@dataclass(frozen=True)
class Quantity:
    """A resource.Quantity: its value and the format Go prints it in ("1Gi" stays binary)."""

    value: Decimal
    format: QuantityFormat = QuantityFormat.BINARY_SI

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Go's resource.ParseQuantity; ValueError for what it refuses."""
        match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"{json.dumps(str(text))} is not a quantity")
        number, suffix = Decimal(match[1]), match[2] or ""
        if suffix in _BINARY:
            return cls(number * 2 ** _BINARY[suffix], QuantityFormat.BINARY_SI)
        if suffix[:1] in ("e", "E"):
            return cls(number.scaleb(int(suffix[1:])), QuantityFormat.DECIMAL_EXPONENT)
        return cls(number.scaleb(_DECIMAL[suffix]), QuantityFormat.DECIMAL_SI)

    def __str__(self) -> str:
        return format_quantity(self.value, self.format)


def format_quantity(value: Decimal | int, fmt: QuantityFormat = QuantityFormat.BINARY_SI) -> str:
    """Go's Quantity.String(): canonical form in the quantity's format; a binary one that is
    small or fractional prints as decimal (52428800 -> "50Mi", 1000 -> "1k", 1.5 -> "1500m")."""
    value = Decimal(value)
    if value == 0:
        return "0"
    if fmt == QuantityFormat.BINARY_SI:
        if -1024 < value < 1024 or value != value.to_integral_value():
            fmt = QuantityFormat.DECIMAL_SI
        else:
            number, power = int(value), 0
            while number % 1024 == 0 and power < len(_BINARY_SUFFIX) - 1:
                number, power = number // 1024, power + 1
            return f"{number}{_BINARY_SUFFIX[power]}"
    sign, digits, exponent = value.normalize().as_tuple()
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    shift = exponent % 3  # down to a multiple of three, as Go's AsCanonicalBytes
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if fmt == QuantityFormat.DECIMAL_EXPONENT:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIX.get(exponent, f'e{exponent}')}"


def _float32(value: float) -> float:
    """Go keeps percentages in a float32; their rounding shows in the figures (5% of 10Gi is
    536870920 bytes, not 536870912)."""
    return struct.unpack("f", struct.pack("f", value))[0]


# --- thresholds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ThresholdValue:
    """An absolute quantity, or a fraction of capacity (a float32, 0.1 for "10%")."""

    quantity: Quantity | None = None
    percentage: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "percentage", _float32(self.percentage))


@dataclass(frozen=True)
class Threshold:
    signal: Signal
    value: ThresholdValue
    grace_period: float = 0.0  # seconds; 0 makes it a hard threshold
    min_reclaim: ThresholdValue | None = None
    operator: str = "LessThan"  # the only operator Go has

    @property
    def hard(self) -> bool:
        return self.grace_period == 0


@dataclass(frozen=True)
class Observation:
    """What the stats summary says of a signal (Go's signalObservation); time is when it was sampled."""

    available: int
    capacity: int
    time: float | None = None


class ThresholdError(ValueError):
    """An eviction setting Go's ParseThresholdConfig refuses; the message names the field and the fix."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


_SIGNALS_HINT = "use one of " + ", ".join(s.value for s in Signal)
_VALUE_HINT = 'give a quantity such as "100Mi" or a percentage such as "10%"'


def _signal(field: str, name: str) -> Signal:
    try:
        return Signal(name)
    except ValueError:
        raise ThresholdError(field, f"unsupported eviction signal {json.dumps(name)}; {_SIGNALS_HINT}") from None


def _percentage(field: str, text: str) -> float:
    number = text.rstrip("%")  # Go's strings.TrimRight
    if not re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", number):
        raise ThresholdError(field, f"{json.dumps(text)} is not a percentage; {_VALUE_HINT}")
    return _float32(_float32(float(number)) / 100)


def _quantity(field: str, text: str) -> Quantity:
    try:
        return Quantity.parse(text)
    except ValueError:
        raise ThresholdError(field, f"{json.dumps(text)} is not a quantity; {_VALUE_HINT}") from None


def _threshold_statements(name: str, statements: Mapping[str, str]) -> list[Threshold]:
    results = []
    for key, text in statements.items():
        field = f"{name}[{json.dumps(key)}]"
        signal = _signal(field, key)
        if text.endswith("%"):
            if text in ("0%", "100%"):  # Go's way to switch a threshold off
                continue
            percentage = _percentage(field, text)
            if percentage < 0:
                raise ThresholdError(field, f'{json.dumps(text)} must be at least 0%; "0%" switches it off')
            if percentage > 1:
                raise ThresholdError(field, f'{json.dumps(text)} must be at most 100%; "100%" switches it off')
            results.append(Threshold(signal, ThresholdValue(percentage=percentage)))
            continue
        quantity = _quantity(field, text)
        if quantity.value <= 0:
            raise ThresholdError(field, f'{json.dumps(text)} must be positive; {_VALUE_HINT}, or "0%" to switch it off')
        results.append(Threshold(signal, ThresholdValue(quantity=quantity)))
    return results


def parse_thresholds(
    eviction_hard: Mapping[str, str],
    eviction_soft: Mapping[str, str],
    soft_grace_periods: Mapping[str, str],
    minimum_reclaim: Mapping[str, str],
    *,
    enforce_node_allocatable: Collection[str] = (),
) -> list[Threshold]:
    """Go's ParseThresholdConfig: hard thresholds, then soft ones with their grace periods, each
    given its minimum reclaim; with "pods" enforced, the hard memory.available threshold is copied
    to allocatableMemory.available. Raises ThresholdError at the first bad entry."""
    hard = _threshold_statements("evictionHard", eviction_hard)
    soft = _threshold_statements("evictionSoft", eviction_soft)
    periods: dict[Signal, float] = {}
    for key, text in soft_grace_periods.items():
        field = f"evictionSoftGracePeriod[{json.dumps(key)}]"
        signal = _signal(field, key)
        try:
            period = parse_duration(text)
        except DurationError as error:
            raise ThresholdError(field, str(error)) from None
        if period < 0:
            raise ThresholdError(field, f"{json.dumps(text)} must not be negative")
        periods[signal] = float(period)
    reclaims: dict[Signal, ThresholdValue] = {}
    for key, text in minimum_reclaim.items():
        field = f"evictionMinimumReclaim[{json.dumps(key)}]"
        signal = _signal(field, key)
        if text.endswith("%"):
            percentage = _percentage(field, text)
            if percentage <= 0:
                problem = "must be positive; leave the signal out to reclaim no more"
                raise ThresholdError(field, f"{json.dumps(text)} {problem}")
            reclaims[signal] = ThresholdValue(percentage=percentage)
            continue
        quantity = _quantity(field, text)
        if quantity.value < 0:
            raise ThresholdError(field, f"{json.dumps(text)} must not be negative")
        reclaims[signal] = ThresholdValue(quantity=quantity)
    for i, threshold in enumerate(soft):
        if threshold.signal not in periods:
            raise ThresholdError(
                f"evictionSoft[{json.dumps(threshold.signal.value)}]",
                "a soft threshold needs a grace period: "
                f'add evictionSoftGracePeriod["{threshold.signal}"] (e.g. "1m30s")',
            )
        soft[i] = replace(threshold, grace_period=periods[threshold.signal])
    results = [replace(t, min_reclaim=reclaims.get(t.signal)) for t in hard + soft]
    if "pods" in enforce_node_allocatable:
        results += [replace(t, signal=Signal.ALLOCATABLE_MEMORY_AVAILABLE, grace_period=0.0)
                    for t in results if t.signal == Signal.MEMORY_AVAILABLE and t.hard]  # fmt: skip
    return results


_CONTAINER_FS_SOURCE = {
    Signal.CONTAINERFS_AVAILABLE: (Signal.NODEFS_AVAILABLE, Signal.IMAGEFS_AVAILABLE),
    Signal.CONTAINERFS_INODES_FREE: (Signal.NODEFS_INODES_FREE, Signal.IMAGEFS_INODES_FREE),
}


def with_container_fs_thresholds(
    thresholds: Iterable[Threshold], *, dedicated_image_fs: bool, split_container_image_fs: bool = False
) -> tuple[list[Threshold], list[str]]:
    """Go's UpdateContainerFsThresholds: containerfs thresholds are not the user's to set; they copy
    nodefs's (one filesystem, or writable layers apart from images) or imagefs's (images and layers
    together on their own disk). Returns the thresholds and a warning per containerfs one ignored."""
    thresholds = list(thresholds)
    warnings = [f"found {t.signal} for {'hard' if t.hard else 'soft'} eviction. ignoring"
                for t in thresholds if t.signal in _CONTAINER_FS_SOURCE]  # fmt: skip
    if dedicated_image_fs == split_container_image_fs:
        pick = 0  # containerfs is nodefs
    elif dedicated_image_fs:
        pick = 1  # containerfs is imagefs
    else:
        return thresholds, warnings  # Go leaves this layout alone
    kept = [t for t in thresholds if t.signal not in _CONTAINER_FS_SOURCE]
    derived = []
    for signal, sources in _CONTAINER_FS_SOURCE.items():
        for hard in (True, False):
            # Go appends a zero threshold when the source is missing; it is never met, so none here.
            source = next((t for t in kept if t.signal == sources[pick] and t.hard == hard), None)
            if source is not None:
                derived.append(replace(source, signal=signal))
    return kept + derived, warnings


# --- meeting thresholds -------------------------------------------------------------------


def threshold_quantity(value: ThresholdValue, capacity: int) -> Quantity:
    """Go's GetThresholdQuantity: the quantity, or the percentage of capacity (float arithmetic, truncated)."""
    if value.quantity is not None:
        return value.quantity
    return Quantity(Decimal(math.trunc(float(capacity) * value.percentage)))


def thresholds_met(
    thresholds: Iterable[Threshold], observations: Mapping[Signal, Observation], enforce_min_reclaim: bool
) -> list[Threshold]:
    """The thresholds whose signal has less available than the threshold (plus its minimum reclaim
    when enforced: a threshold met stays met until that much more is free). Unobserved signals never meet."""
    met = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        quantity = threshold_quantity(threshold.value, observed.capacity).value
        if enforce_min_reclaim and threshold.min_reclaim is not None:
            quantity += threshold_quantity(threshold.min_reclaim, observed.capacity).value
        if threshold.operator == "LessThan" and quantity > observed.available:
            met.append(threshold)
    return met


def merge_thresholds(first: Iterable[Threshold], more: Iterable[Threshold]) -> list[Threshold]:
    """Go's mergeThresholds: `first`, then those of `more` not already there (minimum reclaim aside)."""
    merged = list(first)
    keys = {(t.signal, t.operator, t.value, t.grace_period) for t in merged}
    for threshold in more:
        if (threshold.signal, threshold.operator, threshold.value, threshold.grace_period) not in keys:
            merged.append(threshold)
    return merged


def thresholds_with_new_stats(
    thresholds: Iterable[Threshold], observations: Mapping[Signal, Observation], last: Mapping[Signal, Observation]
) -> list[Threshold]:
    """Go's thresholdsUpdatedStats: act only on thresholds whose signal was sampled anew, so that one
    stale sample does not evict twice."""
    fresh = []
    for threshold in thresholds:
        observed = observations.get(threshold.signal)
        if observed is None:
            continue
        previous = last.get(threshold.signal)
        if previous is None or observed.time is None or observed.time > (previous.time or 0.0):
            fresh.append(threshold)
    return fresh


def thresholds_first_observed(
    thresholds: Iterable[Threshold], last_observed_at: Mapping[Threshold, float], now: float
) -> dict[Threshold, float]:
    """When each threshold met now was first met; one no longer met is forgotten."""
    return {t: last_observed_at.get(t, now) for t in thresholds}


def thresholds_met_grace_period(observed_at: Mapping[Threshold, float], now: float) -> list[Threshold]:
    """The thresholds met for at least their grace period (a hard one at once)."""
    return [t for t, at in observed_at.items() if now - at >= t.grace_period]


def sort_by_eviction_priority(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """Go's byEvictionPriority: memory before everything else, signals with no resource last."""

    def rank(threshold: Threshold) -> int:
        if threshold.signal in (Signal.MEMORY_AVAILABLE, Signal.ALLOCATABLE_MEMORY_AVAILABLE):
            return 0
        return 1 if threshold.signal in SIGNAL_RESOURCE else 2

    return sorted(thresholds, key=rank)


# --- node conditions ----------------------------------------------------------------------


def node_conditions(thresholds: Iterable[Threshold]) -> frozenset[str]:
    """The pressure conditions the thresholds raise: MemoryPressure, DiskPressure, PIDPressure."""
    return frozenset(SIGNAL_CONDITION[t.signal] for t in thresholds if t.signal in SIGNAL_CONDITION)


def node_conditions_last_observed(
    conditions: Iterable[str], last_observed_at: Mapping[str, float], now: float
) -> dict[str, float]:
    """Go's nodeConditionsLastObservedAt: the conditions seen now at `now`, the others at their old time."""
    return {**last_observed_at, **{condition: now for condition in conditions}}


def node_conditions_observed_since(last_observed_at: Mapping[str, float], period: float, now: float) -> frozenset[str]:
    """The conditions the node reports: those seen within evictionPressureTransitionPeriod, so that a
    node does not flap in and out of pressure."""
    return frozenset(condition for condition, at in last_observed_at.items() if now - at < period)


# --- node-level reclaim -------------------------------------------------------------------


class NodeReclaim(StrEnum):
    """What the kubelet frees itself before evicting a pod; the caller performs them in order."""

    DELETE_ALL_UNUSED_CONTAINERS = "DeleteAllUnusedContainers"
    DELETE_UNUSED_IMAGES = "DeleteUnusedImages"


def node_reclaim_functions(
    signal: Signal, *, dedicated_image_fs: bool, split_container_image_fs: bool = False
) -> tuple[NodeReclaim, ...]:
    """Go's buildSignalToNodeReclaimFuncs: for a disk signal, dead containers then unused images, as far
    as they live on the filesystem under pressure; nothing for memory and PIDs."""
    both = (NodeReclaim.DELETE_ALL_UNUSED_CONTAINERS, NodeReclaim.DELETE_UNUSED_IMAGES)
    node = {Signal.NODEFS_AVAILABLE, Signal.NODEFS_INODES_FREE}
    image = {Signal.IMAGEFS_AVAILABLE, Signal.IMAGEFS_INODES_FREE}
    container = {Signal.CONTAINERFS_AVAILABLE, Signal.CONTAINERFS_INODES_FREE}
    if signal not in node | image | container:
        return ()
    if dedicated_image_fs and not split_container_image_fs:
        return () if signal in node else both  # nodefs holds logs and volumes only
    if dedicated_image_fs:
        return (NodeReclaim.DELETE_UNUSED_IMAGES,) if signal in image else (NodeReclaim.DELETE_ALL_UNUSED_CONTAINERS,)
    return both
