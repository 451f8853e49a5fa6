"""Event-bus subscribers: the JSONL event log, the progress display, JSON output."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from anyio.streams.file import FileWriteStream
from anyio.streams.memory import MemoryObjectReceiveStream
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ._events import EvaluationFinished, Event, Notice, PhaseStarted, RunFinished, RunStarted
from .types import Verdict


def event_log(path: Path):  # type: ignore[no-untyped-def]
    """A subscriber appending every event as one JSON line to ``path``."""

    async def write(stream: MemoryObjectReceiveStream[Event]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        async with stream, await FileWriteStream.from_path(path, append=True) as out:
            async for event in stream:
                await out.send((event.to_json() + "\n").encode())

    return write


def json_lines(out: TextIO = sys.stdout):  # type: ignore[no-untyped-def]
    """A subscriber printing one JSON object per finished evaluation (``--json``)."""

    async def write(stream: MemoryObjectReceiveStream[Event]) -> None:
        async with stream:
            async for event in stream:
                if isinstance(event, EvaluationFinished) and event.final:
                    out.write(json.dumps(event.summary()) + "\n")
                    out.flush()

    return write


_STYLE = {Verdict.PASS: "green", Verdict.FAIL: "red", Verdict.ERROR: "yellow"}


def progress_display(console: Console):  # type: ignore[no-untyped-def]
    """A subscriber drawing a progress bar and one line per finished evaluation."""

    async def show(stream: MemoryObjectReceiveStream[Event]) -> None:
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        counts = {v: 0 for v in Verdict}
        bar = None
        running: dict[str, str] = {}
        with progress:
            async with stream:
                async for event in stream:
                    if isinstance(event, Notice):
                        style = "red" if event.level == "error" else "cyan"
                        console.print(f"[{style}]{escape(event.message)}[/]")
                    elif isinstance(event, RunStarted):
                        console.print(
                            f"run [bold]{event.run_id}[/] on the {event.runtime} runtime: "
                            f"{event.total} evaluations"
                            + (f" ({event.done} already done)" if event.done else "")
                        )
                        bar = progress.add_task("evaluating", total=event.total, counts="")
                    elif isinstance(event, PhaseStarted):
                        running[event.evaluation_id] = event.phase.value
                    elif isinstance(event, EvaluationFinished):
                        running.pop(event.evaluation_id, None)
                        if not event.final:
                            console.print(
                                f"[yellow]retrying[/] {escape(event.task)} "
                                f"{escape(_short(event.submission))}: {escape(event.reason)}"
                            )
                            continue
                        counts[event.verdict] += 1
                        console.print(_line(event))
                        if bar is not None:
                            text = " ".join(f"{v.value}={n}" for v, n in counts.items() if n)
                            progress.update(bar, advance=1, counts=text)
                    elif isinstance(event, RunFinished) and event.interrupted:
                        console.print("[yellow]interrupted: finished evaluations are kept; "
                                      f"go on with `anvil run --resume {event.run_id}`[/]")

    return show


def _short(submission: str) -> str:
    return Path(submission).name


def _line(event: EvaluationFinished) -> str:
    style = _STYLE[event.verdict]
    where = f" at {event.phase.value}" if event.phase and event.verdict is not Verdict.PASS else ""
    return (
        f"[{style}]{event.verdict.value:5}[/]{where:12} {escape(event.task)} "
        f"{escape(_short(event.submission))} [dim]({event.duration_s:.1f}s)[/] "
        f"{escape(event.reason)}"
    )
