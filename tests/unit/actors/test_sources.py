"""The file and http sources, wired under a real Supervisor and registry.

File source tests run on real files in a temp dir with trio's autojump clock (scans are
plain blocking calls, so virtual time stays exact). Http source tests talk to a real
HTTP server on 127.0.0.1 and therefore use the real clock with short periods.
"""

from __future__ import annotations

import http.server
import io
import json
import logging
import os
import threading
from pathlib import Path

import pytest
import trio

from pykubelet.actors.pod_config import pod_config_actor
from pykubelet.actors.sources import file_source_actor, http_source_actor
from pykubelet.actors.sources.file import read_bounded
from pykubelet.pods.manifest import MAX_MANIFEST_BYTES
from pykubelet.messages.pod_updates import (
    ManifestProblem,
    ManifestProblems,
    PodUpdate,
    SourcePods,
    SourcesReady,
)
from tests.support.actors import Inbox, running
from pykubelet.supervisor import ChildSpec, MailboxSpec

NODE = "node-1"


def manifest(name: str, image: str = "busybox:1.36") -> bytes:
    return (
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n"
        f"  containers:\n  - name: main\n    image: {image}\n"
    ).encode()




def names(update) -> list[str]:
    return [pod.metadata.name for pod in update.pods]


def ops(messages: list[object]) -> list[tuple[str, list[str]]]:
    return [(m.op, names(m)) for m in messages if isinstance(m, PodUpdate)]


def problems_in(messages: list[object]) -> list[list[tuple[str, str]]]:
    return [[(p.origin, p.message) for p in m.problems] for m in messages if isinstance(m, ManifestProblems)]


# --- the file source through pod config: what the sync loop sees ---------------------


def file_chain(path: Path, sync_loop: Inbox, **settings) -> list[ChildSpec]:
    settings.setdefault("check_frequency", 20.0)
    return [
        sync_loop.spec("sync-loop"),
        ChildSpec(
            "pod-config",
            pod_config_actor(sources=["file"]),
            mailbox=MailboxSpec(capacity=64, durable=True, accepts=(SourcePods,)),
        ),
        ChildSpec("file", file_source_actor(str(path), node_name=NODE, **settings)),
    ]


@pytest.fixture
def sync_loop() -> Inbox:
    return Inbox()


async def test_first_scan_adds_every_pod_then_sources_ready(autojump_clock, tmp_path, sync_loop):
    (tmp_path / "a.yaml").write_bytes(manifest("a"))
    (tmp_path / "b.json").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        messages = sync_loop.take()
        assert ops(messages) == [("ADD", ["a-node-1", "b-node-1"])]
        assert messages[1:] == [ManifestProblems(problems=[]), SourcesReady(sources=["file"])]


async def test_add_edit_delete_give_add_remove_and_add_remove(autojump_clock, tmp_path, sync_loop):
    (tmp_path / "a.yaml").write_bytes(manifest("a"))
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        [added] = [m for m in sync_loop.take() if isinstance(m, PodUpdate)]
        old_uid = added.pods[0].metadata.uid

        (tmp_path / "b.yaml").write_bytes(manifest("b"))
        await trio.sleep(1.1)
        assert ops(sync_loop.take()) == [("ADD", ["b-node-1"])]

        (tmp_path / "a.yaml").write_bytes(manifest("a", image="busybox:1.37-glibc"))
        await trio.sleep(1.1)
        removed, readded = sync_loop.take()
        assert (removed.op, [p.metadata.uid for p in removed.pods]) == ("REMOVE", [old_uid])
        assert readded.op == "ADD" and readded.pods[0].metadata.name == "a-node-1"
        assert readded.pods[0].metadata.uid != old_uid  # new content, new UID

        (tmp_path / "b.yaml").unlink()
        await trio.sleep(1.1)
        assert ops(sync_loop.take()) == [("REMOVE", ["b-node-1"])]

        await trio.sleep(30)  # full re-reads of unchanged files tell the sync loop nothing
        assert sync_loop.take() == []


async def test_a_change_is_seen_within_one_scan_interval(autojump_clock, tmp_path, sync_loop):
    async with running(*file_chain(tmp_path, sync_loop, scan_interval=0.5)):
        await trio.sleep(3.3)
        sync_loop.take()
        written_at = trio.current_time()
        (tmp_path / "a.yaml").write_bytes(manifest("a"))
        await trio.sleep(1.0)
        assert ops(sync_loop.messages) == [("ADD", ["a-node-1"])]
        assert sync_loop.times[0] - written_at <= 0.5


