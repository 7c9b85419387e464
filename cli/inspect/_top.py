"""`pykubelet-inspect top`: the actor tree under load, as top shows processes. Between two
snapshots, each actor's messages/s (its mailbox's `received` delta over the time between
the polls), mailbox depth, restarts and state, busiest first. top_rows and render_top are
pure; run_top polls and prints."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime

import msgspec
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pykubelet.messages.supervision import ActorSnapshot

from ._client import AdminClient, InspectError
from ._render import STATE_STYLES

COLUMNS = ("ACTOR", "STATE", "RESTARTS", "MAILBOX", "MSG/S", "RECEIVED")
_GAP = 2  # rich's Table with box=None and pad_edge=False: one space either side of a cell
_HEADER_LINES = 3  # the header line, the table's header, the "more" line


class TopRow(msgspec.Struct, frozen=True):
    """One actor between two polls; None where it has no mailbox (a supervisor)."""

    path: str
    state: str
    restarts: int
    depth: int | None
    capacity: int | None
    received: int | None
    messages_per_second: float | None


def walk(actor: ActorSnapshot) -> Iterator[ActorSnapshot]:
    yield actor
    for child in actor.children:
        yield from walk(child)


def top_rows(before: ActorSnapshot | None, after: ActorSnapshot, seconds: float) -> list[TopRow]:
    """The actors of `after`, busiest first (messages/s, then mailbox depth, then path;
    supervisors, which have no mailbox, last).

    The rate is the mailbox's received count less the one `seconds` earlier in `before`;
    an actor new since then counts from 0, and so does one whose count went down (a new
    mailbox). Without `before` (the first poll) or mailbox there is no rate."""
    earlier = {actor.path: actor.mailbox.received for actor in walk(before) if actor.mailbox} if before else {}
    rows = []
    for actor in walk(after):
        box, rate = actor.mailbox, None
        if box is not None and before is not None and seconds > 0:
            previous = earlier.get(actor.path, 0)
            rate = (box.received - (previous if previous <= box.received else 0)) / seconds
        rows.append(TopRow(
            path=actor.path, state=actor.state, restarts=actor.restarts,
            depth=box.depth if box else None, capacity=box.capacity if box else None,
            received=box.received if box else None, messages_per_second=rate,
        ))
    rows.sort(key=lambda r: (r.received is None, -(r.messages_per_second or 0.0), -(r.depth or 0), r.path))
    return rows


def render_top(rows: list[TopRow], source: str, at: datetime, interval: float, *,
               limit: int | None = None, error: str | None = None) -> RenderableType:
    """The header (where, when, totals), the table (the first `limit` rows), what is left out."""
    total = sum(r.messages_per_second or 0.0 for r in rows)
    header = Text(f"{source}  {at:%H:%M:%S}  every {interval:g}s  {len(rows)} actors  {total:.1f} messages/s",
                  style="dim", no_wrap=True, overflow="ignore")
    shown = rows if limit is None else rows[:max(limit, 1)]
    cells = [_cells(row) for row in shown]
    widths = [max(cell_len(cell) for cell in column) for column in zip(COLUMNS, *cells)]
    # As wide as its cells, so that rich cuts none (printed with crop=False): a long pod
    # worker's path stays whole, and so does every number.
    table = Table(box=None, pad_edge=False, header_style="bold", width=sum(widths) + _GAP * (len(widths) - 1))
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("ACTOR", "STATE") else "right", no_wrap=True)
    for row, texts in zip(shown, cells):
        full = row.depth is not None and row.capacity is not None and row.depth >= row.capacity
        styles = ["", STATE_STYLES.get(row.state, ""), "yellow" if row.restarts else "",
                  "bold red" if full else "", "", ""]
        table.add_row(*(Text(text, style=style) for text, style in zip(texts, styles)))
    parts: list[RenderableType] = [header, table]
    if len(shown) < len(rows):
        parts.append(Text(f"... {len(rows) - len(shown)} more (quieter) actors", style="dim"))
    if error is not None:
        parts.append(Text(f"unreachable: {error}", style="bold red"))
    return Group(*parts)


def _cells(row: TopRow) -> list[str]:
    return [
        row.path, row.state, str(row.restarts),
        "-" if row.depth is None else f"{row.depth}/{row.capacity}",
        "-" if row.messages_per_second is None else f"{row.messages_per_second:.1f}",
        "-" if row.received is None else str(row.received),
    ]


def top_json(rows: list[TopRow], at: datetime, interval: float) -> bytes:
    return msgspec.json.encode({"at": at.isoformat(), "interval": interval, "actors": rows})


def run_top(client: AdminClient, console: Console, *, interval: float, iterations: int | None,
            output: str | None = None, sleep: Callable[[float], None] | None = None,
            clock: Callable[[], float] | None = None, wall: Callable[[], datetime] | None = None) -> int:
    """Poll every `interval` s. With `iterations`, print that many tables (or JSON lines),
    one per interval, and return: an unreachable daemon is then an error. Without, redraw
    live until Ctrl-C, keeping the last table up while the daemon is away."""
    sleep, clock, wall = sleep or time.sleep, clock or time.monotonic, wall or datetime.now
    before, polled = client.actors()[0], clock()
    if iterations is not None:
        for index in range(iterations):
            sleep(interval)
            after, now = client.actors()[0], clock()
            rows = top_rows(before, after, now - polled)
            if output == "json":
                console.file.write(top_json(rows, wall(), interval).decode() + "\n")
                console.file.flush()
            else:
                if index:
                    console.print()
                console.print(render_top(rows, client.where, wall(), interval), crop=False)
            before, polled = after, now
        return 0
    try:
        with Live(Text(f"{client.where}: first interval..."), console=console, auto_refresh=False) as live:
            rows: list[TopRow] = []
            while True:
                sleep(interval)
                error = None
                try:
                    after, now = client.actors()[0], clock()
                    rows = top_rows(before, after, now - polled)
                    before, polled = after, now
                except InspectError as exc:
                    error = str(exc)
                limit = max(console.size.height - _HEADER_LINES - (error is not None), 1)
                live.update(render_top(rows, client.where, wall(), interval, limit=limit, error=error), refresh=True)
    except KeyboardInterrupt:
        return 0
