"""pykubelet-inspect: rendering of the tree, the pods and the events, the choice of pod and container for
logs and exec, the operator's error messages, and end to end against a small HTTP server on a unix socket
standing in for the daemon."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import socketserver
import sys
import tempfile
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler

import msgspec
import pytest
import yaml
from rich.console import Console

from pykubelet.cli import inspect
from pykubelet.cli.inspect import AdminClient, InspectError, choose_container, find_pod, main
from pykubelet.messages.events import EventList
from pykubelet.messages.pod import ListMeta, PodList
from pykubelet.messages.supervision import ActorSnapshot, ErrorInfo, MailboxStats

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def snapshot() -> ActorSnapshot:
    return ActorSnapshot(
        name="root",
        path="root",
        kind="supervisor",
        strategy="rest_for_one",
        state="running",
        restarts=0,
        started_at="2025-01-01T11:00:00.000Z",
        children=[
            ActorSnapshot(name="runtime-link", path="root/runtime-link", kind="worker",
                          state="running", restarts=0),
            ActorSnapshot(
                name="sources", path="root/sources", kind="supervisor", strategy="one_for_one",
                state="running", restarts=1,
                children=[
                    ActorSnapshot(name="file", path="root/sources/file", kind="worker",
                                  state="stopped", restarts=0),
                ],
            ),
            ActorSnapshot(
                name="sync-loop", path="root/sync-loop", kind="worker", state="restarting",
                restarts=3,
                last_error=ErrorInfo(type="InjectedCrash", message="crashed on purpose",
                                     at="2025-01-01T11:59:00.000Z"),
                mailbox=MailboxStats(depth=7, capacity=256, received=1234),
            ),
            ActorSnapshot(name="gc", path="root/gc", kind="worker", state="failed", restarts=11),
        ],
    )


def as_text(renderable, width=120) -> str:
    console = Console(record=True, width=width)
    console.print(renderable)
    return console.export_text()


def pod(name, *, namespace="default", containers=("app",), statuses=(), phase="Running",
        age=timedelta(minutes=5), deleting=False, init_containers=()):
    meta = {"name": name, "namespace": namespace,
            "creationTimestamp": (NOW - age).isoformat().replace("+00:00", "Z")}
    if deleting:
        meta["deletionTimestamp"] = NOW.isoformat()
    spec = {"containers": [{"name": c} for c in containers]}
    if init_containers:
        spec["initContainers"] = [{"name": c} for c in init_containers]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "containerStatuses": list(statuses)}}


def container(name, *, ready=True, restarts=0, waiting=None, terminated=None):
    state = {"running": {}}
    if waiting:
        state = {"waiting": {"reason": waiting}}
    if terminated:
        state = {"terminated": terminated}
    return {"name": name, "ready": ready, "restartCount": restarts, "state": state}


def pod_list(*items) -> bytes:
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "items": list(items), "metadata": {}}).encode()


def event(pod_name, reason, message, *, type="Normal", namespace="default", field_path="",
          count=1, ago=timedelta(seconds=30)):
    stamp = (NOW - ago).isoformat().replace("+00:00", "Z")
    return {
        "metadata": {"name": f"{pod_name}.17f3", "namespace": namespace},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": pod_name, "uid": "u",
                           "apiVersion": "v1", "fieldPath": field_path},
        "reason": reason, "message": message, "type": type, "count": count,
        "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": "kubelet", "host": "node-1"},
    }


def event_list(*items) -> bytes:
    return json.dumps({"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": list(items)}).encode()


# -- rendering ----------------------------------------------------------------------------


def test_tree_shows_every_actor_with_kind_state_restarts_mailbox_and_last_error():
    lines = as_text(inspect.render_tree(snapshot())).splitlines()
    text = "\n".join(lines)
    assert "root  supervisor rest_for_one  running  restarts 0" in lines[0]
    assert "sources  supervisor one_for_one  running  restarts 1" in text
    assert "file  stopped  restarts 0" in text
    assert "sync-loop  restarting  restarts 3  mailbox 7/256 received 1234" in text
    assert "last error InjectedCrash: crashed on purpose at 2025-01-01T11:59:00.000Z" in text
    assert "gc  failed  restarts 11" in text
    # nesting: file is drawn under sources, deeper than sources itself
    indent = {name: next(l.index(name) for l in lines if name + "  " in l) for name in ("sources", "file")}
    assert indent["file"] > indent["sources"]


@pytest.mark.parametrize(
    "state, style",
    [("running", "green"), ("restarting", "yellow"), ("failed", "bold red"), ("stopped", "dim")],
)
def test_state_is_coloured(state, style):
    label = inspect.actor_label(ActorSnapshot(name="a", path="root/a", kind="worker",
                                              state=state, restarts=0))
    styled = {label.plain[span.start:span.end]: str(span.style) for span in label.spans}
    assert styled[state] == style


def test_pods_table_shows_ready_status_restarts_and_age():
    pods = msgspec.json.decode(
        pod_list(
            pod("web", statuses=[container("app"), container("sidecar")],
                containers=("app", "sidecar"), age=timedelta(hours=3, minutes=5)),
            pod("crashy", namespace="kube-system",
                statuses=[container("app", ready=False, restarts=4, waiting="CrashLoopBackOff")],
                age=timedelta(seconds=42)),
            pod("done", statuses=[container("app", ready=False,
                                            terminated={"exitCode": 0, "reason": "Completed"})],
                phase="Succeeded", age=timedelta(days=3)),
            pod("leaving", statuses=[container("app")], deleting=True),
            pod("new", statuses=[], phase="Pending"),
        ),
        type=PodList,
    )
    rows = [line.split() for line in as_text(inspect.render_pods(pods, NOW)).splitlines()]
    assert rows[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows[1:] == [
        ["default", "web", "2/2", "Running", "0", "3h5m"],
        ["kube-system", "crashy", "0/1", "CrashLoopBackOff", "4", "42s"],
        ["default", "done", "0/1", "Completed", "0", "3d"],
        ["default", "leaving", "1/1", "Terminating", "0", "5m"],
        ["default", "new", "0/1", "Pending", "0", "5m"],
    ]


def test_no_pods_says_so():
    assert as_text(inspect.render_pods(PodList(api_version="v1", kind="PodList", metadata=ListMeta(), items=[]), NOW)).strip() == "No pods."


def test_events_table_reads_like_kubectl_get_events():
    events = msgspec.json.decode(
        event_list(
            event("web", "Pulled", 'Successfully pulled image "busybox"', field_path="spec.containers{app}",
                  ago=timedelta(minutes=3)),
            event("dns", "BackOff", "Back-off restarting failed container coredns", type="Warning",
                  namespace="kube-system", field_path="spec.containers{coredns}", count=7),
            event("web", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.",
                  ago=timedelta(seconds=90)),
        ),
        type=EventList,
    )
    lines = as_text(inspect.render_events(events, NOW), width=200).splitlines()
    assert lines[0].split() == ["NAMESPACE", "LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "COUNT"]
    rows = [line.split() for line in lines[1:]]
    # oldest first, as kubectl events sorts them
    assert [row[:5] for row in rows] == [
        ["default", "3m", "Normal", "Pulled", "pod/web/spec.containers{app}"],
        ["default", "90s", "Normal", "SandboxChanged", "pod/web"],
        ["kube-system", "30s", "Warning", "BackOff", "pod/dns/spec.containers{coredns}"],
    ]
    assert " ".join(rows[0][5:-1]) == 'Successfully pulled image "busybox"'
    assert [row[-1] for row in rows] == ["1", "1", "7"]


def test_events_table_in_one_namespace_has_no_namespace_column():
    events = msgspec.json.decode(event_list(event("web", "Started", "Started container app")), type=EventList)
    lines = as_text(inspect.render_events(events, NOW, all_namespaces=False)).splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "COUNT"]
    assert lines[1].split() == ["30s", "Normal", "Started", "pod/web", "Started", "container", "app", "1"]


LONG_EVENTS = event_list(
    event("web-with-a-long-name", "FailedMount",
          'MountVolume.SetUp failed for volume "data": persistentVolumeClaim volumes are not supported '
          "by pykubelet; use hostPath or emptyDir", type="Warning", count=12, field_path="", ago=timedelta(minutes=2)),
    event("dns", "BackOff", "Back-off restarting failed container coredns in pod dns_kube-system(u)",
          type="Warning", namespace="kube-system", field_path="spec.containers{coredns}", count=1234),
)


def printed(renderable, width) -> list[str]:
    """The lines as main() prints them to a terminal `width` wide: crop=False."""
    console = Console(record=True, width=width)
    console.print(renderable, crop=False)
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [107, 120, 140])  # the other columns take 87
def test_a_narrow_terminal_wraps_the_event_message_and_cuts_no_other_column(width):
    events = msgspec.json.decode(LONG_EVENTS, type=EventList)
    lines = printed(inspect.render_events(events, NOW, width=width), width)
    assert max(len(line) for line in lines) <= width
    text = "\n".join(lines)
    for whole in ("FailedMount", "BackOff", "pod/web-with-a-long-name", "pod/dns/spec.containers{coredns}",
                  "kube-system", "Warning", "LAST SEEN", "COUNT"):
        assert whole in text, whole
    header = lines[0]
    message_at, count_at = header.index("MESSAGE"), header.index("COUNT")
    # Each event's first line ends with its whole count, under COUNT; the message is all there, wrapped.
    firsts = [line for line in lines[1:] if line[:message_at].strip()]
    assert [line[count_at:].strip() for line in firsts] == ["12", "1234"]
    messages = " ".join(line[message_at:count_at].strip() for line in lines[1:])
    for event_json in msgspec.json.decode(LONG_EVENTS)["items"]:
        assert "".join(event_json["message"].split()) in "".join(messages.split())  # a long word may fold


def test_events_through_a_pipe_keep_each_message_on_its_line():
    events = msgspec.json.decode(LONG_EVENTS, type=EventList)
    lines = printed(inspect.render_events(events, NOW, width=None), 400)
    assert len(lines) == 3 and lines[1].rstrip().endswith("12") and "use hostPath or emptyDir" in lines[1]


def test_narrower_than_the_fixed_columns_still_cuts_none_and_the_line_wraps():
    events = msgspec.json.decode(LONG_EVENTS, type=EventList)
    lines = printed(inspect.render_events(events, NOW, width=40), 400)  # as wide as it needs
    assert "pod/dns/spec.containers{coredns}" in "\n".join(lines) and lines[1].split()[-1] == "12"
    assert max(len(line) for line in lines) > 40


def test_no_events_says_so():
    assert as_text(inspect.render_events(EventList(), NOW)).strip() == "No events."


@pytest.mark.parametrize(
    "seconds, age",
    [(0, "0s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600, "3h"),
     (7 * 3600 + 60, "7h1m"), (30 * 3600, "30h"), (50 * 3600, "2d2h"), (10 * 86400, "10d"),
     (800 * 86400, "2y")],
)
def test_age_reads_like_kubectl(seconds, age):
    assert inspect.human_age(seconds) == age


# -- a stand-in daemon on a unix socket ---------------------------------------------------


@pytest.fixture
def sock_dir():
    # Unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    path = tempfile.mkdtemp(prefix="pki-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


class FakeDaemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.routes: dict[tuple[str, str], tuple[int, str, bytes]] = {}
        self.requests: list[tuple[str, str]] = []
        super().__init__(path, _Handler)


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.server.requests.append((self.command, self.path))
        route = self.server.routes.get((self.command, self.path), (404, "text/plain", b"no such endpoint\n"))
        if callable(route):  # writes its own answer
            route(self)
            return
        status, content_type, body = route
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:  # unix peers have no address to log
        pass


@pytest.fixture
def daemon(sock_dir, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich would wrap the tree at 80
    server = FakeDaemon(os.path.join(sock_dir, "pykubelet.sock"))
    os.chmod(server.server_address, 0o600)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def serve_json(daemon, method, path, body, status=200):
    daemon.routes[(method, path)] = (status, "application/json", body)


# -- end to end ---------------------------------------------------------------------------


def test_tree_end_to_end(daemon, capsys):
    serve_json(daemon, "GET", "/debug/actors", msgspec.json.encode(snapshot()))
    assert main(["--socket", daemon.server_address, "tree"]) == 0
    out = capsys.readouterr().out
    assert "sync-loop  restarting  restarts 3" in out
    assert "last error InjectedCrash: crashed on purpose" in out
    assert daemon.requests == [("GET", "/debug/actors")]


def test_tree_json_is_the_snapshot_as_served_pretty_printed(daemon, capsys):
    served = msgspec.json.encode(snapshot())
    serve_json(daemon, "GET", "/debug/actors", served)
    assert main(["--socket", daemon.server_address, "tree", "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == json.loads(served)
    assert out.startswith('{\n  "name": "root",')


def test_pods_end_to_end(daemon, capsys):
    serve_json(daemon, "GET", "/pods", pod_list())
    assert main(["--socket", daemon.server_address, "pods"]) == 0
    assert capsys.readouterr().out.strip() == "No pods."
    serve_json(daemon, "GET", "/pods", pod_list(pod("web", statuses=[container("app")])))
    assert main(["--socket", daemon.server_address, "pods"]) == 0
    out = capsys.readouterr().out
    assert out.split("\n")[1].split()[:5] == ["default", "web", "1/1", "Running", "0"]


WIDE_POD = pod("web", statuses=[container("app", restarts=1)])
WIDE_POD["spec"]["nodeName"] = "node1"
WIDE_POD["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                  "limits": {"cpu": "200m", "memory": "128Mi"}}
WIDE_POD["status"].update(podIP="10.88.0.5", qosClass="Burstable")
WIDE_POD["status"]["containerStatuses"][0]["lastState"] = {
    "terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "2025-01-01T11:55:00Z"}}


def test_pods_wide_end_to_end(daemon, capsys):
    serve_json(daemon, "GET", "/pods", pod_list(WIDE_POD))
    assert main(["--socket", daemon.server_address, "pods", "-o", "wide"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "QOS",
                              "CPU", "MEMORY", "LAST", "STATE"]
    assert row.split()[:5] + row.split()[6:12] == [
        "default", "web", "1/1", "Running", "1", "10.88.0.5", "node1", "Burstable", "100m/200m", "64Mi/128Mi",
        "OOMKilled"]


def test_pods_wide_in_a_narrow_terminal_leaves_columns_out_and_says_so(daemon, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    long_name = "a-static-pod-with-a-name-longer-than-the-terminal-is-wide-node1"
    serve_json(daemon, "GET", "/pods", pod_list(WIDE_POD, pod(long_name, statuses=[container("app")])))
    assert main(["--socket", daemon.server_address, "pods", "-o", "wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert lines[2].split()[:5] == ["default", long_name, "1/1", "Running", "0"]
    assert " ".join(" ".join(lines[3:]).split()).startswith(
        "(IP, NODE, QOS, CPU, MEMORY, LAST STATE left out: the terminal is 60 columns wide;")


def test_pods_into_a_pipe_get_every_wide_column(daemon, capsys, monkeypatch):
    def no_terminal(fd=1):
        raise OSError(25, "Inappropriate ioctl for device")

    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(os, "get_terminal_size", no_terminal)
    serve_json(daemon, "GET", "/pods", pod_list(WIDE_POD))
    assert main(["--socket", daemon.server_address, "pods", "-o", "wide"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[-2:] == ["LAST", "STATE"] and row.split()[-4:-2] == ["OOMKilled", "(137)"]
    assert len(row.rstrip()) > 80  # what rich would have cut at its default width


def test_pods_json_and_yaml_are_the_pod_list_as_served(daemon, capsys):
    served = pod_list(WIDE_POD, pod("idle", namespace="kube-system", phase="Pending"))
    serve_json(daemon, "GET", "/pods", served)
    assert main(["--socket", daemon.server_address, "pods", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(served)
    assert main(["--socket", daemon.server_address, "pods", "-o", "yaml"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out) == json.loads(served)
    assert out.startswith("kind: PodList\napiVersion: v1\nitems:\n- metadata:\n    name: web\n")  # as served


def test_events_end_to_end_with_a_namespace_and_as_json(daemon, capsys):
    served = event_list(event("dns", "Killing", "Stopping container coredns", namespace="kube-system",
                              ago=timedelta(seconds=5)))
    serve_json(daemon, "GET", "/events", event_list())
    serve_json(daemon, "GET", "/events?namespace=kube-system", served)
    assert main(["--socket", daemon.server_address, "events"]) == 0
    assert capsys.readouterr().out.strip() == "No events."
    assert main(["--socket", daemon.server_address, "events", "--namespace", "kube-system"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[1:4] == ["Normal", "Killing", "pod/dns"] and row[-1] == "1"
    assert main(["--socket", daemon.server_address, "events", "-n", "kube-system", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(served)
    assert daemon.requests == [
        ("GET", "/events"), ("GET", "/events?namespace=kube-system"), ("GET", "/events?namespace=kube-system"),
    ]


def test_events_from_something_that_is_not_an_event_list_is_a_clear_error(daemon, capsys):
    serve_json(daemon, "GET", "/events", pod_list())
    assert main(["--socket", daemon.server_address, "events"]) == 1
    assert capsys.readouterr().err == "pykubelet-inspect: GET /events: the answer is a PodList, not an EventList\n"


def test_crash_and_restart_post_to_the_actor_path(daemon, capsys):
    serve_json(daemon, "POST", "/debug/actors/root/sources/file/crash",
               b'{"path": "root/sources/file", "result": "crashed"}')
    serve_json(daemon, "POST", "/debug/actors/root/pleg/restart",
               b'{"path": "root/pleg", "result": "restarted"}')
    assert main(["--socket", daemon.server_address, "crash", "root/sources/file"]) == 0
    assert main(["--socket", daemon.server_address, "restart", "/root/pleg"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "root/sources/file: crashed",
        "root/pleg: restarted",
    ]
    assert daemon.requests == [
        ("POST", "/debug/actors/root/sources/file/crash"),
        ("POST", "/debug/actors/root/pleg/restart"),
    ]


@pytest.mark.parametrize(
    "status, content_type, body, message",
    [
        (403, "application/json",
         b'{"error": "fault injection is off: start the daemon with --enable-fault-injection"}',
         "403 Forbidden: fault injection is off: start the daemon with --enable-fault-injection"),
        (404, "text/plain", b"no actor at root/nope\n", "404 Not Found: no actor at root/nope"),
        (409, "application/json", b'{"error": "root/gc is not running"}',
         "409 Conflict: root/gc is not running"),
    ],
)
def test_daemon_refusal_prints_its_message_and_exits_1(daemon, capsys, status, content_type,
                                                       body, message):
    daemon.routes[("POST", "/debug/actors/root/gc/crash")] = (status, content_type, body)
    assert main(["--socket", daemon.server_address, "crash", "root/gc"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"pykubelet-inspect: POST /debug/actors/root/gc/crash: {message}\n"


def test_non_json_answer_is_a_clear_error(daemon, capsys):
    daemon.routes[("GET", "/debug/actors")] = (200, "text/html", b"<html>hello</html>")
    assert main(["--socket", daemon.server_address, "tree"]) == 1
    assert capsys.readouterr().err == (
        "pykubelet-inspect: GET /debug/actors: the answer is not JSON (it starts '<html>hello</html>')\n"
    )


def test_json_that_is_not_a_snapshot_is_a_clear_error(daemon, capsys):
    serve_json(daemon, "GET", "/debug/actors", b'{"name": "root"}')
    assert main(["--socket", daemon.server_address, "tree"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pykubelet-inspect: GET /debug/actors: the answer is not a ActorSnapshot")
    assert "Traceback" not in err


def test_watch_redraws_until_ctrl_c_and_shows_a_daemon_that_went_away(daemon, capsys, monkeypatch):
    serve_json(daemon, "GET", "/debug/actors", msgspec.json.encode(snapshot()))
    sleeps = []

    def fake_sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 1:
            daemon.routes[("GET", "/debug/actors")] = (500, "text/plain", b"snapshot failed")
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr(inspect.time, "sleep", fake_sleep)
    argv = ["--socket", daemon.server_address, "tree", "--watch", "--interval", "0.25"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert sleeps == [0.25, 0.25]
    assert "sync-loop  restarting  restarts 3" in out  # the last good tree stays up
    assert "unreachable: GET /debug/actors: 500 Internal Server Error: snapshot failed" in out
    assert len(daemon.requests) == 2


# -- the operator's error messages --------------------------------------------------------


def test_missing_socket_says_start_the_daemon_or_pass_socket(sock_dir, capsys):
    path = os.path.join(sock_dir, "pykubelet.sock")
    assert main(["--socket", path, "tree"]) == 1
    assert capsys.readouterr().err == (
        f"pykubelet-inspect: no admin socket at {path}: is the daemon running? start it with "
        f"`pykubelet run`, or pass --socket <root-dir>/pykubelet.sock\n"
    )


def test_default_socket_is_under_var_lib_pykubelet():
    assert AdminClient().socket == "/var/lib/pykubelet/pykubelet.sock"


def test_stale_socket_says_the_daemon_is_not_running(sock_dir, capsys):
    path = os.path.join(sock_dir, "pykubelet.sock")
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(path)  # bound, never listening: what a killed daemon leaves behind
    assert main(["--socket", path, "pods"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"pykubelet-inspect: nothing is listening on {path}: the daemon is not running "
        f"(stale socket left behind); start it with `pykubelet run`\n"
    )


def test_a_file_that_is_not_a_socket_is_named(sock_dir, capsys):
    path = os.path.join(sock_dir, "pykubelet.sock")
    open(path, "w").close()
    assert main(["--socket", path, "tree"]) == 1
    assert capsys.readouterr().err.startswith(f"pykubelet-inspect: {path} is not a unix socket")


def test_a_daemon_that_never_answers_times_out(sock_dir, capsys):
    path = os.path.join(sock_dir, "pykubelet.sock")
    with socket.socket(socket.AF_UNIX) as hung:
        hung.bind(path)
        hung.listen()  # the kernel accepts the connection; nobody reads the request
        assert main(["--socket", path, "--timeout", "0.2", "tree"]) == 1
    assert capsys.readouterr().err == (
        f"pykubelet-inspect: GET /debug/actors: the admin socket {path} did not answer "
        f"within 0.2s (daemon hung or overloaded? try --timeout)\n"
    )


def test_permission_denied_names_the_socket_and_its_owner(sock_dir):
    """Connects as another user than the socket's owner, as the kernel sees it: as root
    (who may connect anywhere) the check runs in a forked child that became nobody."""
    path = os.path.join(sock_dir, "pykubelet.sock")
    os.chmod(sock_dir, 0o755)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(path)
        os.chmod(path, 0o600)
        listening.listen()
        if os.geteuid() != 0:
            os.chmod(path, 0o000)  # the owner is refused too: the same EACCES
            message = _inspect_error(path)
        else:
            message = _inspect_error_as_nobody(path)
    owner = __import__("pwd").getpwuid(os.stat(sock_dir).st_uid).pw_name
    assert message == (
        f"permission denied on admin socket {path}: it is mode 0600, owned by {owner} "
        f"(the daemon's user); run pykubelet-inspect as that user or as root"
    )


def _inspect_error(path: str) -> str:
    client = AdminClient(socket=path, timeout=2)
    try:
        client.actors()
    except InspectError as exc:
        return str(exc)
    finally:
        client.close()
    return "no error"


def _inspect_error_as_nobody(path: str) -> str:
    # Walk the connect path once as root first: nobody cannot read the Python install
    # under /root to import what httpx loads lazily.
    stale = os.path.join(os.path.dirname(path), "stale.sock")
    with socket.socket(socket.AF_UNIX) as unused:
        unused.bind(stale)
    _inspect_error(stale)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            try:
                message = _inspect_error(path)
            except BaseException as exc:
                message = f"child failed: {exc!r}"
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        message = reader.read()
    os.waitpid(pid, 0)
    return message


def test_address_targets_an_http_endpoint(capsys):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert main(["--address", f"http://127.0.0.1:{port}", "pods"]) == 1
    assert capsys.readouterr().err == (
        f"pykubelet-inspect: nothing answers at http://127.0.0.1:{port}: is the daemon "
        f"running, with --read-only-port (or --port) set to that port?\n"
    )


def test_address_must_be_an_http_url(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--address", "127.0.0.1:10255", "pods"])
    assert exit_.value.code == 2
    assert "--address 127.0.0.1:10255: give an http:// or https:// URL" in capsys.readouterr().err


def test_watch_does_not_combine_with_json(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tree", "--watch", "-o", "json"])
    assert exit_.value.code == 2
    assert "does not combine with -o json" in capsys.readouterr().err


# -- logs and exec: which pod and container ------------------------------------------------


def pods_of(*items) -> PodList:
    return msgspec.json.decode(pod_list(*items), type=PodList)


def test_a_pod_is_found_by_its_full_name_in_its_namespace():
    pods = pods_of(pod("web", namespace="other"), pod("web"), pod("web-node1"))
    found = find_pod(pods, "web", "default")
    assert (found.metadata.namespace, found.metadata.name) == ("default", "web")


def test_a_static_pod_is_found_without_its_node_name():
    pods = pods_of(pod("hello-node1"), pod("web-node1"), pod("hello-node1", namespace="kube-system"))
    assert find_pod(pods, "hello", "default").metadata.name == "hello-node1"
    assert find_pod(pods, "hello-node1", "default").metadata.name == "hello-node1"


def test_several_pods_starting_with_the_name_are_listed_not_guessed():
    pods = pods_of(pod("web-a"), pod("web-b"))
    with pytest.raises(InspectError) as error:
        find_pod(pods, "web", "default")
    assert str(error.value) == (
        'pod "web" not found in namespace "default", and several start with "web-": web-a, web-b; give the full name')


@pytest.mark.parametrize(
    "items, message",
    [
        ((pod("etcd-node1", namespace="kube-system"),),
         'pod "etcd" not found in namespace "default"; it is in namespace kube-system: pass -n kube-system'),
        ((pod("etcd", namespace="a"), pod("etcd", namespace="b")),
         'pod "etcd" not found in namespace "default"; pods by that name are in namespaces a, b: '
         "pass -n with one of them"),
        ((pod("web"), pod("etcdx")),
         'pod "etcd" not found in namespace "default"; `pykubelet-inspect pods` lists the pods'),
    ],
)
def test_a_missing_pod_says_where_to_look(items, message):
    with pytest.raises(InspectError) as error:
        find_pod(pods_of(*items), "etcd", "default")
    assert str(error.value) == message


def test_the_only_container_needs_no_name():
    assert choose_container(pods_of(pod("web", containers=("app",))).items[0], None) == "app"


def test_several_containers_need_a_name_as_kubectl_says():
    web = pods_of(pod("web", containers=("app", "sidecar"), init_containers=("setup",))).items[0]
    with pytest.raises(InspectError) as error:
        choose_container(web, None)
    assert str(error.value) == (
        "a container name must be specified for pod web, choose one of: [app sidecar] "
        "or one of the init containers: [setup]")
    assert choose_container(web, "sidecar") == "sidecar"
    assert choose_container(web, "setup") == "setup"
    with pytest.raises(InspectError) as error:
        choose_container(web, "nope")
    assert str(error.value) == (
        "container nope is not valid for pod web: choose one of: [app sidecar] or one of the init containers: [setup]")


# -- logs and exec: the command line ---------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["exec", "web"], "exec: give the command after --: pykubelet-inspect exec POD [-n NAMESPACE] "
                          "[-c CONTAINER] -- CMD [ARGS...]"),
        (["exec", "web", "ls", "-l"], "unrecognized arguments: ls -l; exec's command goes after --: "),
        (["pods", "--wide"], "unrecognized arguments: --wide\n"),
        (["exec", "web", "--"], "exec: give the command after --"),
        (["logs", "web", "--", "ls"], "logs: takes no command after --; only exec does"),
        (["logs", "web", "--tail", "-2"], "--tail -2: give a number of lines >= 0, or -1 for the whole log"),
        (["--address", "http://127.0.0.1:10255", "logs", "web"], "logs goes through the admin socket (--socket)"),
        (["--address", "http://127.0.0.1:10255", "exec", "web", "--", "ls"], "exec goes through the admin socket"),
    ],
)
def test_logs_and_exec_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_exec_help_says_it_is_not_interactive_and_what_the_exit_status_means(capsys):
    with pytest.raises(SystemExit):
        main(["exec", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "usage: pykubelet-inspect exec POD [-n NAMESPACE] [-c CONTAINER] -- CMD [ARGS...]" in help_text
    assert "Not interactive: no stdin, no tty." in help_text
    assert "0 when the command ran, whatever its own exit code" in help_text


# -- logs and exec: end to end ---------------------------------------------------------------

STATIC = pod("hello-node1", containers=("hello",))


def test_logs_writes_the_log_raw_with_the_query_kubectl_would_send(daemon, capsysbinary):
    serve_json(daemon, "GET", "/pods", pod_list(pod("web", namespace="other"), STATIC))
    log = b"hello from pykubelet\n\xff not utf-8\n"
    daemon.routes[("GET", "/containerLogs/default/hello-node1/hello")] = (200, "text/plain", log)
    every_option = "/containerLogs/default/hello-node1/hello?follow=true&tailLines=1&timestamps=true&previous=true"
    daemon.routes[("GET", every_option)] = (200, "text/plain", b"2025-01-01T12:00:00Z one line\n")
    assert main(["--socket", daemon.server_address, "logs", "hello"]) == 0
    assert capsysbinary.readouterr().out == log
    argv = ["--socket", daemon.server_address, "logs", "hello", "-c", "hello", "-f", "--tail", "1",
            "--timestamps", "--previous"]
    assert main(argv) == 0  # followed until the daemon ended the stream: the container stopped
    assert capsysbinary.readouterr().out == b"2025-01-01T12:00:00Z one line\n"
    assert daemon.requests == [
        ("GET", "/pods"), ("GET", "/containerLogs/default/hello-node1/hello"),
        ("GET", "/pods"), ("GET", every_option),
    ]


def test_logs_of_a_pod_with_several_containers_needs_c(daemon, capsys):
    serve_json(daemon, "GET", "/pods", pod_list(pod("web", containers=("app", "sidecar"))))
    assert main(["--socket", daemon.server_address, "logs", "web"]) == 1
    assert capsys.readouterr().err == (
        "pykubelet-inspect: a container name must be specified for pod web, choose one of: [app sidecar]\n")
    assert daemon.requests == [("GET", "/pods")]


def test_logs_refused_by_the_daemon_prints_its_message(daemon, capsys):
    serve_json(daemon, "GET", "/pods", pod_list(STATIC))
    daemon.routes[("GET", "/containerLogs/default/hello-node1/hello?previous=true")] = (
        400, "text/plain", b'previous terminated container "hello" in pod "hello-node1" not found\n')
    assert main(["--socket", daemon.server_address, "logs", "hello", "-p"]) == 1
    assert capsys.readouterr().err == (
        "pykubelet-inspect: GET /containerLogs/default/hello-node1/hello?previous=true: 400 Bad Request: "
        'previous terminated container "hello" in pod "hello-node1" not found\n')


class _Stdout:
    """sys.stdout for main(): a binary buffer that says when something was written."""

    def __init__(self) -> None:
        self.buffer = _Written()


class _Written(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def write(self, data) -> int:
        written = super().write(data)
        self.event.set()
        return written


def test_logs_follow_prints_what_arrives_and_ctrl_c_exits_0(daemon, monkeypatch):
    serve_json(daemon, "GET", "/pods", pod_list(STATIC))
    stdout, released = _Stdout(), threading.Event()

    def follow(handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()  # no length: the body runs until the connection ends
        handler.wfile.write(b"tick 1\n")
        handler.wfile.flush()
        # Ctrl-C once the first line is out, while the client waits for more.
        if stdout.buffer.event.wait(5):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        released.wait(5)

    daemon.routes[("GET", "/containerLogs/default/hello-node1/hello?follow=true")] = follow
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        code = main(["--socket", daemon.server_address, "logs", "-f", "hello"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main()")
    finally:
        released.set()
    assert code == 0
    assert stdout.buffer.getvalue() == b"tick 1\n"


def test_logs_into_a_closed_pipe_exits_0_quietly(daemon, monkeypatch, capsys):
    class ClosedPipe:
        def write(self, data):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            pass

    serve_json(daemon, "GET", "/pods", pod_list(STATIC))
    daemon.routes[("GET", "/containerLogs/default/hello-node1/hello")] = (200, "text/plain", b"line\n" * 100)
    monkeypatch.setattr(sys, "stdout", type("Stdout", (), {"buffer": ClosedPipe(), "fileno": lambda self: -1})())
    assert main(["--socket", daemon.server_address, "logs", "hello"]) == 0
    assert capsys.readouterr().err == ""


def test_exec_prints_the_output_of_run(daemon, capsysbinary):
    serve_json(daemon, "GET", "/pods", pod_list(pod("web", containers=("app", "sidecar"))))
    daemon.routes[("POST", "/run/default/web/sidecar?cmd=ls%20-l%20%2Ftmp")] = (200, "text/plain", b"total 0\n")
    assert main(["--socket", daemon.server_address, "exec", "web", "-c", "sidecar", "--", "ls", "-l", "/tmp"]) == 0
    assert capsysbinary.readouterr().out == b"total 0\n"
    assert daemon.requests == [("GET", "/pods"), ("POST", "/run/default/web/sidecar?cmd=ls%20-l%20%2Ftmp")]


def test_exec_that_cannot_run_exits_1_with_the_daemons_message(daemon, capsys):
    serve_json(daemon, "GET", "/pods", pod_list(STATIC))
    daemon.routes[("POST", "/run/default/hello-node1/hello?cmd=true")] = (
        404, "text/plain", b'container not found ("hello")\n')
    assert main(["--socket", daemon.server_address, "exec", "hello", "--", "true"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "pykubelet-inspect: POST /run/default/hello-node1/hello?cmd=true: 404 Not Found: "
        'container not found ("hello")\n')


@pytest.mark.parametrize("argument", ["echo hi", "", "a\tb"])
def test_exec_refuses_an_argument_run_would_split(daemon, capsys, argument):
    serve_json(daemon, "GET", "/pods", pod_list(STATIC))
    assert main(["--socket", daemon.server_address, "exec", "hello", "--", "sh", "-c", argument]) == 1
    assert capsys.readouterr().err == (
        f"pykubelet-inspect: argument {argument!r}: the daemon's /run splits the command on whitespace "
        "(as the Go kubelet's does), so an argument can be neither empty nor contain whitespace; "
        "put such a command in a script inside the container and run that\n")
    assert daemon.requests == [("GET", "/pods")]


# -- top ----------------------------------------------------------------------------------


def worker(path: str, received: int | None, *, depth: int = 0, capacity: int = 64, state: str = "running",
           restarts: int = 0) -> ActorSnapshot:
    box = None if received is None else MailboxStats(depth=depth, capacity=capacity, received=received)
    return ActorSnapshot(name=path.rsplit("/", 1)[-1], path=path, kind="worker", state=state, restarts=restarts,
                         mailbox=box)


def tree_of(*workers: ActorSnapshot) -> ActorSnapshot:
    return ActorSnapshot(name="root", path="root", kind="supervisor", strategy="rest_for_one", state="running",
                         restarts=0, children=list(workers))


def test_top_rates_are_received_deltas_over_the_interval_busiest_first():
    before = tree_of(worker("root/pleg", 100), worker("root/sync-loop", 1000), worker("root/gc", 5),
                     worker("root/status", 50))
    after = tree_of(worker("root/pleg", 110), worker("root/sync-loop", 1400, depth=9),
                    worker("root/gc", 5, depth=2), worker("root/status", 50),
                    worker("root/pod-workers/u1", 30))  # new since the last poll: counts from 0
    rows = inspect.top_rows(before, after, 2.0)
    assert [(r.path, r.messages_per_second, r.depth) for r in rows] == [
        ("root/sync-loop", 200.0, 9),
        ("root/pod-workers/u1", 15.0, 0),
        ("root/pleg", 5.0, 0),
        ("root/gc", 0.0, 2),       # idle: the deeper mailbox first
        ("root/status", 0.0, 0),
        ("root", None, None),      # a supervisor has no mailbox
    ]


def test_top_counts_a_mailbox_that_started_over_from_zero():
    rows = inspect.top_rows(tree_of(worker("root/pleg", 500)), tree_of(worker("root/pleg", 40, restarts=1)), 4.0)
    assert rows[0].messages_per_second == 10.0 and rows[0].restarts == 1


def test_top_without_a_previous_poll_has_no_rate():
    assert [r.messages_per_second for r in inspect.top_rows(None, tree_of(worker("root/pleg", 5)), 1.0)] == [None, None]


def test_top_table_shows_every_column_and_what_it_left_out():
    after = tree_of(worker("root/sync-loop", 1400, depth=64, capacity=64, restarts=2, state="restarting"),
                    worker("root/pleg", 110), worker("root/gc", 5))
    rows = inspect.top_rows(tree_of(worker("root/sync-loop", 1000), worker("root/pleg", 100), worker("root/gc", 5)),
                            after, 2.0)
    lines = as_text(inspect.render_top(rows, "admin socket /x.sock", NOW, 2.0, limit=2)).splitlines()
    assert lines[0].split() == ["admin", "socket", "/x.sock", "12:00:00", "every", "2s", "4", "actors", "205.0",
                                "messages/s"]
    assert lines[1].split() == ["ACTOR", "STATE", "RESTARTS", "MAILBOX", "MSG/S", "RECEIVED"]
    assert lines[2].split() == ["root/sync-loop", "restarting", "2", "64/64", "200.0", "1400"]
    assert lines[3].split() == ["root/pleg", "running", "0", "0/64", "5.0", "110"]
    assert lines[4].strip() == "... 2 more (quieter) actors"


class Polls:
    """Serves successive snapshots: the next one at each sleep; a clock that moves by the sleeps."""

    def __init__(self, daemon, *snapshots: ActorSnapshot) -> None:
        self.daemon, self.snapshots, self.now, self.sleeps = daemon, list(snapshots), 100.0, []
        self._serve()

    def _serve(self) -> None:
        serve_json(self.daemon, "GET", "/debug/actors", msgspec.json.encode(self.snapshots.pop(0)))

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if not self.snapshots:
            raise KeyboardInterrupt
        self._serve()

    def clock(self) -> float:
        return self.now


@pytest.fixture
def polls(daemon, monkeypatch):
    def make(*snapshots):
        p = Polls(daemon, *snapshots)
        monkeypatch.setattr(inspect._top.time, "sleep", p.sleep)
        monkeypatch.setattr(inspect._top.time, "monotonic", p.clock)
        return p
    return make


def test_top_once_prints_one_table_over_one_interval(daemon, polls, capsys):
    p = polls(tree_of(worker("root/pleg", 100)), tree_of(worker("root/pleg", 130)))
    assert main(["--socket", daemon.server_address, "top", "--once", "--interval", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert p.sleeps == [3.0] and len(daemon.requests) == 2
    assert out[2].split() == ["root/pleg", "running", "0", "0/64", "10.0", "130"]


def test_top_iterations_as_json_lines_for_scripts(daemon, polls, capsys):
    polls(tree_of(worker("root/pleg", 0)), tree_of(worker("root/pleg", 20)), tree_of(worker("root/pleg", 60)))
    assert main(["--socket", daemon.server_address, "top", "--iterations", "2", "--interval", "1", "-o", "json"]) == 0
    frames = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [f["actors"][0]["messages_per_second"] for f in frames] == [20.0, 40.0]
    assert frames[0]["actors"][0] == {"path": "root/pleg", "state": "running", "restarts": 0, "depth": 0,
                                      "capacity": 64, "received": 20, "messages_per_second": 20.0}
    assert frames[0]["interval"] == 1.0


def test_top_live_redraws_until_ctrl_c_and_keeps_the_last_table_while_the_daemon_is_away(
        daemon, polls, capsys, monkeypatch):
    p = polls(tree_of(worker("root/pleg", 0)), tree_of(worker("root/pleg", 50)))
    real_sleep = p.sleep

    def sleep_then_fail(seconds):
        if len(p.sleeps) == 1:  # the second poll finds no daemon
            p.sleeps.append(seconds)
            daemon.routes[("GET", "/debug/actors")] = (500, "text/plain", b"snapshot failed")
            return
        if len(p.sleeps) == 2:
            raise KeyboardInterrupt
        real_sleep(seconds)

    monkeypatch.setattr(inspect._top.time, "sleep", sleep_then_fail)
    assert main(["--socket", daemon.server_address, "top", "--interval", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "root/pleg" in out and "100.0" in out
    assert "unreachable: GET /debug/actors: 500 Internal Server Error: snapshot failed" in out


@pytest.mark.parametrize("argv, message", [
    (["top", "-o", "json"], "top -o json prints lines for scripts: give --once or --iterations N"),
    (["top", "--iterations", "0"], "--iterations 0: give 1 or more"),
    (["top", "--interval", "0"], "--interval must be > 0 seconds"),
    (["top", "--once", "--iterations", "2"], "not allowed with argument"),
])
def test_top_refuses_what_it_cannot_do(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


class FakeKubelet(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """The same fake on 127.0.0.1 TCP, for --address."""

    daemon_threads = True

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], tuple[int, str, bytes]] = {}
        self.requests: list[tuple[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


def test_top_over_address_reads_the_same_snapshots(monkeypatch, capsys):
    server = FakeKubelet()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        polls_over_tcp = Polls(server, tree_of(worker("root/pleg", 0)), tree_of(worker("root/pleg", 8)))
        monkeypatch.setattr(inspect._top.time, "sleep", polls_over_tcp.sleep)
        monkeypatch.setattr(inspect._top.time, "monotonic", polls_over_tcp.clock)
        address = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["--address", address, "top", "--once", "--interval", "2"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"kubelet at {address}")
        assert out[2].split() == ["root/pleg", "running", "0", "0/64", "4.0", "8"]
        assert server.requests == [("GET", "/debug/actors")] * 2
    finally:
        server.shutdown()
        server.server_close()