async def test_bad_file_is_a_problem_and_others_are_unaffected_until_fixed(autojump_clock, tmp_path, sync_loop):
    (tmp_path / "a.yaml").write_bytes(manifest("a"))
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        sync_loop.take()

        bad = tmp_path / "b.yaml"
        bad.write_bytes(manifest("b", image="Bad Image"))
        await trio.sleep(1.1)
        messages = sync_loop.take()
        assert ops(messages) == []  # a.yaml's pod is untouched
        assert problems_in(messages) == [
            [(str(bad), 'spec.containers[0].image: invalid reference format "Bad Image"')]
        ]

        bad.write_bytes(manifest("b"))
        await trio.sleep(1.1)
        messages = sync_loop.take()
        assert ops(messages) == [("ADD", ["b-node-1"])]
        assert problems_in(messages) == [[]]


async def test_a_problem_is_logged_once_not_at_every_scan(autojump_clock, tmp_path, sync_loop, caplog):
    (tmp_path / "bad.yaml").write_bytes(b"kind: Deployment\n")
    with caplog.at_level(logging.WARNING, logger="pykubelet.sources.file"):
        async with running(*file_chain(tmp_path, sync_loop)):
            await trio.sleep(45)  # 45 scans, 3 full re-reads
    warnings = [r.getMessage() for r in caplog.records if r.name == "pykubelet.sources.file"]
    assert warnings == [
        f'manifest {tmp_path / "bad.yaml"}: kind "Deployment" is not a Pod (a static pod manifest holds one Pod)'
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway; the dangling symlink test covers unreadable files")
async def test_unreadable_file_is_a_problem(autojump_clock, tmp_path, sync_loop):
    locked = tmp_path / "a.yaml"
    locked.write_bytes(manifest("a"))
    locked.chmod(0)
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        assert problems_in(sync_loop.take()) == [[(str(locked), "cannot read: Permission denied")]]
        locked.chmod(0o644)  # changes only ctime: still noticed by the next scan
        await trio.sleep(1.1)
        assert ops(sync_loop.take()) == [("ADD", ["a-node-1"])]


async def test_dangling_symlink_is_a_problem_until_its_target_appears(autojump_clock, tmp_path, sync_loop):
    target = tmp_path / "elsewhere.yaml.orig"
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "a.yaml").symlink_to(target)
    (manifests / "b.yaml").write_bytes(manifest("b"))
    async with running(*file_chain(manifests, sync_loop)):
        await trio.sleep(0.5)
        messages = sync_loop.take()
        assert ops(messages) == [("ADD", ["b-node-1"])]
        assert problems_in(messages) == [
            [(str(manifests / "a.yaml"), "cannot read: No such file or directory (a dangling symlink?)")]
        ]
        target.write_bytes(manifest("a"))
        await trio.sleep(1.1)
        messages = sync_loop.take()
        assert ops(messages) == [("ADD", ["a-node-1"])] and problems_in(messages) == [[]]


async def test_over_one_mib_file_is_refused_without_reading_it(autojump_clock, tmp_path, sync_loop):
    big = tmp_path / "big.yaml"
    big.write_bytes(manifest("big") + b"#" * (1300 * 1024))
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        assert problems_in(sync_loop.take()) == [[(str(big), "1.3 MiB is over the 1 MiB limit of a manifest")]]


async def test_hidden_files_and_sub_directories_are_ignored(autojump_clock, tmp_path, sync_loop):
    (tmp_path / ".a.yaml.swp").write_bytes(b"garbage")
    (tmp_path / "..data").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_bytes(manifest("c"))
    (tmp_path / "a.yaml").write_bytes(manifest("a"))
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        messages = sync_loop.take()
        assert ops(messages) == [("ADD", ["a-node-1"])] and problems_in(messages) == [[]]


async def test_two_files_with_one_pod_name_keep_the_first_by_file_name(autojump_clock, tmp_path, sync_loop):
    (tmp_path / "a.yaml").write_bytes(manifest("web"))
    (tmp_path / "b.yaml").write_bytes(manifest("web", image="busybox:1.37"))
    async with running(*file_chain(tmp_path, sync_loop)):
        await trio.sleep(0.5)
        messages = sync_loop.take()
        [added] = [m for m in messages if isinstance(m, PodUpdate)]
        assert added.pods[0].spec.containers[0].image == "busybox:1.36"
        assert problems_in(messages) == [[(
            str(tmp_path / "b.yaml"),
            f'pod "default/web-node-1" is already defined by {tmp_path / "a.yaml"}; this one is ignored',
        )]]
        (tmp_path / "a.yaml").unlink()  # now b.yaml's pod is the one
        await trio.sleep(1.1)
        messages = sync_loop.take()
        removed, added = [m for m in messages if isinstance(m, PodUpdate)]
        assert removed.op == "REMOVE" and added.op == "ADD"
        assert added.pods[0].spec.containers[0].image == "busybox:1.37"
        assert problems_in(messages) == [[]]


