"""Typed events and the run's event bus.

Every lifecycle transition and every oracle item result is an event. The bus
fans each event out to every subscriber's own anyio memory object stream; a
subscriber is a task in the run's task group that iterates its stream until
the bus closes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._oracle import ItemResult
from .types import Phase, Verdict


@dataclass(frozen=True, kw_only=True)
class Event:
    ts: float = field(default_factory=time.time)

    @property
    def kind(self) -> str:
        return type(self).__name__

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, **_plain(dataclasses.asdict(self))})


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


@dataclass(frozen=True, kw_only=True)
class RunStarted(Event):
    run_id: str
    runtime: str
    total: int  # evaluations still to do in this invocation
    done: int = 0  # evaluations already finished (a resumed run)


@dataclass(frozen=True, kw_only=True)
class RunFinished(Event):
    run_id: str
    interrupted: bool
    duration_s: float


@dataclass(frozen=True, kw_only=True)
class Notice(Event):
    """A line for the human: which runtime was picked, a task that does not load."""

    message: str
    level: str = "info"


@dataclass(frozen=True, kw_only=True)
class EvaluationStarted(Event):
    run_id: str
    evaluation_id: str
    task: str
    submission: str
    attempt: int


@dataclass(frozen=True, kw_only=True)
class PhaseStarted(Event):
    evaluation_id: str
    phase: Phase


@dataclass(frozen=True, kw_only=True)
class PhaseFinished(Event):
    evaluation_id: str
    phase: Phase
    ok: bool
    duration_s: float
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ItemStarted(Event):
    """An oracle item began (``ts`` is when, by the oracle process's clock): calls the
    service makes from now until the next item are attributed to it."""

    evaluation_id: str
    nodeid: str


@dataclass(frozen=True, kw_only=True)
class ItemFinished(Event):
    evaluation_id: str
    item: ItemResult


@dataclass(frozen=True, kw_only=True)
class EvaluationFinished(Event):
    """An evaluation's verdict. ``final`` is False when an ``error`` will be retried;
    ``node`` is the host that ran it when an executor ran it elsewhere (``ray``)."""

    run_id: str
    evaluation_id: str
    task: str
    submission: str
    verdict: Verdict
    phase: Phase | None
    reason: str
    items: tuple[ItemResult, ...]
    duration_s: float
    attempt: int
    final: bool = True
    node: str | None = None

    @property
    def items_passed(self) -> int:
        return sum(1 for i in self.items if i.passed)

    @property
    def items_failed(self) -> int:
        """Failed or errored items (a skipped item is neither passed nor failed)."""
        return sum(1 for i in self.items if i.failed)

    @property
    def items_skipped(self) -> int:
        return sum(1 for i in self.items if not i.passed and not i.failed)

    def summary(self) -> dict[str, Any]:
        """The JSON object ``anvil run --json`` prints for a finished evaluation."""
        return {
            "run_id": self.run_id,
            "evaluation_id": self.evaluation_id,
            "task": self.task,
            "submission": self.submission,
            "verdict": self.verdict.value,
            "phase": self.phase.value if self.phase else None,
            "reason": self.reason,
            "items_passed": self.items_passed,
            "items_failed": self.items_failed,
            "items_skipped": self.items_skipped,
            "failed_items": [
                {"nodeid": i.nodeid, "category": i.category, "outcome": i.outcome.value,
                 "message": i.message}
                for i in self.items
                if i.failed
            ],
            "duration_s": round(self.duration_s, 3),
            "attempt": self.attempt,
        }


log = logging.getLogger("anvil.engine")


class EventBus:
    """Fans events out to subscribers, each with its own bounded stream.

    Publishing never waits on a subscriber: runs publish verdicts under shielded
    cancel scopes, so one stuck reader (a paused pager on stdout, a locked
    database) must not hold the run. The policy is **drop and count**: when a
    subscriber's buffer is full, that subscriber misses the event, the loss is
    counted in :attr:`dropped` and logged once per subscriber, and every other
    subscriber still gets it. A subscriber whose stream was closed (it finished
    or crashed) is detached for good.
    """

    def __init__(self, buffer: int = 10_000) -> None:
        self._buffer = buffer
        self._senders: dict[str, MemoryObjectSendStream[Event]] = {}
        self.dropped: dict[str, int] = {}  # subscriber name -> events it missed
        self._count = 0

    def subscribe(
        self, name: str | None = None, buffer: float | None = None
    ) -> MemoryObjectReceiveStream[Event]:
        """A new subscriber's stream; ``name`` identifies it in logs and :attr:`dropped`."""
        self._count += 1
        name = name or f"subscriber-{self._count}"
        if name in self._senders:
            name = f"{name}-{self._count}"
        send, receive = anyio.create_memory_object_stream[Event](
            self._buffer if buffer is None else buffer)
        self._senders[name] = send
        return receive

    @property
    def subscribers(self) -> list[str]:
        """Names of the subscribers still attached."""
        return list(self._senders)

    async def publish(self, event: Event) -> None:
        """Hand ``event`` to every attached subscriber without waiting on any of them.

        Cancellation is honoured only before delivery: an event is given to all
        subscribers or to none.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        for name, send in list(self._senders.items()):
            try:
                send.send_nowait(event)
            except anyio.WouldBlock:
                missed = self.dropped.get(name, 0) + 1
                self.dropped[name] = missed
                if missed == 1:
                    log.warning("event subscriber %s is not keeping up: dropping its events",
                                name)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.close()  # it left: the run goes on without it
                del self._senders[name]
        await anyio.lowlevel.cancel_shielded_checkpoint()  # let subscribers drain

    def close(self) -> None:
        """End every subscriber's stream once it has drained."""
        for send in self._senders.values():
            send.close()
        self._senders.clear()
