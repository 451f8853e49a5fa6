"""The payment mock as the fabric sees it: a :class:`~mocks.types.MockService`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..types import MockContext
from ._api import Api, encode
from ._errors import StripeError
from ._form import Params
from ._idempotency import IdempotencyStore
from ._intents import Payments
from ._ledger import Ledger, Obj
from ._openapi import document
from ._webhooks import CLOCKS, Outbox

#: The ``customers`` scenario: three customers, ready to be charged.
SEED_CUSTOMERS = (
    {"email": "ada@example.com", "name": "Ada Lovelace", "metadata": {"tier": "gold"}},
    {"email": "grace@example.com", "name": "Grace Hopper", "metadata": {"tier": "silver"}},
    {"email": "alan@example.com", "name": "Alan Turing", "metadata": {"tier": "bronze"}},
)
ADMIN_PREFIX = "/__mock__/payment"


def _form_tree(value: Any) -> Any:
    """JSON seed data as the form decoder would have made it (every leaf a string)."""
    if isinstance(value, Mapping):
        return {str(key): _form_tree(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_form_tree(item) for item in value]
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


class PaymentMock:
    """A Stripe-like payment provider (customers, payment intents, refunds, webhooks).

    Seed data (``POST /__mock__/seed {"scenario": ..., "data": {...}}``) may hold
    ``customers`` (Stripe create parameters), ``webhook_endpoints`` (``url``,
    ``enabled_events``, optionally a fixed ``secret``), ``webhook_faults`` and
    ``webhook_clock`` (``wall``, the default, or ``virtual``: where the signature's
    timestamp comes from, see ``_webhooks``).
    """

    kind: ClassVar[str] = "payment"
    scenarios: ClassVar[Sequence[str]] = ("default", "customers")

    def __init__(self, ctx: MockContext) -> None:
        self.ctx = ctx
        self.ledger = Ledger(ctx)
        self.payments = Payments(self.ledger)
        self.keys = IdempotencyStore()
        self.outbox = Outbox(ctx)
        self.ledger.on_event = self._on_event
        self.api = Api(self.ledger, self.payments, self.keys)

    def _on_event(self, event: Obj) -> None:
        self.outbox.push(event, self.ledger.subscribers(event))

    def routes(self) -> Sequence[BaseRoute]:
        return self.api.routes()

    def seed(self, scenario: str, data: Mapping[str, Any] | None = None) -> None:
        """Load ``scenario`` then ``data``.

        Raises:
            KeyError: an unknown scenario.
            ValueError: seed data the API would refuse (the message is Stripe's).
        """
        if scenario not in self.scenarios:
            raise KeyError(scenario)
        data = dict(data or {})
        customers = list(SEED_CUSTOMERS) if scenario == "customers" else []
        customers += list(data.get("customers") or [])
        try:
            for spec in customers:
                self.ledger.create_customer(Params(_form_tree(spec)))
            for spec in data.get("webhook_endpoints") or []:
                spec = dict(spec)
                secret = spec.pop("secret", None)
                endpoint = self.ledger.create_endpoint(Params(_form_tree(spec)))
                if secret:
                    endpoint["secret"] = str(secret)
            for spec in data.get("webhook_faults") or []:
                self.outbox.add_fault(spec)
            clock = data.get("webhook_clock", "wall")
            if clock not in CLOCKS:
                raise ValueError(f"webhook_clock must be one of {', '.join(CLOCKS)}")
            self.outbox.clock = clock
        except StripeError as exc:
            raise ValueError(exc.message) from None

    def openapi(self) -> dict[str, Any]:
        return document()

    async def run(self) -> None:
        """The instance's own task: webhook deliveries, until cancelled."""
        await self.outbox.run()

    def admin_routes(self) -> Sequence[BaseRoute]:
        """Payment's own admin routes (behind the instance's token)::

            GET    /__mock__/payment/webhooks/faults   the armed webhook faults
            POST   /__mock__/payment/webhooks/faults   {"kind": "duplicate"|"out_of_order",
                                                        "times": N, "type": "glob"}
            DELETE /__mock__/payment/webhooks/faults   disarm them
        """
        return [Route(f"{ADMIN_PREFIX}/webhooks/faults", self._webhook_faults,
                      methods=["GET", "POST", "DELETE"])]

    async def _webhook_faults(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.outbox.faults.clear()
        elif request.method == "POST":
            try:
                spec = json.loads(await request.body() or b"{}")
                if not isinstance(spec, dict):
                    raise ValueError("the body must be a JSON object")
                self.outbox.add_fault(spec)
            except ValueError as exc:
                return Response(encode({"error": str(exc)}), 400,
                                media_type="application/json")
        return Response(encode({"faults": [f.describe() for f in self.outbox.faults]}),
                        media_type="application/json")
