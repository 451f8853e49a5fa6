"""The ``anvil`` command line."""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import PackageNotFoundError, entry_points
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import plugins
from mocks import MockHost, MockHostError, MockNotInstalled, MockService, load_mock
from mocks import available as mocks_available

from ._errors import AnvilError, InputError, RuntimeUnavailable, TaskFormatError
from ._events import EvaluationFinished
from ._mocks import MockFabric
from ._proxy import default_attachments
from ._reaper import marked_processes, reap_orphans
from ._report import Format, render_report
from ._run import Planned, Runner, RunSettings, evaluate_once, plan
from ._skeleton import write_skeleton
from ._store import EvaluationRecord, Store, default_url
from ._subscribers import (
    STYLE,
    event_log,
    json_lines,
    plural,
    progress_display,
    stderr_console,
)
from ._task import discover_tasks, load_task
from ._taskcheck import check_task
from ._traces import item_ids, load_trace, resolve, select, waterfall
from .runtimes import cache_dir, make_runtime, runtime_names
from .runtimes.docker import (
    BootstrapResult,
    bootstrap,
    docker_client,
    gc_images,
    parse_size,
    reap_docker,
)
from .runtimes.process import gc_venvs
from .types import Runtime, Verdict

T = TypeVar("T")



class ExitCode(enum.IntEnum):
    """What the exit status of every anvil command means (listed in ``anvil --help``)."""

    OK = 0  # done; `run`: every evaluation got a verdict, pass or fail
    FAILED = 1  # what was judged did not pass: `verify` (the submission), `tasks check`
    USAGE = 2  # bad arguments or input (click uses 2 for its own usage errors too)
    ERROR = 3  # anvil could not judge: an evaluation ended in `error`, no runtime, no store
    INCOMPLETE = 4  # `run`: part of what was asked was not evaluated (a task without submissions)
    INTERRUPTED = 130  # Ctrl-C or SIGTERM: `anvil run --resume RUN_ID` goes on


EXIT_CODES = """Exit codes (every command):

\b
  0    ok: done; `run`: every evaluation got a verdict (pass or fail)
  1    failed: `verify`: the submission failed; `tasks check`: a check failed
  2    usage: bad arguments or input (a missing folder, an unknown run id, ...)
  3    error: anvil could not judge (an evaluation ended in error, no runtime, no store)
  4    incomplete: `run`: a task had no submissions or an evaluation was not done
  130  interrupted: finished evaluations are kept; `anvil run --resume RUN_ID` goes on
"""

app = typer.Typer(
    help="Score candidate backend services against hidden HTTP oracles.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: flags without `<bool>`, nothing boxed or cut
)
tasks_app = typer.Typer(help="List, check and create task packages.", no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(tasks_app, name="tasks")
docker_app = typer.Typer(help="Docker runtime set-up.", no_args_is_help=True,
                         rich_markup_mode=None)
app.add_typer(docker_app, name="docker")
mocks_app = typer.Typer(help="List and serve mock providers (the anvil.mocks plug-ins).",
                        no_args_is_help=True, rich_markup_mode=None)
app.add_typer(mocks_app, name="mocks")

err = stderr_console()
RUNTIMES = runtime_names()


def _runtime_choice(value: str) -> str:
    if value not in RUNTIMES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(RUNTIMES)}")
    return value


RuntimeOpt = Annotated[str, typer.Option(
    "--runtime", metavar="<" + "|".join(RUNTIMES) + ">", callback=_runtime_choice,
    help="Where services run; auto: docker when a daemon answers, else process.",
)]

HomeOpt = Annotated[
    Path,
    typer.Option("--home", envvar="ANVIL_HOME", metavar="DIR",
                 help="Folder for runs, logs, caches and the db."),
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="ANVIL_DB", metavar="URL",
                 help="SQLAlchemy URL of the store [default: sqlite:///HOME/anvil.db]."),
]


