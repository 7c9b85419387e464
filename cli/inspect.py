"""pykubelet-inspect: look into a running daemon through its admin socket (or its
read-only HTTP endpoint): the live actor tree, the pods, the events, and fault injection.

Rendering (snapshot -> rich renderable, pod and event lists -> tables) is pure and lives apart from
AdminClient, the thin HTTP port; main() only wires the two together.
"""

from __future__ import annotations

import argparse
import errno
import os
import pwd
import stat
import sys
import time
from datetime import datetime, timezone
from typing import Sequence
from urllib.parse import quote, urlencode

import httpx
import msgspec
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from pykubelet.messages.supervision import ActorSnapshot

DEFAULT_SOCKET = "/var/lib/pykubelet/pykubelet.sock"
PROG = "pykubelet-inspect"


class InspectError(Exception):
    """Something the operator must be told in one line; main() prints it and exits 1."""


# -- the port: HTTP to the daemon ---------------------------------------------------------


class AdminClient:
    """GET/POST against the daemon's admin socket or an http(s) kubelet endpoint.

    Every failure leaves as an InspectError whose message names the socket or URL and
    says what to do about it.
    """

    def __init__(
        self,
        *,
        socket: str = DEFAULT_SOCKET,
        address: str | None = None,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.socket = socket if address is None else None
        self.address = address
        self.timeout = timeout
        if self.socket is not None:
            self.where = f"admin socket {self.socket}"
            transport = transport or httpx.HTTPTransport(uds=self.socket)
            base_url = "http://localhost"
        else:
            self.where = f"kubelet at {address}"
            base_url = address.rstrip("/")
        self._http = httpx.Client(base_url=base_url, transport=transport, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def actors(self) -> tuple[ActorSnapshot, bytes]:
        """The tree snapshot, and its JSON exactly as served."""
        raw = self._request("GET", "/debug/actors")
        return _decode(raw, ActorSnapshot, "GET /debug/actors"), raw

    def pods(self) -> tuple[PodList, bytes]:
        raw = self._request("GET", "/pods")
        pods = _decode(raw, PodList, "GET /pods")
        if pods.kind != "PodList":
            raise InspectError(f"GET /pods: the answer is a {pods.kind}, not a PodList")
        return pods, raw

    def events(self, namespace: str | None = None) -> tuple[EventList, bytes]:
        url = "/events" + (f"?{urlencode({'namespace': namespace})}" if namespace else "")
        raw = self._request("GET", url)
        events = _decode(raw, EventList, f"GET {url}")
        if events.kind != "EventList":
            raise InspectError(f"GET {url}: the answer is a {events.kind}, not an EventList")
        return events, raw

    def act(self, path: str, action: str) -> str:
        """POST restart|crash for the actor at path; the daemon's one-word result."""
        path = path.strip("/")
        url = f"/debug/actors/{quote(path, safe='/')}/{action}"
        raw = self._request("POST", url)
        try:
            return str(msgspec.json.decode(raw).get("result", action + "ed"))
        except (msgspec.DecodeError, AttributeError):
            return raw.decode(errors="replace").strip() or action + "ed"

    def _request(self, method: str, url: str) -> bytes:
        if self.socket is not None:
            self._check_socket_file()
        try:
            response = self._http.request(method, url)
        except httpx.TimeoutException:
            raise InspectError(
                f"{method} {url}: the {self.where} did not answer within {self.timeout:g}s "
                f"(daemon hung or overloaded? try --timeout)"
            ) from None
        except httpx.TransportError as exc:
            raise InspectError(self._explain_transport_error(method, url, exc)) from None
        if response.is_error:
            raise InspectError(
                f"{method} {url}: {response.status_code} {response.reason_phrase}: "
                f"{_error_message(response)}"
            )
        return response.content

    def _check_socket_file(self) -> None:
        try:
            mode = os.stat(self.socket).st_mode
        except FileNotFoundError:
            raise InspectError(self._missing()) from None
        except PermissionError:
            raise InspectError(self._denied()) from None
        if not stat.S_ISSOCK(mode):
            raise InspectError(
                f"{self.socket} is not a unix socket: pass the daemon's admin socket, "
                f"--socket <root-dir>/pykubelet.sock"
            )

    def _explain_transport_error(self, method: str, url: str, exc: httpx.TransportError) -> str:
        code = _os_errno(exc)
        if self.socket is not None:
            if code in (errno.EACCES, errno.EPERM):
                return self._denied()
            if code == errno.ECONNREFUSED:
                return (
                    f"nothing is listening on {self.socket}: the daemon is not running "
                    f"(stale socket left behind); start it with `pykubelet run`"
                )
            if code == errno.ENOENT:
                return self._missing()
        elif code == errno.ECONNREFUSED:
            return (
                f"nothing answers at {self.address}: is the daemon "
                f"running, with --read-only-port (or --port) set to that port?"
            )
        if isinstance(exc, httpx.ConnectError):
            return f"cannot connect to the {self.where}: {exc}"
        return f"{method} {url}: the {self.where} broke off the exchange: {exc or type(exc).__name__}"

    def _missing(self) -> str:
        return (
            f"no admin socket at {self.socket}: is the daemon running? start it with "
            f"`pykubelet run`, or pass --socket <root-dir>/pykubelet.sock"
        )

    def _denied(self) -> str:
        try:
            owner = f"{pwd.getpwuid(os.stat(self.socket).st_uid).pw_name} (the daemon's user)"
        except (OSError, KeyError):  # e.g. the root dir itself is closed to us
            owner = "the daemon's user"
        return (
            f"permission denied on admin socket {self.socket}: it is mode 0600, owned by "
            f"{owner}; run {PROG} as that user or as root"
        )


def _os_errno(exc: BaseException) -> int | None:
    """The errno of the OSError under httpx's and httpcore's wrappers, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return None


def _error_message(response: httpx.Response) -> str:
    text = response.text.strip()
    try:
        body = msgspec.json.decode(response.content)
    except msgspec.DecodeError:
        return text or "(no message)"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    if isinstance(body, dict) and isinstance(body.get("message"), str):  # a k8s Status
        return body["message"]
    return text


def _decode(raw: bytes, type_: type, what: str):
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        raise InspectError(f"{what}: the answer is not a {type_.__name__}: {exc}") from None
    except msgspec.DecodeError:
        start = raw[:60].decode(errors="replace")
        raise InspectError(f"{what}: the answer is not JSON (it starts {start!r})") from None


# -- the pods this CLI reads: only the fields the table shows -----------------------------


class _ContainerState(msgspec.Struct):
    reason: str | None = None
    exitCode: int | None = None
    signal: int | None = None


class _ContainerStateSet(msgspec.Struct):
    waiting: _ContainerState | None = None
    terminated: _ContainerState | None = None


class _ContainerStatus(msgspec.Struct):
    name: str = ""
    ready: bool = False
    restartCount: int = 0
    state: _ContainerStateSet | None = None


class _PodStatus(msgspec.Struct):
    phase: str | None = None
    reason: str | None = None
    containerStatuses: list[_ContainerStatus] = []


class _Container(msgspec.Struct):
    name: str = ""


class _PodSpec(msgspec.Struct):
    containers: list[_Container] = []


class _ObjectMeta(msgspec.Struct):
    name: str = ""
    namespace: str = "default"
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None


class Pod(msgspec.Struct):
    metadata: _ObjectMeta = msgspec.field(default_factory=_ObjectMeta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class PodList(msgspec.Struct):
    kind: str
    items: list[Pod] = []


# -- the events this CLI reads ----------------------------------------------------------


class _InvolvedObject(msgspec.Struct):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    fieldPath: str = ""


class Event(msgspec.Struct):
    involvedObject: _InvolvedObject = msgspec.field(default_factory=_InvolvedObject)
    reason: str = ""
    message: str = ""
    type: str = ""
    count: int = 1
    firstTimestamp: str | None = None
    lastTimestamp: str | None = None


class EventList(msgspec.Struct):
    kind: str
    items: list[Event] = []


# -- rendering: pure ----------------------------------------------------------------------

STATE_STYLES = {"running": "green", "restarting": "yellow", "failed": "bold red", "stopped": "dim"}


def actor_label(actor: ActorSnapshot) -> Text:
    """One tree node: name, kind, state, restarts, mailbox, and the last error below."""
    label = Text()
    label.append(actor.name, style="bold")
    if actor.kind == "supervisor":
        label.append(f"  supervisor {actor.strategy or ''}".rstrip(), style="cyan")
    label.append("  ")
    label.append(actor.state, style=STATE_STYLES.get(actor.state, ""))
    label.append(f"  restarts {actor.restarts}", style="yellow" if actor.restarts else "")
    if actor.mailbox is not None:
        box = actor.mailbox
        full = box.depth >= box.capacity
        label.append(f"  mailbox {box.depth}/{box.capacity}", style="bold red" if full else "")
        label.append(f" received {box.received}")
    if actor.last_error is not None:
        err = actor.last_error
        label.append(f"\nlast error {err.type}: {err.message} at {err.at}", style="red")
    return label


def render_tree(snapshot: ActorSnapshot) -> Tree:
    tree = Tree(actor_label(snapshot), guide_style="dim")
    _add_children(tree, snapshot)
    return tree


def _add_children(node: Tree, actor: ActorSnapshot) -> None:
    for child in actor.children:
        _add_children(node.add(actor_label(child)), child)


def pod_status(pod: Pod) -> str:
    """The STATUS column, as kubectl computes it: a container's waiting or terminated
    reason wins over the phase, and a pod being deleted is Terminating."""
    reason = pod.status.reason or pod.status.phase or "Unknown"
    for status in reversed(pod.status.containerStatuses):
        state = status.state or _ContainerStateSet()
        if state.waiting is not None and state.waiting.reason:
            reason = state.waiting.reason
        elif state.terminated is not None:
            term = state.terminated
            if term.reason:
                reason = term.reason
            elif term.signal:
                reason = f"Signal:{term.signal}"
            else:
                reason = f"ExitCode:{term.exitCode or 0}"
    if pod.metadata.deletionTimestamp is not None:
        reason = "Terminating"
    return reason


def human_age(seconds: float) -> str:
    """Kubernetes' HumanDuration (what kubectl prints in AGE), trimmed."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y"


def _age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        created = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_age((now - created).total_seconds())


def render_pods(pods: PodList, now: datetime) -> RenderableType:
    if not pods.items:
        return Text("No pods.")
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"):
        table.add_column(column, no_wrap=True)
    for pod in pods.items:
        statuses = pod.status.containerStatuses
        total = max(len(pod.spec.containers), len(statuses))
        ready = sum(1 for s in statuses if s.ready)
        table.add_row(
            pod.metadata.namespace,
            pod.metadata.name,
            f"{ready}/{total}",
            pod_status(pod),
            str(sum(s.restartCount for s in statuses)),
            _age(pod.metadata.creationTimestamp, now),
        )
    return table


def event_object(event: Event) -> str:
    """The OBJECT column: kind/name as kubectl writes it, then the field path if any."""
    ref = event.involvedObject
    name = f"{ref.kind.lower() or 'pod'}/{ref.name}"
    return f"{name}/{ref.fieldPath}" if ref.fieldPath else name


def render_events(events: EventList, now: datetime, *, all_namespaces: bool = True) -> RenderableType:
    """kubectl get events (-A adds NAMESPACE), with the count as a column; oldest first."""
    if not events.items:
        return Text("No events.")
    table = Table(box=None, pad_edge=False, header_style="bold")
    columns = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "COUNT"]
    if all_namespaces:
        columns.insert(0, "NAMESPACE")
    for column in columns:
        table.add_column(column, no_wrap=column != "MESSAGE")
    ordered = sorted(events.items, key=lambda e: e.lastTimestamp or e.firstTimestamp or "")
    for event in ordered:
        row = [
            _age(event.lastTimestamp or event.firstTimestamp, now),
            Text(event.type, style="yellow" if event.type == "Warning" else ""),
            event.reason,
            event_object(event),
            event.message,
            str(event.count),
        ]
        if all_namespaces:
            row.insert(0, event.involvedObject.namespace)
        table.add_row(*row)
    return table


def watch_frame(
    snapshot: ActorSnapshot | None, source: str, at: datetime, error: str | None = None
) -> Group:
    """What --watch shows: a header line, the tree (the last good one), any fetch error."""
    header = Text(f"{source}  {at:%H:%M:%S}  (Ctrl-C to quit)", style="dim")
    parts: list[RenderableType] = [header]
    if snapshot is not None:
        parts.append(render_tree(snapshot))
    if error is not None:
        parts.append(Text(f"unreachable: {error}", style="bold red"))
    return Group(*parts)


# -- the command line ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Inspect a running pykubelet through its admin socket."
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--socket",
        default=DEFAULT_SOCKET,
        metavar="PATH",
        help=f"the daemon's admin socket, <root-dir>/pykubelet.sock (default {DEFAULT_SOCKET})",
    )
    target.add_argument(
        "--address",
        metavar="URL",
        help="http(s) URL of the kubelet's read-only/debug endpoint instead of the socket",
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="default 5")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tree = commands.add_parser("tree", help="the live actor tree")
    tree.add_argument("--watch", action="store_true", help="redraw until Ctrl-C")
    tree.add_argument("--interval", type=float, default=1.0, metavar="S", help="default 1")
    tree.add_argument("-o", "--output", choices=["json"], help="the snapshot JSON as served")

    pods = commands.add_parser("pods", help="the pods this kubelet runs")
    pods.add_argument("-o", "--output", choices=["json"], help="the PodList JSON as served")

    events = commands.add_parser("events", help="what the kubelet did to its pods, oldest first")
    events.add_argument("-n", "--namespace", metavar="NS", help="only the events of pods in NS")
    events.add_argument("-o", "--output", choices=["json"], help="the EventList JSON as served")

    for action in ("restart", "crash"):
        sub = commands.add_parser(
            action,
            help=f"{action} one actor"
            + (" (needs --enable-fault-injection on the daemon)" if action == "crash" else ""),
        )
        sub.add_argument("path", help='the actor\'s path in the tree, e.g. "root/pleg"')
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "tree" and args.watch and args.output:
        parser.error("tree --watch draws the tree; it does not combine with -o json")
    if args.address is not None and not args.address.startswith(("http://", "https://")):
        parser.error(f"--address {args.address}: give an http:// or https:// URL")
    if args.command == "tree" and args.interval <= 0:
        parser.error("--interval must be > 0 seconds")
    client = AdminClient(socket=args.socket, address=args.address, timeout=args.timeout)
    try:
        return _run(args, client, Console())
    except InspectError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()


