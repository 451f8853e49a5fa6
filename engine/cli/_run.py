"""``anvil run`` and ``anvil verify``."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.markup import escape
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from telemetry import DEFAULT_BODY_LIMIT, Capture

from .._errors import AnvilError, InputError
from .._events import EvaluationFinished
from .._executors import make_executor
from .._explain import explain
from .._mocks import MockFabric
from .._reaper import marked_processes, reap_orphans
from .._run import Planned, Runner, RunSettings, evaluate_once, new_run_id, plan
from .._store import EvaluationRecord, Store
from .._subscribers import (
    STYLE,
    event_log,
    json_lines,
    plural,
    progress_display,
)
from .._task import load_task
from .._tracing import default_attachments
from ..runtimes import make_runtime
from ..types import Phase, Verdict
from ._app import (
    DbOpt,
    ExitCode,
    HomeOpt,
    RuntimeOpt,
    app,
    code_of,
    err,
    fail,
    open_store,
    run_async,
)
from ._caches import auto_gc


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
    trace_body_limit: Annotated[int, typer.Option(
        min=0, metavar="BYTES",
        help="Bytes of each request and response body kept in the trace (the whole "
             "size is kept too; 0: no bodies).",
    )] = DEFAULT_BODY_LIMIT,
    check_requests: Annotated[bool, typer.Option(
        "--check-requests",
        help="Also check each request the oracle sends against the task's openapi.yaml "
             "(by default only what the service controls: its responses and routes).",
    )] = False,
    repeat: Annotated[int, typer.Option(
        "--repeat", min=1, metavar="K",
        help="Evaluate every submission K times in this run, each time its own evaluation; "
             "`anvil report` then gives pass@k, the item flip rate and the items to "
             "quarantine.",
    )] = 1,
    executor: Annotated[str | None, typer.Option(
        "--executor", metavar="<local|ray>",
        help="Where evaluations run: local (this machine) or ray (each evaluation whole on "
             "a node of a Ray cluster; the `ray` extra). Default: local, or the resumed "
             "run's.",
    )] = None,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", metavar="ADDR", envvar="RAY_ADDRESS",
        help="The Ray cluster for --executor ray (default: the one `ray start` runs on "
             "this machine).",
    )] = None,
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
        raise fail("give TASK... and --submissions DIR, or --resume RUN_ID")
    if resume is not None and repeat != 1:
        raise fail("--repeat is for a new run: --resume finishes the repeats the run has")
    try:
        if executor is not None:  # refused before anything starts (Ray not installed)
            make_executor(executor, address=ray_address)
        code = run_async(_run, tasks or [], submissions, runtime, concurrency, resume,
                          json_output, home, db, trace_body_limit, check_requests, repeat,
                          executor, ray_address)
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None
    except KeyboardInterrupt:  # a Ctrl-C in the instant the run ends: it is kept all the same
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    raise typer.Exit(code)


async def _run(
    task_paths: list[Path], submissions: Path | None, runtime_name: str, concurrency: int,
    resume: str | None, json_output: bool, home: Path, db: str | None,
    trace_body_limit: int = DEFAULT_BODY_LIMIT, check_requests: bool = False,
    repeat: int = 1, executor_name: str | None = None, ray_address: str | None = None,
) -> ExitCode:
    home = home.resolve()
    store = open_store(home, db)
    notices: list[str] = []
    planned: list[Planned] = []
    without_submissions: list[str] = []
    new_id: str | None = None
    if resume:
        record = store.run(resume)
        if record is None:
            raise InputError(f"--resume {resume}", "no such run in the store")
        resume = record.id
        options = record.options_dict()
        runtime_name = options.get("runtime", runtime_name)
        concurrency = options.get("concurrency", concurrency)
        trace_body_limit = options.get("trace_body_limit", trace_body_limit)
        check_requests = options.get("check_requests", check_requests)
        executor_name = executor_name or options.get("executor")
        if executor_name == "ray":  # the runtime asked for: each node resolves "auto" itself
            runtime_name = options.get("node_runtime", runtime_name)
    else:
        assert submissions is not None
        found = plan(task_paths, submissions)
        planned, notices = found.evaluations, found.problems
        without_submissions = found.without_submissions
        if not planned:
            raise InputError(submissions, "nothing to evaluate: " + "; ".join(notices))
        new_id = new_run_id()
        planned = repeat_plan(planned, repeat, home / "runs" / new_id)
    reaped = reap_orphans()
    if reaped:
        err.print(f"reaped {plural(len(reaped), 'process')} left by a killed anvil")
    runtime, which = await make_runtime(runtime_name, home)
    err.print(escape(which))
    executor = make_executor(executor_name or "local", address=ray_address,
                             runtime=runtime_name, home=home)
    settings = RunSettings(home=home, concurrency=concurrency, executor=executor,
                           keep_passed_items=False, options={
        "tasks": [str(p.resolve()) for p in task_paths],
        "submissions": str(submissions.resolve()) if submissions else None,
        "concurrency": concurrency,
        "trace_body_limit": trace_body_limit,
        "check_requests": check_requests,
        "repeat": repeat,
        "executor": executor.name,
        "node_runtime": runtime_name,
    })
    async with runtime, MockFabric() as fabric:
        # Each evaluation's own mock instances (their calls traced), then its trace and
        # recording proxy: it wires last, so BASE_URL is the proxy in front of the service.
        settings.attachments = default_attachments(
            store, fabric, Capture(body_limit=trace_body_limit), check_requests=check_requests)
        runner = Runner(store, runtime, settings)
        run_id = resume or await runner.start(planned, new_id)
        subscribers = [
            event_log(home / "runs" / run_id / "events.jsonl"),
            progress_display(err),
        ]
        if json_output:
            subscribers.append(json_lines(on_closed=warn))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, runner)
            results = await runner.execute(run_id, subscribers, notices)
            tg.cancel_scope.cancel()
        if not runner.interrupted:
            await auto_gc(home, runtime)
    rows = await anyio.to_thread.run_sync(store.evaluations, run_id)
    explained = await anyio.to_thread.run_sync(_explanations, store, results)
    store.close()
    if runner.interrupted:
        return ExitCode.INTERRUPTED
    verdicts = {r.id: r.verdict for r in rows if r.status == "done"}
    done_before = len(verdicts.keys() - {r.evaluation_id for r in results})
    verdicts.update({r.evaluation_id: r.verdict.value for r in results})  # newer than the store
    _print_summary(results, rows, home / "runs" / run_id, explained,
                   _traces_options(home, db))
    _print_totals(run_id, verdicts, len(rows), done_before)
    for task_id in without_submissions:
        err.print(f"[red]not evaluated:[/] task {escape(task_id)} had no submissions")
    if "error" in verdicts.values():
        return ExitCode.ERROR
    if without_submissions or len(verdicts) < len(rows):
        return ExitCode.INCOMPLETE
    return ExitCode.OK


def repeat_plan(planned: Sequence[Planned], repeat: int, run_dir: Path) -> list[Planned]:
    """``planned`` ``repeat`` times over, one repeat after the other: the evaluation at
    position p is repeat ``p // len(planned) + 1`` (reports find it again by counting the
    evaluations of its task and submission folder name in position order).

    The store keeps one evaluation per task and submission path in a run, so repeat r > 1
    of a submission is evaluated through a link to its folder,
    ``run_dir/repeat-<r>/<task id>/<folder name>``: the same files under the same folder
    name, at a path of its own (``--resume`` finds it there too).

    Raises:
        InputError: a link cannot be made in ``run_dir``.
    """
    evaluations = list(planned)
    for r in range(2, repeat + 1):
        for p in planned:
            link = run_dir / f"repeat-{r}" / p.task_id / p.submission.name
            try:
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(p.submission.resolve(), target_is_directory=True)
            except OSError as exc:
                raise InputError(link, f"cannot link repeat {r} of the submission: "
                                       f"{exc.strerror or exc}") from None
            evaluations.append(replace(p, submission=link))
    return evaluations


def warn(message: str) -> None:
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
EXPLAINED_ITEMS = 3  # of those, the first ones get the line their trace explains


def _explanations(store: Store, results: Sequence[EvaluationFinished]
                  ) -> dict[str, dict[str, str]]:
    """For each evaluation that did not pass, its first failed items' explanation lines."""
    explained: dict[str, dict[str, str]] = {}
    for result in results:
        failed = [i for i in result.items if i.failed][:EXPLAINED_ITEMS]
        if failed:
            found = explain(store.spans(result.evaluation_id), failed)
            explained[result.evaluation_id] = {e.nodeid: e.line for e in found}
    return explained


