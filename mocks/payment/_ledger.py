"""The state of one payment instance and the operations on customers, payment methods,
webhook endpoints and events (payment intents, charges and refunds are in ``_intents``).

Every operation validates its parameters completely before it changes anything, so a
:class:`~mocks.payment._errors.StripeError` raised by validation leaves the state as it was
(and is not stored for idempotent replay). Objects are kept as the dicts the API returns;
the HTTP layer serialises them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from typing import Any

from ..types import MockContext
from . import _objects as obj
from ._cards import CARDS, PAYMENT_METHODS, TOKENS, Card, luhn
from ._errors import StripeError, invalid, missing
from ._form import Params, apply_metadata

Obj = dict[str, Any]

#: Which id prefix lives in which table, and how Stripe names the kind in messages.
KINDS: dict[str, tuple[str, str]] = {
    "cus": ("customers", "customer"),
    "pm": ("payment_methods", "PaymentMethod"),
    "pi": ("intents", "payment_intent"),
    "ch": ("charges", "charge"),
    "re": ("refunds", "refund"),
    "evt": ("events", "event"),
    "we": ("endpoints", "webhook_endpoint"),
}

#: Every event type the mock emits (a webhook endpoint may enable these or ``*``).
EVENT_TYPES = (
    "charge.captured", "charge.failed", "charge.refunded", "charge.succeeded",
    "customer.created", "customer.deleted", "customer.updated",
    "payment_intent.amount_capturable_updated", "payment_intent.canceled",
    "payment_intent.created", "payment_intent.payment_failed", "payment_intent.succeeded",
    "payment_method.attached", "payment_method.detached", "refund.created",
)

#: What Stripe's event type names look like (endpoints may enable types anvil never sends).
_EVENT_NAME = re.compile(r"[a-z_]+(\.[a-z_]+)+")

#: Fields each kind lets ``expand[]`` replace by the object they name.
EXPANDABLE: dict[str, frozenset[str]] = {
    "payment_intent": frozenset({"customer", "payment_method", "latest_charge"}),
    "charge": frozenset({"customer", "payment_intent", "refunds"}),
    "refund": frozenset({"charge", "payment_intent"}),
    "payment_method": frozenset({"customer"}),
    "customer": frozenset(),
    "event": frozenset(),
    "webhook_endpoint": frozenset(),
}


class Ledger:
    """One payment instance's objects, in creation order.

    Args:
        ctx: the instance's context (ids, virtual clock, journal side events).
    """

    def __init__(self, ctx: MockContext) -> None:
        self.ctx = ctx
        self.customers: dict[str, Obj] = {}
        self.payment_methods: dict[str, Obj] = {}
        self.intents: dict[str, Obj] = {}
        self.charges: dict[str, Obj] = {}
        self.refunds: dict[str, Obj] = {}
        self.events: dict[str, Obj] = {}
        self.endpoints: dict[str, Obj] = {}
        self.cards: dict[str, Card] = {}  # payment method id -> its test card
        self.deleted_customers: set[str] = set()
        #: The request being served (its id and idempotency key go into the events it makes).
        self.request: tuple[str | None, str | None] = (None, None)
        #: Called with every event created (webhook delivery subscribes here).
        self.on_event: Callable[[Obj], None] | None = None

    # -- lookups -------------------------------------------------------------------------

    def table(self, object_id: str) -> dict[str, Obj] | None:
        prefix = object_id.split("_", 1)[0]
        if prefix not in KINDS:
            return None
        table: dict[str, Obj] = getattr(self, KINDS[prefix][0])
        return table

    def get(self, prefix: str, object_id: str, *, param: str = "id",
            status: int = 404) -> Obj:
        """The object ``object_id`` of kind ``prefix``.

        Raises:
            StripeError: ``resource_missing`` (404 for a path id, 400 for a parameter).
        """
        table: dict[str, Obj] = getattr(self, KINDS[prefix][0])
        found = table.get(object_id)
        if found is None:
            raise missing(KINDS[prefix][1], object_id, param=param, status=status)
        return found

    # -- events --------------------------------------------------------------------------

    def emit(self, type: str, subject: Obj, previous: Obj | None = None) -> Obj:
        """Record event ``type`` about ``subject`` (a snapshot of it as it is now)."""
        data: Obj = {"object": copy.deepcopy(subject)}
        if previous is not None:
            data["previous_attributes"] = previous
        pending = sum(1 for endpoint in self.endpoints.values() if _wants(endpoint, type))
        request_id, key = self.request
        event = obj.event(self.ctx.new_id("evt"), self.ctx.now(), type=type, data=data,
                          pending_webhooks=pending, request_id=request_id, idempotency_key=key)
        self.events[event["id"]] = event
        if self.on_event is not None:
            self.on_event(event)
        return event

    def subscribers(self, event: Obj) -> list[Obj]:
        """The enabled webhook endpoints that want ``event``, in creation order."""
        return [endpoint for endpoint in self.endpoints.values() if _wants(endpoint, event["type"])]

    # -- lists ---------------------------------------------------------------------------

    def page(self, params: Params, url: str, items: Iterable[Obj], kind: str) -> Obj:
        """Stripe's list object over ``items`` (oldest first in): newest first out, with
        ``limit`` (1-100, default 10), ``starting_after`` and ``ending_before``.

        Raises:
            StripeError: a bad ``limit``, or a cursor naming no object of this list.
        """
        limit = params.integer("limit", minimum=1, maximum=100) or 10
        after = params.string("starting_after")
        before = params.string("ending_before")
        if after and before:
            raise invalid("You may only specify one of these parameters: ending_before, "
                          "starting_after.", param="ending_before")
        ordered = list(items)[::-1]
        ids = [item["id"] for item in ordered]
        if after is not None:
            if after not in ids:
                raise missing(kind, after, param="starting_after", status=400)
            start = ids.index(after) + 1
            chosen = ordered[start:start + limit]
            more = start + limit < len(ordered)
        elif before is not None:
            if before not in ids:
                raise missing(kind, before, param="ending_before", status=400)
            end = ids.index(before)
            chosen = ordered[max(0, end - limit):end]
            more = end - limit > 0
        else:
            chosen = ordered[:limit]
            more = limit < len(ordered)
        return obj.list_object(url, chosen, more)

    # -- customers -----------------------------------------------------------------------

    CUSTOMER_PARAMS = ("address", "balance", "cash_balance", "description", "email",
                       "invoice_prefix", "invoice_settings", "metadata", "name",
                       "next_invoice_sequence", "payment_method", "phone",
                       "preferred_locales", "shipping", "source", "tax", "tax_exempt",
                       "tax_id_data", "test_clock", "expand", "business_name",
                       "individual_name", "validate")

    def create_customer(self, params: Params) -> Obj:
        params.only(self.CUSTOMER_PARAMS)
        email = params.string("email", max_length=512)
        name = params.string("name", max_length=256)
        description = params.string("description", max_length=350)
        phone = params.string("phone", max_length=20)
        update = params.metadata()
        pm_id = params.string("payment_method")
        pm = self.payment_method(pm_id, param="payment_method") if pm_id else None
        metadata: dict[str, str] = {}
        apply_metadata(metadata, update)
        customer = obj.customer(self.ctx.new_id("cus"), self.ctx.now(), email=email, name=name,
                                description=description, phone=phone, metadata=metadata)
        self.customers[customer["id"]] = customer
        self.emit("customer.created", customer)
        if pm is not None:
            self._attach(pm, customer)
        return customer

    def customer(self, customer_id: str) -> Obj:
        if customer_id in self.deleted_customers:
            return obj.deleted(customer_id, "customer")
        return self.get("cus", customer_id)

    def update_customer(self, customer_id: str, params: Params) -> Obj:
        params.only(self.CUSTOMER_PARAMS)
        customer = self.get("cus", customer_id)
        changes = {key: params.string(key, empty_is_none=False)
                   for key in ("email", "name", "description", "phone") if params.has(key)}
        update = params.metadata()
        merged = dict(customer["metadata"])
        apply_metadata(merged, update)
        previous = {key: customer[key] for key in changes}
        if update is not None:
            previous["metadata"] = dict(customer["metadata"])
        for key, value in changes.items():
            customer[key] = value or None
        customer["metadata"] = merged
        if previous:
            self.emit("customer.updated", customer, previous)
        return customer

    def delete_customer(self, customer_id: str) -> Obj:
        customer = self.get("cus", customer_id)
        del self.customers[customer_id]
        self.deleted_customers.add(customer_id)
        self.emit("customer.deleted", customer)
        return obj.deleted(customer_id, "customer")

    def list_customers(self, params: Params) -> Obj:
        params.only(("limit", "starting_after", "ending_before", "email", "created",
                     "test_clock", "expand"))
        email = params.string("email", max_length=512)
        items = [c for c in self.customers.values() if email is None or c["email"] == email]
        return self.page(params, "/v1/customers", items, "customer")

    # -- payment methods -----------------------------------------------------------------

    def payment_method(self, pm_id: str, *, param: str = "payment_method") -> Obj:
        """A payment method by id; Stripe's test ids (``pm_card_visa``) make a new one.

        Raises:
            StripeError: no such payment method (400, naming ``param``).
        """
        test_card = PAYMENT_METHODS.get(pm_id)
        if test_card is not None:
            return self._new_payment_method(test_card, *self._test_expiry(), "pass", {})
        found = self.payment_methods.get(pm_id)
        if found is None:
            raise missing("PaymentMethod", pm_id, param=param, status=400)
        return found

    def _test_expiry(self) -> tuple[int, int]:
        return obj.expiry(self.ctx.now())

    def _new_payment_method(self, card: Card, exp_month: int, exp_year: int,
                            cvc_check: str | None, metadata: dict[str, str]) -> Obj:
        pm = obj.payment_method(self.ctx.new_id("pm"), self.ctx.now(),
                                obj.card_details(card, exp_month, exp_year, cvc_check),
                                metadata)
        self.payment_methods[pm["id"]] = pm
        self.cards[pm["id"]] = card
        return pm

    PM_PARAMS = ("type", "card", "billing_details", "metadata", "allow_redisplay", "expand",
                 "radar_options")

    def create_payment_method(self, params: Params, *, param: str = "") -> Obj:
        """A card payment method from ``card[number]``/``exp_*``/``cvc`` or ``card[token]``.

        Raises:
            StripeError: 400 for a bad parameter, 402 (``card_error``) for a bad card, as
                Stripe answers (``incorrect_number``, ``invalid_expiry_year``, ...).
        """
        params.only(self.PM_PARAMS)
        kind = params.enum("type", ("card",), required=True)
        assert kind == "card"
        card_params = params.hash("card", required=True)
        assert card_params is not None
        metadata: dict[str, str] = {}
        apply_metadata(metadata, params.metadata())
        card, exp_month, exp_year, cvc = self._card_from(card_params)
        return self._new_payment_method(card, exp_month, exp_year, cvc, metadata)

    def _card_from(self, card: Params) -> tuple[Card, int, int, str | None]:
        card.only(("number", "exp_month", "exp_year", "cvc", "token", "networks"))
        token = card.string("token")
        if token is not None:
            found = TOKENS.get(token)
            if found is None:
                raise missing("token", token, param=card.name("token"), status=400)
            return (found, *self._test_expiry(), "pass")
        number = (card.string("number", required=True) or "").replace(" ", "")
        exp_month = card.integer("exp_month", required=True)
        exp_year = card.integer("exp_year", required=True)
        cvc = card.string("cvc")
        assert exp_month is not None and exp_year is not None
        if not number.isdigit() or not 12 <= len(number) <= 19 or not luhn(number):
            raise _card_error("incorrect_number", "Your card number is incorrect.", "number")
        if not 1 <= exp_month <= 12:
            raise _card_error("invalid_expiry_month",
                              "Your card's expiration month is invalid.", "exp_month")
        if exp_year < 100:
            exp_year += 2000
        now_month, next_year = self._test_expiry()
        if (exp_year, exp_month) < (next_year - 1, now_month) or exp_year > next_year + 49:
            raise _card_error("invalid_expiry_year",
                              "Your card's expiration year is invalid.", "exp_year")
        if cvc is not None and (not cvc.isdigit() or not 3 <= len(cvc) <= 4):
            raise _card_error("invalid_cvc", "Your card's security code is invalid.", "cvc")
        found = CARDS.get(number)
        if found is None:
            raise StripeError(
                402, "card_error", "Your card was declined. Your request was in test mode, "
                "but used a non test (live) card. For a list of valid test cards, visit: "
                "https://stripe.com/docs/testing.", code="card_declined",
                decline_code="test_mode_live_card")
        return found, exp_month, exp_year, "pass" if cvc else None

    def attach_payment_method(self, pm_id: str, params: Params) -> Obj:
        params.only(("customer", "expand"))
        customer_id = params.string("customer", required=True)
        assert customer_id is not None
        pm = self.payment_method(pm_id, param="payment_method") \
            if pm_id in PAYMENT_METHODS else self.get("pm", pm_id)
        customer = self.get("cus", customer_id, param="customer", status=400)
        if pm["customer"] not in (None, customer_id):
            raise invalid("The payment method you provided has already been attached to a "
                          "customer.", param="payment_method")
        return self._attach(pm, customer)

    def _attach(self, pm: Obj, customer: Obj) -> Obj:
        if pm["customer"] != customer["id"]:
            pm["customer"] = customer["id"]
            self.emit("payment_method.attached", pm)
        return pm

    def detach_payment_method(self, pm_id: str, params: Params) -> Obj:
        params.only(("expand",))
        pm = self.get("pm", pm_id)
        if pm["customer"] is None:
            raise invalid(f"The payment method {pm_id} is not attached to a customer so "
                          "detachment is impossible.", param="payment_method")
        pm["customer"] = None
        self.emit("payment_method.detached", pm)
        return pm

    def list_payment_methods(self, params: Params, customer_id: str | None = None) -> Obj:
        params.only(("customer", "type", "limit", "starting_after", "ending_before",
                     "expand", "allow_redisplay"))
        params.enum("type", ("card",))
        url = "/v1/payment_methods"
        if customer_id is not None:  # GET /v1/customers/{id}/payment_methods
            self.get("cus", customer_id)
            url = f"/v1/customers/{customer_id}/payment_methods"
        else:
            customer_id = params.string("customer")
            if customer_id is not None:
                self.get("cus", customer_id, param="customer", status=400)
        items = [pm for pm in self.payment_methods.values()
                 if customer_id is None or pm["customer"] == customer_id]
        return self.page(params, url, items, "PaymentMethod")

    # -- webhook endpoints ---------------------------------------------------------------

    ENDPOINT_PARAMS = ("url", "enabled_events", "description", "metadata", "api_version",
                       "connect", "disabled", "expand")

    def create_endpoint(self, params: Params) -> Obj:
        params.only(self.ENDPOINT_PARAMS)
        url = _url(params)
        assert url is not None
        events = _enabled_events(params, required=True)
        metadata: dict[str, str] = {}
        apply_metadata(metadata, params.metadata())
        endpoint = obj.webhook_endpoint(
            self.ctx.new_id("we"), self.ctx.now(), url=url, enabled_events=events,
            secret=self.ctx.new_id("whsec"), description=params.string("description"),
            metadata=metadata, api_version=params.string("api_version"))
        self.endpoints[endpoint["id"]] = endpoint
        return endpoint

    def endpoint(self, endpoint_id: str) -> Obj:
        # The secret is only shown when the endpoint is created, as on Stripe.
        found = self.get("we", endpoint_id)
        return {key: value for key, value in found.items() if key != "secret"}

    def update_endpoint(self, endpoint_id: str, params: Params) -> Obj:
        params.only(self.ENDPOINT_PARAMS)
        endpoint = self.get("we", endpoint_id)
        url = _url(params, required=False)
        events = _enabled_events(params, required=False)
        disabled = params.boolean("disabled")
        update = params.metadata()
        merged = dict(endpoint["metadata"])
        apply_metadata(merged, update)
        if url is not None:
            endpoint["url"] = url
        if events:
            endpoint["enabled_events"] = events
        if disabled is not None:
            endpoint["status"] = "disabled" if disabled else "enabled"
        if params.has("description"):
            endpoint["description"] = params.string("description")
        endpoint["metadata"] = merged
        return self.endpoint(endpoint_id)

    def delete_endpoint(self, endpoint_id: str) -> Obj:
        self.get("we", endpoint_id)
        del self.endpoints[endpoint_id]
        return obj.deleted(endpoint_id, "webhook_endpoint")

    def list_endpoints(self, params: Params) -> Obj:
        params.only(("limit", "starting_after", "ending_before", "expand"))
        items = [self.endpoint(e) for e in self.endpoints]
        return self.page(params, "/v1/webhook_endpoints", items, "webhook_endpoint")

    def list_events(self, params: Params) -> Obj:
        params.only(("limit", "starting_after", "ending_before", "type", "types", "created",
                     "delivery_success", "expand"))
        wanted = set(params.strings("types"))
        one = params.string("type")
        if one is not None:
            wanted.add(one)

        def matches(event: Obj) -> bool:
            if not wanted:
                return True
            return any(event["type"] == w or (w.endswith(".*") and
                                              event["type"].startswith(w[:-1])) for w in wanted)

        items = [e for e in self.events.values() if matches(e)]
        return self.page(params, "/v1/events", items, "event")

    # -- expansion -----------------------------------------------------------------------

    def expand(self, subject: Obj, paths: list[str]) -> Obj:
        """``subject`` with each ``expand[]`` path's ids replaced by their objects.

        Copies only what it changes: the stored objects are never modified.

        Raises:
            StripeError: a path that cannot be expanded.
        """
        result = subject
        for path in paths:
            result = self._expand_one(result, path.split("."), path, 0)
        return result

    def _expand_one(self, subject: Obj, parts: list[str], path: str, depth: int) -> Obj:
        if depth >= 4:
            raise invalid(f"You cannot expand more than 4 levels of a property. Property: "
                          f"{path}", param="expand")
        head, rest = parts[0], parts[1:]
        if subject.get("object") == "list" and head == "data" and rest:
            data = [self._expand_one(item, rest, path, depth) for item in subject["data"]]
            return {**subject, "data": data}
        kind = subject.get("object", "")
        if head not in EXPANDABLE.get(kind, frozenset()):
            raise invalid(f"This property cannot be expanded ({head}).", param="expand")
        if kind == "charge" and head == "refunds":
            refunds = [r for r in self.refunds.values() if r["charge"] == subject["id"]]
            value: Any = obj.list_object(f"/v1/charges/{subject['id']}/refunds",
                                         refunds[::-1], False)
        else:
            value = subject.get(head)
            if isinstance(value, str):
                table = self.table(value)
                value = table.get(value) if table is not None else None
                if value is None:
                    value = subject.get(head)
        if rest and isinstance(value, dict):
            value = self._expand_one(value, rest, path, depth + 1)
        return {**subject, head: value}


def _wants(endpoint: Obj, event_type: str) -> bool:
    if endpoint["status"] != "enabled":
        return False
    enabled: list[str] = endpoint["enabled_events"]
    return "*" in enabled or event_type in enabled


def _card_error(code: str, message: str, param: str) -> StripeError:
    return StripeError(402, "card_error", message, code=code, param=param)


def _url(params: Params, *, required: bool = True) -> str | None:
    url = params.string("url", required=required, max_length=2048)
    if url is not None and not url.startswith(("http://", "https://")):
        raise invalid(f"Invalid URL: {url}", param="url", code="url_invalid")
    return url


def _enabled_events(params: Params, *, required: bool) -> list[str]:
    events = params.strings("enabled_events")
    if not events and required:
        raise invalid("Missing required param: enabled_events.", param="enabled_events")
    for name in events:
        if name != "*" and not _EVENT_NAME.fullmatch(name):
            raise invalid(f"Invalid enabled_events: {name} is not a valid event type",
                          param="enabled_events")
    return events
