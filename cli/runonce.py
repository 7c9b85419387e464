"""`pykubelet run --runonce`: run the static pods once through the real actor tree, wait
until each reached its goal (Go's retry rule, pods/run_once.py), print one line per pod
and exit 0 if all did, 1 otherwise. Containers keep running after the exit, as in Go.

Before anything starts, the manifests are read once (a bad one exits 2, like a bad flag);
then the tree runs as `pykubelet run` runs it, with no kubelet API port and no healthz port,
and this module only watches its boards: the runtime, the sync loop's desired set, the pods'
statuses.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
from typing import Sequence, TextIO

import trio

from pykubelet.actors import events as events_reasons
from pykubelet.actors.container_manager import ContainerManager
from pykubelet.actors.events import EventRecorder
from pykubelet.actors.pod_statuses import PodStatuses
from pykubelet.actors.root import Daemon, DaemonSettings
from pykubelet.actors.runtime_link import RuntimeHandle
from pykubelet.actors.sources.file import ManifestPath
from pykubelet.actors.sources.http import FetchFailed, ManifestURL, fetch
from pykubelet.actors.sync_loop import DesiredPods
from pykubelet.messages.duration import format_duration
from pykubelet.messages.pod import Pod
from pykubelet.pods.run_once import RUN_ONCE_MANIFEST_DELAY, Verdict, gave_up, judge, retry_delays
from pykubelet.supervisor import RestartIntensityExceeded

from .config import ConfigurationError
from .node import node_name

log = logging.getLogger("pykubelet.runonce")

# The events a pod worker records when a pod-level step of its sync fails: Go's SyncPod
# returns these as errors, and runonce fails the pod on them.
POD_SYNC_ERRORS = frozenset({events_reasons.FAILED_MOUNT_VOLUME, events_reasons.FAILED_CREATE_POD_SANDBOX})
SOURCES_POLL = 0.01  # how often the sync loop's desired set is looked at while it is not complete


class RunOnceFailed(Exception):
    """--runonce cannot run its pods (a source unreachable, no runtime); exit 1."""


def prepare(loaded) -> list[Pod]:
    """What main does first with --runonce, before anything starts: refuse what it cannot
    do (exit 2), read the manifests (a bad one: exit 2; an unreachable URL: exit 1)."""
    for warning in refuse_unsupported(loaded.flags, loaded.config, loaded.explicit):
        log.warning("%s", warning)
    try:
        return read_manifests(loaded.config, node_name(loaded.flags.hostname_override))
    except RunOnceFailed as error:
        print(f"pykubelet: --runonce: {error}", file=sys.stderr)
        raise SystemExit(1) from None


def refuse_unsupported(flags, config, explicit: frozenset[str]) -> list[str]:
    """ConfigurationError for what --runonce cannot do; the warnings for what it leaves out.

    Only the file and URL sources run once (Go: "exit after spawning pods from static pod
    files or remote urls"): --kubeconfig is refused, and one of the two is required."""
    if flags.kubeconfig is not None:
        raise ConfigurationError(
            f"--runonce runs the static pods of --pod-manifest-path and --manifest-url only; "
            f"--kubeconfig {flags.kubeconfig} cannot be used with it: drop one of the two"
        )
    if not config.static_pod_path and not config.static_pod_url:
        raise ConfigurationError("--runonce needs --pod-manifest-path or --manifest-url (staticPodPath, staticPodURL)")
    served = sorted(explicit & {"enableServer", "port", "readOnlyPort", "healthzPort", "address"})
    if served:
        return [f"--runonce serves no kubelet API and no healthz (as the Go kubelet): {', '.join(served)} not used"]
    return []


def read_manifests(config, node_name: str) -> list[Pod]:
    """The pods of the sources, read once before anything starts: a manifest the sources
    would refuse is a ConfigurationError (exit 2) naming it; an unreachable URL is
    RunOnceFailed (exit 1)."""
    pods: list[Pod] = []
    problems = []
    if config.static_pod_path:
        path = config.static_pod_path
        if not os.path.exists(path):
            raise ConfigurationError(f"--pod-manifest-path {path}: does not exist; create it or fix the path")
        manifests = ManifestPath(path, node_name=node_name)
        manifests.scan(full=True)
        found = manifests.source_pods()
        pods += found.pods
        problems += found.problems
    if config.static_pod_url:
        url = config.static_pod_url
        headers = [(name, value) for name, values in config.static_pod_url_header.items() for value in values]

        async def get():
            import httpx  # only --manifest-url needs it

            async with httpx.AsyncClient(headers=headers, follow_redirects=True) as client:
                return await fetch(client, url, timeout=10.0)

        fetched = trio.run(get)
        if isinstance(fetched, FetchFailed):
            raise RunOnceFailed(f"--manifest-url {url}: {fetched.reason}")
        found = ManifestURL(url, node_name=node_name).observe(fetched)
        pods += found.pods
        problems += found.problems
    if problems:
        raise ConfigurationError("\n".join(f"manifest {p.origin}: {p.message}" for p in problems))
    return pods


def runonce_settings(settings: DaemonSettings) -> DaemonSettings:
    """The tree of `pykubelet run` without its ports and without housekeeping: Go's runonce
    serves neither the kubelet API nor healthz (the admin socket stays, for
    pykubelet-inspect), and terminates no pod that its sources do not list (another
    kubelet's static pods, or those of an earlier run, stay as they are)."""
    return dataclasses.replace(
        settings, kubelet_api=None, healthz_port=0,
        sync=dataclasses.replace(settings.sync, terminate_unwanted=False),
    )


# --- waiting for the pods ------------------------------------------------------------


async def wait_for_pods(
    *,
    runtime: RuntimeHandle,
    desired: DesiredPods,
    statuses: PodStatuses,
    expected: Sequence[Pod] = (),
    events: EventRecorder | None = None,
    runtime_timeout: float = 120.0,
    manifest_delay: float = RUN_ONCE_MANIFEST_DELAY,
) -> list[tuple[str, Verdict]]:
    """Every pod of the sources' first complete set with its verdict, by pod name.

    The runtime must answer within runtime_timeout and the sources' complete set reach the
    sync loop within manifest_delay after that (Go's runOnceManifestDelay), or
    RunOnceFailed. Then every pod is looked at now and after each of retry_delays(); one
    that stays pending past the last is failed (Go's runPod)."""
    with trio.move_on_after(runtime_timeout) as waited:
        await runtime.wait_connected()
    if waited.cancelled_caught:
        raise RunOnceFailed(
            f"the container runtime at {runtime.endpoint} did not answer within {format_duration(runtime_timeout)}"
        )
    with trio.move_on_after(manifest_delay) as waited:
        while not desired.sources_ready:
            await trio.sleep(SOURCES_POLL)
    if waited.cancelled_caught:
        raise RunOnceFailed(f"no complete set of pods from the sources after {format_duration(manifest_delay)}")
    rejected = set(desired.rejected)
    uids = sorted(desired.uids | rejected)
    names = {pod.metadata.uid: pod.full_name for pod in expected}
    verdicts: dict[str, Verdict] = {}
    for pod in expected:
        if pod.metadata.uid not in desired.uids | rejected:
            # The sources changed between the first read and the tree's: the pod is gone.
            verdicts[pod.metadata.uid] = Verdict("Failed", "no longer listed by its source")
    log.info("waiting for %d pods", len(uids) - len(rejected))
    pending = set(uids)
    delays = retry_delays()
    while True:
        for uid in sorted(pending):
            pod = statuses.pod(uid)
            if pod is not None:
                names[uid] = pod.full_name
            verdict = judge(pod, rejected=uid in rejected, pod_errors=_pod_errors(events, uid))
            verdicts[uid] = verdict
            if verdict.done:
                pending.discard(uid)
                _log_verdict(names.get(uid, uid), verdict)
        if not pending:
            break
        delay = next(delays, None)
        if delay is None:
            for uid in pending:
                verdicts[uid] = gave_up(verdicts[uid])
                _log_verdict(names.get(uid, uid), verdicts[uid])
            break
        log.info("%d pods not there yet, looking again in %s", len(pending), format_duration(delay))
        await trio.sleep(delay)
    return sorted(((names.get(uid, uid), verdict) for uid, verdict in verdicts.items()), key=lambda item: item[0])


def _pod_errors(events: EventRecorder | None, uid: str) -> list[str]:
    """The pod's failed pod-level steps, from the events its worker recorded."""
    if events is None:
        return []
    return [f"{e.reason}: {e.message}" for e in events.events(involved_uid=uid)
            if e.type == "Warning" and e.reason in POD_SYNC_ERRORS]


def _log_verdict(name: str, verdict: Verdict) -> None:
    if verdict.reached_goal:
        log.info("started pod: %s", verdict.detail, extra={"pod": name})
    else:
        log.warning("failed to start pod: %s: %s", verdict.outcome, verdict.detail, extra={"pod": name})


def report(results: list[tuple[str, Verdict]], out: TextIO) -> int:
    """One line per pod, then the exit code: 0 if every pod reached its goal."""
    width = max((len(name) for name, _ in results), default=0)
    for name, verdict in results:
        print(f"{name:<{width}}  {verdict.outcome:<9}  {verdict.detail}", file=out)
    failed = [name for name, verdict in results if not verdict.reached_goal]
    if failed:
        print(f"pykubelet: --runonce: {len(failed)} of {len(results)} pods did not reach their goal: "
              f"{', '.join(failed)}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"pykubelet: --runonce: {len(results)} pods started", file=sys.stderr)
    return 0


# --- the run -------------------------------------------------------------------------


async def run_once(
    settings: DaemonSettings, containers: ContainerManager | None = None, *, expected: Sequence[Pod] = (),
    out: TextIO | None = None,
) -> int:
    """Run the tree until every pod is judged, then stop it (containers keep running)."""
    daemon = Daemon(settings, containers=containers)
    results: list[tuple[str, Verdict]] | None = None
    problem = ""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope)
            try:
                async with trio.open_nursery() as tree:
                    await tree.start(daemon.run)
                    try:
                        results = await wait_for_pods(
                            runtime=daemon.runtime, desired=daemon.desired, statuses=daemon.statuses,
                            expected=expected, events=daemon.events, runtime_timeout=settings.runtime.request_timeout,
                        )
                    except RunOnceFailed as error:
                        problem = str(error)
                    tree.cancel_scope.cancel()
            except* RestartIntensityExceeded as group:  # raised inside the tree's nursery
                problem = f"the root supervisor gave up: {group.exceptions[0]}"
            nursery.cancel_scope.cancel()
    if results is None:
        print(f"pykubelet: --runonce: {problem or 'interrupted before every pod was judged'}", file=sys.stderr)
        return 1
    log.info("stopped; containers keep running in the runtime")
    return report(results, out or sys.stdout)


async def _stop_on_signal(signals, stop: trio.CancelScope) -> None:
    async for signum in signals:
        log.info("received %s: stopping before every pod was judged", signal.Signals(signum).name)
        stop.cancel()
        return

