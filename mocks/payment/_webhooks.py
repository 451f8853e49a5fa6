"""Signed webhook delivery to the endpoints the candidate registered.

Each event is POSTed to every enabled endpoint that wants its type, in the order the events
were made and, per event, in the order the endpoints were registered, by one task per
instance (:meth:`Outbox.run`) after the API answer that made the event was sent. The body is
the event's JSON; the ``Stripe-Signature`` header is Stripe's::

    Stripe-Signature: t=<when it is sent>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed
                      with the endpoint's whsec_ secret>

``t`` is the one value here taken from the wall clock (``clock="wall"``, the default):
every Stripe receiver refuses a signature more than five minutes older than its own clock
(``stripe.Webhook.construct_event``'s default tolerance), and the instance's virtual clock
starts at a fixed instant long past, so a virtual ``t`` would make a correct candidate reject
every webhook. Bodies, their order and the journal stay deterministic; with
``clock="virtual"`` (seed data ``{"webhook_clock": "virtual"}``) ``t`` is the event's virtual
time and the deliveries are byte-identical too (receivers must then verify with
``tolerance=None``).

Faults, for the next N matching events: ``duplicate`` delivers the event twice (same id,
body and signature); ``out_of_order`` holds the event back and delivers it after the one
that follows it (or after :data:`HOLD_GRACE` seconds of quiet, if none follows).
Every attempt is recorded in the instance's journal (``ctx.emit``) when the receiver has
answered: the deliveries' order and content are fixed by the requests, their place among the
journal's request entries follows how fast the receiver answers. Failed deliveries are
recorded, not retried.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio

from ..types import MockContext

USER_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
TIMEOUT = 10.0  # seconds a receiver gets to answer one delivery
HOLD_GRACE = 0.5  # seconds an out-of-order event waits for a follower
QUEUE_LIMIT = 10_000
FAULT_KINDS = ("duplicate", "out_of_order")
CLOCKS = ("wall", "virtual")


def sign(payload: bytes, secret: str, timestamp: int) -> str:
    """The ``Stripe-Signature`` header value for ``payload``."""
    signed = f"{timestamp}.".encode() + payload
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def payload(event: Mapping[str, Any]) -> bytes:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Delivery:
    event_id: str
    event_type: str
    endpoint_id: str
    url: str
    body: bytes
    secret: str
    created: int  # the event's virtual time
    duplicate: bool = False


@dataclass
class WebhookFault:
    kind: str  # duplicate | out_of_order
    times: int = 1
    type: str = "*"  # an event type glob
    hits: int = 0

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> WebhookFault:
        """Raises: ValueError: an unknown kind or field, or a bad count."""
        unknown = sorted(set(spec) - {"kind", "times", "type"})
        if unknown:
            raise ValueError(f"unknown webhook fault fields: {', '.join(unknown)} "
                             "(known: kind, times, type)")
        kind = str(spec.get("kind", ""))
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}")
        times = spec.get("times", 1)
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise ValueError("times must be an integer >= 1")
        return cls(kind=kind, times=times, type=str(spec.get("type") or "*"))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "times": self.times, "type": self.type, "hits": self.hits}


@dataclass
class Outbox:
    """The deliveries of one instance, and the task that makes them."""

    ctx: MockContext
    clock: str = "wall"  # where the signature's t comes from (see the module docstring)
    faults: list[WebhookFault] = field(default_factory=list)
    _queue: deque[Delivery] = field(default_factory=deque)
    _held: list[Delivery] = field(default_factory=list)
    _wake: anyio.Event | None = None  # made by the running task (an Event needs a loop)

    def add_fault(self, spec: Mapping[str, Any]) -> WebhookFault:
        """Arm a webhook fault. Raises: ValueError: a bad specification."""
        fault = WebhookFault.parse(spec)
        self.faults.append(fault)
        return fault

    def _fault(self, kind: str, event_type: str) -> bool:
        for fault in self.faults:
            if fault.kind == kind and fnmatch.fnmatchcase(event_type, fault.type):
                fault.hits += 1
                if fault.hits >= fault.times:
                    self.faults.remove(fault)
                return True
        return False

    def push(self, event: Mapping[str, Any], endpoints: list[dict[str, Any]]) -> None:
        """Queue ``event`` for ``endpoints`` (called as the event is made, in order)."""
        if not endpoints:
            return
        body = payload(event)
        deliveries = [Delivery(event["id"], event["type"], endpoint["id"], endpoint["url"], body,
                               endpoint["secret"], event["created"]) for endpoint in endpoints]
        if self._fault("duplicate", event["type"]):
            deliveries = [d for first in deliveries
                          for d in (first, Delivery(**{**first.__dict__, "duplicate": True}))]
        if self._fault("out_of_order", event["type"]):
            # Held behind whatever comes next; several held in a row come out last first.
            self._held = [*deliveries, *self._held]
        else:
            held, self._held = self._held, []
            for delivery in [*deliveries, *held]:
                if len(self._queue) >= QUEUE_LIMIT:
                    self._record(delivery, None, "dropped: delivery queue full")
                else:
                    self._queue.append(delivery)
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Deliver queued events one at a time, in order, until cancelled."""
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                self._wake = wake = anyio.Event()
                while self._queue:
                    await self._deliver(session, self._queue.popleft())
                if not self._held:
                    await wake.wait()
                    continue
                with anyio.move_on_after(HOLD_GRACE):
                    await wake.wait()
                if not wake.is_set():  # nothing followed the held event: let it go
                    self._queue.extend(self._held)
                    self._held = []

    async def _deliver(self, session: aiohttp.ClientSession, delivery: Delivery) -> None:
        at = delivery.created if self.clock == "virtual" else int(time.time())
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT,
                   "Stripe-Signature": sign(delivery.body, delivery.secret, at),
                   "Cache-Control": "no-cache", "Accept": "*/*; q=0.5, application/xml"}
        status: int | None = None
        error: str | None = None
        try:
            async with session.post(delivery.url, data=delivery.body, headers=headers) as reply:
                await reply.read()
                status = reply.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:300]
        self._record(delivery, status, error)

    def _record(self, delivery: Delivery, status: int | None, error: str | None) -> None:
        self.ctx.emit({"type": "webhook", "event": delivery.event_id,
                       "event_type": delivery.event_type, "endpoint": delivery.endpoint_id,
                       "url": delivery.url, "status": status, "error": error,
                       "duplicate": delivery.duplicate})
