"""Runs: planning evaluations, scheduling them, retrying errors, resuming.

One anyio task group per run owns every evaluation; subscribers (store
writer, event log, progress, JSON output) drain the run's event bus in an
outer task group so they see every event, even when the run is cancelled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from ._errors import HarnessError, InputError, TaskFormatError
from ._events import (
    EvaluationFinished,
    Event,
    EventBus,
    Notice,
    RunFinished,
    RunStarted,
)
from ._executors import Attempt, Executor, LocalExecutor
from ._lifecycle import DEFAULT_LOG_CAP, AttachmentFactory, Evaluation, Limits
from ._mocks import MockFabric, mock_problems
from ._oracle_worker import OracleWorker, oracle_worker
from ._reaper import owner_env
from ._store import Store
from ._task import Task, load_task
from .types import Phase, Runtime, Verdict

log = logging.getLogger("anvil.engine")
STORE_BATCH = 256  # events per store transaction, at most

Subscriber = Callable[[MemoryObjectReceiveStream[Event]], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Planned:
    """One evaluation to do: a submission against a task (or a task that did not load)."""

    task_path: Path
    submission: Path
    task: Task | None
    problem: str | None = None

    @property
    def task_id(self) -> str:
        return self.task.id if self.task else self.task_path.name


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def find_submissions(folder: Path) -> list[Path]:
    """``folder`` itself when it has a Dockerfile, else each non-hidden subfolder.

    A subfolder without a Dockerfile is still a submission: it fails at build,
    which is its author's fault, not a reason to skip it.
    """
    if (folder / "Dockerfile").is_file():
        return [folder]
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


@dataclass
class Plan:
    """What :func:`plan` found: the evaluations to do and what stands in the way."""

    evaluations: list[Planned]
    problems: list[str]  # lines for the human: tasks that do not load, tasks left out
    without_submissions: list[str]  # ids of tasks no submission was found for


def plan(task_paths: Sequence[Path], submissions: Path) -> Plan:
    """Pair tasks with submissions.

    ``submissions`` is one submission (it has a Dockerfile: every task gets it)
    or a folder of submission folders; with several tasks, ``submissions/<task
    id>/`` is that task's folder of submissions. A task that does not load still
    gets its evaluations (they end in ``error`` with the task's problem); a task
    with no submissions is a problem line and is named in ``without_submissions``.

    Raises:
        InputError: ``submissions`` or a task folder does not exist, two task
            folders have the same id, or a task names a mock kind no installed
            plug-in provides (or a scenario its mock does not have).
    """
    if not submissions.is_dir():
        raise InputError(submissions, "no such submissions folder")
    task_paths = list(dict.fromkeys(p.resolve() for p in task_paths))  # named twice: once
    for path in task_paths:
        if not path.is_dir():
            raise InputError(path, "no such task folder")
    single = (submissions / "Dockerfile").is_file()
    result = Plan([], [], [])
    seen: dict[str, Path] = {}
    for path in task_paths:
        task: Task | None = None
        problem: str | None = None
        try:
            task = load_task(path)
        except TaskFormatError as exc:
            problem = str(exc)
            result.problems.append(problem)
        if task is not None and (refused := mock_problems(task)):
            # Refused before any evaluation: its services would start without their mocks.
            raise InputError(path, "; ".join(refused))
        task_id = task.id if task else path.name
        if task_id in seen:  # results, logs and DIR/<task-id>/ would mix: refuse
            raise InputError(path, f"task id {task_id!r} is also the id of {seen[task_id]}")
        seen[task_id] = path
        base = submissions
        nested = submissions / task_id
        if not single and nested.is_dir():
            base = nested
        elif not single and len(task_paths) > 1:
            result.problems.append(f"{nested}: no submissions for task {task_id}")
            result.without_submissions.append(task_id)
            continue
        found = find_submissions(base)
        if not found:
            result.problems.append(f"{base}: no submissions (no Dockerfile, no subfolders)")
            result.without_submissions.append(task_id)
        for sub in found:
            result.evaluations.append(Planned(path, sub.resolve(), task, problem))
    return result


@dataclass
class RunSettings:
    home: Path
    concurrency: int = 4
    build_slots: int | None = None
    log_cap: int = DEFAULT_LOG_CAP
    retries: int = 1  # extra attempts for a transient ``error`` verdict
    retry_delay: float = 1.0  # seconds before another attempt: a transient fault may pass
    options: dict[str, Any] = field(default_factory=dict)  # recorded for --resume
    attachments: Sequence[AttachmentFactory] = ()  # mock fabric, proxy: see Attachment
    store_attempts: int = 6  # a store write that fails is retried with backoff, not dropped
    #: Fork oracle runs from a warm worker (``ANVIL_ORACLE_WORKER=0``: a cold process each).
    oracle_worker: bool = field(
        default_factory=lambda: os.environ.get("ANVIL_ORACLE_WORKER", "1") != "0")
    #: Keep the passed items of each final verdict in :attr:`Runner.results` (``anvil
    #: run`` keeps only what did not pass: its summary needs no more, and a long run's
    #: passed items were most of its memory, e.g. 140k item records at 784 evaluations).
    keep_passed_items: bool = True
    #: Where evaluations run: in this process (local) or on a Ray cluster (engine._ray).
    executor: Executor = field(default_factory=LocalExecutor)


class Runner:
    """Executes a run: every planned evaluation, under the run's limits."""

    def __init__(self, store: Store, runtime: Runtime, settings: RunSettings) -> None:
        self.store = store
        self.runtime = runtime
        self.settings = settings
        self.bus = EventBus()
        self._scope: anyio.CancelScope | None = None
        self.interrupted = False
        self.results: list[EvaluationFinished] = []
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._teardown_deadline = 20.0
        self.skipped: list[str] = []  # evaluations another live anvil holds
        self._worker: OracleWorker | None = None

    def teardown_deadline(self) -> float:
        """The longest teardown any planned evaluation may take (for a forced exit)."""
        return self._teardown_deadline

    def cancel(self) -> None:
        """Stop the run (e.g. on Ctrl-C): evaluations tear down, subscribers drain."""
        self.interrupted = True
        if self._scope is not None:
            self._scope.cancel()

    async def start(self, planned: Sequence[Planned], run_id: str | None = None) -> str:
        """Record a new run with all its evaluations as pending; return its id."""
        run_id = run_id or new_run_id()
        rows = [
            (f"{run_id}.{i}", p.task_id, str(p.task_path), str(p.submission))
            for i, p in enumerate(planned)
        ]
        options = {**self.settings.options, "runtime": self.runtime.name}
        await anyio.to_thread.run_sync(
            self.store.create_run, run_id, self.runtime.name, options, rows
        )
        return run_id

    def pending(self, run_id: str) -> list[tuple[str, int, Planned]]:
        """The run's evaluations without a final verdict, re-planned from the store."""
        todo = []
        tasks: dict[str, Task | TaskFormatError] = {}
        for row in self.store.evaluations(run_id):
            if row.status == "done":
                continue
            if row.task_path not in tasks:
                try:
                    tasks[row.task_path] = load_task(row.task_path)
                except TaskFormatError as exc:
                    tasks[row.task_path] = exc
            loaded = tasks[row.task_path]
            task = loaded if isinstance(loaded, Task) else None
            problem = str(loaded) if isinstance(loaded, TaskFormatError) else None
            todo.append((row.id, row.position,
                         Planned(Path(row.task_path), Path(row.submission), task, problem)))
        return todo

    async def execute(
        self, run_id: str, subscribers: Sequence[Subscriber] = (), notices: Sequence[str] = ()
    ) -> list[EvaluationFinished]:
        """Run every pending evaluation of ``run_id``; return the final verdicts."""
        todo = await anyio.to_thread.run_sync(self.pending, run_id)
        self._teardown_deadline = max([p.task.timeout(Phase.TEARDOWN) for _, _, p in todo
                                       if p.task] or [self._teardown_deadline])
        done = len(await anyio.to_thread.run_sync(self.store.evaluations, run_id)) - len(todo)
        run_dir = self.settings.home / "runs" / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        executor = self.settings.executor
        started = time.monotonic()
        streams = [self.bus.subscribe(getattr(s, "__qualname__", None)) for s in subscribers]
        # The store must never miss an event: its stream is unbounded (memory grows only
        # while the database is slower than the run, and retried writes catch up).
        store_stream = self.bus.subscribe("store", buffer=math.inf)
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._write_store, store_stream)
            for subscriber, stream in zip(subscribers, streams, strict=True):
                outer.start_soon(subscriber, stream)
            try:
                for message in notices:
                    await self.bus.publish(Notice(message=message, level="error"))
                await self.bus.publish(RunStarted(
                    run_id=run_id, runtime=self.runtime.name, total=len(todo), done=done,
                ))
                warm = self.settings.oracle_worker and bool(todo) and executor.in_process
                with anyio.CancelScope() as self._scope:
                    async with executor.session(), oracle_worker(warm) as (
                            self._worker), anyio.create_task_group() as tg:
                        limits = executor.limits(self.settings.concurrency,
                                                 self.settings.build_slots)
                        for evaluation_id, position, planned in todo:
                            workdir = run_dir / _slug(position, planned)
                            tg.start_soon(self._evaluate, run_id, evaluation_id, planned,
                                          workdir, limits)
            finally:
                crashed = sys.exc_info()[0] is not None  # resumable like an interruption
                with anyio.CancelScope(shield=True):
                    await self.bus.publish(RunFinished(
                        run_id=run_id, interrupted=self.interrupted or crashed,
                        duration_s=time.monotonic() - started,
                    ))
                    self.bus.close()
        return self.results

    async def _evaluate(
        self, run_id: str, evaluation_id: str, planned: Planned, workdir: Path, limits: Limits
    ) -> None:
        if planned.task is None:
            finished = EvaluationFinished(
                run_id=run_id, evaluation_id=evaluation_id, task=planned.task_id,
                submission=str(planned.submission), verdict=Verdict.ERROR, phase=None,
                reason=planned.problem or "task did not load", items=(), duration_s=0.0,
                attempt=1,
            )
            await self.bus.publish(finished)
            self.results.append(finished)
            return
        evaluation = Evaluation(
            run_id=run_id, evaluation_id=evaluation_id, task=planned.task,
            submission=planned.submission, workdir=workdir, owner_env=owner_env(run_id),
        )
        async with limits.admitted:  # claimed only once under way: a lease never lapses
            await self._attempts(evaluation, planned, limits)  # while it waits its turn

    async def _attempts(self, evaluation: Evaluation, planned: Planned, limits: Limits) -> None:
        run_id, evaluation_id = evaluation.run_id, evaluation.evaluation_id
        assert planned.task is not None
        attempts = 1 + self.settings.retries
        for attempt in range(1, attempts + 1):
            if not await self._claim(evaluation_id, planned.task.lease_seconds()):
                return
            if attempt > 1:
                await anyio.sleep(self.settings.retry_delay)
            try:
                finished = await self.settings.executor.run(Attempt(
                    evaluation, attempt, attempt == attempts, self.bus, limits,
                    self.settings.log_cap, self.runtime, self.settings.attachments,
                    self._worker))
            except Exception as exc:  # noqa: BLE001 - one evaluation never takes the run down
                log.exception("evaluation %s crashed", evaluation_id)
                finished = EvaluationFinished(
                    run_id=run_id, evaluation_id=evaluation_id, task=planned.task_id,
                    submission=str(planned.submission), verdict=Verdict.ERROR, phase=None,
                    reason=f"internal error: {exc!r}", items=(), duration_s=0.0,
                    attempt=attempt, final=True)
                with anyio.CancelScope(shield=True):
                    await self.bus.publish(finished)
            if finished.final:
                if not self.settings.keep_passed_items:
                    finished = dataclasses.replace(
                        finished, items=tuple(i for i in finished.items if not i.passed))
                self.results.append(finished)
                return

    async def _claim(self, evaluation_id: str, lease_seconds: float) -> bool:
        """Claim (or renew the claim on) an evaluation; False when another anvil holds it."""
        try:
            claimed = await anyio.to_thread.run_sync(
                self.store.claim, evaluation_id, self.owner, lease_seconds + 60)
        except HarnessError as exc:
            log.error("store: cannot claim %s: %s", evaluation_id, exc)
            claimed = True  # the store is down: scoring goes on, the event log keeps it all
        if not claimed:
            self.skipped.append(evaluation_id)
            await self.bus.publish(Notice(
                message=f"{evaluation_id}: skipped, another anvil is running it"))
        return claimed

    async def _write_store(self, stream: MemoryObjectReceiveStream[Event]) -> None:
        writer = anyio.CapacityLimiter(1)
        async with stream:
            async for event in stream:
                # Every event queued by now in one transaction and one thread hop (a hop
                # per event was 4% of anvil's CPU); nothing waits to fill a batch.
                batch = [event]
                with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                    while len(batch) < STORE_BATCH:
                        batch.append(stream.receive_nowait())
                delay = 0.1
                for attempt in range(1, self.settings.store_attempts + 1):
                    try:
                        await anyio.to_thread.run_sync(self.store.apply_many, batch,
                                                       limiter=writer)
                        break
                    except HarnessError as exc:
                        if attempt == self.settings.store_attempts:
                            # The event log still has it; the run goes on.
                            log.error("store: %s (gave up after %d attempts)", exc, attempt)
                            break
                        log.warning("store: %s; retrying in %.1fs", exc, delay)
                        with anyio.CancelScope(shield=True):
                            await anyio.sleep(delay)
                        delay = min(delay * 2, 2.0)


