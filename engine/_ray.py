"""The ``ray`` executor: each evaluation attempt runs whole on a Ray worker node.

One Ray task per attempt (:func:`_evaluate_on_node`, a streaming generator that asks for
one ``anvil_slot``, the per-node capacity declared with ``ray start --resources
'{"anvil_slot": N}'``, and no CPU) runs build, startup, health, wiring, oracle and
teardown on the node that takes it, with that node's own:

- runtime: the run's choice (``--runtime``), ``auto`` resolved on the node (docker where
  its daemon answers, else process); its cache is ``ANVIL_CACHE`` of the node, else
  ``<home>/cache``;
- mock fabric: the task's mock instances are served next to the service;
- warm oracle worker.

Those are made once per Ray worker process and kept for its next tasks (:class:`_NodeHost`).

The node's lifecycle publishes on a bus of its own; every event is yielded back as it
happens, the verdict (:class:`EvaluationFinished`, ``node`` set to the host that ran it)
last. The driver awaits each streamed ref through its future (Ray's ``asyncio.wait`` on
refs is broken on Python 3.11) and republishes each event on the run's bus, so the
store records the verdict the moment it arrives, and the progress display, ``--json``
and the event log behave as with the local executor.

Assumptions and limits:

- The filesystem is shared: the task, the submission and the run's folder are at the
  same paths on every node (on one machine they are); each node writes an evaluation's
  logs in its folder under the driver's ``--home``.
- Traces: where the driver traces its evaluations into its store (a
  :class:`~engine._tracing.TraceRecorder` among the run's attachments), each node traces
  the evaluations it runs into the same store, opened there from the driver's URL (a
  sqlite file on a shared filesystem, or PostgreSQL across machines). A node that cannot
  open it, or does not find the run in it, says so in one line (once per machine) and
  runs its evaluations without spans.
- Soft affinity: an evaluation whose submission (its real path: ``--repeat`` links are
  followed) already went to a node in this run prefers that node, which has its image or
  venv (``NodeAffinitySchedulingStrategy(soft=True)``), and goes elsewhere when that node
  is busy or gone. Evaluations of a submission dispatched while its first one waits for
  a node wait for it too: a few milliseconds, and they follow it.
- Ray does not retry a task (``max_retries=0``): a worker or node that dies
  mid-evaluation is an ``error`` attempt (the harness's fault), and the run's own retry
  loop dispatches another attempt, which goes to another node (placements on the dead
  node are forgotten).
- An interrupted run cancels its tasks (``ray.cancel``): each node cancels its lifecycle
  and tears down, but Ray streams nothing more from a cancelled task, so the driver ends
  the open phase itself and the teardown's events stay on the node. The driver does not
  wait for those teardowns: what one cut short leaves behind carries anvil's marks for
  the node's next run or ``anvil gc``.
- A run whose cluster has no ``anvil_slot`` at all errs every evaluation at once with one
  reason; an attempt still waiting for a node after :attr:`RayExecutor.slot_check`
  seconds errs the same way when the cluster has lost every slot meanwhile. Tasks never
  wait forever for a node that cannot exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import queue
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.from_thread
import ray
import ray.exceptions
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal
from anyio.streams.memory import MemoryObjectReceiveStream
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from sqlalchemy.engine import make_url

from telemetry import Capture

from ._errors import HarnessError
from ._events import (
    EvaluationFinished,
    Event,
    EventBus,
    ItemFinished,
    Notice,
    PhaseFinished,
    PhaseStarted,
)
from ._executors import Attempt
from ._lifecycle import AttachmentFactory, Evaluation, Lifecycle, Limits
from ._mocks import MockFabric
from ._oracle import ItemResult
from ._oracle_worker import OracleWorker, oracle_worker
from ._reaper import owner_env
from ._store import Store
from ._tracing import TraceRecorder
from .runtimes import make_runtime
from .types import Phase, Runtime, Verdict

log = logging.getLogger("anvil.engine")

SLOT = "anvil_slot"
NO_SLOTS = (f"no Ray node offers an {SLOT} (start each worker with "
            f"`ray start --address ADDR --resources '{{\"{SLOT}\": N}}'`)")


@dataclass(frozen=True)
class NodeTracing:
    """Where and how a node traces its evaluations: the driver's store and capture."""

    store_url: str = field(repr=False)  # with its password, if any: nodes must log in
    capture: Capture = Capture()
    check_requests: bool = False

    @classmethod
    def of_run(cls, attachments: Sequence[AttachmentFactory]) -> NodeTracing | None:
        """What the driver's own trace attachment does, for the nodes to do the same; None
        when the run records no traces."""
        for factory in attachments:
            recorder = getattr(factory, "__self__", None)
            if isinstance(recorder, TraceRecorder):
                url = recorder.store.engine.url.render_as_string(hide_password=False)
                return cls(url, recorder.capture, recorder.check_requests)
        return None