def _run(args: argparse.Namespace, client: AdminClient, console: Console) -> int:
    if args.command == "tree":
        if args.watch:
            return _watch(client, console, args.interval)
        snapshot, raw = client.actors()
        if args.output == "json":
            _print_json(raw)
        else:
            console.print(render_tree(snapshot))
    elif args.command == "pods":
        pods, raw = client.pods()
        if args.output == "json":
            _print_json(raw)
        else:
            console.print(render_pods(pods, datetime.now(timezone.utc)))
    elif args.command == "events":
        events, raw = client.events(args.namespace)
        if args.output == "json":
            _print_json(raw)
        else:
            now = datetime.now(timezone.utc)
            console.print(render_events(events, now, all_namespaces=not args.namespace))
    else:
        result = client.act(args.path, args.command)
        print(f"{args.path.strip('/')}: {result}")
    return 0


def _watch(client: AdminClient, console: Console, interval: float) -> int:
    """Redraw every interval until Ctrl-C. An unreachable daemon at the start is an error;
    later (the daemon restarting) it is shown under the last tree and retried."""
    snapshot, _ = client.actors()
    try:
        first = watch_frame(snapshot, client.where, datetime.now())
        with Live(first, console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                error = None
                try:
                    snapshot, _ = client.actors()
                except InspectError as exc:
                    error = str(exc)
                live.update(watch_frame(snapshot, client.where, datetime.now(), error), refresh=True)
    except KeyboardInterrupt:
        return 0


def _print_json(raw: bytes) -> None:
    sys.stdout.write(msgspec.json.format(raw, indent=2).decode() + "\n")


if __name__ == "__main__":
    sys.exit(main())
