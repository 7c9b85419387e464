"""Pod config: merges the sources' full sets (SourcePods) into incremental PodUpdates for
the sync loop, as the Go kubelet's podStorage does in its incremental mode.

It keeps each source's last set by UID and tells the sync loop what changed (REMOVE, ADD,
UPDATE, RECONCILE, in that order), SourcesReady once every configured source has sent a
set, and the union of the sources' problems (ManifestProblems) whenever it changes.

A new incarnation starts empty: the sources re-send their full sets (under rest_for_one,
pod config is started before them, so its restart restarts them), which gives the sync
loop an ADD for every pod, then a new SourcesReady and the current problems.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import msgspec

from pykubelet.messages.pod import Pod
from pykubelet.messages.pod_updates import (
    ManifestProblem,
    ManifestProblems,
    PodUpdate,
    SourcePods,
    SourcesReady,
    SyncLoopMessage,
)
from pykubelet.pods.manifest import CONFIG_SEEN, CONFIG_SOURCE, LOCAL_ANNOTATIONS
from pykubelet.supervisor import ActorContext
from pykubelet.supervisor.verbosity import V

log = logging.getLogger("pykubelet.pod_config")


def seen_timestamp(now_ns: int | None = None) -> str:
    """Go's kubetypes.Timestamp string: RFC 3339 with nine fractional digits (UTC here)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    seconds, nanos = divmod(now_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


# --- the decision: one source's new set against its last one ------------------------


@dataclass
class SourceChanges:
    removed: list[Pod] = field(default_factory=list)
    added: list[Pod] = field(default_factory=list)
    updated: list[Pod] = field(default_factory=list)
    reconciled: list[Pod] = field(default_factory=list)


def _without_local(annotations: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k not in LOCAL_ANNOTATIONS}


def differ_semantically(existing: Pod, new: Pod) -> bool:
    """Go's podsDifferSemantically: spec, labels, deletion fields or annotations other
    than the kubelet's own (config.source, config.mirror, config.seen)."""
    a, b = existing.metadata, new.metadata
    return (
        existing.spec != new.spec
        or a.labels != b.labels
        or a.deletion_timestamp != b.deletion_timestamp
        or a.deletion_grace_period_seconds != b.deletion_grace_period_seconds
        or _without_local(a.annotations) != _without_local(b.annotations)
    )


def _with_annotations(pod: Pod, annotations: dict[str, str]) -> Pod:
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations))


def merge_source_set(
    source: str, old: dict[str, Pod], incoming: list[Pod], *, seen: str
) -> tuple[dict[str, Pod], SourceChanges]:
    """The source's new pods by UID, and what changed against `old`.

    A new UID is an ADD (stamped config.seen = seen); a known UID whose pod differs
    semantically is an UPDATE (keeping its first config.seen); one whose status alone
    changed is a RECONCILE; a UID no longer there is a REMOVE. Of two pods with the same
    namespace/name (or UID), the first wins.
    """
    pods: dict[str, Pod] = {}
    changes = SourceChanges()
    names: set[str] = set()
    for pod in incoming:
        uid = pod.metadata.uid
        if pod.full_name in names or uid in pods:
            log.warning("ignoring a second pod named %s or with UID %s", pod.full_name, uid, extra={"source": source})
            continue
        names.add(pod.full_name)
        pod = _with_annotations(pod, {**pod.metadata.annotations, CONFIG_SOURCE: source})
        existing = old.get(uid)
        if existing is None:
            pod = _with_annotations(pod, {**pod.metadata.annotations, CONFIG_SEEN: seen})
            changes.added.append(pod)
        elif differ_semantically(existing, pod):
            local = {k: v for k, v in existing.metadata.annotations.items() if k in LOCAL_ANNOTATIONS}
            pod = _with_annotations(pod, {**pod.metadata.annotations, **local})
            changes.updated.append(pod)
        elif existing.status != pod.status:
            pod = msgspec.structs.replace(existing, status=pod.status)
            changes.reconciled.append(pod)
        else:
            pod = existing
        pods[uid] = pod
    changes.removed = [pod for uid, pod in old.items() if uid not in pods]
    return pods, changes


# --- the state of one incarnation ---------------------------------------------------


class PodConfig:
    """Every source's pods and problems, and what the sync loop has been told."""

    def __init__(self, sources: list[str]) -> None:
        self.sources = list(sources)
        self._pods: dict[str, dict[str, Pod]] = {}
        self._problems: dict[str, list[ManifestProblem]] = {}
        self._sent_problems: list[ManifestProblem] | None = None  # unknown to a new incarnation
        self._ready = False

    def start(self) -> list[SyncLoopMessage]:
        """What to tell the sync loop before any set arrives: with no source configured,
        every source has been seen already."""
        return self._check_ready()

    def _check_ready(self) -> list[SyncLoopMessage]:
        if self._ready or not all(source in self._pods for source in self.sources):
            return []
        self._ready = True
        return [SourcesReady(sources=list(self.sources))]

    def merge(self, update: SourcePods, *, seen: str) -> list[SyncLoopMessage]:
        """What to tell the sync loop about this source's new full set."""
        if update.source not in self.sources:
            log.warning("pods from a source that is not configured: %s", update.source)
        pods, changes = merge_source_set(update.source, self._pods.get(update.source, {}), update.pods, seen=seen)
        self._pods[update.source] = pods
        self._problems[update.source] = list(update.problems)
        out: list[SyncLoopMessage] = [
            PodUpdate(op=op, source=update.source, pods=group)
            for op, group in (
                ("REMOVE", changes.removed),
                ("ADD", changes.added),
                ("UPDATE", changes.updated),
                ("RECONCILE", changes.reconciled),
            )
            if group
        ]
        problems = [p for source in self._source_order() for p in self._problems[source]]
        if problems != self._sent_problems:
            out.append(ManifestProblems(problems=problems))
            self._sent_problems = problems
        return out + self._check_ready()

    def _source_order(self) -> list[str]:
        return [s for s in self.sources if s in self._problems] + sorted(
            s for s in self._problems if s not in self.sources
        )


def pod_config_actor(
    *, sources: list[str], send_to: str = "root/sync-loop", clock: Callable[[], str] = seen_timestamp
):
    """The actor function of pod config. Its mailbox (durable) accepts SourcePods; the
    mailbox at send_to (the sync loop) must exist before it starts. clock gives the
    config.seen stamp of a new pod."""

    async def run(ctx: ActorContext) -> None:
        assert ctx.mailbox is not None, "pod config needs a mailbox (ChildSpec.mailbox)"
        sync_loop = ctx.registry.lookup(send_to)
        config = PodConfig(sources)
        for out in config.start():
            await sync_loop.send(out)
        async for message in ctx.mailbox:
            for out in config.merge(message, seen=clock()):
                if isinstance(out, PodUpdate):
                    log.log(
                        V(2),
                        "%s %d pods from %s: %s",
                        out.op,
                        len(out.pods),
                        out.source,
                        ", ".join(p.full_name for p in out.pods),
                        extra={"source": out.source},
                    )
                elif isinstance(out, SourcesReady):
                    log.info("all sources ready: %s", ", ".join(out.sources))
                await sync_loop.send(out)

    return run