@dataclass(frozen=True)
class NodeJob:
    """What a node needs to run one attempt (pickled to it: paths must be shared)."""

    evaluation: Evaluation
    attempt: int
    final: bool
    runtime: str  # the run's --runtime; ``auto`` is resolved on the node
    home: Path  # the node's runtime cache is <home>/cache unless it sets ANVIL_CACHE
    log_cap: int
    tracing: NodeTracing | None = None


@dataclass(frozen=True)
class _Taken:
    """The task's first item: which node took it, and when (its clock)."""

    node_id: str
    label: str
    at: float  # time.time() on the node


@dataclass(frozen=True)
class _Answered:
    """Sent right before the verdict: when the node sent it (its clock)."""

    at: float


def node_label() -> str:
    """The host a task runs on, as ``--json`` shows it: its hostname and Ray node id
    (nodes of one machine, as in tests, differ by their node id only)."""
    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


# -- on the worker node -------------------------------------------------------------------


@ray.remote(num_returns="streaming", num_cpus=0, resources={SLOT: 1}, max_retries=0,
            scheduling_strategy="SPREAD")
def _evaluate_on_node(job: NodeJob) -> Iterator[Event | _Taken | _Answered]:
    """Run ``job`` here and yield its events as they happen, the verdict last (a
    :class:`_Taken` comes first, an :class:`_Answered` right before the verdict).

    The lifecycle runs in this process's :class:`_NodeHost` event loop; this thread relays
    its bus. When the task is cancelled (the driver was interrupted) or dropped, the
    lifecycle is cancelled and its teardown runs to its end (shielded, under its
    deadline) before the task ends.
    """
    label = node_label()
    yield _Taken(ray.get_runtime_context().get_node_id(), label, time.time())
    key = (job.runtime, job.home, job.tracing)
    host = _NodeHost.hosts.get(key)
    if host is None:
        try:
            host = _NodeHost.hosts[key] = _NodeHost(job.runtime, job.home, job.tracing)
        except Exception as exc:  # noqa: BLE001 - no runtime here: the attempt's `error`
            yield _Answered(time.time())
            yield _error(job.evaluation, job.attempt, job.final, f"node {label}: {exc}",
                         transient=True, node=label)  # retried: another node may have one
            return
    portal = host.portal
    bus, stream = portal.call(_open_bus)
    done = portal.start_task_soon(host.evaluate, job, bus)
    try:
        while (event := _next(portal, stream)) is not None:
            if isinstance(event, EvaluationFinished):
                event = dataclasses.replace(event, node=label)
                yield _Answered(time.time())
            yield event
    except BaseException:  # ray.cancel (a KeyboardInterrupt), dropped, or failing
        # Ray relays nothing after a cancel: the teardown runs here all the same, and
        # this worker stays busy until it ends.
        done.cancel()
        grace = job.evaluation.task.timeout(Phase.TEARDOWN) + 5
        portal.call(_drain, stream, grace)
        raise
    done.result()


def _next(portal: BlockingPortal, stream: MemoryObjectReceiveStream[Event]) -> Event | None:
    """The stream's next event (None at its end). The wait wakes this thread every
    quarter second: Ray's cancellation (a KeyboardInterrupt) lands only then."""
    receiving = portal.start_task_soon(stream.receive)
    try:
        while True:
            try:
                return receiving.result(timeout=0.25)
            except TimeoutError:
                continue
            except anyio.EndOfStream:
                return None
    finally:
        receiving.cancel()  # no-op once received


async def _open_bus() -> tuple[EventBus, MemoryObjectReceiveStream[Event]]:
    bus = EventBus()
    return bus, bus.subscribe("driver", buffer=math.inf)  # the relay never drops an event


