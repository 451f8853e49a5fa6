"""One evaluation as an explicit state machine.

    build -> startup -> health -> wiring -> oracle -> teardown

Each phase runs under its own deadline from task.toml. The outcome is mapped
to a verdict in one place (:func:`_verdict_for`): a candidate failure gives
``fail`` with the phase, a deadline gives ``fail`` with the phase, a harness
fault gives ``error``. Teardown always runs, shielded from cancellation and
bounded by its own deadline.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import aiohttp
import anyio

from telemetry import PEER, client_tracing

from ._errors import (
    AnvilError,
    CandidateFailure,
    HarnessError,
    ServiceExited,
    ServiceUnhealthy,
    Unsupported,
)
from ._events import (
    EvaluationFinished,
    EvaluationStarted,
    EventBus,
    ItemFinished,
    ItemStarted,
    PhaseFinished,
    PhaseStarted,
)
from ._logs import read_tail
from ._oracle import ItemResult, run_oracle
from ._oracle_worker import OracleWorker
from ._task import Task
from .types import (
    Artifact,
    BuildRequest,
    ExitInfo,
    Instance,
    Outcome,
    Phase,
    Runtime,
    StartRequest,
    Verdict,
)

log = logging.getLogger("anvil.engine")
T = TypeVar("T")

DEFAULT_LOG_CAP = 2 * 1024 * 1024
_HARNESS_PHASES = (Phase.STARTUP, Phase.WIRING)  # a deadline there is anvil's, not the service's
PROBE = "anvil.probe"  # the span attribute that marks a health probe


@dataclass(frozen=True)
class Limits:
    """Separate capacity for builds, running services and oracle runs, and how many
    evaluations are under way at all (``admitted``: enough for every service slot to
    be busy while the next evaluations build; the rest wait, holding nothing, not even
    their claim in the store)."""

    builds: anyio.CapacityLimiter
    services: anyio.CapacityLimiter
    oracles: anyio.CapacityLimiter
    admitted: anyio.CapacityLimiter

    @classmethod
    def for_concurrency(cls, concurrency: int, build_slots: int | None = None) -> Limits:
        builds = build_slots or max(1, min(concurrency, 2))
        return cls(
            builds=anyio.CapacityLimiter(builds),
            services=anyio.CapacityLimiter(concurrency),
            oracles=anyio.CapacityLimiter(concurrency),
            admitted=anyio.CapacityLimiter(concurrency + builds),
        )


@dataclass(frozen=True)
class Evaluation:
    """One submission against one task, within a run."""

    run_id: str
    evaluation_id: str
    task: Task
    submission: Path
    workdir: Path
    owner_env: dict[str, str] = field(default_factory=dict)  # marks processes for reaping


class Attachment(Protocol):
    """Something an evaluation acquires next to its service: mock instances, a proxy.

    The lifecycle calls the hooks in phase order. Whatever an attachment acquires it
    registers on ``stack``, the evaluation's exit stack: teardown closes it (shielded,
    under the teardown deadline) whatever happened before, in reverse order of
    acquisition, so nothing an evaluation holds outlives it.
    """

    #: The ``[[mocks]]`` kinds this attachment serves (the rest of a task's mocks is an error).
    provides: frozenset[str]

    async def startup(self, stack: AsyncExitStack, runtime: Runtime) -> Mapping[str, str]:
        """Before the service starts: acquire endpoints; return env vars for the service.

        ``runtime.listen_host`` is where to listen so that the service reaches it and
        ``runtime.reachable_url`` turns an address on this machine into the service's view.
        """
        ...

    async def wiring(self, stack: AsyncExitStack, base_url: str) -> tuple[str, Mapping[str, str]]:
        """Once the service answers at ``base_url``: reset/seed/check what was acquired.

        Returns the base URL the oracle should use (e.g. a recording proxy in front of
        ``base_url``, or ``base_url`` itself) and env vars for the oracle process.
        """
        ...

    async def item_started(self, nodeid: str) -> None:
        """The oracle started item ``nodeid``: calls from now on belong to it."""
        ...

    # Optional: ``async def oracle_finished(self) -> None``, called once the oracle ran to
    # its end; raising a HarnessError there makes the verdict anvil's ``error`` (the
    # recording proxy does when it could not relay a call).
    #
    # Optional: ``def phase(self, phase: Phase) -> AbstractAsyncContextManager[None]``,
    # entered around each phase, in the evaluation's task: what it sets in context
    # variables holds for the phase's work (the trace's phase span does), and a failure
    # of the phase passes through it. Its exit must not raise.


AttachmentFactory = Callable[["Evaluation"], Attachment | None]


@dataclass(frozen=True)
class Result:
    verdict: Verdict
    phase: Phase | None
    reason: str
    items: tuple[ItemResult, ...]
    retry: bool = False  # an ``error`` that another attempt could cure


class Lifecycle:
    """Runs one evaluation through its phases and publishes every transition."""

    def __init__(
        self,
        evaluation: Evaluation,
        runtime: Runtime,
        bus: EventBus,
        limits: Limits,
        log_cap: int = DEFAULT_LOG_CAP,
        attachments: Sequence[AttachmentFactory] = (),
        oracle_worker: OracleWorker | None = None,
    ) -> None:
        self.ev = evaluation
        self.oracle_worker = oracle_worker
        self.runtime = runtime
        self.bus = bus
        self.limits = limits
        self.log_cap = log_cap
        self.phase = Phase.BUILD
        self.items: list[ItemResult] = []
        self.attachments = [a for a in (make(evaluation) for make in attachments) if a]

    async def run(self, attempt: int = 1, *, final: bool = True) -> EvaluationFinished:
        """Run every phase; return (and publish) the verdict. Cancellation propagates."""
        ev = self.ev
        started = time.monotonic()
        await self.bus.publish(EvaluationStarted(
            run_id=ev.run_id, evaluation_id=ev.evaluation_id, task=ev.task.id,
            submission=str(ev.submission), attempt=attempt,
        ))
        try:
            ev.workdir.mkdir(parents=True, exist_ok=True)
            result = await self._phases()
        except Exception as exc:  # noqa: BLE001 - every failure becomes a verdict here
            result = self._verdict_for(exc)
        finished = EvaluationFinished(
            run_id=ev.run_id, evaluation_id=ev.evaluation_id, task=ev.task.id,
            submission=str(ev.submission), verdict=result.verdict, phase=result.phase,
            reason=result.reason, items=result.items, duration_s=time.monotonic() - started,
            attempt=attempt,
            final=final or result.verdict is not Verdict.ERROR or not result.retry,
        )
        with anyio.CancelScope(shield=True):  # a verdict reached is never lost to a cancel
            await self.bus.publish(finished)
        return finished

    def _verdict_for(self, exc: Exception) -> Result:
        """The one place where an outcome becomes a verdict."""
        items = tuple(self.items)
        if isinstance(exc, CandidateFailure):
            return Result(Verdict.FAIL, exc.phase or self.phase, exc.reason, items)
        if isinstance(exc, TimeoutError):
            timeout = self.ev.task.timeout(self.phase)
            reason = f"{self.phase.value} timed out after {timeout:g}s"
            if self.phase in _HARNESS_PHASES:
                # Starting a process or container and wiring mocks is anvil's work (the
                # service's own start-up time counts in `health`): not the candidate's.
                return Result(Verdict.ERROR, self.phase, reason, items, retry=True)
            return Result(Verdict.FAIL, self.phase, reason, items)
        if isinstance(exc, AnvilError):
            # A deterministic refusal (an oracle that does not import, an instruction the
            # runtime cannot emulate) is reported once; a transient fault is retried.
            retry = isinstance(exc, HarnessError) and exc.transient
            return Result(Verdict.ERROR, self.phase, str(exc), items, retry)
        log.error("internal error in %s", self.ev.evaluation_id, exc_info=exc)
        detail = "".join(traceback.format_exception_only(exc)).strip()
        return Result(Verdict.ERROR, self.phase, f"internal error: {detail}", items)

    @asynccontextmanager
    async def _enter(self, phase: Phase) -> AsyncIterator[list[str]]:
        """Publish the phase's start and end; the end is published even on cancel.

        Lines the phase appends to the yielded list become the end event's message.
        """
        self.phase = phase
        await self.bus.publish(PhaseStarted(evaluation_id=self.ev.evaluation_id, phase=phase))
        started = time.monotonic()
        ok, notes = False, list[str]()
        message = ""
        try:
            async with AsyncExitStack() as hooks:
                for attachment in self.attachments:
                    around = getattr(attachment, "phase", None)
                    if around is not None:
                        await hooks.enter_async_context(around(phase))
                yield notes
            ok = True
            message = "; ".join(notes)
        except TimeoutError:
            message = f"timed out after {self.ev.task.timeout(phase):g}s"
            raise
        except CandidateFailure as exc:
            message = exc.reason
            raise
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            raise
        except BaseException:
            message = "cancelled"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self.bus.publish(PhaseFinished(
                    evaluation_id=self.ev.evaluation_id, phase=phase, ok=ok,
                    duration_s=time.monotonic() - started, message=message,
                ))

    async def _phases(self) -> Result:
        ev, task = self.ev, self.ev.task
        self._check_mocks()
        # Everything the evaluation acquires is registered on `stack`; teardown closes it,
        # shielded and under its own deadline, whatever happened before.
        stack = AsyncExitStack()
        torn_down = False
        try:
            async with self.limits.builds, self._enter(Phase.BUILD):
                with anyio.fail_after(task.timeout(Phase.BUILD)):
                    artifact = await self.runtime.build(BuildRequest(
                        submission=ev.submission, workdir=ev.workdir,
                        log_path=ev.workdir / "build.log",
                    ))
                    stack.push_async_callback(self.runtime.release, artifact)
            async with self.limits.services:
                try:
                    async with self._enter(Phase.STARTUP):
                        with anyio.fail_after(task.timeout(Phase.STARTUP)):
                            env = await self._service_env(stack)
                            instance = await self._start(stack, artifact, env)
                    async with self._enter(Phase.HEALTH) as health:
                        base_url = await self._healthy(instance)
                        health.append(f"answered at {base_url}")
                    async with self._enter(Phase.WIRING):
                        with anyio.fail_after(task.timeout(Phase.WIRING)):
                            base_url, oracle_env = await self._wire(stack, base_url)
                    async with self.limits.oracles, self._enter(Phase.ORACLE):
                        with anyio.fail_after(task.timeout(Phase.ORACLE)):
                            # A service that dies mid-oracle fails now, not item by item.
                            await _until_exit(instance, run_oracle(
                                task.oracle_dir, base_url, ev.workdir,
                                item_timeout=task.config.oracle.item_timeout,
                                on_item=self._on_item, on_start=self._on_start,
                                extra_env={**ev.owner_env, **oracle_env},
                                log_cap=self.log_cap, worker=self.oracle_worker,
                            ), "during the oracle", Phase.ORACLE)
                        # A fault on anvil's side of the wire (the recording proxy could not
                        # relay a call) makes the verdict anvil's `error`, not a `fail`.
                        for attachment in self.attachments:
                            finished = getattr(attachment, "oracle_finished", None)
                            if finished is not None:
                                await finished()
                finally:
                    torn_down = True  # while the service slot is still held
                    await self._teardown(stack)
        finally:
            if not torn_down:
                await self._teardown(stack)
        return self._oracle_result()

    def _oracle_result(self) -> Result:
        items = tuple(self.items)
        failed = [i for i in items if i.failed]
        skipped = sum(1 for i in items if not i.passed and not i.failed)
        skip_note = f", {skipped} skipped" if skipped else ""
        if failed:
            categories = sorted({i.category or "uncategorized" for i in failed})
            errors = sum(1 for i in failed if i.outcome is Outcome.ERROR)
            error_note = f", {errors} of them errors in setup" if errors else ""
            reason = (f"{len(failed)}/{len(items)} items failed ({', '.join(categories)})"
                      f"{error_note}{skip_note}")
            return Result(Verdict.FAIL, Phase.ORACLE, reason, items)
        passed = len(items) - skipped
        return Result(Verdict.PASS, None, f"{passed} items passed{skip_note}", items)

    def _check_mocks(self) -> None:
        needed = {m.kind for m in self.ev.task.config.mocks}
        served = set().union(*(a.provides for a in self.attachments))
        if needed - served:
            missing = ", ".join(sorted(needed - served))
            raise Unsupported(f"task needs mocks ({missing}) but no mock fabric serves them")

    async def _service_env(self, stack: AsyncExitStack) -> dict[str, str]:
        """The service's environment: anvil's marks plus what each attachment provides."""
        env = {**self.ev.owner_env, "ANVIL_EVALUATION": self.ev.evaluation_id}
        for attachment in self.attachments:
            env.update(await attachment.startup(stack, self.runtime))
        return env

    async def _start(self, stack: AsyncExitStack, artifact: Artifact,
                     env: Mapping[str, str]) -> Instance:
        task = self.ev.task
        instance = await self.runtime.start(artifact, StartRequest(
            port=task.config.service.port,
            env=env,
            workdir=self.ev.workdir,
            log_path=self.ev.workdir / "service.log",
            log_cap=self.log_cap,
            labels=self._labels(),
            memory_mb=task.config.service.memory_mb,
            cpus=task.config.service.cpus,
            pids_limit=task.config.service.pids_limit,
        ))
        stack.push_async_callback(self.runtime.stop, instance)
        return instance

    def _labels(self) -> dict[str, str]:
        """Marks for reaping: which run, which evaluation, and until when it may live."""
        lease = time.time() + self.ev.task.lease_seconds() + 60
        return {"anvil.run": self.ev.run_id, "anvil.evaluation": self.ev.evaluation_id,
                "anvil.lease": str(int(lease))}

    async def _healthy(self, instance: Instance) -> str:
        """Wait for the service to listen, then for an HTTP answer; return its base URL.

        A service that exits meanwhile fails at once (startup); one that does not
        answer by the deadline fails health with the best explanation we have.
        """
        probe = HealthProbe(self.ev.task.config.service.health_path)

        async def listening_and_answering() -> str:
            base_url = await instance.wait_listening()
            await probe.until_answer(base_url)
            return base_url

        timeout = self.ev.task.timeout(Phase.HEALTH)
        try:
            with anyio.fail_after(timeout):
                return await _until_exit(instance, listening_and_answering(),
                                         "before it answered")
        except ServiceExited as exc:
            last = await read_tail(self.ev.workdir / "service.log", 1)
            raise ServiceExited(f"{exc.reason}: {last}" if last else exc.reason,
                                exc.returncode, Phase.STARTUP) from None
        except TimeoutError:
            why = instance.diagnose() or probe.last
            what = "no healthy answer" if probe.answered else "no HTTP answer"
            raise ServiceUnhealthy(f"{what} within {timeout:g}s: {why}") from None

    async def _wire(self, stack: AsyncExitStack, base_url: str) -> tuple[str, dict[str, str]]:
        """Each attachment wires in turn; the last base URL is the one the oracle uses
        (this is the one place where BASE_URL can be put behind something)."""
        oracle_env: dict[str, str] = {}
        for attachment in self.attachments:
            base_url, env = await attachment.wiring(stack, base_url)
            oracle_env.update(env)
        return base_url, oracle_env

    async def _on_item(self, item: ItemResult) -> None:
        self.items.append(item)
        await self.bus.publish(ItemFinished(evaluation_id=self.ev.evaluation_id, item=item))

    async def _on_start(self, nodeid: str, ts: float) -> None:
        for attachment in self.attachments:
            await attachment.item_started(nodeid)
        await self.bus.publish(ItemStarted(evaluation_id=self.ev.evaluation_id, nodeid=nodeid,
                                           ts=ts or time.time()))

    async def _teardown(self, stack: AsyncExitStack) -> None:
        """Close everything the evaluation acquired. A teardown fault is logged and never
        replaces the verdict, nor a cancellation in flight (that propagates as itself)."""
        with anyio.CancelScope(shield=True):
            previous = self.phase
            try:
                async with self._enter(Phase.TEARDOWN):
                    with anyio.fail_after(self.ev.task.timeout(Phase.TEARDOWN)):
                        await stack.aclose()
            except Exception as exc:  # noqa: BLE001 - a teardown fault must not hide the verdict
                log.error("teardown of %s failed: %s", self.ev.evaluation_id,
                          str(exc) or type(exc).__name__)
            finally:
                self.phase = previous


async def _until_exit(
    instance: Instance, work: Awaitable[T], when: str, phase: Phase | None = None
) -> T:
    """Await ``work`` unless the service exits first; then fail at once with its exit.

    Raises:
        ServiceExited: the service ended first (reason e.g. ``service oom {when}``).
    """
    outcome: list[T] = []
    ended: list[ExitInfo] = []
    failed: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            ended.append(await instance.wait_exit())
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        try:
            outcome.append(await work)
        except Exception as exc:  # re-raised below as itself, not in an ExceptionGroup
            failed.append(exc)
        finally:
            tg.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not outcome and ended:
        if ended[0].harness:
            raise HarnessError(f"service {ended[0].reason} {when}")
        raise ServiceExited(f"service {ended[0].reason} {when}", ended[0].returncode, phase)
    return outcome[0]


class HealthProbe:
    """Probes a service until it answers; ``last`` says what the latest probe saw.

    With ``path`` None, any HTTP answer on ``/health`` or ``/`` counts (the
    service is up even without a health route); with a path, a 2xx is required.
    """

    def __init__(self, path: str | None, interval: float = 0.1) -> None:
        self.paths = [path] if path else ["/health", "/"]
        self.strict = path is not None
        self.interval = interval
        self.last = "the service never answered"
        self.answered = False  # some HTTP answer came, just not an acceptable one

    async def until_answer(self, base_url: str) -> int:
        """Probe until an acceptable answer and return its status; the caller sets the deadline."""
        timeout = aiohttp.ClientTimeout(total=2)
        tracing = client_tracing(**{PEER: "service", PROBE: "health"})
        async with aiohttp.ClientSession(timeout=timeout, trace_configs=[tracing]) as session:
            while True:
                for path in self.paths:
                    try:
                        async with session.get(base_url + path, allow_redirects=False) as resp:
                            await resp.read()
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        self.last = f"GET {path} failed: {type(exc).__name__}"
                        continue
                    if not self.strict or 200 <= resp.status < 300:
                        return resp.status
                    self.answered = True
                    self.last = f"GET {path} answered {resp.status}"
                await anyio.sleep(self.interval)
