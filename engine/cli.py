"""The ``anvil`` command line."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from rich.console import Console
from rich.table import Table

from ._errors import AnvilError, InputError, RuntimeUnavailable, TaskFormatError
from ._events import EvaluationFinished
from ._reaper import reap_orphans
from ._report import FORMATS, render_report
from ._run import Planned, Runner, RunSettings, evaluate_once, plan
from ._store import Store, default_url
from ._subscribers import event_log, json_lines, progress_display
from ._task import discover_tasks, load_task
from ._taskcheck import check_task
from .runtimes import cache_dir, make_runtime, runtime_names
from .runtimes.docker import (
    BootstrapResult,
    bootstrap,
    docker_client,
    gc_images,
    parse_size,
    reap_docker,
)
from .types import Verdict

T = TypeVar("T")

EXIT_OK, EXIT_ERROR_VERDICT, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

app = typer.Typer(
    help="Score candidate backend services against hidden HTTP oracles.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tasks_app = typer.Typer(help="List and check task packages.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")
docker_app = typer.Typer(help="Docker runtime set-up.", no_args_is_help=True)
app.add_typer(docker_app, name="docker")

err = Console(stderr=True)

HomeOpt = Annotated[
    Path,
    typer.Option("--home", envvar="ANVIL_HOME", help="Folder for runs, logs, caches and the db."),
]
DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="ANVIL_DB",
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


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    err.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def _open_store(home: Path, db: str | None) -> Store:
    return Store(db or default_url(home.resolve()))


@app.command()
def run(
    tasks: Annotated[list[Path] | None, typer.Argument(
        help="Task folders (task.toml, or BackendForge style with tests/).", show_default=False,
    )] = None,
    submissions: Annotated[Path | None, typer.Option(
        "--submissions", "-s",
        help="One submission (has a Dockerfile) or a folder of submission folders; "
             "with several tasks, DIR/<task-id>/ is looked up the same way.",
    )] = None,
    runtime: Annotated[str, typer.Option(help=f"One of {', '.join(runtime_names())}.")] = "auto",
    concurrency: Annotated[int, typer.Option(
        min=1, help="Services running at once (builds and oracle runs have their own limits).",
    )] = 4,
    resume: Annotated[str | None, typer.Option(
        help="Finish an interrupted run: redo only its unfinished evaluations.",
    )] = None,
    json_output: Annotated[bool, typer.Option(
        "--json", help="JSON Lines on stdout, one object per finished evaluation.",
    )] = False,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """Evaluate submissions against tasks and print each verdict.

    Exit code 0 when every evaluation got a verdict (pass or fail), 1 when any
    ended in error (a harness fault), 130 when interrupted (resume with --resume).
    """
    if resume is None and (not tasks or submissions is None):
        raise _fail("give TASK... and --submissions DIR, or --resume RUN_ID")
    try:
        code = _run_async(_run, tasks or [], submissions, runtime, concurrency, resume,
                         json_output, home, db)
    except AnvilError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(code)


async def _run(
    task_paths: list[Path], submissions: Path | None, runtime_name: str, concurrency: int,
    resume: str | None, json_output: bool, home: Path, db: str | None,
) -> int:
    home = home.resolve()
    store = _open_store(home, db)
    notices: list[str] = []
    planned: list[Planned] = []
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
        planned, notices = plan(task_paths, submissions)
        if not planned:
            raise InputError(submissions, "nothing to evaluate: " + "; ".join(notices))
    reaped = reap_orphans()
    if reaped:
        err.print(f"reaped {len(reaped)} processes left by a killed anvil")
    runtime, which = await make_runtime(runtime_name, home)
    err.print(which)
    settings = RunSettings(home=home, concurrency=concurrency, options={
        "tasks": [str(p.resolve()) for p in task_paths],
        "submissions": str(submissions.resolve()) if submissions else None,
        "concurrency": concurrency,
    })
    async with runtime:
        runner = Runner(store, runtime, settings)
        run_id = resume or await runner.start(planned)
        subscribers = [
            event_log(home / "runs" / run_id / "events.jsonl"),
            progress_display(err),
        ]
        if json_output:
            subscribers.append(json_lines(sys.stdout))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, runner)
            results = await runner.execute(run_id, subscribers, notices)
            tg.cancel_scope.cancel()
    store.close()
    if runner.interrupted:
        return EXIT_INTERRUPTED
    _print_totals(results)
    if any(r.verdict is Verdict.ERROR for r in results):
        return EXIT_ERROR_VERDICT
    return EXIT_OK


async def _cancel_on_signal(runner: Runner) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if not runner.interrupted:
                err.print(f"\n{signal.Signals(signum).name}: tearing down, please wait")
            runner.cancel()


def _print_totals(results: list[EvaluationFinished]) -> None:
    counts = {v: sum(1 for r in results if r.verdict is v) for v in Verdict}
    err.print(" ".join(f"{v.value}={n}" for v, n in counts.items()))


@app.command()
def verify(
    task: Annotated[Path, typer.Argument(help="The task folder.")],
    submission: Annotated[Path, typer.Argument(help="The submission folder (has a Dockerfile).")],
    runtime: Annotated[str, typer.Option(help=f"One of {', '.join(runtime_names())}.")] = "auto",
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Self-verification: print SELF_VERIFY_PASS or SELF_VERIFY_FAIL phase=<phase>, nothing else.

    Nothing about item names, assertions or requests is revealed. Exit code 0
    on pass, 1 on fail, 2 when the harness could not judge.
    """
    logging.disable(logging.CRITICAL)
    try:
        verdict, phase = _run_async(_verify, task, submission, runtime, home.resolve())
    except AnvilError:
        print("SELF_VERIFY_FAIL phase=error")
        raise typer.Exit(EXIT_USAGE) from None
    if verdict is Verdict.PASS:
        print("SELF_VERIFY_PASS")
        raise typer.Exit(EXIT_OK)
    print(f"SELF_VERIFY_FAIL phase={phase or 'error'}")
    raise typer.Exit(EXIT_ERROR_VERDICT if verdict is Verdict.FAIL else EXIT_USAGE)


