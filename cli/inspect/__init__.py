"""pykubelet-inspect: look into a running daemon through its admin socket (or its read-only
HTTP endpoint): the live actor tree and its load (top), the pods, the events, a container's
log, a command run in a container, and fault injection.

This module is the command line. AdminClient (_client.py) is the thin HTTP port; rendering
(_render.py, the pods table _pods.py, top's table _top.py) and the choice of pod and container (_targets.py) are
pure; main() wires them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from typing import BinaryIO, Sequence

import msgspec
import yaml
from rich.console import Console
from rich.live import Live

from ._client import DEFAULT_SOCKET, PROG, RUN_TIMEOUT, AdminClient, InspectError
from ._pods import last_state, pod_age, pod_resources, pod_status, render_pods
from ._render import STATE_STYLES, actor_label, event_object, human_age, render_events, render_tree, watch_frame
from ._targets import choose_container, find_pod
from ._top import TopRow, render_top, run_top, top_rows

__all__ = [
    "DEFAULT_SOCKET", "PROG", "AdminClient", "InspectError",
    "STATE_STYLES", "actor_label", "event_object", "human_age", "last_state", "pod_age", "pod_resources",
    "pod_status", "render_events", "render_pods", "render_tree", "watch_frame", "choose_container", "find_pod",
    "TopRow", "render_top", "run_top", "top_rows", "main",
]

EXEC_USAGE = f"{PROG} exec POD [-n NAMESPACE] [-c CONTAINER] -- CMD [ARGS...]"
_UNFOLDED = 2**31 - 1  # -o yaml's line width: PyYAML folds long strings at 80


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

    top = commands.add_parser(
        "top", help="the actors under load: messages/s, mailbox depth, restarts, busiest first",
        description="Poll the actor tree every interval and show each actor's messages/s (its "
                    "mailbox's received count over the interval), mailbox depth/capacity, restarts "
                    "and state, busiest first. Live until Ctrl-C, or --once / --iterations N for scripts.",
    )
    top.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between polls (default 2)")
    count = top.add_mutually_exclusive_group()
    count.add_argument("--once", action="store_true", help="one table over one interval, then exit")
    count.add_argument("--iterations", type=int, metavar="N", help="N tables, one per interval, then exit")
    top.add_argument("-o", "--output", choices=["json"],
                     help="json: one object a line per interval (needs --once or --iterations)")

    pods = commands.add_parser("pods", help="the pods this kubelet runs")
    pods.add_argument(
        "-o", "--output", choices=["wide", "json", "yaml"],
        help="wide: also IP, NODE, QOS, CPU and MEMORY (request/limit) and LAST STATE; "
             "json, yaml: the PodList as served",
    )

    events = commands.add_parser("events", help="what the kubelet did to its pods, oldest first")
    events.add_argument("-n", "--namespace", metavar="NS", help="only the events of pods in NS")
    events.add_argument("-o", "--output", choices=["json"], help="the EventList JSON as served")

    logs = commands.add_parser(
        "logs",
        help="a container's log, as kubectl logs prints it",
        description="Print a container's log as it arrives, through the admin socket.",
    )
    _add_pod_arguments(logs)
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep streaming new output until the container stops (or Ctrl-C, exit 0)")
    logs.add_argument("--tail", type=int, default=-1, metavar="N",
                      help="only the last N lines (default -1: the whole log)")
    logs.add_argument("--timestamps", action="store_true", help="each line with its RFC 3339 time")
    logs.add_argument("-p", "--previous", action="store_true",
                      help="the log of the container's previous, ended, instance")

    run = commands.add_parser(
        "exec",
        usage=EXEC_USAGE,
        help="run a command in a container and print its output (no stdin, no tty)",
        description=(
            "Run CMD in the container through the daemon's /run (CRI ExecSync) and print its output, "
            "stdout then stderr, once it has ended. Not interactive: no stdin, no tty. Exit status: 0 "
            "when the command ran, whatever its own exit code (/run does not report it); 1, with the "
            "error, when it could not run. Arguments cannot be empty or contain whitespace (/run "
            f"splits the command on whitespace); the daemon ends a command after {RUN_TIMEOUT:g} s."
        ),
    )
    _add_pod_arguments(run)

    for action in ("restart", "crash"):
        sub = commands.add_parser(
            action,
            help=f"{action} one actor"
            + (" (needs --enable-fault-injection on the daemon)" if action == "crash" else ""),
        )
        sub.add_argument("path", help='the actor\'s path in the tree, e.g. "root/pleg"')
    return parser


def _add_pod_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pod", metavar="POD",
        help="the pod's name; for a static pod also without the node name (web for web-node1)",
    )
    parser.add_argument("-n", "--namespace", default="default", metavar="NAMESPACE", help="default: default")
    parser.add_argument("-c", "--container", metavar="CONTAINER",
                        help="needed when the pod has more than one container")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after "--" is exec's command, options and all, never ours.
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = f"; exec's command goes after --: {EXEC_USAGE}" if args.command == "exec" else ""
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if args.command == "exec" and not command:
        parser.error(f"exec: give the command after --: {EXEC_USAGE}")
    if command and args.command != "exec":
        parser.error(f"{args.command}: takes no command after --; only exec does")
    if args.command == "tree" and args.watch and args.output:
        parser.error("tree --watch draws the tree; it does not combine with -o json")
    if args.address is not None and not args.address.startswith(("http://", "https://")):
        parser.error(f"--address {args.address}: give an http:// or https:// URL")
    if args.address is not None and args.command in ("logs", "exec"):
        parser.error(f"{args.command} goes through the admin socket (--socket): "
                     "the kubelet's read-only port serves no logs and runs no commands")
    if args.command in ("tree", "top") and args.interval <= 0:
        parser.error("--interval must be > 0 seconds")
    if args.command == "top" and args.iterations is not None and args.iterations < 1:
        parser.error(f"--iterations {args.iterations}: give 1 or more")
    if args.command == "top" and args.output and not (args.once or args.iterations):
        parser.error("top -o json prints lines for scripts: give --once or --iterations N")
    if args.command == "logs" and args.tail < -1:
        parser.error(f"--tail {args.tail}: give a number of lines >= 0, or -1 for the whole log")
    client = AdminClient(socket=args.socket, address=args.address, timeout=args.timeout)
    try:
        return _run(args, command, client, Console())
    except InspectError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader had enough (`logs web | head`)
        _silence_stdout()
        return 0
    finally:
        client.close()


def _run(args: argparse.Namespace, command: list[str], client: AdminClient, console: Console) -> int:
    if args.command == "tree":
        if args.watch:
            return _watch(client, console, args.interval)
        snapshot, raw = client.actors()
        if args.output == "json":
            _print_json(raw)
        else:
            console.print(render_tree(snapshot))
    elif args.command == "top":
        iterations = 1 if args.once else args.iterations
        return run_top(client, console, interval=args.interval, iterations=iterations, output=args.output)
    elif args.command == "pods":
        pods, raw = client.pods()
        if args.output == "json":
            _print_json(raw)
        elif args.output == "yaml":
            _print_yaml(raw)
        else:
            now = datetime.now(timezone.utc)
            table = render_pods(pods, now, wide=args.output == "wide", width=_terminal_width())
            console.print(table, crop=False)  # the table fits itself; rich must cut no name
    elif args.command == "events":
        events, raw = client.events(args.namespace)
        if args.output == "json":
            _print_json(raw)
        else:
            now = datetime.now(timezone.utc)
            table = render_events(events, now, all_namespaces=not args.namespace, width=_terminal_width())
            console.print(table, crop=False)  # the table fits itself; rich must cut no reason or count
    elif args.command == "logs":
        return _logs(args, client, sys.stdout.buffer)
    elif args.command == "exec":
        return _exec(args, command, client, sys.stdout.buffer)
    else:
        result = client.act(args.path, args.command)
        print(f"{args.path.strip('/')}: {result}")
    return 0


def _logs(args: argparse.Namespace, client: AdminClient, out: BinaryIO) -> int:
    """The log, raw, as it arrives. Ctrl-C is how a follow is meant to end: exit 0."""
    try:
        pods, _ = client.pods()
        pod = find_pod(pods, args.pod, args.namespace)
        client.logs(
            pod.metadata.namespace, pod.metadata.name, choose_container(pod, args.container), out,
            follow=args.follow, tail_lines=args.tail if args.tail >= 0 else None,
            timestamps=args.timestamps, previous=args.previous,
        )
    except KeyboardInterrupt:
        pass
    return 0


def _exec(args: argparse.Namespace, command: list[str], client: AdminClient, out: BinaryIO) -> int:
    pods, _ = client.pods()
    pod = find_pod(pods, args.pod, args.namespace)
    output = client.run(pod.metadata.namespace, pod.metadata.name, choose_container(pod, args.container), command)
    out.write(output)
    out.flush()
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


def _print_yaml(raw: bytes) -> None:
    # The keys in the order served, as -o json keeps them; long strings unfolded, so that a
    # message stays on one line for grep.
    sys.stdout.write(yaml.safe_dump(msgspec.json.decode(raw), sort_keys=False, allow_unicode=True, width=_UNFOLDED))


def _terminal_width() -> int | None:
    """The terminal's width (COLUMNS first, as shutil reads it); None when stdout is no
    terminal, so that a pipe gets every column, as kubectl's output does."""
    return shutil.get_terminal_size(fallback=(0, 0)).columns or None


def _silence_stdout() -> None:
    """Point stdout at /dev/null: Python flushes it at exit, and the closed pipe would
    raise there again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
