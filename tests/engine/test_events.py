"""The event bus: fan-out to every subscriber, in order, until closed."""

from __future__ import annotations

import json
import logging

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from engine import Event, EventBus, Notice, Phase, PhaseStarted
from engine._subscribers import isolated


async def test_every_subscriber_sees_every_event_in_order() -> None:
    bus = EventBus()
    streams = [bus.subscribe() for _ in range(3)]
    seen: list[list[str]] = [[] for _ in streams]

    async def consume(i: int) -> None:
        async with streams[i]:
            async for event in streams[i]:
                assert isinstance(event, Notice)
                seen[i].append(event.message)

    async with anyio.create_task_group() as tg:
        for i in range(len(streams)):
            tg.start_soon(consume, i)
        for n in range(50):
            await bus.publish(Notice(message=str(n)))
        bus.close()
    assert seen == [[str(n) for n in range(50)]] * 3


async def test_a_subscriber_that_left_does_not_stop_the_run() -> None:
    bus = EventBus()
    gone = bus.subscribe()
    gone.close()
    kept = bus.subscribe()
    await bus.publish(Notice(message="still here"))
    assert (await kept.receive()).message == "still here"  # type: ignore[attr-defined]
    bus.close()
    kept.close()


def test_events_serialize_to_json_with_their_kind() -> None:
    line = PhaseStarted(evaluation_id="r.1", phase=Phase.HEALTH, ts=1.5).to_json()
    assert json.loads(line) == {"kind": "PhaseStarted", "ts": 1.5, "evaluation_id": "r.1",
                                "phase": "health"}


async def test_a_stuck_subscriber_never_blocks_a_shielded_publish(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drop and count: a subscriber that does not read loses what its buffer cannot hold,
    once logged; the publisher never waits and the others miss nothing."""
    bus = EventBus()
    stuck = bus.subscribe("stuck", buffer=2)  # never read
    kept = bus.subscribe("kept", buffer=500)
    with anyio.fail_after(5), anyio.CancelScope(shield=True):
        for n in range(300):
            await bus.publish(Notice(message=str(n)))
    assert bus.dropped == {"stuck": 298}
    assert [r.getMessage() for r in caplog.records] == [
        "event subscriber stuck is not keeping up: dropping its events"]
    bus.close()
    async with kept:
        assert [e.message async for e in kept] == [str(n) for n in range(300)]  # type: ignore[attr-defined]
    async with stuck:
        assert [e.message async for e in stuck] == ["0", "1"]  # type: ignore[attr-defined]


async def test_a_subscriber_that_raises_is_logged_once_and_detached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    seen: list[str] = []
    crashed = anyio.Event()

    async def fragile(stream: MemoryObjectReceiveStream[Event]) -> None:
        async for event in stream:
            assert isinstance(event, Notice)
            if event.message == "2":
                raise OSError("disk full")

    async def steady(stream: MemoryObjectReceiveStream[Event]) -> None:
        async with stream:
            async for event in stream:
                assert isinstance(event, Notice)
                seen.append(event.message)

    async def watched(stream: MemoryObjectReceiveStream[Event]) -> None:
        try:
            await isolated("fragile", fragile)(stream)
        finally:
            crashed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watched, bus.subscribe("fragile"))
        tg.start_soon(steady, bus.subscribe("steady"))
        for n in range(3):
            await bus.publish(Notice(message=str(n)))
        with anyio.fail_after(5):
            await crashed.wait()
        for n in range(3, 10):
            await bus.publish(Notice(message=str(n)))
        assert bus.subscribers == ["steady"]
        bus.close()
    assert seen == [str(n) for n in range(10)]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "fragile stopped (OSError: disk full); the run goes on without it"]


async def test_publish_delivers_to_all_or_none_when_cancelled() -> None:
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await bus.publish(Notice(message="lost"))
    with anyio.CancelScope(shield=True):
        await bus.publish(Notice(message="kept"))
    bus.close()
    for stream in (a, b):
        async with stream:
            assert [e.message async for e in stream] == ["kept"]  # type: ignore[attr-defined]