async def _drain(stream: MemoryObjectReceiveStream[Event], grace: float) -> None:
    with anyio.move_on_after(grace):
        async for _ in stream:
            pass


class _NodeHost:
    """A Ray worker process's event loop (a daemon thread) and what its evaluations share:
    the node's runtime, a mock fabric, a warm oracle worker and, when the run is traced,
    a trace recorder writing to the driver's store.

    The first task a worker process runs makes it; the next ones reuse it. A Ray worker
    runs one task at a time and lives as long as the driver's job, so each slot of a node
    keeps one runtime and one warm oracle worker for the run. Nothing is closed when Ray
    ends the process: each evaluation's teardown stopped what it started, the recorder
    flushed its spans at the end of each evaluation, and the oracle worker ends when the
    pipe from its parent closes.
    """

    hosts: ClassVar[dict[tuple[str, Path, NodeTracing | None], _NodeHost]] = {}

    def __init__(self, runtime: str, home: Path, tracing: NodeTracing | None) -> None:
        """Raises: whatever keeps the runtime from running here (RuntimeUnavailable)."""
        made: queue.Queue[BlockingPortal] = queue.Queue()
        threading.Thread(target=anyio.run, args=(self._loop, made), daemon=True,
                         name="anvil-node").start()
        self.portal = made.get()
        self.recorder: TraceRecorder | None = None
        self.trace_problem: str | None = None  # why this node records no spans
        self._untraced: dict[str, str | None] = {}  # run id -> why it has no spans here
        try:
            _, (self.runtime, self.fabric, self.worker) = self.portal.start_task(
                self._hold, runtime, home, tracing)
        except BaseException:
            self.portal.call(self.portal.stop, True)
            raise

    @staticmethod
    async def _loop(made: queue.Queue[BlockingPortal]) -> None:
        async with BlockingPortal() as portal:
            made.put(portal)
            await portal.sleep_until_stopped()

    async def _hold(self, runtime_name: str, home: Path, tracing: NodeTracing | None, *,
                    task_status: TaskStatus[tuple[Runtime, MockFabric, OracleWorker | None]]
                    ) -> None:
        runtime, _ = await make_runtime(runtime_name, home)
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(runtime)
            fabric = await stack.enter_async_context(MockFabric())
            worker = await stack.enter_async_context(oracle_worker())
            if tracing is not None:
                try:
                    store = await anyio.to_thread.run_sync(_open_store, tracing.store_url)
                except HarnessError as exc:
                    self.trace_problem = str(exc)
                else:
                    stack.callback(store.close)
                    self.recorder = await stack.enter_async_context(TraceRecorder(
                        store, tracing.capture, check_requests=tracing.check_requests))
                    fabric.observer = self.recorder.observer  # mock calls become spans
            task_status.started((runtime, fabric, worker))
            await anyio.sleep_forever()

    async def _traced(self, run_id: str) -> str | None:
        """Why evaluations of ``run_id`` get no spans here (None: they do). The store must
        hold the run: a store at the same URL that is not the driver's (a sqlite path
        with no shared filesystem behind it) would keep spans nobody reads."""
        if run_id not in self._untraced:
            problem = self.trace_problem
            if problem is None and self.recorder is not None:
                store = self.recorder.store
                try:
                    found = await anyio.to_thread.run_sync(store.run, run_id)
                except Exception as exc:  # noqa: BLE001 - any failure: no spans, scoring goes on
                    found, problem = None, f"{store.url}: {_first_line(exc)}"
                if found is None and problem is None:
                    problem = f"{store.url} does not hold run {run_id} (not the driver's store)"
            self._untraced[run_id] = problem
        return self._untraced[run_id]

    async def evaluate(self, job: NodeJob, bus: EventBus) -> None:
        evaluation = dataclasses.replace(job.evaluation,
                                         owner_env=owner_env(job.evaluation.run_id))
        try:
            attachments: list[AttachmentFactory] = [self.fabric.attach]
            if job.tracing is not None:
                fresh = evaluation.run_id not in self._untraced
                problem = await self._traced(evaluation.run_id)
                if problem is None and self.recorder is not None:
                    attachments.append(self.recorder.attach)  # last: the proxy wires last
                elif fresh:  # once per worker; the driver shows it once per machine
                    message = (f"traces: node {socket.gethostname()} cannot record spans "
                               f"({problem}); its evaluations run without them")
                    log.warning("%s", message)
                    await bus.publish(Notice(message=message, level="warning"))
            lifecycle = Lifecycle(evaluation, self.runtime, bus, Limits.for_concurrency(1),
                                  job.log_cap, attachments, oracle_worker=self.worker)
            await lifecycle.run(job.attempt, final=job.final)
        finally:
            bus.close()


