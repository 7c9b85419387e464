"""The kubelet API on --port, against a daemon in cluster mode on a private containerd with
the v1beta1 defaults: TLS with a self-signed serving certificate, bearer tokens checked by
TokenReview, every request authorized by a SubjectAccessReview (the test API server's
grants). Logs (tail, follow, previous), exec through the upgrade proxy, the read paths,
and the 401/403 answers."""

from __future__ import annotations

import os
import socket
import ssl
from urllib.parse import quote

import httpx
import pytest
import trio

from tests.support.containerd import BUSYBOX_IMAGE
from tests.support.pods import container, phase, pod_manifest, wait_for_pod, write_manifest
from tests.support.websocket import exit_code, websocket

NS = "/api/v1/namespaces/default"
STDOUT, STATUS = 1, 3
# Prints numbered lines, a line every 0.1 s after the first ten; exits at once on SIGTERM.
CHATTY = ["sh", "-c", "trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo line $i; "
          "if [ $i -gt 10 ]; then sleep 0.1; fi; done"]


def kubelet(daemon, token: str | None = None) -> httpx.Client:
    """A client of the daemon's kubelet API that trusts its self-signed certificate."""
    context = ssl.create_default_context(cafile=str(daemon.root_dir / "pki" / "kubelet.crt"))
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"https://127.0.0.1:{daemon.port}", verify=context, headers=headers, timeout=20)


def running(apiserver, name: str) -> bool:
    answer = apiserver.admin.get(f"{NS}/pods/{name}")
    return answer.status_code == 200 and answer.json().get("status", {}).get("phase") == "Running"


@pytest.mark.containerd
def test_the_kubelet_api_authenticates_authorizes_and_serves_logs_and_exec(node_daemon, apiserver):
    daemon = node_daemon
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "chatty", "namespace": "default"},
           "spec": {"nodeName": "node1", "terminationGracePeriodSeconds": 2, "hostNetwork": True,
                    "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "IfNotPresent",
                                    "command": CHATTY}]}}
    assert apiserver.admin.post(f"{NS}/pods", json=pod).status_code == 201
    daemon.wait_for(lambda: running(apiserver, "chatty"), "the pod to run", timeout=60)

    # The Node tells the API server where to dial the kubelet.
    node = apiserver.admin.get("/api/v1/nodes/node1").json()
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == daemon.port

    # No credentials: 401. A token the API server knows, with no grant: 403 naming the
    # user and what was asked (Go's fine-grained /pods asks "pods", then "proxy").
    with kubelet(daemon) as anonymous:
        answer = anonymous.get("/pods")
        assert answer.status_code == 401 and answer.text.startswith("Unauthorized")
    with kubelet(daemon, apiserver.add_token("alice")) as alice:
        answer = alice.get("/pods")
        assert answer.status_code == 403
        assert answer.text == "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
    with kubelet(daemon, "not-a-token") as stranger:
        assert stranger.get("/pods").status_code == 401

    # bob may use the node's proxy and read its metrics and stats (RBAC: nodes/proxy,
    # nodes/metrics, nodes/stats).
    apiserver.grant("bob", verbs=["get", "create"], resources=["nodes/proxy", "nodes/metrics", "nodes/stats"])
    token = apiserver.add_token("bob")
    with kubelet(daemon, token) as bob:
        pods = bob.get("/pods")
        assert pods.status_code == 200
        assert [p["metadata"]["name"] for p in pods.json()["items"]] == ["chatty"]
        # /runningpods/ is the runtime as the PLEG last relisted it (within a second).
        def running_pods():
            return bob.get("/runningpods/").json()["items"]

        daemon.wait_for(lambda: running_pods() and running_pods()[0]["spec"]["containers"],
                        "the pod's running container in /runningpods/", timeout=10)
        assert running_pods()[0]["spec"]["containers"] == [{"name": "app", "resources": {}}]
        assert bob.get("/configz").json()["kubeletconfig"]["port"] == daemon.port
        assert b"kubelet_running_pods" in bob.get("/metrics").content
        summary = bob.get("/stats/summary").json()  # what metrics-server reads
        assert summary["node"]["nodeName"] == "node1" and summary["node"]["fs"]["capacityBytes"] > 0
        (chatty,) = [p for p in summary["pods"] if p["podRef"]["name"] == "chatty"]
        assert [c["name"] for c in chatty["containers"]] == ["app"]
        assert chatty["containers"][0]["cpu"]["usageCoreNanoSeconds"] > 0
        resource = bob.get("/metrics/resource").text  # what newer metrics-server scrapes
        assert 'container_cpu_usage_seconds_total{container="app",namespace="default",pod="chatty"}' in resource
        assert "resource_scrape_error 0" in resource

        # Logs: the tail, then a follow that sees new lines as they are written.
        tail = bob.get("/containerLogs/default/chatty/app", params={"tailLines": "2"})
        assert tail.status_code == 200
        lines = tail.text.splitlines()
        # The last two lines when the tail was found, and whatever the container wrote while
        # they were read (read to the end, as Go's ReadLogs does).
        numbers = [int(line.removeprefix("line ")) for line in lines]
        assert len(numbers) >= 2 and numbers == list(range(numbers[0], numbers[0] + len(numbers)))
        first = int(lines[-1].split()[1])
        seen: list[int] = []
        with bob.stream("GET", "/containerLogs/default/chatty/app",
                          params={"follow": "true", "tailLines": "1"}) as followed:
            for line in followed.iter_lines():
                seen.append(int(line.split()[1]))
                if len(seen) == 5:
                    break
        assert seen == list(range(seen[0], seen[0] + 5)) and seen[-1] > first
        assert bob.get("/containerLogs/default/chatty/app", params={"previous": "true"}).status_code == 400
        assert bob.get("/containerLogs/default/nope/app").status_code == 404
        assert bob.get("/containerLogs/default/chatty/app", params={"tailLines": "-1"}).status_code == 422

    # Exec through the kubelet: a WebSocket (v4.channel.k8s.io) upgraded and proxied to
    # containerd's streaming server; stdout and the exit status come back.
    async def exec_hi() -> tuple[bytes, int]:
        context = ssl.create_default_context(cafile=str(daemon.root_dir / "pki" / "kubelet.crt"))
        command = "&".join(f"command={quote(part)}" for part in ["sh", "-c", "echo hi from $HOSTNAME; exit 3"])
        async with websocket(daemon.port, f"/exec/default/chatty/app?{command}&stdout=1&stderr=1",
                             ssl_context=context, headers=[("Authorization", f"Bearer {token}")]) as ws:
            assert ws.status_line.split()[1] == "101", ws.head
            channels = await ws.channels()
        return channels.get(STDOUT, b""), exit_code(channels[STATUS])

    stdout, code = trio.run(exec_hi)
    assert stdout.startswith(b"hi from") and code == 3


