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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
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
class ItemFinished(Event):
    evaluation_id: str
    item: ItemResult


@dataclass(frozen=True, kw_only=True)
class EvaluationFinished(Event):
    """An evaluation's verdict. ``final`` is False when an ``error`` will be retried."""

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

    @property
    def items_passed(self) -> int:
        return sum(1 for i in self.items if i.passed)

    @property
    def items_failed(self) -> int:
        return sum(1 for i in self.items if not i.passed)

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
            "failed_items": [
                {"nodeid": i.nodeid, "category": i.category, "message": i.message}
                for i in self.items
                if not i.passed
            ],
            "duration_s": round(self.duration_s, 3),
            "attempt": self.attempt,
        }


class EventBus:
    """Fans events out to subscribers, each with its own bounded stream."""

    def __init__(self, buffer: int = 10_000) -> None:
        self._buffer = buffer
        self._senders: list[MemoryObjectSendStream[Event]] = []

    def subscribe(self) -> MemoryObjectReceiveStream[Event]:
        send, receive = anyio.create_memory_object_stream[Event](self._buffer)
        self._senders.append(send)
        return receive

    async def publish(self, event: Event) -> None:
        for send in self._senders:
            try:
                await send.send(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # a subscriber that went away does not stop the run

    def close(self) -> None:
        """End every subscriber's stream once it has drained."""
        for send in self._senders:
            send.close()
        self._senders.clear()
