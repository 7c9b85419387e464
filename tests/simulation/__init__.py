"""Deterministic simulation: the real actor tree on trio's MockClock, with a simulated CRI
runtime, played through seeded schedules of workload and faults (issue 14)."""
