"""Event-bus subscribers: the JSONL event log, the progress display, JSON output.

Each subscriber is isolated (:func:`isolated`): one that raises is logged once
and detached (its stream closes, so the bus stops feeding it) while scoring,
the store and the other subscribers go on. Output that can block (stdout to a
pipe) is written from a worker thread, so a stuck reader never blocks the
event loop; the bus drops what such a subscriber cannot take (see
:class:`~engine._events.EventBus`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._events import (
    EvaluationFinished,
    EvaluationStarted,
    Event,
    ItemFinished,
    Notice,
    PhaseStarted,
    RunFinished,
    RunStarted,
)
from ._logs import INLINE_WRITE
from .types import Verdict

EVENT_LOG_BATCH = 512  # events per write of the event log, at most

log = logging.getLogger("anvil.engine")

Stream = MemoryObjectReceiveStream[Event]
Subscriber = Callable[[Stream], Coroutine[Any, Any, None]]


def isolated(name: str, subscriber: Subscriber) -> Subscriber:
    """``subscriber`` that can fail alone: an exception is logged once and detaches it.

    Its stream is closed on the way out, so the bus stops feeding it; the run and
    the other subscribers are not affected. Cancellation passes through.
    """

    async def run(stream: Stream) -> None:
        try:
            async with stream:
                await subscriber(stream)
        except Exception as exc:  # noqa: BLE001 - a display or log must never stop a run
            log.error("%s stopped (%s: %s); the run goes on without it",
                      name, type(exc).__name__, exc)

    run.__name__ = run.__qualname__ = name
    return run


def event_log(path: Path) -> Subscriber:
    """A subscriber appending every event as one JSON line to ``path``."""

    async def write(stream: Stream) -> None:
        await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
        out: BinaryIO = await anyio.to_thread.run_sync(lambda: path.open("ab"))
        try:
            async for event in stream:
                # Every event queued by now goes in one write, and a write of a few KiB
                # goes to the page cache from the loop: a worker-thread round trip per
                # event cost more than the events themselves (8% of anvil's CPU). Flushed
                # each time, so a killed anvil loses no event already handled.
                lines = [event.to_json()]
                with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                    while len(lines) < EVENT_LOG_BATCH:
                        lines.append(stream.receive_nowait().to_json())
                data = ("\n".join(lines) + "\n").encode()
                if len(data) <= INLINE_WRITE:
                    _write_flush_bytes(out, data)
                else:
                    await anyio.to_thread.run_sync(_write_flush_bytes, out, data)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(out.close)

    return isolated("event-log", write)


def _write_flush_bytes(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


def json_lines(out: TextIO | None = None, on_closed: Callable[[str], None] | None = None
               ) -> Subscriber:
    """A subscriber printing one JSON object per finished evaluation (``--json``).

    Lines are written from a worker thread: a reader that does not read (a paused
    pager) stalls this subscriber only. When the reader goes away (``| head -1``),
    JSON output stops and ``on_closed`` is told why; nothing else does.

    Args:
        out: where to write (default: ``sys.stdout``, looked up when the run starts).
        on_closed: called with one line for the human when output had to stop.
    """

    async def write(stream: Stream) -> None:
        target = out or sys.stdout
        async for event in stream:
            if not (isinstance(event, EvaluationFinished) and event.final):
                continue
            summary = event.summary()
            if event.node is not None:  # the host that ran it (the ray executor)
                summary["node"] = event.node
            line = json.dumps(summary) + "\n"
            try:
                await anyio.to_thread.run_sync(_write_flush, target, line)
            except OSError as exc:
                _silence(target)
                if on_closed is not None:
                    why = "the reader closed the pipe" if exc.errno == errno.EPIPE else str(exc)
                    on_closed(f"--json output stopped ({why}); the run goes on")
                return

    return isolated("json-lines", write)


def _write_flush(out: TextIO, line: str) -> None:
    out.write(line)
    out.flush()


def _silence(out: TextIO) -> None:
    """Point ``out``'s descriptor at /dev/null so the interpreter's final flush of the
    lines still buffered does not fail again (the Python docs' remedy for EPIPE)."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def stderr_console() -> Console:
    """The console for human output: soft-wrapped (never cut or wrapped at 80 columns)
    when stderr is not a terminal, so every line stays whole for ``grep``."""
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=True, highlight=False, soft_wrap=True)
    return console


