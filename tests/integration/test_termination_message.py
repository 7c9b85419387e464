"""terminationMessagePath and terminationMessagePolicy end to end on containerd."""

from __future__ import annotations

import pytest

from tests.integration.test_static_pods import manifests, start_daemon  # noqa: F401 (fixtures)
from tests.support.pods import container, container_status, phase, pod_manifest, wait_for_pod, write_manifest


@pytest.mark.containerd
def test_message_file_and_log_fallback_become_the_terminated_message(containerd, manifests, start_daemon):
    daemon = start_daemon(containerd.endpoint)
    writes_file = container("file", ["sh", "-c", "echo 'disk full' > /dev/termination-log; exit 1"])
    falls_back = container(
        "logs", ["sh", "-c", "echo starting; echo 'boom: bad config' >&2; exit 2"],
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    custom_path = container(
        "custom", ["sh", "-c", "echo done > /tmp/msg; exit 0"], terminationMessagePath="/tmp/msg"
    )
    write_manifest(manifests, pod_manifest("messages", [writes_file, falls_back, custom_path], restartPolicy="Never"))
    pod = wait_for_pod(daemon, "messages", phase("Failed"), "Failed")
    assert container_status(pod, "file")["state"]["terminated"]["message"].strip() == "disk full"
    assert container_status(pod, "logs")["state"]["terminated"]["message"].splitlines() == ["starting", "boom: bad config"]
    assert container_status(pod, "custom")["state"]["terminated"]["message"].strip() == "done"
