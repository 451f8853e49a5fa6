"""Where a run's evaluations execute: the executor seam of the scheduler.

The :class:`~engine._run.Runner` keeps everything that is the run's: planning, claims in
the store, retries, the event bus and its subscribers. For each attempt at an evaluation
it asks its executor for the verdict (:meth:`Executor.run`); the executor publishes the
attempt's events on the run's bus as they happen, the verdict last.

- ``local`` (:class:`LocalExecutor`, the default): the evaluation's
  :class:`~engine._lifecycle.Lifecycle` runs in this process, with the run's runtime,
  attachments (mock fabric, trace) and warm oracle worker: anvil on one machine.
- ``ray`` (:class:`engine._ray.RayExecutor`, the ``ray`` extra): one Ray task per
  attempt runs the whole evaluation on a worker node and streams its events back.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ._errors import InputError
from ._events import EvaluationFinished, EventBus
from ._lifecycle import AttachmentFactory, Evaluation, Lifecycle, Limits
from ._oracle_worker import OracleWorker
from .types import Runtime

EXECUTORS = ("local", "ray")
RAY_EXTRA = "pip install 'anvil-harness[ray]'"


@dataclass(frozen=True)
class Attempt:
    """One attempt at an evaluation, with what the run lends it.

    ``runtime``, ``attachments`` and ``oracle_worker`` are this process's: only an
    executor that runs evaluations here (``local``) uses them.
    """

    evaluation: Evaluation
    number: int  # 1 for the first attempt
    final: bool  # no attempt follows this one, whatever its verdict
    bus: EventBus
    limits: Limits
    log_cap: int
    runtime: Runtime
    attachments: Sequence[AttachmentFactory] = ()
    oracle_worker: OracleWorker | None = None


class Executor(Protocol):
    """Runs evaluation attempts for a :class:`~engine._run.Runner`."""

    #: ``local``, ``ray``: recorded with the run (``--resume`` uses it again).
    name: str
    #: Evaluations run in this process (the run starts its warm oracle worker for them).
    in_process: bool

    def session(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Held around a run's evaluations: connect to a cluster, and let go of it.

        Raises:
            HarnessError: the executor cannot run anything (no cluster answers).
        """
        ...

    def limits(self, concurrency: int, build_slots: int | None) -> Limits:
        """The run's limits, asked for inside :meth:`session`; ``admitted`` bounds the
        evaluations under way at once (each holds its claim in the store meanwhile)."""
        ...

    async def run(self, attempt: Attempt) -> EvaluationFinished:
        """Run one attempt; publish its events on ``attempt.bus``, its verdict last, and
        return the verdict. A fault of the executor is an ``error`` verdict (retried
        unless ``attempt.final``), never an exception. Cancellation propagates."""
        ...


class LocalExecutor:
    """Today's path: the evaluation's lifecycle runs in this process, in the run's task
    group, under the run's limits (``--concurrency``)."""

    name = "local"
    in_process = True

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        yield

    def limits(self, concurrency: int, build_slots: int | None) -> Limits:
        return Limits.for_concurrency(concurrency, build_slots)

    async def run(self, attempt: Attempt) -> EvaluationFinished:
        lifecycle = Lifecycle(attempt.evaluation, attempt.runtime, attempt.bus, attempt.limits,
                              attempt.log_cap, attempt.attachments,
                              oracle_worker=attempt.oracle_worker)
        return await lifecycle.run(attempt.number, final=attempt.final)


def make_executor(name: str, *, address: str | None = None, runtime: str = "auto",
                  home: Path | None = None) -> Executor:
    """The executor called ``name``; ``address``, ``runtime`` and ``home`` are the
    ``ray`` executor's (the cluster, and what each node resolves its runtime from).

    Raises:
        InputError: an unknown name, or ``ray`` without the ``ray`` extra installed.
    """
    if name == "local":
        return LocalExecutor()
    if name == "ray":
        try:
            from ._ray import RayExecutor
        except ImportError:
            raise InputError("--executor ray", f"Ray is not installed: {RAY_EXTRA}") from None
        return RayExecutor(address=address, runtime=runtime, home=home or Path(".anvil"))
    raise InputError(f"--executor {name}", f"no such executor (choose: {', '.join(EXECUTORS)})")
