"""Pod config: the diff of a source's full sets, SourcesReady, problems, and restarts."""

from __future__ import annotations

import re

import msgspec
import pytest
import trio

from pykubelet.actors.pod_config import PodConfig, merge_source_set, pod_config_actor, seen_timestamp
from pykubelet.actors.sources import file_source_actor
from pykubelet.messages.pod import Pod, PodStatus
from pykubelet.messages.pod_updates import (
    ManifestProblem,
    ManifestProblems,
    PodUpdate,
    SourcePods,
    SourcesReady,
)
from pykubelet.pods.manifest import CONFIG_SEEN, CONFIG_SOURCE, decode_manifests
from tests.support.actors import Inbox, running
from pykubelet.supervisor import ChildSpec, MailboxSpec

T0 = "2024-05-01T10:00:00.000000000Z"
T1 = "2024-05-01T10:00:20.000000000Z"


def static_pod(name: str = "web", image: str = "busybox:1.36", *, uid: str = "", labels: str = "{}") -> Pod:
    data = (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {labels}"
        + (f", uid: {uid}" if uid else "")
        + f"}}\nspec: {{containers: [{{name: main, image: '{image}'}}]}}\n"
    ).encode()
    [pod] = decode_manifests(data, origin=f"/m/{name}.yaml", source="file", node_name="node-1")
    return pod


def with_annotations(pod: Pod, **extra: str) -> Pod:
    annotations = {**pod.metadata.annotations, **extra}
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations))


def with_status(pod: Pod, phase: str) -> Pod:
    return msgspec.structs.replace(pod, status=PodStatus(phase=phase))


def stamped(pod: Pod, seen: str = T0) -> Pod:
    return with_annotations(pod, **{CONFIG_SOURCE: "file", CONFIG_SEEN: seen})


WEB = static_pod("web", uid="u-web")
DB = static_pod("db", uid="u-db")


# --- the pure diff -------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, incoming, expected",
    [
        pytest.param([], [WEB], {"added": [stamped(WEB, T1)]}, id="new uid is an ADD stamped seen now"),
        pytest.param([stamped(WEB)], [WEB], {}, id="same pod again is nothing"),
        pytest.param(
            [stamped(WEB)], [with_annotations(WEB, **{CONFIG_SEEN: "other"})], {},
            id="config.seen alone is not a change",
        ),
        pytest.param(
            [stamped(WEB)], [static_pod("web", uid="u-web", labels="{tier: web}")],
            {"updated": [stamped(static_pod("web", uid="u-web", labels="{tier: web}"), T0)]},
            id="labels changed under one uid is an UPDATE keeping the first seen",
        ),
        pytest.param(
            [stamped(WEB)], [static_pod("web", image="busybox:1.37", uid="u-web")],
            {"updated": [stamped(static_pod("web", image="busybox:1.37", uid="u-web"), T0)]},
            id="spec changed under one uid is an UPDATE",
        ),
        pytest.param(
            [stamped(WEB)], [with_annotations(WEB, note="x")],
            {"updated": [stamped(with_annotations(WEB, note="x"), T0)]},
            id="an annotation of the manifest is an UPDATE",
        ),
        pytest.param(
            [stamped(WEB)], [with_status(WEB, "Running")],
            {"reconciled": [with_status(stamped(WEB), "Running")]},
            id="status alone is a RECONCILE",
        ),
        pytest.param([stamped(WEB), stamped(DB)], [DB], {"removed": [stamped(WEB)]}, id="gone uid is a REMOVE"),
    ],
)
def test_merge_source_set(old, incoming, expected):
    before = {pod.metadata.uid: pod for pod in old}
    pods, changes = merge_source_set("file", before, incoming, seen=T1)
    for kind in ("added", "updated", "reconciled", "removed"):
        assert getattr(changes, kind) == expected.get(kind, []), kind
    assert set(pods) == {pod.metadata.uid for pod in incoming}


def test_content_change_of_a_static_pod_is_remove_then_add():
    old = static_pod("web")
    new = static_pod("web", image="busybox:1.37")
    pods, changes = merge_source_set("file", {old.metadata.uid: stamped(old)}, [new], seen=T1)
    assert [p.metadata.uid for p in changes.removed] == [old.metadata.uid]
    assert [p.metadata.uid for p in changes.added] == [new.metadata.uid]
    assert list(pods) == [new.metadata.uid]


def test_seen_timestamp_is_rfc3339_with_nanoseconds():
    assert seen_timestamp(1_714_557_600_123_456_789) == "2024-05-01T10:00:00.123456789Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", seen_timestamp())


# --- the state machine: ops order, SourcesReady, problems ----------------------------


def problem(source: str, origin: str) -> ManifestProblem:
    return ManifestProblem(source=source, origin=origin, message="bad")


