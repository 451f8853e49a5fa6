"""checkout reference: orders paid through a Stripe-compatible provider with the official
``stripe`` library (payment intents, refunds, webhook endpoints, ``Webhook.construct_event``).
See spec.md for the behaviour.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import stripe
from anyio import to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

PAYMENT_URL = os.environ["PAYMENT_URL"].rstrip("/")
SECRET_KEY = "sk_test_checkout_4eC39HqLyjWDarjtT1zdp7dc"
ADMIN_KEY = "checkout-admin-key"
CURRENCIES = ("usd", "eur", "gbp")
ATTEMPTS = 4
TOLERANCE = 300

app = FastAPI()
_ids = itertools.count(1)
_orders: dict[int, dict[str, Any]] = {}
_owners: dict[int, str] = {}
_locks: dict[int, threading.Lock] = {}
_state = threading.Lock()  # guards the dicts above and the webhook registration
_hook: dict[str, Any] = {"id": None, "secret": None}
_seen_events: set[str] = set()


class Problem(Exception):
    def __init__(self, status: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.detail, self.extra = status, detail, extra


@app.exception_handler(Problem)
async def _problem(_request: Request, exc: Problem) -> JSONResponse:
    return JSONResponse({"detail": exc.detail, **exc.extra}, exc.status)


# -- the provider -------------------------------------------------------------------------

# One client for the service: the official library, pointed at PAYMENT_URL. Its own
# retries are off; ``call`` retries, with the same idempotency key, anything that gave no
# usable answer (connection errors, 5xx, an unreadable body).
client = stripe.StripeClient(SECRET_KEY, base_addresses={"api": PAYMENT_URL},
                             max_network_retries=0)


def call(operation: Callable[..., Any], *args: Any, params: dict[str, Any] | None = None,
         key: str | None = None) -> Any:
    """``operation`` (a ``client.v1`` method), retried. Raises Problem(502) when every
    attempt failed; the library's errors for definite answers (card, invalid request)
    propagate."""
    options = {"idempotency_key": key} if key else {}
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(0.1 * attempt)
        try:
            if params is None:
                return operation(*args, options=options)
            return operation(*args, params=params, options=options)
        except (stripe.APIConnectionError, stripe.APIError):
            continue
        except stripe.StripeError as exc:
            if exc.http_status is not None and exc.http_status >= 500:
                continue
            raise
    raise Problem(502, "the payment provider could not be reached")


# -- helpers ------------------------------------------------------------------------------


def shopper(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(401, "missing or invalid bearer token")
    return token.strip()


async def body_of(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        value = json.loads(raw or b"null")
    except ValueError:
        raise Problem(422, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise Problem(422, "the body must be a JSON object")
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def own_order(order_id: int, who: str) -> dict[str, Any]:
    with _state:
        order = _orders.get(order_id)
        if order is None or _owners[order_id] != who:
            raise Problem(404, "no such order")
        return order


def settle_status(order: dict[str, Any]) -> None:
    if order["payment_intent"] is None:
        return
    refunded = order["amount_refunded"]
    order["status"] = ("paid" if refunded == 0 else
                       "refunded" if refunded >= order["amount"] else "partially_refunded")


# -- routes -------------------------------------------------------------------------------


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/orders", status_code=201)
async def create_order(request: Request) -> dict[str, Any]:
    who = shopper(request)
    body = await body_of(request)
    items = body.get("items")
    if not isinstance(items, list) or not 1 <= len(items) <= 50:
        raise Problem(422, "items must be a list of 1 to 50 items")
    clean = []
    for item in items:
        if not isinstance(item, dict):
            raise Problem(422, "each item must be an object")
        sku, quantity, price = item.get("sku"), item.get("quantity"), item.get("unit_price")
        if not isinstance(sku, str) or not 1 <= len(sku) <= 64:
            raise Problem(422, "sku must be a string of 1 to 64 characters")
        if not is_int(quantity) or not 1 <= quantity <= 100:
            raise Problem(422, "quantity must be an integer from 1 to 100")
        if not is_int(price) or not 1 <= price <= 1_000_000:
            raise Problem(422, "unit_price must be an integer from 1 to 1000000")
        clean.append({"sku": sku, "quantity": quantity, "unit_price": price})
    currency = body.get("currency", "usd")
    if currency not in CURRENCIES:
        raise Problem(422, f"currency must be one of {', '.join(CURRENCIES)}")
    amount = sum(i["quantity"] * i["unit_price"] for i in clean)
    if not 50 <= amount <= 99_999_999:
        raise Problem(422, "the amount must be between 50 and 99999999")
    with _state:
        order_id = next(_ids)
        order = {"id": order_id, "status": "pending", "currency": currency, "items": clean,
                 "amount": amount, "amount_refunded": 0, "payment_intent": None,
                 "last_payment_error": None}
        _orders[order_id], _owners[order_id] = order, who
        _locks[order_id] = threading.Lock()
        order["_attempt"] = 0
        order["_refunds"] = 0
        return public(order)


def public(order: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in order.items() if not k.startswith("_")}


@app.get("/orders")
def list_orders(request: Request) -> dict[str, Any]:
    who = shopper(request)
    with _state:
        return {"orders": [public(o) for i, o in sorted(_orders.items()) if _owners[i] == who]}


@app.get("/orders/{order_id}")
def get_order(order_id: int, request: Request) -> dict[str, Any]:
    return public(own_order(order_id, shopper(request)))


@app.post("/orders/{order_id}/pay")
async def pay(order_id: int, request: Request) -> dict[str, Any]:
    who = shopper(request)
    body = await body_of(request)
    method = body.get("payment_method")
    if not isinstance(method, str) or not method.strip():
        raise Problem(422, "payment_method must be a non-empty string")
    order = own_order(order_id, who)
    return await to_thread.run_sync(_pay, order, method)


def _pay(order: dict[str, Any], method: str) -> dict[str, Any]:
    with _locks[order["id"]]:
        if order["status"] != "pending":
            raise Problem(409, f"the order is {order['status']}")
        key = f"order-{order['id']}-pay-{order['_attempt']}"
        try:
            intent = call(client.v1.payment_intents.create, key=key, params={
                "amount": order["amount"], "currency": order["currency"],
                "payment_method": method, "confirm": True,
                "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
                "metadata": {"order_id": str(order["id"])}})
        except stripe.CardError as exc:
            order["_attempt"] += 1  # a decided attempt: the next one is a new call
            error = exc.error
            code = error.code if error else exc.code
            decline = error.decline_code if error else None
            message = (error.message if error else None) or "your card was declined"
            order["last_payment_error"] = {"code": code, "decline_code": decline,
                                           "message": message}
            raise Problem(402, message, code=code, decline_code=decline) from None
        except stripe.StripeError as exc:
            order["_attempt"] += 1
            raise Problem(422, exc.user_message or str(exc)) from None
        if intent.status != "succeeded":
            order["_attempt"] += 1
            raise Problem(402, f"the payment did not succeed ({intent.status})")
        order["payment_intent"] = intent.id
        order["last_payment_error"] = None
        settle_status(order)
        return public(order)


@app.post("/orders/{order_id}/refunds", status_code=201)
async def refund(order_id: int, request: Request) -> dict[str, Any]:
    who = shopper(request)
    body = await body_of(request)
    amount = body.get("amount")
    if amount is not None and (not is_int(amount) or amount < 1):
        raise Problem(422, "amount must be an integer >= 1")
    order = own_order(order_id, who)
    return await to_thread.run_sync(_refund, order, amount)


def _refund(order: dict[str, Any], amount: int | None) -> dict[str, Any]:
    with _locks[order["id"]]:
        if order["status"] not in ("paid", "partially_refunded"):
            raise Problem(409, f"the order is {order['status']}")
        remaining = order["amount"] - order["amount_refunded"]
        amount = remaining if amount is None else amount
        if amount > remaining:
            raise Problem(422, f"at most {remaining} can still be refunded")
        key = f"order-{order['id']}-refund-{order['_refunds']}"
        try:
            made = call(client.v1.refunds.create, key=key, params={
                "payment_intent": order["payment_intent"], "amount": amount,
                "metadata": {"order_id": str(order["id"])}})
        except stripe.StripeError as exc:
            order["_refunds"] += 1
            raise Problem(422, exc.user_message or str(exc)) from None
        order["_refunds"] += 1
        order["amount_refunded"] += amount
        settle_status(order)
        return {"id": made.id, "order_id": order["id"], "amount": amount,
                "status": made.status}


# -- webhooks -----------------------------------------------------------------------------


@app.post("/webhooks/endpoint", status_code=201)
async def register(request: Request) -> dict[str, Any]:
    if request.headers.get("x-admin-key") != ADMIN_KEY:
        raise Problem(401, "missing or wrong X-Admin-Key")
    body = await body_of(request)
    url = body.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise Problem(422, "url must be an http(s) URL")
    return await to_thread.run_sync(_register, url)


def _register(url: str) -> dict[str, Any]:
    with _state:
        old = _hook["id"]
    if old:
        try:
            call(client.v1.webhook_endpoints.delete, old)
        except stripe.InvalidRequestError:
            pass  # already gone
    try:
        answer = call(client.v1.webhook_endpoints.create,
                      key=f"webhook-endpoint-{uuid.uuid4().hex}",
                      params={"url": url, "enabled_events": ["payment_intent.succeeded",
                                                             "charge.refunded"]})
    except stripe.StripeError as exc:
        raise Problem(502, exc.user_message or str(exc)) from None
    with _state:
        _hook["id"], _hook["secret"] = answer.id, answer.secret
    return {"id": answer.id, "url": answer.url, "enabled_events": list(answer.enabled_events)}


@app.post("/webhooks/payment")
async def webhook(request: Request) -> dict[str, Any]:
    payload = await request.body()
    with _state:
        secret = _hook["secret"]
    if not secret:
        raise Problem(400, "no webhook endpoint is registered")
    try:
        event = stripe.Webhook.construct_event(
            payload, request.headers.get("stripe-signature") or "", secret,
            tolerance=TOLERANCE)
    except (ValueError, stripe.SignatureVerificationError):
        raise Problem(400, "the signature does not verify") from None
    event = json.loads(payload)  # verified: the plain dict is easier to handle than the Event
    try:
        kind, subject = event["type"], event["data"]["object"]
    except (KeyError, TypeError):
        raise Problem(400, "not an event") from None
    await to_thread.run_sync(_handle, event.get("id"), kind, subject)
    return {"received": True}


def _order_for(subject: dict[str, Any]) -> dict[str, Any] | None:
    with _state:
        raw = (subject.get("metadata") or {}).get("order_id")
        if raw is not None and str(raw).isdigit() and int(raw) in _orders:
            return _orders[int(raw)]
        intent = subject.get("payment_intent")
        for order in _orders.values():
            if intent and order["payment_intent"] == intent:
                return order
    return None


def _handle(event_id: str | None, kind: str, subject: dict[str, Any]) -> None:
    if kind not in ("payment_intent.succeeded", "charge.refunded"):
        return
    order = _order_for(subject)
    if order is None:
        return
    with _locks[order["id"]]:
        with _state:
            if event_id in _seen_events:
                return
            if event_id:
                _seen_events.add(event_id)
        if kind == "payment_intent.succeeded":
            if (order["status"] == "pending" and subject.get("amount") == order["amount"]
                    and subject.get("currency") == order["currency"]):
                order["payment_intent"] = subject.get("id")
                order["last_payment_error"] = None
                settle_status(order)
        elif order["payment_intent"] is not None:
            refunded = subject.get("amount_refunded")
            if is_int(refunded) and refunded > order["amount_refunded"]:
                order["amount_refunded"] = min(refunded, order["amount"])
                settle_status(order)