def plural(n: int, word: str) -> str:
    """``1 evaluation``, ``2 evaluations``, ``2 processes``."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith(("s", "sh", "ch", "x")) else f"{n} {word}s"


STYLE = {Verdict.PASS: "green", Verdict.FAIL: "red", Verdict.ERROR: "yellow"}


@dataclass
class _Running:
    task: str
    submission: str
    phase: str = "queued"
    items: int = 0


class _LiveProgress(Progress):
    """The overall bar, then one row per running evaluation with its current phase."""

    def __init__(self, running: dict[str, _Running], console: Console) -> None:
        self.running = running  # first: the base class may render at once
        super().__init__(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        rows = list(self.running.values())  # a snapshot: the event loop keeps changing it
        if not rows:
            return
        shown = max(1, min(len(rows), self.console.height - 4))
        table = Table.grid(padding=(0, 2))
        for row in rows[:shown]:
            items = f"{plural(row.items, 'item')} done" if row.phase == "oracle" else ""
            table.add_row(f"  {escape(row.task)}", escape(row.submission),
                          f"[cyan]{row.phase}[/]", items)
        if len(rows) > shown:
            table.add_row(f"  ... and {len(rows) - shown} more", "", "", "")
        yield table


def progress_display(console: Console) -> Subscriber:
    """A subscriber printing one line per finished evaluation; on a terminal, also a live
    bar with each running evaluation's current phase (nothing but plain lines otherwise)."""

    async def show(stream: Stream) -> None:
        running: dict[str, _Running] = {}
        live = _LiveProgress(running, console) if console.is_terminal else None
        counts = {v: 0 for v in Verdict}
        bar = None
        if live is not None:
            live.start()
        try:
            async for event in stream:
                if isinstance(event, Notice):
                    style = "red" if event.level == "error" else "cyan"
                    console.print(f"[{style}]{escape(event.message)}[/]")
                elif isinstance(event, RunStarted):
                    console.print(
                        f"run [bold]{event.run_id}[/] on the {escape(event.runtime)} runtime: "
                        f"{plural(event.total, 'evaluation')}"
                        + (f" ({event.done} already done)" if event.done else "")
                    )
                    if live is not None:
                        bar = live.add_task("evaluating", total=event.total, counts="")
                elif isinstance(event, EvaluationStarted):
                    running[event.evaluation_id] = _Running(event.task, _short(event.submission))
                elif isinstance(event, PhaseStarted):
                    if event.evaluation_id in running:
                        running[event.evaluation_id].phase = event.phase.value
                elif isinstance(event, ItemFinished):
                    if event.evaluation_id in running:
                        running[event.evaluation_id].items += 1
                elif isinstance(event, EvaluationFinished):
                    running.pop(event.evaluation_id, None)
                    if not event.final:
                        console.print(
                            f"[yellow]retrying[/] {escape(event.task)} "
                            f"{escape(_short(event.submission))}: {escape(event.reason)}"
                        )
                        continue
                    counts[event.verdict] += 1
                    console.print(verdict_line(event))
                    if live is not None and bar is not None:
                        text = " ".join(f"{v.value}={n}" for v, n in counts.items() if n)
                        live.update(bar, advance=1, counts=text)
                elif isinstance(event, RunFinished) and event.interrupted:
                    console.print("[yellow]interrupted: finished evaluations are kept; "
                                  f"go on with `anvil run --resume {event.run_id}`[/]")
        finally:
            if live is not None:
                live.stop()

    return isolated("progress", show)


def _short(submission: str) -> str:
    return Path(submission).name


def verdict_line(event: EvaluationFinished) -> str:
    """One finished evaluation as rich markup, user text escaped."""
    style = STYLE[event.verdict]
    where = f" at {event.phase.value}" if event.phase and event.verdict is not Verdict.PASS else ""
    return (
        f"[{style}]{event.verdict.value:5}[/]{where:12} {escape(event.task)} "
        f"{escape(_short(event.submission))} [dim]({event.duration_s:.1f}s)[/] "
        f"{escape(event.reason)}"
    )