def _anvil_error(exc: BaseException) -> AnvilError | None:
    """The AnvilError behind ``exc``, also from inside an ExceptionGroup."""
    if isinstance(exc, AnvilError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _anvil_error(inner)
            if found is not None:
                return found
    return None


def _run_async(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run`` whose AnvilErrors leave as themselves, never wrapped in a group."""
    try:
        return anyio.run(fn, *args)
    except BaseExceptionGroup as group:
        found = _anvil_error(group)
        if found is None:
            raise
        raise found from None


def _fail(message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _code_of(exc: AnvilError) -> ExitCode:
    """Bad input is the user's to fix (usage); anything else kept anvil from judging."""
    return ExitCode.USAGE if isinstance(exc, InputError) else ExitCode.ERROR


def _version(value: bool) -> None:
    if value:
        try:
            number = dist_version("anvil-harness")
        except PackageNotFoundError:
            number = "unknown (not installed)"
        print(f"anvil {number}")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="Print anvil's version and exit.",
    )] = False,
) -> None:
    """Score candidate backend services against hidden HTTP oracles."""


def _open_store(home: Path, db: str | None) -> Store:
    return Store(db or default_url(home.resolve()))


@app.command()
def run(
    tasks: Annotated[list[Path] | None, typer.Argument(
        metavar="TASK", show_default=False,
        help="Task folders (task.toml, or BackendForge style with tests/).",
    )] = None,
    submissions: Annotated[Path | None, typer.Option(
        "--submissions", "-s", metavar="DIR",
        help="One submission (has a Dockerfile) or a folder of submission folders; "
             "with several tasks, DIR/<task-id>/ is looked up the same way.",
    )] = None,
    runtime: RuntimeOpt = "auto",
    concurrency: Annotated[int, typer.Option(
        min=1, metavar="N",
        help="Services running at once (builds and oracle runs have their own limits).",
    )] = 4,
    resume: Annotated[str | None, typer.Option(
        metavar="RUN_ID", help="Finish an interrupted run: redo only its unfinished evaluations.",
    )] = None,
    json_output: Annotated[bool, typer.Option(
        "--json", help="JSON Lines on stdout, one object per finished evaluation.",
    )] = False,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """Evaluate submissions against tasks and print each verdict.

    Ends with the totals of the whole run and a short summary of what did not
    pass: the failed items and each evaluation's folder of logs. Exit code 0
    when every evaluation got a verdict (pass or fail), 3 when one ended in
    error, 4 when a task had no submissions, 130 when interrupted.
    """
    if resume is None and (not tasks or submissions is None):
        raise _fail("give TASK... and --submissions DIR, or --resume RUN_ID")
    try:
        code = _run_async(_run, tasks or [], submissions, runtime, concurrency, resume,
                          json_output, home, db)
    except AnvilError as exc:
        raise _fail(str(exc), _code_of(exc)) from None
    except KeyboardInterrupt:  # a Ctrl-C in the instant the run ends: it is kept all the same
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    raise typer.Exit(code)


async def _run(
    task_paths: list[Path], submissions: Path | None, runtime_name: str, concurrency: int,
    resume: str | None, json_output: bool, home: Path, db: str | None,
) -> ExitCode:
    home = home.resolve()
    store = _open_store(home, db)
    notices: list[str] = []
    planned: list[Planned] = []
    without_submissions: list[str] = []
    if resume:
        record = store.run(resume)
        if record is None:
            raise InputError(f"--resume {resume}", "no such run in the store")
        resume = record.id
        options = record.options_dict()
        runtime_name = options.get("runtime", runtime_name)
        concurrency = options.get("concurrency", concurrency)
    else:
        assert submissions is not None
        found = plan(task_paths, submissions)
        planned, notices = found.evaluations, found.problems
        without_submissions = found.without_submissions
        if not planned:
            raise InputError(submissions, "nothing to evaluate: " + "; ".join(notices))
    reaped = reap_orphans()
    if reaped:
        err.print(f"reaped {plural(len(reaped), 'process')} left by a killed anvil")
    runtime, which = await make_runtime(runtime_name, home)
    err.print(escape(which))
    settings = RunSettings(home=home, concurrency=concurrency, options={
        "tasks": [str(p.resolve()) for p in task_paths],
        "submissions": str(submissions.resolve()) if submissions else None,
        "concurrency": concurrency,
    })
    async with runtime, MockFabric() as fabric:
        # Each evaluation's own mock instances, then the recording proxy: it wires last,
        # so the oracle's BASE_URL is the proxy right in front of the service.
        settings.attachments = [fabric.attach, *default_attachments(store)]
        runner = Runner(store, runtime, settings)
        run_id = resume or await runner.start(planned)
        subscribers = [
            event_log(home / "runs" / run_id / "events.jsonl"),
            progress_display(err),
        ]
        if json_output:
            subscribers.append(json_lines(on_closed=_warn))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, runner)
            results = await runner.execute(run_id, subscribers, notices)
            tg.cancel_scope.cancel()
        if not runner.interrupted:
            await _auto_gc(home, runtime)
    rows = await anyio.to_thread.run_sync(store.evaluations, run_id)
    store.close()
    if runner.interrupted:
        return ExitCode.INTERRUPTED
    verdicts = {r.id: r.verdict for r in rows if r.status == "done"}
    done_before = len(verdicts.keys() - {r.evaluation_id for r in results})
    verdicts.update({r.evaluation_id: r.verdict.value for r in results})  # newer than the store
    _print_summary(results, rows, home / "runs" / run_id)
    _print_totals(run_id, verdicts, len(rows), done_before)
    for task_id in without_submissions:
        err.print(f"[red]not evaluated:[/] task {escape(task_id)} had no submissions")
    if "error" in verdicts.values():
        return ExitCode.ERROR
    if without_submissions or len(verdicts) < len(rows):
        return ExitCode.INCOMPLETE
    return ExitCode.OK


