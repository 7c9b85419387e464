"""Prometheus metrics of the supervision tree, read from a snapshot at each scrape.

Series are labelled with the actor's path, as in the tree snapshot. Dynamic children of a
supervisor listed in `fold` (pod workers, probe workers) are summed into their
supervisor's series so that the number of series stays bounded.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from pykubelet.messages.supervision import ActorSnapshot


class ActorTreeCollector(Collector):
    def __init__(self, snapshot: Callable[[], ActorSnapshot], fold: Iterable[str] = ()) -> None:
        self._snapshot = snapshot
        self._fold = frozenset(fold)

    def collect(self):
        restarts = CounterMetricFamily(
            "pykubelet_actor_restarts", "Restarts of the actor by its supervisor or an operator.", labels=["actor"]
        )
        up = GaugeMetricFamily("pykubelet_actor_up", "1 when the actor is running.", labels=["actor"])
        depth = GaugeMetricFamily(
            "pykubelet_actor_mailbox_depth", "Messages waiting in the actor's mailbox.", labels=["actor"]
        )
        messages = CounterMetricFamily(
            "pykubelet_actor_messages", "Messages the actor has taken from its mailbox.", labels=["actor"]
        )
        for actor, totals in self._series(self._snapshot()):
            restarts.add_metric([actor], totals["restarts"])
            up.add_metric([actor], totals["up"])
            if totals["has_mailbox"]:
                depth.add_metric([actor], totals["depth"])
                messages.add_metric([actor], totals["received"])
        return [restarts, up, depth, messages]

    def _series(self, root: ActorSnapshot):
        series: dict[str, dict[str, float]] = {}

        def add(label: str, actor: ActorSnapshot, folded: bool) -> None:
            totals = series.setdefault(
                label, {"restarts": 0, "up": 0, "depth": 0, "received": 0, "has_mailbox": False}
            )
            totals["restarts"] += actor.restarts
            if not folded:
                totals["up"] = 1 if actor.state == "running" else 0
            if actor.mailbox is not None:
                totals["has_mailbox"] = True
                totals["depth"] += actor.mailbox.depth
                totals["received"] += actor.mailbox.received

        def visit(actor: ActorSnapshot) -> None:
            add(actor.path, actor, folded=False)
            if actor.path in self._fold:
                for descendant in list(actor.walk())[1:]:
                    add(actor.path, descendant, folded=True)
                return
            for child in actor.children:
                visit(child)

        visit(root)
        return series.items()
