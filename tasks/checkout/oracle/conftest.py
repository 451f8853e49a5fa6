"""Shared helpers for the checkout oracle.

Every item makes its own shoppers (random bearer tokens) and orders, so items are
independent of each other and of their order. The provider is the evaluation's payment
mock: items read its state with the task's secret key (``provider_get``) and its journal
through the ``payment`` fixture (anvil's mock fixtures), and arm faults on it.

Time budget: task.toml gives the whole oracle 180 s. A request to the service waits at
most ``SERVICE_TIMEOUT``; once a route has timed out (it hangs), later requests to it wait
only ``HUNG_TIMEOUT``, and once several routes hung every request does: a service that hangs
costs each remaining item well under a second, so every item still gets its verdict.
"""

import hashlib
import hmac
import json
import os
import re
import threading
import time
import uuid
from urllib.parse import parse_qsl

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
PAYMENT_URL = os.environ.get("PAYMENT_URL", "http://127.0.0.1:12111").rstrip("/")
PAYMENT_TOKEN = os.environ.get("PAYMENT_URL_TOKEN", "")
SECRET_KEY = "sk_test_checkout_4eC39HqLyjWDarjtT1zdp7dc"
ADMIN = {"X-Admin-Key": "checkout-admin-key"}
WAIT = 10.0
MISSING = 987654321  # an order id no item creates
ONE_ITEM = [{"sku": "mug", "quantity": 1, "unit_price": 900}]
SERVICE_TIMEOUT = 5.0  # a correct service answers in milliseconds, provider retries included
HUNG_TIMEOUT = 0.5
HUNG_ROUTES = 3  # this many hung routes: the whole service is treated as hung
_hung: set[str] = set()
_hung_lock = threading.Lock()


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


def shopper() -> dict:
    """Headers of a fresh shopper."""
    return {"Authorization": f"Bearer shopper-{uuid.uuid4().hex}"}


def _route(method: str, path: str) -> str:
    return f"{method} {re.sub(r'/[0-9]+', '/{id}', path.partition('?')[0])}"


def api(method: str, path: str, headers=None, timeout: float = SERVICE_TIMEOUT,
        **kwargs) -> requests.Response:
    """One request to the service, bounded (see the module docstring)."""
    route = _route(method, path)
    with _hung_lock:
        if route in _hung or len(_hung) >= HUNG_ROUTES:
            timeout = HUNG_TIMEOUT
    try:
        return requests.request(method, BASE_URL + path, headers=headers, timeout=timeout,
                                **kwargs)
    except requests.Timeout:
        with _hung_lock:
            _hung.add(route)
        raise AssertionError(f"{method} {path}: no answer within {timeout:g} s") from None


def make_order(headers, items=None, currency=None) -> dict:
    body = {"items": items or [{"sku": "mug", "quantity": 2, "unit_price": 1250}]}
    if currency:
        body["currency"] = currency
    r = api("POST", "/orders", headers, json=body)
    assert r.status_code == 201, f"setup: POST /orders -> {r.status_code} {r.text}"
    return r.json()


def pay(headers, order_id, method="pm_card_visa") -> requests.Response:
    return api("POST", f"/orders/{order_id}/pay", headers, json={"payment_method": method})


def paid_order(headers, **kwargs) -> dict:
    order = make_order(headers, **kwargs)
    r = pay(headers, order["id"])
    assert r.status_code == 200, f"setup: pay -> {r.status_code} {r.text}"
    return r.json()


def get_order(headers, order_id) -> dict:
    r = api("GET", f"/orders/{order_id}", headers)
    assert r.status_code == 200, f"GET /orders/{order_id} -> {r.status_code} {r.text}"
    return r.json()


def eventually(check, what: str, timeout: float = WAIT):
    """Poll ``check()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"within {timeout:.0f} s: {what} (last seen: {last!r})")


# -- the provider, as the oracle sees it ---------------------------------------------------


def provider_get(path: str, **params) -> dict:
    """A GET on the provider's own API with the task's secret key."""
    r = requests.get(PAYMENT_URL + path, params=params, timeout=10,
                     headers={"Authorization": f"Bearer {SECRET_KEY}"})
    assert r.status_code == 200, f"provider GET {path} -> {r.status_code} {r.text}"
    return r.json()


def provider_post(path: str, data: dict, key: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {SECRET_KEY}",
               "Idempotency-Key": key or uuid.uuid4().hex}
    return requests.post(PAYMENT_URL + path, data=data, headers=headers, timeout=10)


def listed(path: str, **params) -> list:
    """Every object of a provider list, through its pages."""
    found, after = [], None
    while True:
        query = dict(params, limit=100)
        if after:
            query["starting_after"] = after
        page = provider_get(path, **query)
        found += page["data"]
        if not page["has_more"]:
            return found
        after = page["data"][-1]["id"]


def keep_only_endpoint(endpoint_id: str) -> None:
    """Delete, at the provider, every webhook endpoint but ``endpoint_id`` (cleaning up
    after an item that may leave a second one, which would sign later events twice)."""
    for endpoint in listed("/v1/webhook_endpoints"):
        if endpoint["id"] != endpoint_id:
            requests.delete(f"{PAYMENT_URL}/v1/webhook_endpoints/{endpoint['id']}", timeout=10,
                            headers={"Authorization": f"Bearer {SECRET_KEY}"})


def intents_for(order_id) -> list:
    """The provider's PaymentIntents whose metadata names ``order_id``."""
    return [pi for pi in listed("/v1/payment_intents")
            if pi["metadata"].get("order_id") == str(order_id)]