def _slug(position: int, planned: Planned) -> str:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in planned.submission.name)
    return f"{position:03d}-{planned.task_id}-{name}"


async def evaluate_once(
    task: Task, submission: Path, runtime: Runtime, cache_home: Path,
    attachments: Sequence[AttachmentFactory] | None = None,
) -> EvaluationFinished:
    """One evaluation outside any recorded run (self-verify, task checks): scratch store.

    Without ``attachments``, the task's mocks are served by a mock fabric of its own.

    Raises:
        InputError: the task names a mock that cannot be served here.
    """
    problems = mock_problems(task)
    if problems:
        raise InputError(task.root, "; ".join(problems))
    scratch = Path(tempfile.mkdtemp(prefix="anvil-once-", dir=cache_home))
    store = Store(f"sqlite:///{scratch / 'once.db'}")
    try:
        async with contextlib.AsyncExitStack() as stack:
            if attachments is None:
                fabric = await stack.enter_async_context(MockFabric())
                attachments = [fabric.attach]
            settings = RunSettings(home=scratch, concurrency=1, attachments=attachments)
            runner = Runner(store, runtime, settings)
            run_id = await runner.start([Planned(task.root, submission.resolve(), task)])
            results = await runner.execute(run_id)
    finally:
        store.close()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, scratch, True)
    if not results:
        raise HarnessError("the evaluation was interrupted before its verdict")
    return results[0]
