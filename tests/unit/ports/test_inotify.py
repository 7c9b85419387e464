"""inotify wakes the file source at once; the stat scan is only the safety net."""

from __future__ import annotations

import json

import trio

from pykubelet.actors.sources import file_source_actor
from pykubelet.messages.pod_updates import SourcePods
from pykubelet.ports.inotify import DirectoryWatch
from pykubelet.supervisor import ChildSpec
from tests.support.actors import Inbox, running


async def test_a_rename_into_the_directory_wakes_the_watch(tmp_path):
    watch = DirectoryWatch(str(tmp_path))
    try:
        with trio.fail_after(2):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch.changed)
                (tmp_path / "x.tmp").write_text("{}")
                (tmp_path / "x.tmp").rename(tmp_path / "x.json")
    finally:
        watch.close()


async def test_file_source_sees_a_new_manifest_long_before_its_scan_interval(tmp_path):
    inbox = Inbox()
    source = file_source_actor(str(tmp_path), node_name="n", check_frequency=3600, scan_interval=3600)
    async with running(inbox.spec("pod-config"), ChildSpec("file", source)):
        with trio.fail_after(2):
            while not inbox.messages:
                await trio.sleep(0.01)
        inbox.take()
        manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
        (tmp_path / "web.json").write_text(json.dumps(manifest))
        with trio.fail_after(2):  # the scan interval is an hour: only inotify can do this
            while not any(isinstance(m, SourcePods) and m.pods for m in inbox.messages):
                await trio.sleep(0.01)