def test_sources_ready_once_every_source_has_sent_a_set():
    config = PodConfig(["file", "http"])
    assert config.start() == []
    assert config.merge(SourcePods(source="file", pods=[WEB]), seen=T0) == [
        PodUpdate(op="ADD", source="file", pods=[stamped(WEB)]),
        ManifestProblems(problems=[]),  # a new incarnation always says what it knows
    ]
    assert config.merge(SourcePods(source="http", pods=[]), seen=T0) == [SourcesReady(sources=["file", "http"])]
    assert config.merge(SourcePods(source="http", pods=[]), seen=T0) == []  # only once


def test_no_source_configured_is_ready_at_once():
    assert PodConfig([]).start() == [SourcesReady(sources=[])]


def test_ops_come_remove_add_update_reconcile():
    config = PodConfig(["file"])
    config.merge(SourcePods(source="file", pods=[WEB, DB]), seen=T0)
    relabelled = static_pod("web", uid="u-web", labels="{tier: web}")
    new = static_pod("cache")
    out = config.merge(SourcePods(source="file", pods=[relabelled, new]), seen=T1)
    assert [(m.op, [p.metadata.name for p in m.pods]) for m in out] == [
        ("REMOVE", ["db-node-1"]),
        ("ADD", ["cache-node-1"]),
        ("UPDATE", ["web-node-1"]),
    ]


def test_problems_are_the_union_of_sources_sent_when_they_change():
    config = PodConfig(["file", "http"])
    a, b = problem("file", "/m/a.yaml"), problem("http", "http://127.0.0.1/pods")
    assert config.merge(SourcePods(source="http", pods=[], problems=[b]), seen=T0) == [ManifestProblems(problems=[b])]
    assert config.merge(SourcePods(source="file", pods=[], problems=[a]), seen=T0) == [
        ManifestProblems(problems=[a, b]),  # in the configured order of sources
        SourcesReady(sources=["file", "http"]),
    ]
    assert config.merge(SourcePods(source="file", pods=[], problems=[a]), seen=T0) == []
    assert config.merge(SourcePods(source="http", pods=[]), seen=T0) == [ManifestProblems(problems=[a])]


@pytest.mark.parametrize(
    "other", [static_pod("web", image="busybox:1.37", uid="u-other"), static_pod("db", uid="u-web")],
    ids=["same name", "same uid"],
)
def test_two_pods_with_one_name_or_uid_in_a_set_keep_the_first(other):
    pods, changes = merge_source_set("file", {}, [WEB, other], seen=T0)
    assert list(pods) == ["u-web"] and changes.added == [stamped(WEB)]


# --- the actor -----------------------------------------------------------------------




def pod_config_spec(sources: list[str]) -> ChildSpec:
    return ChildSpec(
        "pod-config",
        pod_config_actor(sources=sources, clock=lambda: T0),
        mailbox=MailboxSpec(capacity=64, durable=True, accepts=(SourcePods,)),
    )


async def test_actor_turns_source_sets_into_updates(autojump_clock):
    sync_loop = Inbox()
    async with running(ChildSpec("sync-loop", sync_loop.run, mailbox=MailboxSpec()), pod_config_spec(["file"])) as tree:
        mailbox = tree.registry.lookup("root/pod-config")
        await mailbox.send(SourcePods(source="file", pods=[WEB]))
        await mailbox.send(SourcePods(source="file", pods=[DB]))
        await trio.sleep(0.1)
        assert sync_loop.take() == [
            PodUpdate(op="ADD", source="file", pods=[stamped(WEB)]),
            ManifestProblems(problems=[]),
            SourcesReady(sources=["file"]),
            PodUpdate(op="REMOVE", source="file", pods=[stamped(WEB)]),
            PodUpdate(op="ADD", source="file", pods=[stamped(DB)]),
        ]


async def test_restarted_pod_config_re_adds_what_the_restarted_sources_resend(autojump_clock, tmp_path):
    """root: sync-loop, pod-config, file (rest_for_one): a crash of pod config restarts
    the file source too, whose first set makes the new incarnation ADD every pod again and
    say SourcesReady again."""
    (tmp_path / "web.yaml").write_bytes(
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: main, image: busybox}]}\n"
    )
    sync_loop = Inbox()
    source = file_source_actor(str(tmp_path), node_name="node-1", check_frequency=20.0)
    async with running(
        ChildSpec("sync-loop", sync_loop.run, mailbox=MailboxSpec(durable=True)),
        pod_config_spec(["file"]),
        ChildSpec("file", source),
    ) as tree:
        await trio.sleep(0.5)
        first = sync_loop.take()
        assert [type(m).__name__ for m in first] == ["PodUpdate", "ManifestProblems", "SourcesReady"]

        await tree.crash_child("pod-config")
        await trio.sleep(0.5)
        again = sync_loop.take()
        assert again == first  # the same ADD (same UID), the problems, a new SourcesReady
        snapshot = {child.name: child.restarts for child in tree.snapshot().children}
        assert snapshot == {"sync-loop": 0, "pod-config": 1, "file": 1}