def _warn(message: str) -> None:
    err.print(f"[yellow]{escape(message)}[/]")


async def _cancel_on_signal(runner: Runner) -> None:
    """First Ctrl-C: every evaluation tears down (shielded, under its deadline). Second:
    teardown gets its deadline, then anvil kills what it still owns and exits 130."""
    try:
        await _handle_signals(runner)
    finally:
        if runner.interrupted:
            # On the way out already: a late Ctrl-C must not turn exit 130 into a traceback.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


async def _handle_signals(runner: Runner) -> None:
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if not runner.interrupted:
                    err.print(f"\n{name}: tearing down, please wait "
                              "(again to force the exit)")
                    runner.cancel()
                    continue
                grace = runner.teardown_deadline()
                err.print(f"{name} again: exiting in at most {grace:g}s "
                          "(the teardown deadline)")
                tg.start_soon(_force_exit, grace)


async def _force_exit(grace: float) -> None:
    await anyio.sleep(grace)
    mine = [p for p in marked_processes() if p.owner == os.getpid()]
    for pgid in {p.pgid for p in mine}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    err.print(f"forced exit: killed {plural(len(mine), 'process')} still running; "
              "containers are reaped by the next run or `anvil gc`")
    sys.stderr.flush()
    os._exit(ExitCode.INTERRUPTED)


def _print_totals(run_id: str, verdicts: dict[str, str | None], evaluations: int,
                  done_before: int) -> None:
    """Totals of the whole run: what earlier invocations finished counts too."""
    counts = " ".join(f"{v.value}={sum(1 for x in verdicts.values() if x == v.value)}"
                      for v in Verdict)
    notes = [plural(evaluations, "evaluation")]
    if done_before:
        notes.append(f"{done_before} done before this resume")
    if len(verdicts) < evaluations:
        notes.append(f"{evaluations - len(verdicts)} not finished")
    err.print(f"{counts} ({', '.join(notes)}; run {run_id})")


SUMMARY_ITEMS = 10  # failed items listed per evaluation; `anvil report` has them all


