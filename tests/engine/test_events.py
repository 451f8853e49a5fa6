"""The event bus: fan-out to every subscriber, in order, until closed."""

from __future__ import annotations

import json

import anyio

from engine import EventBus, Notice, Phase, PhaseStarted


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