def _open_store(url: str) -> Store:
    """The driver's store, from a node.

    Raises:
        HarnessError: it cannot be opened here, or it is a sqlite file that does not
            exist here (opening it would make a new, empty one: no shared filesystem).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and not Path(
            parsed.database).is_file():
        raise HarnessError(f"no file {parsed.database} here (no shared filesystem?)")
    return Store(url)


# -- on the driver ------------------------------------------------------------------------


def _error(evaluation: Evaluation, attempt: int, final: bool, reason: str, *,
           transient: bool, phase: Phase | None = None,
           items: tuple[ItemResult, ...] = (), duration_s: float = 0.0,
           node: str | None = None) -> EvaluationFinished:
    return EvaluationFinished(
        run_id=evaluation.run_id, evaluation_id=evaluation.evaluation_id,
        task=evaluation.task.id, submission=str(evaluation.submission),
        verdict=Verdict.ERROR, phase=phase, reason=reason, items=items,
        duration_s=duration_s, attempt=attempt, final=final or not transient, node=node)


@dataclass
class _Seen:
    """What the driver saw of an attempt: enough for its verdict if the node dies."""

    started: float = field(default_factory=time.monotonic)
    started_on_node: bool = False  # a first event came: a node took the task
    node_id: str | None = None  # the node that took it
    submitted_at: float = field(default_factory=time.time)  # the driver's clock
    taken_at: float = 0.0  # the node's clock
    answered_at: float = 0.0  # the node's clock
    leading: anyio.Event | None = None  # set once a node took it: the next ones follow
    phase: Phase | None = None  # the phase open on the node
    phase_started: float = 0.0
    items: list[ItemResult] = field(default_factory=list)
    finished: EvaluationFinished | None = None

    def see(self, event: Event) -> None:
        if isinstance(event, PhaseStarted):
            self.phase, self.phase_started = event.phase, time.monotonic()
        elif isinstance(event, PhaseFinished):
            self.phase = None
        elif isinstance(event, ItemFinished):
            self.items.append(event.item)
        elif isinstance(event, EvaluationFinished):
            self.finished = event


@dataclass(frozen=True)
class Dispatch:
    """Ray's part in one attempt: the way to the node and the verdict's way back.

    Times are ``time.time()`` of the driver (``submitted``, ``received``) and of the node
    (``taken``, ``answered``): the two legs are exact on one machine; across machines
    they are off by the clocks' skew, in opposite directions (their sum is not).
    """

    evaluation_id: str
    node: str
    submitted: float  # the driver submitted the task
    taken: float  # the task began on its node
    answered: float  # the node sent the verdict
    received: float  # the verdict reached the driver

    @property
    def overhead_s(self) -> float:
        """Seconds of the attempt that were Ray's (includes any wait for a free slot)."""
        return (self.taken - self.submitted) + (self.received - self.answered)

    @property
    def wall_s(self) -> float:
        return self.received - self.submitted