async def test_missing_directory_is_an_empty_ready_source_until_it_appears(autojump_clock, tmp_path, sync_loop, caplog):
    manifests = tmp_path / "manifests"
    with caplog.at_level(logging.INFO, logger="pykubelet.sources.file"):
        async with running(*file_chain(manifests, sync_loop)):
            await trio.sleep(5)
            assert sync_loop.take() == [ManifestProblems(problems=[]), SourcesReady(sources=["file"])]
            manifests.mkdir()
            (manifests / "a.yaml").write_bytes(manifest("a"))
            await trio.sleep(1.1)
            assert ops(sync_loop.take()) == [("ADD", ["a-node-1"])]
    missing = [r for r in caplog.records if "does not exist" in r.getMessage()]
    assert len(missing) == 1  # logged once, not at every scan


async def test_a_single_manifest_file_as_the_path(autojump_clock, tmp_path, sync_loop):
    path = tmp_path / "web.yaml"
    path.write_bytes(manifest("web"))
    async with running(*file_chain(path, sync_loop)):
        await trio.sleep(0.5)
        assert ops(sync_loop.take()) == [("ADD", ["web-node-1"])]
        path.unlink()
        await trio.sleep(1.1)
        assert ops(sync_loop.take()) == [("REMOVE", ["web-node-1"])]


# --- the file source's own messages ---------------------------------------------------


async def test_full_set_is_sent_after_every_full_re_read_and_on_change_only_between(autojump_clock, tmp_path):
    pod_config = Inbox()
    (tmp_path / "a.yaml").write_bytes(manifest("a"))
    source = file_source_actor(str(tmp_path), node_name=NODE, check_frequency=20.0, send_to="root/pod-config")
    async with running(pod_config.spec("pod-config"), ChildSpec("file", source)):
        await trio.sleep(19)
        assert len(pod_config.take()) == 1  # the first set; 18 quiet scans sent nothing
        await trio.sleep(2)
        [again] = pod_config.take()  # the full re-read at t=20 sends the set again
        assert again.source == "file" and names(again) == ["a-node-1"] and again.problems == []
        os.utime(tmp_path / "a.yaml")  # touched, same bytes: nothing to say
        await trio.sleep(1.1)
        assert pod_config.take() == []


async def test_a_problem_carries_the_source_and_path(autojump_clock, tmp_path):
    pod_config = Inbox()
    (tmp_path / "x.yaml").write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: []}\n")
    source = file_source_actor(str(tmp_path), node_name=NODE, check_frequency=20.0)
    async with running(pod_config.spec("pod-config"), ChildSpec("file", source)):
        await trio.sleep(0.5)
        [update] = pod_config.take()
        assert update == SourcePods(
            source="file",
            pods=[],
            problems=[ManifestProblem(source="file", origin=str(tmp_path / "x.yaml"), message="metadata.name: required")],
        )


# --- the http source against a real server on 127.0.0.1 -------------------------------


class ManifestServer:
    """An HTTP server on 127.0.0.1 in a thread; tests set what it answers."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b""
        self.hang = False
        self.headers: list[list[tuple[str, str]]] = []
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                server.headers.append(list(self.headers.items()))
                if server.hang:
                    server.release.wait(10)
                    return
                self.send_response(server.status)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/pods"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> ManifestServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with ManifestServer() as running_server:
        yield running_server


POD_JSON = json.dumps({
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "web", "image": "busybox:1.36"}]},
}).encode()
POD_LIST_YAML = b"""\
apiVersion: v1
kind: PodList
items:
- metadata: {name: a}
  spec: {containers: [{name: a, image: busybox}]}
- metadata: {name: b}
  spec: {containers: [{name: b, image: busybox}]}