def _traces_options(home: Path, db: str | None) -> str:
    """The options `anvil traces` needs to find this run's store (a password in the
    database URL is not printed)."""
    options = ""
    if home != Path(os.environ.get("ANVIL_HOME") or ".anvil").resolve():
        options += f" --home {shlex.quote(str(home))}"
    if db:
        try:
            shown = make_url(db).render_as_string(hide_password=True)
        except ArgumentError:
            shown = "URL"
        options += f" --db {shlex.quote(shown)}"
    return options


def _print_summary(
    results: Sequence[EvaluationFinished], rows: Sequence[EvaluationRecord], run_dir: Path,
    explained: dict[str, dict[str, str]] | None = None, traces_options: str = "",
) -> None:
    """A pytest-like short summary: what did not pass, which items, what their traces
    show, the command that opens them, where the logs are."""
    explained = explained or {}
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
            why = explained.get(result.evaluation_id, {}).get(item.nodeid)
            if why:
                err.print(f"    [dim]→[/] {escape(why)}")
        if len(failed) > SUMMARY_ITEMS:
            err.print(f"  ... and {len(failed) - SUMMARY_ITEMS} more failed items "
                      f"(anvil report {run_dir.name})")
        at_oracle = result.phase is not None and result.phase.value == "oracle"
        if failed or (result.verdict is Verdict.ERROR and at_oracle):
            err.print(f"  trace: anvil traces {escape(result.evaluation_id)} --failed"
                      f"{escape(traces_options)}")
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
    public: Annotated[bool, typer.Option(
        "--public",
        help="After the verdict line, one line per public item (marked visibility "
             "\"public\", the default) with its outcome and, when it failed, its first "
             "assertion line; private items stay one coarse line: PRIVATE PASS, or "
             "PRIVATE FAIL phase=<phase>.",
    )] = False,
) -> None:
    """Self-verification: one line on stdout and nothing else.

    Nothing about item names, assertions or requests is revealed (with --public: only
    about the task's public items).

    \b
    SELF_VERIFY_PASS                     exit 0
    SELF_VERIFY_FAIL phase=<phase>       exit 1: the submission failed that phase
    SELF_VERIFY_ERROR usage: <problem>   exit 2: bad arguments (e.g. a folder of submissions)
    SELF_VERIFY_ERROR harness: <reason>  exit 3: anvil could not judge; not the submission's fault

    \b
    with --public, then:
    PUBLIC PASS <item>                   a public item that passed
    PUBLIC FAIL <item>: <assertion>      a public item that failed (or errored)
    PUBLIC SKIP <item>                   a public item that was skipped
    PRIVATE PASS | PRIVATE FAIL phase=<phase>
    """
    logging.disable(logging.CRITICAL)
    problem = _not_one_submission(submission)
    if problem:
        print(f"SELF_VERIFY_ERROR usage: {problem}")
        raise typer.Exit(ExitCode.USAGE)
    try:
        result = run_async(_verify, task, submission, runtime, home.resolve())
    except InputError as exc:
        print(f"SELF_VERIFY_ERROR usage: {_one_line(str(exc))}")
        raise typer.Exit(ExitCode.USAGE) from None
    except AnvilError as exc:
        print(f"SELF_VERIFY_ERROR harness: {_one_line(str(exc))}")
        raise typer.Exit(ExitCode.ERROR) from None
    if result.verdict is Verdict.PASS:
        print("SELF_VERIFY_PASS")
        if public:
            _public_lines(result)
        raise typer.Exit(ExitCode.OK)
    phase = result.phase.value if result.phase else "error"
    if result.verdict is Verdict.FAIL:
        print(f"SELF_VERIFY_FAIL phase={phase}")
        if public:
            _public_lines(result)
        raise typer.Exit(ExitCode.FAILED)
    # What went wrong inside the oracle can name hidden items: say only where it was.
    why = ("the oracle could not run (details withheld)" if phase == "oracle"
           else _one_line(result.reason))
    print(f"SELF_VERIFY_ERROR harness: {why} (phase={phase})")
    raise typer.Exit(ExitCode.ERROR)


def _public_lines(result: EvaluationFinished) -> None:
    """The public items one by one, the private ones as one coarse line (verify --public).

    An evaluation that failed before the oracle has no items: every line is the phase's."""
    private_failed = False
    for item in result.items:
        if item.markers.get("visibility", "public") != "public":
            private_failed = private_failed or item.failed
            continue
        if item.failed:
            why = _one_line(item.message) if item.message else item.outcome.value
            print(f"PUBLIC FAIL {item.nodeid}: {why}")
        else:
            print(f"PUBLIC {'PASS' if item.passed else 'SKIP'} {item.nodeid}")
    phase = result.phase.value if result.phase else "error"
    if result.verdict is Verdict.FAIL and result.phase is not Phase.ORACLE:
        private_failed = True  # no item ran: the private ones did not pass either
    print(f"PRIVATE FAIL phase={phase}" if private_failed else "PRIVATE PASS")


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