def form(entry) -> dict:
    """A journaled provider request's form body, decoded (nested keys kept flat)."""
    return dict(parse_qsl(entry["body"] or "", keep_blank_values=True))


def header(entry, name: str):
    return entry["headers"].get(name.lower())


def admin_journal(**params) -> list:
    """Journal entries of every item (for the fixtures, which outlive one item)."""
    r = requests.get(f"{PAYMENT_URL}/__mock__/journal", params=params, timeout=10,
                     headers={"X-Mock-Token": PAYMENT_TOKEN})
    assert r.status_code == 200, f"mock journal -> {r.status_code} {r.text}"
    return r.json()["entries"]


def current_secret():
    """The signing secret of the service's latest webhook registration, read from what
    the provider answered it (None if it never registered)."""
    for entry in reversed(admin_journal(method="POST", path="/v1/webhook_endpoints")):
        if entry["status"] == 200 and entry["response"]:
            return json.loads(entry["response"]).get("secret")
    return None


WEBHOOK_URL = f"{BASE_URL}/webhooks/payment"


def register_webhooks() -> requests.Response:
    return api("POST", "/webhooks/endpoint", ADMIN, json={"url": WEBHOOK_URL})


@pytest.fixture
def webhook_secret() -> str:
    """Make sure the service has registered its webhook endpoint; its secret."""
    secret = current_secret()
    if secret is None:
        r = register_webhooks()
        assert r.status_code == 201, f"setup: POST /webhooks/endpoint -> {r.status_code} {r.text}"
        secret = current_secret()
    assert secret, "setup: the service's webhook registration never reached the provider"
    return secret


@pytest.fixture
def faults(payment):
    """The payment mock, with every fault disarmed when the item ends."""
    yield payment
    payment.clear_faults()


@pytest.fixture
def webhook_faults():
    """Arm a webhook fault on the payment mock (duplicate, out_of_order); all are disarmed
    when the item ends."""
    url = f"{PAYMENT_URL}/__mock__/payment/webhooks/faults"
    headers = {"X-Mock-Token": PAYMENT_TOKEN}

    def arm(spec: dict) -> None:
        r = requests.post(url, json=spec, headers=headers, timeout=10)
        assert r.status_code == 200, f"setup: webhook fault -> {r.status_code} {r.text}"

    yield arm
    requests.delete(url, headers=headers, timeout=10)


def sign(payload: bytes, secret: str, at: int | None = None) -> str:
    """Stripe's signature header, computed here independently of the provider."""
    stamp = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + payload,
                      hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


def event(kind: str, subject: dict, event_id: str | None = None) -> bytes:
    """An Event of type ``kind`` about ``subject``, as the provider would send it."""
    body = {"id": event_id or f"evt_{uuid.uuid4().hex[:24]}", "object": "event",
            "api_version": "2026-10-28.endive", "created": int(time.time()),
            "livemode": False, "pending_webhooks": 1, "type": kind,
            "request": {"id": None, "idempotency_key": None},
            "data": {"object": subject}}
    return json.dumps(body).encode()


def intent_event(order: dict, amount=None, currency=None) -> bytes:
    """A payment_intent.succeeded event for ``order``, as the provider would send it."""
    pi = f"pi_forged{uuid.uuid4().hex[:16]}"
    return event("payment_intent.succeeded", {
        "id": pi, "object": "payment_intent",
        "amount": order["amount"] if amount is None else amount,
        "amount_received": order["amount"], "currency": currency or order["currency"],
        "metadata": {"order_id": str(order["id"])}, "status": "succeeded"})


def charge_event(order: dict, amount_refunded: int, metadata: bool = True) -> bytes:
    """A charge.refunded event about the charge of paid ``order`` (named by its metadata,
    or only by its payment_intent)."""
    return event("charge.refunded", {
        "id": f"ch_forged{uuid.uuid4().hex[:16]}", "object": "charge",
        "amount": order["amount"], "amount_captured": order["amount"],
        "amount_refunded": amount_refunded, "currency": order["currency"],
        "payment_intent": order["payment_intent"],
        "metadata": {"order_id": str(order["id"])} if metadata else {},
        "refunded": amount_refunded >= order["amount"], "status": "succeeded"})


def deliver(payload: bytes, signature: str | None) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["Stripe-Signature"] = signature
    return api("POST", "/webhooks/payment", headers, data=payload)


def posts(payment, path: str | None = None) -> int:
    """How many POSTs (to ``path``, if given) reached the provider during this item."""
    return len(payment.requests(method="POST", path=path))


def deliveries(payment, event_type: str) -> list:
    """Webhook deliveries of ``event_type`` the provider made during this item."""
    return [e for e in payment.events() if e.get("type") == "webhook"
            and e.get("event_type") == event_type]


def delivered(payment, event_type: str, object_id: str, count: int = 1) -> list:
    """Wait until the provider has delivered (``count`` times) the ``event_type`` event
    about ``object_id``; the deliveries."""
    def found():
        events = [e["id"] for e in listed("/v1/events", type=event_type)
                  if e["data"]["object"]["id"] == object_id]
        got = [d for d in deliveries(payment, event_type) if d["event"] in events]
        return got if len(got) >= count else None

    return eventually(found, f"{count} delivery(ies) of {event_type} about {object_id}")