def _print_summary(
    results: Sequence[EvaluationFinished], rows: Sequence[EvaluationRecord], run_dir: Path
) -> None:
    """A pytest-like short summary: what did not pass, which items, where the logs are."""
    positions = {r.id: r.position for r in rows}
    bad = sorted((r for r in results if r.verdict is not Verdict.PASS),
                 key=lambda r: positions.get(r.evaluation_id, 0))
    if not bad:
        return
    err.print(f"[bold]short summary:[/] {len(bad)} of {plural(len(results), 'evaluation')} "
              "did not pass")
    for result in bad:
        task, sub = escape(result.task), escape(Path(result.submission).name)
        where = f" at {result.phase.value}" if result.phase else ""
        err.print(f"[{STYLE[result.verdict]}]{result.verdict.value.upper()}[/] {task} {sub}"
                  f"{where}: {escape(_one_line(result.reason))}")
        failed = [i for i in result.items if i.failed]
        for item in failed[:SUMMARY_ITEMS]:
            category = f" [{item.category}]" if item.category else ""
            message = _one_line(item.message) or item.outcome.value
            err.print(f"  {item.outcome.value.upper()} {task} {sub} {escape(item.nodeid)}"
                      f"{escape(category)} - {escape(message)}")
        if len(failed) > SUMMARY_ITEMS:
            err.print(f"  ... and {len(failed) - SUMMARY_ITEMS} more failed items "
                      f"(anvil report {run_dir.name})")
        position = positions.get(result.evaluation_id)
        logs = sorted(run_dir.glob(f"{position:03d}-*")) if position is not None else []
        if logs:
            err.print(f"  logs: {escape(str(logs[0]))}")


def _one_line(text: str, limit: int = 200) -> str:
    """The first non-empty line of ``text``, at most ``limit`` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


@app.command()
def verify(
    task: Annotated[Path, typer.Argument(metavar="TASK", help="The task folder.")],
    submission: Annotated[Path, typer.Argument(
        metavar="SUBMISSION", help="One submission folder (it has a Dockerfile).")],
    runtime: RuntimeOpt = "auto",
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Self-verification: one line on stdout and nothing else.

    Nothing about item names, assertions or requests is revealed.

    \b
    SELF_VERIFY_PASS                     exit 0
    SELF_VERIFY_FAIL phase=<phase>       exit 1: the submission failed that phase
    SELF_VERIFY_ERROR usage: <problem>   exit 2: bad arguments (e.g. a folder of submissions)
    SELF_VERIFY_ERROR harness: <reason>  exit 3: anvil could not judge; not the submission's fault
    """
    logging.disable(logging.CRITICAL)
    problem = _not_one_submission(submission)
    if problem:
        print(f"SELF_VERIFY_ERROR usage: {problem}")
        raise typer.Exit(ExitCode.USAGE)
    try:
        result = _run_async(_verify, task, submission, runtime, home.resolve())
    except InputError as exc:
        print(f"SELF_VERIFY_ERROR usage: {_one_line(str(exc))}")
        raise typer.Exit(ExitCode.USAGE) from None
    except AnvilError as exc:
        print(f"SELF_VERIFY_ERROR harness: {_one_line(str(exc))}")
        raise typer.Exit(ExitCode.ERROR) from None
    if result.verdict is Verdict.PASS:
        print("SELF_VERIFY_PASS")
        raise typer.Exit(ExitCode.OK)
    phase = result.phase.value if result.phase else "error"
    if result.verdict is Verdict.FAIL:
        print(f"SELF_VERIFY_FAIL phase={phase}")
        raise typer.Exit(ExitCode.FAILED)
    # What went wrong inside the oracle can name hidden items: say only where it was.
    why = ("the oracle could not run (details withheld)" if phase == "oracle"
           else _one_line(result.reason))
    print(f"SELF_VERIFY_ERROR harness: {why} (phase={phase})")
    raise typer.Exit(ExitCode.ERROR)


def _not_one_submission(folder: Path) -> str | None:
    """Why ``folder`` is not one submission, or None; a folder without a Dockerfile but
    with submission subfolders is a folder of submissions (a usage error, not a fail)."""
    if not folder.is_dir():
        return f"{folder}: no such submission folder"
    if (folder / "Dockerfile").is_file():
        return None
    inside = sorted(p.name for p in folder.iterdir() if (p / "Dockerfile").is_file())
    if inside:
        return (f"{folder} is a folder of {plural(len(inside), 'submission')} "
                f"({', '.join(inside[:3])}{', ...' if len(inside) > 3 else ''}); "
                "verify takes one submission folder (with a Dockerfile)")
    return None  # no Dockerfile at all: the submission's own fail at build