def _held_by_followers(daemon, log_dir: str) -> tuple[int, int, int]:
    """What a follower holds in the daemon: open log files under log_dir, inotify
    instances, and established connections to the kubelet port."""
    fd_dir = f"/proc/{daemon.process.pid}/fd"
    targets = []
    for fd in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(f"{fd_dir}/{fd}"))
        except OSError:
            pass  # closed meanwhile
    logs = sum(t.startswith(log_dir) for t in targets)
    inotify = sum(t == "anon_inode:inotify" for t in targets)
    port = f":{daemon.port:04X} "
    with open("/proc/net/tcp") as table:  # local address, remote address, state 01 = ESTABLISHED
        connections = sum(1 for row in table if row.split()[1].endswith(port.strip()) and row.split()[3] == "01")
    return logs, inotify, connections


def _raw_follow(daemon, path: str) -> ssl.SSLSocket:
    """A TLS connection that asked for `path` and read nothing yet: a reader as slow as can be."""
    context = ssl.create_default_context(cafile=str(daemon.root_dir / "pki" / "kubelet.crt"))
    conn = context.wrap_socket(socket.create_connection(("127.0.0.1", daemon.port), timeout=10),
                               server_hostname="127.0.0.1")
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return conn


def _nothing_left(held: tuple[int, int, int], inotify_before: int) -> bool:
    files, inotify, connections = held
    return files == 0 and inotify <= inotify_before and connections == 0


@pytest.mark.containerd
def test_slow_and_vanishing_log_readers_cost_nothing(containerd, manifests, start_daemon):
    """A follower that never reads does not hold up other requests; followers that go away
    mid-stream leave no file descriptor (log file, inotify, socket) behind."""
    daemon = start_daemon(containerd.endpoint)  # standalone: anonymous, AlwaysAllow, 127.0.0.1
    script = "yes 'a line of log text long enough to fill buffers fast' | head -c 20000000; " \
             "trap 'exit 0' TERM; while true; do echo tick; sleep 0.1; done"
    write_manifest(manifests, pod_manifest("big", [container("app", ["sh", "-c", script])]))
    wait_for_pod(daemon, "big", phase("Running"), "Running")
    logs = "/containerLogs/default/big-node1/app"
    with kubelet(daemon) as client:
        daemon.wait_for(lambda: client.get(logs, params={"tailLines": "1"}).text == "tick\n", "the 20 MB to be written")
        log_dir = str(daemon.root_dir.parent / "pod-logs")
        _, inotify_before, _ = _held_by_followers(daemon, log_dir)

        # A reader that asked for all 20 MB and reads none of it: the server is stuck on its
        # socket, and nothing else is.
        stalled = _raw_follow(daemon, f"{logs}?follow=true")
        assert stalled.recv(1)
        for _ in range(3):
            assert client.get("/healthz").text == "ok"
            assert client.get(logs, params={"tailLines": "1"}).text == "tick\n"

        # Followers that leave mid-stream, without a word.
        gone = [_raw_follow(daemon, f"{logs}?follow=true&tailLines=1") for _ in range(10)]
        for conn in gone:
            assert conn.recv(100)
        files, _, connections = _held_by_followers(daemon, log_dir)
        assert files >= 1 and connections >= 11  # the measure sees the followers
        for conn in [stalled, *gone]:
            conn.close()
        client.close()  # its keep-alive connection too: then no connection to the port is left
        daemon.wait_for(lambda: _nothing_left(_held_by_followers(daemon, log_dir), inotify_before),
                        "no log file, inotify instance or connection left by the followers", timeout=20)
    with kubelet(daemon) as client:
        assert client.get(logs, params={"tailLines": "1"}).text == "tick\n"