class RayExecutor:
    """Runs each evaluation attempt as one Ray task on a worker node (module docstring).

    Args:
        address: the cluster (``--ray-address``); default ``RAY_ADDRESS``, else ``auto``
            (the cluster ``ray start`` runs on this machine).
        runtime: the runtime each node makes (``auto`` is resolved on the node).
        home: anvil's home; nodes keep their runtime cache under it (shared filesystem)
            unless they set ``ANVIL_CACHE``.
        slot_check: seconds an attempt waits for a node before anvil checks that the
            cluster still has an ``anvil_slot`` at all.
        queued: attempts submitted beyond the cluster's slots, waiting in Ray's queue to
            take the next free slot at once (default: ``build_slots``, else 2; 0 submits
            an attempt only when a slot is free, as a measurement of dispatch wants).
    """

    name = "ray"
    in_process = False

    def __init__(self, address: str | None = None, runtime: str = "auto",
                 home: Path = Path(".anvil"), slot_check: float = 10.0,
                 queued: int | None = None) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or "auto"
        self.runtime = runtime
        self.home = home.resolve()
        self.slot_check = slot_check
        self.queued = queued
        self.slots = 0  # the cluster's anvil_slot total when the run started
        #: Ray's part in each attempt that got a verdict from its node, in arrival order.
        self.dispatches: list[Dispatch] = []
        # Soft affinity: submission (real path) -> the node that took its first evaluation
        # in this run; _placing: the submissions whose first evaluation waits for a node.
        self._placed: dict[str, str] = {}
        self._placing: dict[str, anyio.Event] = {}
        self._notices: set[str] = set()  # the nodes' notices, each shown once

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """Connect to the cluster for the run (unless this process already is) and let go
        of it at the end.

        Raises:
            HarnessError: no Ray cluster answers at the address.
        """
        owned = not ray.is_initialized()
        if owned:
            # Ray's own connect retries for minutes when nothing listens: say so at once.
            silent = await _silent(self.address)
            if silent:
                raise HarnessError(f"Ray: no cluster answers at {self.address}: {silent}")
            try:
                # On the event loop's thread (it may install signal handlers, which only
                # the main thread can); connecting takes ~50 ms on one machine.
                ray.init(address=self.address, namespace="anvil", log_to_driver=False,
                         logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise HarnessError(f"Ray: cannot connect to a cluster at {self.address}: "
                                   f"{exc}") from None
        self.dispatches, self._placed, self._placing, self._notices = [], {}, {}, set()
        try:
            self.slots = await _cluster_slots()
            yield
        finally:
            if owned:
                ray.shutdown()

    def limits(self, concurrency: int, build_slots: int | None) -> Limits:
        """Under Ray the cluster's slots bound the evaluations under way (``--concurrency``
        is each node's ``anvil_slot`` count); ``build_slots`` more (default 2) wait in
        Ray's queue to take the next free slot at once."""
        slots = max(1, self.slots)
        queued = self.queued if self.queued is not None else build_slots or 2
        limits = Limits.for_concurrency(slots, max(1, queued))
        limits.admitted.total_tokens = slots + queued  # builds happen on the nodes
        return limits

    async def run(self, attempt: Attempt) -> EvaluationFinished:
        ev = attempt.evaluation
        if self.slots <= 0:
            finished = _error(ev, attempt.number, True, NO_SLOTS, transient=False)
            await attempt.bus.publish(finished)
            return finished
        job = NodeJob(evaluation=ev, attempt=attempt.number, final=attempt.final,
                      runtime=self.runtime, home=self.home, log_cap=attempt.log_cap,
                      tracing=NodeTracing.of_run(attempt.attachments))
        key = os.path.realpath(ev.submission)
        strategy, seen = await self._placement(key)
        try:
            stream: Any = _evaluate_on_node.options(scheduling_strategy=strategy).remote(job)
            await self._relay(stream, attempt, seen, key)
        except anyio.get_cancelled_exc_class():
            # Interrupted: the node cancels the lifecycle, whose teardown runs there, but
            # Ray streams nothing more once a task is cancelled: the open phase ends here.
            ray.cancel(stream)
            with anyio.CancelScope(shield=True):
                await self._close_phase(attempt, seen, "cancelled")
            raise
        except _NoSlots:
            ray.cancel(stream)
            return await self._lost(attempt, seen, NO_SLOTS, transient=False)
        except ray.exceptions.RayTaskError as exc:  # anvil's code failed on the node
            log.error("evaluation %s failed on its node: %s", ev.evaluation_id, exc)
            return await self._lost(attempt, seen, f"internal error on the node: "
                                    f"{_first_line(exc)}", transient=False)
        except ray.exceptions.RayError as exc:  # the worker or its node died, or Ray failed
            why = f"Ray: {type(exc).__name__} mid-evaluation: {_first_line(exc)}"
            if seen.node_id is not None:  # the next attempts go where a new first one goes
                self._placed = {k: n for k, n in self._placed.items() if n != seen.node_id}
            return await self._lost(attempt, seen, why, transient=True)
        finally:
            self._followed(key, seen)
        if seen.finished is None:
            return await self._lost(attempt, seen, "the node ended the evaluation without "
                                    "a verdict", transient=True)
        return seen.finished

    async def _placement(self, key: str) -> tuple[Any, _Seen]:
        """Where the next evaluation of submission ``key`` goes: the node its first one
        went to, softly (another node when that one is busy or gone); for a first one,
        wherever (``SPREAD``). While a first one waits for its node, the others wait too
        (they follow it): a few milliseconds, or their turn for a slot anyway."""
        while key not in self._placed and (first := self._placing.get(key)) is not None:
            await first.wait()
        node = self._placed.get(key)
        if node is not None:
            strategy = NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
            return strategy, _Seen()
        leading = self._placing[key] = anyio.Event()
        return "SPREAD", _Seen(leading=leading)

    def _followed(self, key: str, seen: _Seen) -> None:
        """A node took the attempt (it is placed), or it ended without one: those that
        wait for it, when it was a submission's first, go on."""
        if seen.leading is not None:
            if self._placing.get(key) is seen.leading:
                del self._placing[key]
            seen.leading.set()
            seen.leading = None

    async def _relay(self, stream: Any, attempt: Attempt, seen: _Seen, key: str) -> None:
        """Republish each event of ``stream`` on the run's bus as it arrives.

        Raises:
            ray.exceptions.RayError: the task failed (its last ref holds the error).
            _NoSlots: nothing started the task and the cluster has no slot left.
        """
        while True:
            waiting = not seen.started_on_node
            with anyio.move_on_after(self.slot_check if waiting else math.inf) as wait:
                try:
                    ref = await stream.__anext__()
                except StopAsyncIteration:
                    return
            if wait.cancelled_caught:
                if await _cluster_slots() <= 0:
                    raise _NoSlots
                continue
            item: Event | _Taken | _Answered = await asyncio.wrap_future(ref.future())
            seen.started_on_node = True
            if isinstance(item, _Taken):
                seen.node_id, seen.taken_at = item.node_id, item.at
                self._placed.setdefault(key, item.node_id)
                self._followed(key, seen)
                continue
            if isinstance(item, _Answered):
                seen.answered_at = item.at
                continue
            if isinstance(item, Notice):  # each node's worker says it: show it once
                if item.message in self._notices:
                    continue
                self._notices.add(item.message)
            seen.see(item)
            if isinstance(item, EvaluationFinished) and seen.taken_at and seen.answered_at:
                self.dispatches.append(Dispatch(
                    attempt.evaluation.evaluation_id, item.node or "", seen.submitted_at,
                    seen.taken_at, seen.answered_at, time.time()))
            await attempt.bus.publish(item)

    async def _lost(self, attempt: Attempt, seen: _Seen, reason: str, *,
                    transient: bool) -> EvaluationFinished:
        """The attempt's verdict when its node gave none: the open phase is closed."""
        if seen.finished is not None:  # the verdict came before the task failed
            return seen.finished
        ev, phase = attempt.evaluation, seen.phase
        with anyio.CancelScope(shield=True):
            await self._close_phase(attempt, seen, reason)
            finished = _error(ev, attempt.number, attempt.final, reason, transient=transient,
                              phase=phase, items=tuple(seen.items),
                              duration_s=time.monotonic() - seen.started)
            await attempt.bus.publish(finished)
        return finished

    async def _close_phase(self, attempt: Attempt, seen: _Seen, message: str) -> None:
        """End the phase the node had open (it will not say so itself)."""
        if seen.phase is not None:
            await attempt.bus.publish(PhaseFinished(
                evaluation_id=attempt.evaluation.evaluation_id, phase=seen.phase, ok=False,
                duration_s=time.monotonic() - seen.phase_started, message=message))
            seen.phase = None


class _NoSlots(Exception):
    pass


async def _silent(address: str) -> str | None:
    """Why nothing answers at ``address`` when it is ``host:port``; None when something
    does, or for any other form (``auto``, ``ray://...``: Ray says why itself)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return None
    try:
        with anyio.fail_after(5):
            connection = await anyio.connect_tcp(host, int(port))
    except (OSError, TimeoutError) as exc:
        return str(exc) or "no answer within 5s"
    await connection.aclose()
    return None


async def _cluster_slots() -> int:
    resources = await anyio.to_thread.run_sync(ray.cluster_resources)
    return int(resources.get(SLOT, 0))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

