"""terminationMessagePath and terminationMessagePolicy end to end on containerd."""

from __future__ import annotations

import pytest

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
    def messages_in(pod: dict) -> bool:
        # The runtime may report an exit before the last log lines are written; a later
        # sync (at the latest the resync) reads the complete message.
        statuses = pod.get("status", {}).get("containerStatuses", [])
        done = [s for s in statuses if "terminated" in s.get("state", {})]
        return phase("Failed")(pod) and len(done) == 3 and all(s["state"]["terminated"].get("message") for s in done)

    pod = wait_for_pod(daemon, "messages", messages_in, "Failed with the three messages", timeout=100)
    assert container_status(pod, "file")["state"]["terminated"]["message"].strip() == "disk full"
    # stdout and stderr reach the log through two pipes: their lines may come in either order
    lines = container_status(pod, "logs")["state"]["terminated"]["message"].splitlines()
    assert sorted(lines) == ["boom: bad config", "starting"]
    assert container_status(pod, "custom")["state"]["terminated"]["message"].strip() == "done"
