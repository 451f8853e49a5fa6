"""``anvil report`` and ``anvil traces``: reading what runs stored."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from .._errors import AnvilError
from .._report import (
    Format,
    LeaderboardFormat,
    render_comparison,
    render_leaderboard,
    render_report,
    scoreboard,
)
from .._store import EvaluationRecord, RunRecord, Store
from .._traces import export_otlp_json, item_ids, load_trace, resolve, select, waterfall
from ._app import (
    DbOpt,
    HomeOpt,
    app,
    code_of,
    err,
    fail,
    open_store,
)


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(
        metavar="RUN_ID", help="A run id, or 'latest'.")] = "latest",
    format: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = "table",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE",
        help="Write to FILE (its folder is created) instead of stdout.")] = None,
    against: Annotated[str | None, typer.Option(
        "--against", metavar="RUN_B",
        help="Instead, list the tasks and items whose verdict changed from RUN_B to RUN_ID "
             "(regressions first), matched by task and submission folder name; "
             "table or json.")] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="DIR",
        help="Also draw the charts into DIR as SVG and PNG: failed evaluations by phase "
             "and failed items by category per submission (stacked bars), success by "
             "cumulative tier (with tiers) and pass@k (with repeats).")] = None,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """Scoreboard of a run, and its metrics (errors are anvil's: left out of every rate):

    \b
    - all-pass success (pass@1): evaluations with every phase and every item passed
    - item pass rate: passed items among the judged items of evaluations whose oracle ran
    - success by cumulative tier: all-pass success with only the items of base, base+R1, ...,
      final (all tiers), and the relative change from base to final
    - requirement accuracy: requirements (`requirement` marker) whose items all passed
    - balanced score: harmonic mean of item pass rate and requirement accuracy
    - layered scores: item pass rate per `level` marker (leaf, mid, root)
    - integration gap: evaluations whose leaf items all pass while a mid/root item fails
    - failed items by category per submission; failed evaluations by phase per task
    - pass@k (run --repeat K): mean of 1-C(n-c,k)/C(n,k) over task x submission (n runs, c pass)
    - item flip rate: items whose outcome differs between repeats, of those judged in 2+ repeats
    - quarantine: items the reference (folder `reference`) fails or that flip; scores without them

    The table is as wide as the terminal (reasons wrap inside their cell); sent
    to a file or a pipe, each row stays on one line. Several runs side by side, a row
    per candidate set: `anvil leaderboard RUN...`.
    """
    try:
        store = open_store(home, db)
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None
    record = store.run(run_id)
    if record is None:
        raise fail(f"no run {run_id!r} in {store.url}")
    baseline = None
    if against is not None:
        if format not in ("table", "json"):
            raise fail(f"--against compares as table or json, not {format}")
        baseline = store.run(against)
        if baseline is None:
            raise fail(f"no run {against!r} in {store.url}")
        if plot is not None:
            raise fail("--plot draws one run's charts: not with --against")
    if plot is not None:
        _plot(store, record, plot)
    if format == "table" and output is None and sys.stdout.isatty():
        console = Console(highlight=False)
        if baseline is not None:
            render_comparison(store, record, baseline, "table", console)
        else:
            render_report(store, record, "table", console)
        return
    text = (render_comparison(store, record, baseline, format) if baseline is not None
            else render_report(store, record, format))
    assert text is not None
    _write_out(text, output, "the report")


def _plot(store: Store, record: RunRecord, folder: Path) -> None:
    from .._plots import write_charts  # matplotlib loads only for --plot

    try:
        written = write_charts(scoreboard(store, record).metrics, folder)
    except OSError as exc:
        where = f" ({exc.filename}: {exc.strerror})" if exc.filename else f" ({exc})"
        raise fail(f"{folder}: cannot write the charts{where}") from None
    for path in written:
        err.print(f"wrote {escape(str(path))}")


@app.command()
def leaderboard(
    runs: Annotated[list[str], typer.Argument(
        metavar="RUN", show_default=False,
        help="Run ids (or 'latest'), each the run of one candidate set.")],
    format: Annotated[LeaderboardFormat, typer.Option(
        "--format", "-f", help="md (a Markdown table), csv or json.")] = "md",
    name: Annotated[list[str] | None, typer.Option(
        "--name", metavar="RUN=NAME", show_default=False,
        help="Name RUN's row NAME (repeatable). A row is named after its run's "
             "submissions folder otherwise.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE",
        help="Write to FILE (its folder is created) instead of stdout.")] = None,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """Several candidate sets in one table, best first (by task pass rate, then item pass
    rate), with the metrics of `anvil report` as columns.

    A candidate set is what one run evaluated: for a folder per model, run
    `anvil run TASK... --submissions models/<model>/` once per model, then
    `anvil leaderboard RUN_A RUN_B ...`. Columns (a kind only when some run has data for
    it; `-` where a run has none):

    \b
    - evaluations, judged (pass or fail), errors (anvil's, left out of every rate)
    - task pass rate (pass@1) and item pass rate
    - requirement accuracy and balanced score (with `requirement` markers)
    - item pass rate per level and the integration gap (with `level` markers)
    - success up to each cumulative tier, and its change base to final (with tiers)
    - pass@1..pass@K and the item flip rate (runs made with --repeat K)
    - failed evaluations per phase (build, startup, health, wiring, oracle)

    In csv, rates are fractions (empty: no data); in json, each rate carries its counts.
    """
    try:
        store = open_store(home, db)
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None
    try:
        records: list[RunRecord] = []
        for run_id in runs:
            record = store.run(run_id)
            if record is None:
                raise fail(f"no run {run_id!r} in {store.url}")
            if record.id in (r.id for r in records):
                raise fail(f"run {record.id} is given twice")
            records.append(record)
        names: dict[str, str] = {}
        for given in name or []:
            run_id, sep, shown = given.partition("=")
            record = store.run(run_id) if sep and shown.strip() else None
            if not sep or not shown.strip():
                raise fail(f"--name {given}: expected RUN=NAME")
            if record is None or record.id not in (r.id for r in records):
                raise fail(f"--name {given}: {run_id!r} is not one of the runs given")
            names[record.id] = shown.strip()
        text = render_leaderboard(store, records, format, names)
    finally:
        store.close()
    _write_out(text, output, "the leaderboard")


EXPORT_FORMATS = ("otlp-json",)


def _export(store: Store, found: Sequence[EvaluationRecord], format: str,
            output: Path) -> None:
    bundle = export_otlp_json(store, found)
    store.close()
    count = sum(len(scope.get("spans", [])) for rs in bundle.get("resourceSpans", [])
                for scope in rs.get("scopeSpans", []))
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(bundle), encoding="utf-8")
    except OSError as exc:
        where = f" ({exc.filename}: {exc.strerror})" if exc.filename else f" ({exc})"
        raise fail(f"{output}: cannot write the traces{where}") from None
    err.print(f"wrote {count} spans ({format}) to {escape(str(output))}")


@app.command()
def traces(
    evaluation: Annotated[str, typer.Argument(
        metavar="EVAL", show_default=False,
        help="An evaluation id (RUN_ID.N), or a run id or 'latest' for all of its "
             "evaluations.")],
    failed: Annotated[bool, typer.Option(
        "--failed", help="Only failed items (and, for a run, evaluations that did not "
                         "pass).")] = False,
    item: Annotated[str | None, typer.Option(
        "--item", metavar="NODEID", help="Only the items whose node id is or contains "
                                         "NODEID.")] = None,
    json_output: Annotated[bool, typer.Option(
        "--json", help="The trace as JSON on stdout (every span, attribute and event).")
    ] = False,
    export: Annotated[tuple[str, Path] | None, typer.Option(
        "--export", metavar="FORMAT FILE", show_default=False,
        help="Write every span of the evaluation(s), all attempts, to FILE instead; "
             "FORMAT: otlp-json (an OTLP/JSON bundle other trace viewers load).")] = None,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """What happened in an evaluation: its oracle items and every HTTP call they made,
    as a waterfall with timings, status codes and the failing assertions.

    Filtered with --failed or --item, each call also shows the start of its request and
    response bodies.
    """
    try:
        store = open_store(home, db)
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None
    found = resolve(store, evaluation)
    if not found:
        raise fail(f"no evaluation or run {evaluation!r} in {store.url}")
    one = len(found) == 1 and found[0].id == evaluation
    if export is not None:
        format, output = export
        if format not in EXPORT_FORMATS:
            raise fail(f"--export {format}: the formats are {', '.join(EXPORT_FORMATS)}")
        _export(store, found, format, output)
        return
    if failed and not one:
        found = [e for e in found if e.verdict != "pass"]
    shown = [select(load_trace(store, e), failed, item) for e in found]
    if item is not None and not any(item_ids(t) for t in shown):
        known = sorted({i for e in found for i in item_ids(load_trace(store, e))})
        raise fail(f"no item matches {item!r}" + (f"; items: {', '.join(known[:20])}"
                                                   if known else ""))
    store.close()
    if json_output:
        payload = [t.to_json() for t in shown]
        sys.stdout.write(json.dumps(payload[0] if one else payload, indent=2) + "\n")
        return
    # Into a pipe or a file, every line whole (node ids and paths are what one greps for).
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    for trace in shown:
        console.print(waterfall(trace, details=failed or item is not None))
        console.print()


@app.command()
def serve(
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on (loopback unless --expose).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    expose: Annotated[bool, typer.Option(
        "--expose", help="Allow a --host that is not loopback: the UI has no login and "
                         "shows request bodies and logs.")] = False,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """A web UI of stored runs: evaluations, items (failed first) and each item's trace,
    with its requests, responses and the service's log. Works offline; Ctrl-C stops it."""
    import uvicorn  # the web stack loads only for this command

    from .._web import create_app, is_loopback

    if not is_loopback(host) and not expose:
        raise fail(f"--host {host} is not a loopback address; add --expose to serve on it")
    try:
        store = open_store(home, db)
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None
    shown = f"[{host}]" if ":" in host else host
    err.print(f"anvil serve: http://{shown}:{port}/ ({escape(store.url)}); Ctrl-C stops it")
    try:
        uvicorn.run(create_app(store, home.resolve()), host=host, port=port,
                    log_level="warning")
    finally:
        store.close()


def _write_out(text: str, output: Path | None, what: str) -> None:
    """``text`` to stdout, or to ``output`` (its folder made), saying where it went."""
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        where = f" ({exc.filename}: {exc.strerror})" if exc.filename else f" ({exc})"
        raise fail(f"{output}: cannot write {what}{where}") from None
    err.print(f"wrote {escape(str(output))}")