async def _verify(
    task_path: Path, submission: Path, runtime_name: str, home: Path
) -> tuple[Verdict, str | None]:
    task = load_task(task_path)
    if not submission.is_dir():
        raise InputError(submission, "no such submission folder")
    home.mkdir(parents=True, exist_ok=True)
    runtime, _ = await make_runtime(runtime_name, home)
    async with runtime:
        result = await evaluate_once(task, submission, runtime, home)
    return result.verdict, result.phase.value if result.phase else None


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="A run id, or 'latest'.")] = "latest",
    format: Annotated[str, typer.Option(
        "--format", "-f", help=f"One of {', '.join(FORMATS)}.")] = "table",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to this file instead of stdout.")] = None,
    home: HomeOpt = Path(".anvil"),
    db: DbOpt = None,
) -> None:
    """Scoreboard of a run: task-level success, item pass rate, failures by category and phase."""
    if format not in FORMATS:
        raise _fail(f"--format {format}: choose one of {', '.join(FORMATS)}")
    try:
        store = _open_store(home, db)
    except AnvilError as exc:
        raise _fail(str(exc)) from None
    record = store.run(run_id)
    if record is None:
        raise _fail(f"no run {run_id!r} in {store.url}")
    if format == "table":
        render_report(store, record, "table", Console())
        return
    text = render_report(store, record, format, None)
    assert text is not None
    if output:
        output.write_text(text, encoding="utf-8")
        err.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


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
            table.add_row(path.name, f"[red]{exc.problem}[/]", "", "", str(path))
            continue
        mocks = ", ".join(m.kind for m in task.config.mocks) or "-"
        table.add_row(task.id, task.config.title, task.config.domain, mocks, str(path))
    Console().print(table)


@tasks_app.command("check")
def tasks_check(
    tasks: Annotated[list[Path], typer.Argument(help="Task folders to check.")],
    runtime: Annotated[str, typer.Option(help=f"One of {', '.join(runtime_names())}.")] = "auto",
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Check task packages: files exist and parse, the oracle collects, the reference passes."""
    ok = True
    for path in tasks:
        try:
            checks = _run_async(check_task, path, runtime, home.resolve())
        except AnvilError as exc:
            raise _fail(str(exc), EXIT_ERROR_VERDICT) from None
        for check in checks:
            mark = "[green]ok[/]  " if check.ok else "[red]FAIL[/]"
            err.print(f"{mark} {path.name}: {check.name}: {check.detail}", highlight=False)
            ok = ok and check.ok
    raise typer.Exit(EXIT_OK if ok else EXIT_ERROR_VERDICT)


@app.command()
def gc(
    images: Annotated[bool, typer.Option(
        "--images", help="Also remove cached build images beyond --budget, LRU first.")] = False,
    budget: Annotated[str, typer.Option(help="Disk budget for cached build images.")] = "10G",
    everything: Annotated[bool, typer.Option(
        "--all", help="Remove every anvil container and network, even of live runs.")] = False,
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Reap what a killed anvil left: processes, containers and networks whose owner is gone
    or whose lease expired."""
    try:
        _run_async(_gc, images, parse_size(budget), everything, home.resolve())
    except (AnvilError, ValueError) as exc:
        raise _fail(str(exc)) from None


async def _gc(images: bool, budget: int, everything: bool, home: Path) -> None:
    reaped = reap_orphans()
    for orphan in reaped:
        err.print(f"killed process group {orphan.pgid} (run {orphan.run_id}, owner {orphan.owner})")
    err.print(f"reaped {len(reaped)} processes")
    try:
        docker = await docker_client()
    except RuntimeUnavailable as exc:
        err.print(f"docker: skipped ({exc})")
        return
    try:
        removed = await reap_docker(docker, everything=everything)
        for name in removed:
            err.print(f"removed {name}")
        err.print(f"reaped {len(removed)} containers and networks")
        if images:
            gone = await gc_images(docker, cache_dir(home), budget)
            for tag, size in gone:
                err.print(f"removed image {tag} ({size / 2**20:.0f} MiB)")
            err.print(f"removed {len(gone)} images")
    finally:
        await docker.close()


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
        raise _fail(str(exc), EXIT_ERROR_VERDICT) from None
    verb = "built" if result.built else "already there:"
    err.print(f"{verb} {', '.join(result.tags)} in {result.seconds:.1f}s")


async def _bootstrap(force: bool) -> BootstrapResult:
    docker = await docker_client()
    try:
        return await bootstrap(docker, force=force, say=lambda m: err.print(m))
    finally:
        await docker.close()


def main() -> None:
    if os.environ.get("ANVIL_DEBUG"):
        logging.basicConfig(level=logging.DEBUG)
    app()