async def _verify(
    task_path: Path, submission: Path, runtime_name: str, home: Path
) -> EvaluationFinished:
    task = load_task(task_path)
    home.mkdir(parents=True, exist_ok=True)
    runtime, _ = await make_runtime(runtime_name, home)
    async with runtime:
        return await evaluate_once(task, submission, runtime, home)


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(
        metavar="RUN_ID", help="A run id, or 'latest'.")] = "latest",
    format: Annotated[Format, typer.Option("--format", "-f", help="Report format.")] = "table",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE",
        help="Write to FILE (its folder is created) instead of stdout.")] = None,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """Scoreboard of a run: task-level success, item pass rate, failures by category and phase.

    The table is as wide as the terminal (reasons wrap inside their cell); sent
    to a file or a pipe, each row stays on one line.
    """
    try:
        store = _open_store(home, db)
    except AnvilError as exc:
        raise _fail(str(exc), _code_of(exc)) from None
    record = store.run(run_id)
    if record is None:
        raise _fail(f"no run {run_id!r} in {store.url}")
    if format == "table" and output is None and sys.stdout.isatty():
        render_report(store, record, "table", Console(highlight=False))
        return
    text = render_report(store, record, format)
    assert text is not None
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        where = f" ({exc.filename}: {exc.strerror})" if exc.filename else f" ({exc})"
        raise _fail(f"{output}: cannot write the report{where}") from None
    err.print(f"wrote {escape(str(output))}")


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
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """What happened in an evaluation: its oracle items and every HTTP call they made,
    as a waterfall with timings, status codes and the failing assertions.

    Filtered with --failed or --item, each call also shows the start of its request and
    response bodies.
    """
    try:
        store = _open_store(home, db)
    except AnvilError as exc:
        raise _fail(str(exc), _code_of(exc)) from None
    found = resolve(store, evaluation)
    if not found:
        raise _fail(f"no evaluation or run {evaluation!r} in {store.url}")
    one = len(found) == 1 and found[0].id == evaluation
    if failed and not one:
        found = [e for e in found if e.verdict != "pass"]
    shown = [select(load_trace(store, e), failed, item) for e in found]
    if item is not None and not any(item_ids(t) for t in shown):
        known = sorted({i for e in found for i in item_ids(load_trace(store, e))})
        raise _fail(f"no item matches {item!r}" + (f"; items: {', '.join(known[:20])}"
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


@tasks_app.command("list")
def tasks_list(
    root: Annotated[Path, typer.Argument(help="Folder holding task folders.")] = Path("tasks"),
) -> None:
    """List the task packages under ROOT."""
    table = Table("id", "title", "domain", "mocks", "path")
    found = discover_tasks(root)
    if not found:
        raise _fail(f"{root}: no task folders")
    for path in found:
        try:
            task = load_task(path)
        except TaskFormatError as exc:
            table.add_row(escape(path.name), f"[red]{escape(exc.problem)}[/]", "", "",
                          escape(str(path)))
            continue
        mocks = ", ".join(m.kind for m in task.config.mocks) or "-"
        table.add_row(*(escape(cell) for cell in (task.id, task.config.title, task.config.domain,
                                                   mocks, str(path))))
    Console(highlight=False).print(table)


@tasks_app.command("check")
def tasks_check(
    tasks: Annotated[list[Path], typer.Argument(help="Task folders to check.")],
    runtime: RuntimeOpt = "auto",
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Check task packages: files parse and validate (every problem on its own line, with
    file and line), the oracle collects and marks each item's category, the reference
    passes. What cannot be checked (no reference/, no task.toml) is said, not failed."""
    marks = {"ok": "[green]ok[/]  ", "fail": "[red]FAIL[/]", "warn": "[yellow]warn[/]",
             "skip": "[dim]skip[/]"}
    ok = True
    for path in tasks:
        try:
            checks = _run_async(check_task, path, runtime, home.resolve())
        except AnvilError as exc:
            raise _fail(str(exc), _code_of(exc)) from None
        for check in checks:
            detail = escape(f"{path.resolve().name}: {check.name}: {check.detail}")
            err.print(f"{marks[check.status]} {detail}", highlight=False)
            ok = ok and check.ok
    raise typer.Exit(ExitCode.OK if ok else ExitCode.FAILED)


@tasks_app.command("new")
def tasks_new(
    task_id: Annotated[str, typer.Argument(
        help="The new task's id: letters, digits, '_', '.', '-'.", show_default=False)],
    root: Annotated[Path, typer.Option(help="Folder that holds task folders.")] = Path("tasks"),
) -> None:
    """Write a task skeleton ROOT/TASK_ID (task.toml, spec.md, openapi.yaml, oracle/ with one
    example item per category, reference/) that `anvil tasks check` passes as written."""
    try:
        folder = write_skeleton(root, task_id)
    except InputError as exc:
        raise _fail(str(exc), ExitCode.USAGE) from None
    err.print(f"wrote {escape(str(folder))}: edit spec.md, openapi.yaml, oracle/ and "
              f"reference/, then run `anvil tasks check {escape(str(folder))}`", highlight=False)


@app.command()
def gc(
    images: Annotated[bool, typer.Option(
        "--caches", "--images",
        help="Also trim the caches (venvs, and build images of this home) to --budget each, "
             "least recently used first; what a live run uses stays.")] = False,
    budget: Annotated[str, typer.Option(
        envvar="ANVIL_CACHE_BUDGET",
        help="Disk budget of each cache (venvs; build images). `anvil run` trims to it "
             "automatically when a run ends.")] = "10G",
    everything: Annotated[bool, typer.Option(
        "--all", help="Remove every anvil container and network, even of live runs.")] = False,
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Reap what a killed anvil left: processes, containers and networks whose owner is gone
    or whose lease expired."""
    try:
        size = parse_size(budget)
    except ValueError as exc:
        raise _fail(f"--budget {budget}: {exc}") from None
    try:
        _run_async(_gc, images, size, everything, home.resolve())
    except AnvilError as exc:
        raise _fail(str(exc), _code_of(exc)) from None


async def _trim_venvs(home: Path, budget: int) -> None:
    gone = await anyio.to_thread.run_sync(gc_venvs, cache_dir(home), budget)
    for venv in gone:
        err.print(f"removed venv {escape(venv.name)}")
    if gone:
        err.print(f"removed {plural(len(gone), 'venv')} (cache budget {budget / 2**30:g} GiB)")


async def _auto_gc(home: Path, runtime: Runtime) -> None:
    """Keep the caches within ANVIL_CACHE_BUDGET (default 10G) when a run ends."""
    try:
        budget = parse_size(os.environ.get("ANVIL_CACHE_BUDGET") or "10G")
    except ValueError:
        err.print("[yellow]ANVIL_CACHE_BUDGET is not a size; caches not trimmed[/]")
        return
    await _trim_venvs(home, budget)
    docker = getattr(runtime, "docker", None)
    if runtime.name == "docker" and docker is not None:
        gone = await gc_images(docker, cache_dir(home), budget)
        if gone:
            err.print(f"removed {plural(len(gone), 'build image')} "
                      f"(cache budget {budget / 2**30:g} GiB)")


async def _gc(images: bool, budget: int, everything: bool, home: Path) -> None:
    reaped = reap_orphans()
    for orphan in reaped:
        err.print(f"killed process group {orphan.pgid} "
                  f"(run {escape(str(orphan.run_id))}, owner {escape(str(orphan.owner))})")
    err.print(f"reaped {plural(len(reaped), 'process')}")
    if images:
        await _trim_venvs(home, budget)
    try:
        docker = await docker_client()
    except RuntimeUnavailable as exc:
        err.print(f"docker: skipped ({escape(str(exc))})")
        return
    try:
        removed = await reap_docker(docker, everything=everything)
        for name in removed:
            err.print(f"removed {escape(name)}")
        err.print(f"reaped containers and networks: {len(removed)}")
        if images:
            gone = await gc_images(docker, cache_dir(home), budget)
            for tag, size in gone:
                err.print(f"removed image {escape(tag)} ({size / 2**20:.0f} MiB)")
            err.print(f"removed {plural(len(gone), 'image')}")
    finally:
        await docker.close()


@mocks_app.command("list")
def mocks_list() -> None:
    """List the installed mock kinds: where each comes from and its scenarios."""
    table = Table("kind", "scenarios", "provided by")
    for kind, target in mocks_available().items():
        try:
            scenarios = ", ".join(load_mock(kind).scenarios)
        except MockNotInstalled as exc:
            scenarios = f"[red]{escape(str(exc))}[/]"
        table.add_row(escape(kind), scenarios, escape(f"{target} ({_distribution(kind)})"))
    Console(highlight=False).print(table)


def _distribution(kind: str) -> str:
    for ep in entry_points(group=plugins.MOCKS, name=kind):
        if ep.dist is not None:
            return f"{ep.dist.name} {ep.dist.version}"
    return "source tree"


@mocks_app.command("serve")
def mocks_serve(
    kind: Annotated[str, typer.Argument(help="The mock's kind (see `anvil mocks list`).")],
    port: Annotated[int, typer.Option(min=0, max=65535, metavar="N",
                                      help="Port to listen on; 0: any free port.")] = 0,
    seed: Annotated[str, typer.Option(
        metavar="S", help="Seed of every id the mock makes: same seed, same requests, "
                          "same answers.")] = "anvil",
    scenario: Annotated[str, typer.Option(
        metavar="X", help="The named state the mock starts in.")] = "default",
    host: Annotated[str, typer.Option(
        metavar="ADDR", help="Address to listen on (loopback unless you need otherwise).")
    ] = "127.0.0.1",
    token: Annotated[str | None, typer.Option(
        metavar="T", help="Admin token of /__mock__/ [default: a random one, printed].")
    ] = None,
) -> None:
    """Run one mock standalone until Ctrl-C, to develop a candidate against it.

    Prints its URL, its admin token and the ANVIL_MOCKS line that lets an oracle's
    fixtures (payment.requests(), ...) reach it.
    """
    try:
        mock = load_mock(kind)
    except MockNotInstalled as exc:
        raise _fail(str(exc)) from None
    if scenario not in mock.scenarios:
        raise _fail(f"mock {kind!r} has no scenario {scenario!r} "
                    f"(it has: {', '.join(mock.scenarios)})")
    try:
        _run_async(_serve_mock, mock, kind, host, port, seed, scenario, token)
    except MockHostError as exc:
        raise _fail(str(exc), ExitCode.ERROR) from None


async def _serve_mock(mock: type[MockService], kind: str, host: str, port: int, seed: str,
                      scenario: str, token: str | None) -> None:
    async with MockHost() as mock_host:
        hosted = await mock_host.start(mock, instance=kind, seed=seed, scenario=scenario,
                                       host=host, port=port, token=token)
        env = f"{kind.upper().replace('-', '_')}_URL"
        described = [{"name": kind, "kind": kind, "env": env, "url": hosted.url,
                      "token": hosted.token, "scenario": scenario}]
        print(f"serving mock {kind} (scenario {scenario}, seed {seed}) at {hosted.url}")
        print(f"admin: {hosted.url}/__mock__/ with X-Mock-Token: {hosted.token}")
        print(f"export {env}={hosted.url} {env}_TOKEN={hosted.token}")
        print(f"export ANVIL_MOCKS='{json.dumps(described)}'", flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
        err.print(f"stopped mock {escape(kind)}")


@docker_app.command("bootstrap")
def docker_bootstrap(
    force: Annotated[bool, typer.Option(help="Rebuild even if the image exists.")] = False,
) -> None:
    """Build the offline Python base image (python:3.11-slim and aliases) with debootstrap.

    Needs a running Docker daemon and debootstrap (apt-get install -y docker.io
    debootstrap). Idempotent: does nothing when the image is there.
    """
    try:
        result = _run_async(_bootstrap, force)
    except AnvilError as exc:
        raise _fail(str(exc), _code_of(exc)) from None
    verb = "built" if result.built else "already there:"
    err.print(f"{verb} {', '.join(result.tags)} in {result.seconds:.1f}s")


async def _bootstrap(force: bool) -> BootstrapResult:
    docker = await docker_client()
    try:
        return await bootstrap(docker, force=force, say=lambda m: err.print(escape(m)))
    finally:
        await docker.close()


def main() -> None:
    if os.environ.get("ANVIL_DEBUG"):
        logging.basicConfig(level=logging.DEBUG)
    try:
        app()
    except Exception:  # a bug of ours: the traceback is for us; the exit code stays in the table
        traceback.print_exc()
        sys.exit(ExitCode.ERROR)
