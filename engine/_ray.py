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

Assumptions and limits of this first slice:

- The filesystem is shared: the task, the submission and the run's folder are at the
  same paths on every node (on one machine they are); each node writes an evaluation's
  logs in its folder under the driver's ``--home``.
- Traces are not recorded: the trace and recording proxy attachments
  (:func:`engine._tracing.default_attachments`) need the driver's store; under Ray an
  evaluation has its verdict, items and logs, but no spans.
- Ray does not retry a task (``max_retries=0``): a worker or node that dies
  mid-evaluation is an ``error`` attempt (the harness's fault), and the run's own retry
  loop dispatches another attempt, which Ray may place on another node. Tasks are
  spread over the nodes (``SPREAD``); preferring a node that has the submission's image
  is for later.
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
from collections.abc import AsyncIterator, Iterator
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

from ._errors import HarnessError
from ._events import (
    EvaluationFinished,
    Event,
    EventBus,
    ItemFinished,
    PhaseFinished,
    PhaseStarted,
)
from ._executors import Attempt
from ._lifecycle import Evaluation, Lifecycle, Limits
from ._mocks import MockFabric
from ._oracle import ItemResult
from ._oracle_worker import OracleWorker, oracle_worker
from ._reaper import owner_env
from .runtimes import make_runtime
from .types import Phase, Runtime, Verdict

log = logging.getLogger("anvil.engine")

SLOT = "anvil_slot"
NO_SLOTS = (f"no Ray node offers an {SLOT} (start each worker with "
            f"`ray start --address ADDR --resources '{{\"{SLOT}\": N}}'`)")


@dataclass(frozen=True)
class NodeJob:
    """What a node needs to run one attempt (pickled to it: paths must be shared)."""

    evaluation: Evaluation
    attempt: int
    final: bool
    runtime: str  # the run's --runtime; ``auto`` is resolved on the node
    home: Path  # the node's runtime cache is <home>/cache unless it sets ANVIL_CACHE
    log_cap: int


def node_label() -> str:
    """The host a task runs on, as ``--json`` shows it: its hostname and Ray node id
    (nodes of one machine, as in tests, differ by their node id only)."""
    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


# -- on the worker node -------------------------------------------------------------------


@ray.remote(num_returns="streaming", num_cpus=0, resources={SLOT: 1}, max_retries=0,
            scheduling_strategy="SPREAD")
def _evaluate_on_node(job: NodeJob) -> Iterator[Event]:
    """Run ``job`` here and yield its events as they happen, the verdict last.

    The lifecycle runs in this process's :class:`_NodeHost` event loop; this thread relays
    its bus. When the task is cancelled (the driver was interrupted) or dropped, the
    lifecycle is cancelled and its teardown runs to its end (shielded, under its
    deadline) before the task ends.
    """
    label = node_label()
    key = (job.runtime, job.home)
    host = _NodeHost.hosts.get(key)
    if host is None:
        try:
            host = _NodeHost.hosts[key] = _NodeHost(job.runtime, job.home)
        except Exception as exc:  # noqa: BLE001 - no runtime here: the attempt's `error`
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
    the node's runtime, a mock fabric and a warm oracle worker.

    The first task a worker process runs makes it; the next ones reuse it. A Ray worker
    runs one task at a time and lives as long as the driver's job, so each slot of a node
    keeps one runtime and one warm oracle worker for the run. Nothing is closed when Ray
    ends the process: each evaluation's teardown stopped what it started, and the oracle
    worker ends when the pipe from its parent closes.
    """

    hosts: ClassVar[dict[tuple[str, Path], _NodeHost]] = {}

    def __init__(self, runtime: str, home: Path) -> None:
        """Raises: whatever keeps the runtime from running here (RuntimeUnavailable)."""
        made: queue.Queue[BlockingPortal] = queue.Queue()
        threading.Thread(target=anyio.run, args=(self._loop, made), daemon=True,
                         name="anvil-node").start()
        self.portal = made.get()
        try:
            _, (self.runtime, self.fabric, self.worker) = self.portal.start_task(
                self._hold, runtime, home)
        except BaseException:
            self.portal.call(self.portal.stop, True)
            raise

    @staticmethod
    async def _loop(made: queue.Queue[BlockingPortal]) -> None:
        async with BlockingPortal() as portal:
            made.put(portal)
            await portal.sleep_until_stopped()

    @staticmethod
    async def _hold(runtime_name: str, home: Path, *,
                    task_status: TaskStatus[tuple[Runtime, MockFabric, OracleWorker | None]]
                    ) -> None:
        runtime, _ = await make_runtime(runtime_name, home)
        async with runtime, MockFabric() as fabric, oracle_worker() as worker:
            task_status.started((runtime, fabric, worker))
            await anyio.sleep_forever()

    async def evaluate(self, job: NodeJob, bus: EventBus) -> None:
        evaluation = dataclasses.replace(job.evaluation,
                                         owner_env=owner_env(job.evaluation.run_id))
        try:
            lifecycle = Lifecycle(evaluation, self.runtime, bus, Limits.for_concurrency(1),
                                  job.log_cap, [self.fabric.attach], oracle_worker=self.worker)
            await lifecycle.run(job.attempt, final=job.final)
        finally:
            bus.close()


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
    """

    name = "ray"
    in_process = False

    def __init__(self, address: str | None = None, runtime: str = "auto",
                 home: Path = Path(".anvil"), slot_check: float = 10.0) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or "auto"
        self.runtime = runtime
        self.home = home.resolve()
        self.slot_check = slot_check
        self.slots = 0  # the cluster's anvil_slot total when the run started

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
        return Limits.for_concurrency(slots, build_slots or 2)

    async def run(self, attempt: Attempt) -> EvaluationFinished:
        ev = attempt.evaluation
        if self.slots <= 0:
            finished = _error(ev, attempt.number, True, NO_SLOTS, transient=False)
            await attempt.bus.publish(finished)
            return finished
        job = NodeJob(evaluation=ev, attempt=attempt.number, final=attempt.final,
                      runtime=self.runtime, home=self.home, log_cap=attempt.log_cap)
        stream: Any = _evaluate_on_node.remote(job)
        seen = _Seen()
        try:
            await self._relay(stream, attempt, seen)
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
            return await self._lost(attempt, seen, why, transient=True)
        if seen.finished is None:
            return await self._lost(attempt, seen, "the node ended the evaluation without "
                                    "a verdict", transient=True)
        return seen.finished

    async def _relay(self, stream: Any, attempt: Attempt, seen: _Seen) -> None:
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
            event: Event = await asyncio.wrap_future(ref.future())
            seen.started_on_node = True
            seen.see(event)
            await attempt.bus.publish(event)

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

