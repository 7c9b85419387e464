"""What the eviction manager last observed of the node, for those who act on it: node status
reports its conditions, admission refuses pods under them (pods/eviction.py
admit_under_pressure), inspection shows the observations. Written by
actors/eviction_manager.py only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pykubelet.pods.eviction_thresholds import (
    DISK_PRESSURE,
    MEMORY_PRESSURE,
    PID_PRESSURE,
    Observation,
    Signal,
    Threshold,
)


class NodePressure:
    """The eviction manager's view of the node, for node status (conditions) and admission. Times
    are trio's clock."""

    def __init__(self) -> None:
        self.conditions: frozenset[str] = frozenset()  # MemoryPressure, DiskPressure, PIDPressure
        self.observations: Mapping[Signal, Observation] = {}
        self.thresholds_met: tuple[Threshold, ...] = ()  # grace periods satisfied
        self.updated_at: float | None = None
        self.conditions_observed_at: Mapping[str, float] = {}  # kept for a restarted manager

    def publish(
        self, *, conditions: frozenset[str], observations: Mapping[Signal, Observation],
        thresholds_met: Sequence[Threshold], conditions_observed_at: Mapping[str, float], now: float,
    ) -> None:
        self.conditions, self.observations = conditions, dict(observations)
        self.thresholds_met, self.conditions_observed_at = tuple(thresholds_met), dict(conditions_observed_at)
        self.updated_at = now

    @property
    def memory_pressure(self) -> bool:
        return MEMORY_PRESSURE in self.conditions

    @property
    def disk_pressure(self) -> bool:
        return DISK_PRESSURE in self.conditions

    @property
    def pid_pressure(self) -> bool:
        return PID_PRESSURE in self.conditions
