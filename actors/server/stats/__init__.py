"""GET /stats/summary and /metrics/resource: the stats provider (provider.py) lists the
runtime, keeps its stats sample (cri_stats.py) and reads files, and builds the node's and
pods' stats from them (summary_parts.py)."""

from .provider import StatsProvider, StatsState

__all__ = ["StatsProvider", "StatsState"]
