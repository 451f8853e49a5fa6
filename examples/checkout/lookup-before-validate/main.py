"""checkout reference: orders paid through a Stripe-compatible provider, in raw HTTP.

The provider is called with ``requests`` (form bodies, Bearer key, Idempotency-Key);
webhook signatures are verified with hmac. See spec.md for the behaviour.
"""

# BROKEN (lookup-before-validate): pay and refund look the order up (404, 409) before
# validating the body (422).


from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import threading
import time
import uuid
from typing import Any

import requests
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


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}[{key}]" if prefix else key
        if isinstance(value, dict):
            pairs += _flatten(value, name)
        elif isinstance(value, list):
            pairs += [(f"{name}[]", str(v)) for v in value]
        elif isinstance(value, bool):
            pairs.append((name, "true" if value else "false"))
        else:
            pairs.append((name, str(value)))
    return pairs


def provider(method: str, path: str, data: dict[str, Any] | None = None,
             key: str | None = None) -> tuple[int, dict[str, Any]]:
    """(status, JSON) of one provider call, retried with the same key when no usable
    answer came back. Raises Problem(502) when every attempt failed."""
    headers = {"Authorization": f"Bearer {SECRET_KEY}"}
    if method == "POST":
        headers["Idempotency-Key"] = key or uuid.uuid4().hex
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(0.1 * attempt)
        try:
            answer = requests.request(method, PAYMENT_URL + path, headers=headers,
                                      data=_flatten(data or {}), timeout=10)
        except requests.RequestException:
            continue
        if answer.status_code >= 500:
            continue
        try:
            body = answer.json()
        except ValueError:
            continue
        return answer.status_code, body
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
    order = own_order(order_id, who)
    if order["status"] != "pending":
        raise Problem(409, f"the order is {order['status']}")
    body = await body_of(request)
    method = body.get("payment_method")
    if not isinstance(method, str) or not method.strip():
        raise Problem(422, "payment_method must be a non-empty string")
    return await to_thread.run_sync(_pay, order, method)


def _pay(order: dict[str, Any], method: str) -> dict[str, Any]:
    with _locks[order["id"]]:
        if order["status"] != "pending":
            raise Problem(409, f"the order is {order['status']}")
        key = f"order-{order['id']}-pay-{order['_attempt']}"
        status, answer = provider("POST", "/v1/payment_intents", {
            "amount": order["amount"], "currency": order["currency"],
            "payment_method": method, "confirm": True,
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "metadata": {"order_id": order["id"]}}, key)
        if status != 200:
            order["_attempt"] += 1  # a decided attempt: the next one is a new call
            error = answer.get("error") or {}
            message = error.get("message") or "the provider refused the payment"
            if status == 402:
                order["last_payment_error"] = {"code": error.get("code"),
                                               "decline_code": error.get("decline_code"),
                                               "message": message}
                raise Problem(402, message, code=error.get("code"),
                              decline_code=error.get("decline_code"))
            raise Problem(422, message)
        if answer.get("status") != "succeeded":
            order["_attempt"] += 1
            raise Problem(402, f"the payment did not succeed ({answer.get('status')})")
        order["payment_intent"] = answer["id"]
        order["last_payment_error"] = None
        settle_status(order)
        return public(order)


@app.post("/orders/{order_id}/refunds", status_code=201)
async def refund(order_id: int, request: Request) -> dict[str, Any]:
    who = shopper(request)
    order = own_order(order_id, who)
    if order["status"] not in ("paid", "partially_refunded"):
        raise Problem(409, f"the order is {order['status']}")
    body = await body_of(request)
    amount = body.get("amount")
    if amount is not None and (not is_int(amount) or amount < 1):
        raise Problem(422, "amount must be an integer >= 1")
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
        status, answer = provider("POST", "/v1/refunds", {
            "payment_intent": order["payment_intent"], "amount": amount,
            "metadata": {"order_id": order["id"]}}, key)
        order["_refunds"] += 1
        if status != 200:
            raise Problem(422, (answer.get("error") or {}).get("message") or "refund refused")
        order["amount_refunded"] += amount
        settle_status(order)
        return {"id": answer["id"], "order_id": order["id"], "amount": amount,
                "status": answer.get("status")}


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
        provider("DELETE", f"/v1/webhook_endpoints/{old}")
    status, answer = provider("POST", "/v1/webhook_endpoints", {
        "url": url, "enabled_events": ["payment_intent.succeeded", "charge.refunded"]},
        f"webhook-endpoint-{uuid.uuid4().hex}")
    if status != 200:
        raise Problem(502, (answer.get("error") or {}).get("message") or "registration failed")
    with _state:
        _hook["id"], _hook["secret"] = answer["id"], answer["secret"]
    return {"id": answer["id"], "url": answer["url"],
            "enabled_events": answer["enabled_events"]}


def verified(payload: bytes, header: str | None, secret: str | None) -> bool:
    if not header or not secret:
        return False
    parts = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [v for k, v in parts if k.strip() == "t"]
    signatures = [v for k, v in parts if k.strip() == "v1"]
    if len(stamps) != 1 or not signatures or not stamps[0].isdigit():
        return False
    expected = hmac.new(secret.encode(), stamps[0].encode() + b"." + payload,
                        hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, s) for s in signatures):
        return False
    return abs(time.time() - int(stamps[0])) <= TOLERANCE


@app.post("/webhooks/payment")
async def webhook(request: Request) -> dict[str, Any]:
    payload = await request.body()
    with _state:
        secret = _hook["secret"]
    if not verified(payload, request.headers.get("stripe-signature"), secret):
        raise Problem(400, "the signature does not verify")
    try:
        event = json.loads(payload)
        kind, subject = event["type"], event["data"]["object"]
    except (ValueError, KeyError, TypeError):
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
