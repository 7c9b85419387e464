"""The probes subtree: a one_for_one supervisor whose static child is the probe manager
and whose dynamic children are the probe workers the manager starts.

root/probes            one_for_one
├── manager            mailbox root/probes/manager (durable), accepts ProbeTargets
└── <uid>.<container>.<kind>   transient probe workers, one per running container x probe
"""

from __future__ import annotations

from collections.abc import Callable

from pykubelet.messages.probes import ProbeTargets
from pykubelet.supervisor import ChildSpec, MailboxSpec, RestartBackoff, RestartIntensity, Supervisor

from .manager import ProbeTarget, probe_manager_actor
from .metrics import ProbeMetrics
from .results import ProbeResults
from .worker import ProbeHandler, probe_worker_actor

# As the pod workers: a probe worker that keeps crashing is slowed by back-off (up to 30 s
# between restarts), so only many failing at once, which is systemic, escalates to root.
PROBES_INTENSITY = RestartIntensity(max_restarts=100, period=60.0)
PROBES_BACKOFF = RestartBackoff(initial=0.1, maximum=30.0, reset_after=60.0)
MANAGER_MAILBOX = MailboxSpec(capacity=1024, durable=True, accepts=(ProbeTargets,))


def probes_supervisor_spec(
    *,
    tree: Callable[[], Supervisor],
    results: ProbeResults,
    metrics: ProbeMetrics,
    runtime,
    host_ip: str,
    send_to: str = "root/sync-loop",
    name: str = "probes",
    parent: str = "root",
    handler: ProbeHandler | None = None,
    events=None,
) -> ChildSpec:
    """The ChildSpec of the probes supervisor, to put under `parent` (its path is
    "<parent>/<name>"; pod workers send ProbeTargets to "<parent>/<name>/manager").

    runtime: the RuntimeHandle (exec probes); host_ip: the node IP, the probes' target
    for pods without an IP of their own; send_to: where ProbeResults go (the sync loop);
    handler: runs one probe (default: the real handlers of ports/probers.py; tests fake it).
    """

    def make_worker(target: ProbeTarget):
        return probe_worker_actor(
            target.pod, target.container_name, target.container_id, target.kind, target.started_at,
            results=results, metrics=metrics, runtime=runtime, send_to=send_to, host_ip=host_ip,
            jitter=target.jitter, handler=handler, events=events,
        )

    manager = ChildSpec(
        "manager",
        probe_manager_actor(tree=tree, results=results, make_worker=make_worker, workers=f"{parent}/{name}"),
        mailbox=MANAGER_MAILBOX,
    )
    return Supervisor.child_spec(name, [manager], strategy="one_for_one", intensity=PROBES_INTENSITY, backoff=PROBES_BACKOFF)