"""


def http_source(url: str, *, headers=None, timeout: float = 2.0) -> ChildSpec:
    actor = http_source_actor(url, headers or {}, node_name=NODE, check_frequency=0.05, timeout=timeout)
    return ChildSpec("http", actor)


async def wait_for(inbox: Inbox, count: int, *, within: float = 5.0) -> list[SourcePods]:
    with trio.fail_after(within):
        while len(inbox.messages) < count:
            await trio.sleep(0.01)
    return list(inbox.messages)


def reasons(update: SourcePods) -> list[str]:
    return [p.message for p in update.problems]


async def test_http_pod_and_then_pod_list(server):
    pod_config = Inbox()
    server.body = POD_JSON
    async with running(pod_config.spec("pod-config"), http_source(server.url)):
        [first] = await wait_for(pod_config, 1)
        assert first.source == "http" and names(first) == ["web-node-1"] and first.problems == []
        assert first.pods[0].metadata.annotations["kubernetes.io/config.source"] == "http"
        server.body = POD_LIST_YAML
        _, second = await wait_for(pod_config, 2)
        assert names(second) == ["a-node-1", "b-node-1"] and second.problems == []


async def test_http_unchanged_body_is_sent_once(server):
    pod_config = Inbox()
    server.body = POD_JSON
    async with running(pod_config.spec("pod-config"), http_source(server.url)):
        await wait_for(pod_config, 1)
        await trio.sleep(0.5)  # about ten more polls
        assert len(server.headers) > 5 and len(pod_config.messages) == 1


async def test_http_first_poll_failing_still_sends_an_empty_set(server):
    pod_config = Inbox()
    server.status, server.body = 500, b"oops"
    async with running(pod_config.spec("pod-config"), http_source(server.url)):
        [first] = await wait_for(pod_config, 1)
        assert first.pods == [] and first.problems == [
            ManifestProblem(source="http", origin=server.url, message="GET answered 500 Internal Server Error")
        ]
        server.status, server.body = 200, POD_JSON
        _, fixed = await wait_for(pod_config, 2)
        assert names(fixed) == ["web-node-1"] and fixed.problems == []


async def test_http_errors_keep_the_last_good_set(server):
    pod_config = Inbox()
    server.body = POD_JSON
    async with running(pod_config.spec("pod-config"), http_source(server.url, timeout=0.3)):
        await wait_for(pod_config, 1)

        server.status = 503
        update = (await wait_for(pod_config, 2))[-1]
        assert names(update) == ["web-node-1"] and reasons(update) == ["GET answered 503 Service Unavailable"]

        server.status, server.body = 200, b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: Web, image: busybox}]}\n"
        update = (await wait_for(pod_config, 3))[-1]
        assert names(update) == ["web-node-1"]
        assert reasons(update) == [
            'spec.containers[0].name: "Web" is not a DNS-1123 label (lowercase letters, digits and "-", '
            "starting and ending alphanumeric)"
        ]

        server.hang = True
        update = (await wait_for(pod_config, 4))[-1]
        assert names(update) == ["web-node-1"] and reasons(update) == ["GET timed out after 0.3s"]

        server.hang, server.body = False, POD_JSON
        update = (await wait_for(pod_config, 5))[-1]
        assert names(update) == ["web-node-1"] and update.problems == []


async def test_http_empty_body_is_an_empty_set_with_a_problem(server):
    pod_config = Inbox()
    server.body = POD_JSON
    async with running(pod_config.spec("pod-config"), http_source(server.url)):
        await wait_for(pod_config, 1)
        server.body = b""
        update = (await wait_for(pod_config, 2))[-1]
        assert update.pods == [] and reasons(update) == ["empty response body (no pods)"]


async def test_http_body_over_the_limit(server):
    pod_config = Inbox()
    server.body = b" " * (1300 * 1024)
    async with running(pod_config.spec("pod-config"), http_source(server.url)):
        [update] = await wait_for(pod_config, 1)
        assert reasons(update) == ["1.3 MiB is over the 1 MiB limit of a manifest"]


async def test_http_connection_refused():
    with ManifestServer() as closed:
        url = closed.url  # the port is free again once the server is gone
    pod_config = Inbox()
    async with running(pod_config.spec("pod-config"), http_source(url)):
        [update] = await wait_for(pod_config, 1)
        assert update.pods == [] and update.problems[0].origin == url
        assert reasons(update)[0].startswith("GET failed: cannot connect")


async def test_http_sends_the_manifest_url_headers(server):
    pod_config = Inbox()
    server.body = POD_JSON
    headers = {"X-Token": ["a", "b"], "Authorization": ["Bearer t"]}
    async with running(pod_config.spec("pod-config"), http_source(server.url, headers=headers)):
        await wait_for(pod_config, 1)
    sent = server.headers[0]
    assert ("X-Token", "a") in sent and ("X-Token", "b") in sent and ("Authorization", "Bearer t") in sent


class _RecordingFile(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int] = []

    def read(self, size: int = -1) -> bytes:
        self.asked.append(size)
        return super().read(size)


def test_a_manifest_is_read_with_a_buffer_of_its_size_not_of_the_limit():
    manifest = _RecordingFile(b"kind: Pod\n")
    assert read_bounded(manifest, 10, MAX_MANIFEST_BYTES + 1) == b"kind: Pod\n"
    assert manifest.asked == [11]  # one byte more than stat said: EOF proves the file did not grow


def test_a_manifest_that_grew_since_its_stat_is_read_on_up_to_the_limit():
    assert read_bounded(_RecordingFile(b"x" * 50), 10, 31) == b"x" * 31
    assert read_bounded(_RecordingFile(b"x" * 20), 10, 31) == b"x" * 20
    assert read_bounded(_RecordingFile(b"x" * 50), 100, 31) == b"x" * 31  # a stat past the limit
