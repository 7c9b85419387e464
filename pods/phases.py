"""A pod's phases (Go: v1.PodPhase), shared by the status and its conditions."""

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL_PHASES = frozenset({SUCCEEDED, FAILED})
