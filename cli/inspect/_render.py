"""Rendering for pykubelet-inspect, pure: the actor tree snapshot as a rich tree, the events
as a kubectl-like table, the --watch frame, and the ages both tables print (the pods table
is _pods.py). No I/O: the caller prints."""

from __future__ import annotations

from datetime import datetime, timezone

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from pykubelet.messages.events import Event, EventList
from pykubelet.messages.supervision import ActorSnapshot

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


def parse_time(timestamp: str) -> datetime | None:
    """An RFC 3339 time as the API writes it; None when it is not one. One without a zone
    (hand-made) is taken as UTC, so that it compares with the others."""
    try:
        at = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def age(timestamp: str | None, now: datetime) -> str:
    """The AGE or LAST SEEN of a timestamp, "<unknown>" without one, as kubectl prints."""
    if not timestamp:
        return "<unknown>"
    at = parse_time(timestamp)
    return "<invalid>" if at is None else human_age((now - at).total_seconds())


def event_object(event: Event) -> str:
    """The OBJECT column: kind/name as kubectl writes it, then the field path if any."""
    ref = event.involved_object
    name = f"{ref.kind.lower() or 'pod'}/{ref.name}"
    return f"{name}/{ref.field_path}" if ref.field_path else name


# The MESSAGE column is given what the other columns leave of the terminal, but never less
# than this: below it a message would be a column of single words.
MESSAGE_MIN_WIDTH = 20
_GAP = 2  # rich's Table with box=None and pad_edge=False: one space either side of a cell


def render_events(events: EventList, now: datetime, *, all_namespaces: bool = True,
                  width: int | None = None) -> RenderableType:
    """kubectl get events (-A adds NAMESPACE), with the count as a column; oldest first.

    `width` is the terminal's (None: no limit, a message on one line). Every column keeps
    its cells whole; only MESSAGE gives way, wrapped within what the others leave (at least
    MESSAGE_MIN_WIDTH: when even that does not fit, the terminal wraps the line)."""
    if not events.items:
        return Text("No events.")
    columns = ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "COUNT"]
    if all_namespaces:
        columns.insert(0, "NAMESPACE")
    ordered = sorted(events.items, key=lambda e: e.last_timestamp or e.first_timestamp or "")
    rows = []
    for event in ordered:
        row = [age(event.last_timestamp or event.first_timestamp, now), event.type, event.reason,
               event_object(event), event.message, str(event.count)]
        if all_namespaces:
            row.insert(0, event.involved_object.namespace)
        rows.append(row)
    widths = [max(cell_len(cell) for cell in column) for column in zip(columns, *rows)]
    message = columns.index("MESSAGE")
    others = sum(widths) - widths[message] + _GAP * (len(columns) - 1)
    if width is not None:
        widths[message] = min(widths[message], max(MESSAGE_MIN_WIDTH, width - others))
    table = Table(box=None, pad_edge=False, header_style="bold", width=others + widths[message])
    for column, cells in zip(columns, widths):
        wraps = column == "MESSAGE"
        table.add_column(column, width=cells, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for row in rows:
        cells = [Text(cell) for cell in row]  # Text: a message is no markup
        cells[columns.index("TYPE")].stylize("yellow" if row[columns.index("TYPE")] == "Warning" else "")
        table.add_row(*cells)
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
