"""Shared helpers for the notify oracle.

Every item makes its own shops, customers and orders, so items are independent of
each other and of their order. The provider is the evaluation's delivery mock: items
read its objects with a key of their own (``provider_get``, marked so they can be told
apart from the service's calls) and its journal through the ``delivery`` fixture
(anvil's mock fixtures), arm faults on it and move its clock.

Every call to the service is bounded (``api``): a few seconds while the service answers,
under a second once it has let two calls time out, and a quarter of one once it has answered
none of the last several calls. A route that hangs fails its own items without starving the
rest, and a service that hangs on every route still lets all the items end within the
oracle's budget (task.toml: 180 s) rather than time out the whole oracle.
"""

import json
import os
import threading
import uuid

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
DELIVERY_URL = os.environ.get("DELIVERY_URL", "http://127.0.0.1:12112").rstrip("/")
ORACLE_MARK = "x-notify-oracle"
PROVIDER_HEADERS = {"Authorization": "Bearer dk_test_oracle", ORACLE_MARK: "1"}
WAREHOUSE = {"name": "Anvil Goods", "street1": "500 Forge Way", "city": "Portland",
             "state": "OR", "zip": "97201", "country": "US"}
HOME = {"street1": "12 Byron St", "city": "London", "zip": "N1 7AA", "country": "GB"}
DELIVERED_AFTER = 100_800  # seconds from the label's purchase to "delivered" (the mock's)
IN_TRANSIT_AFTER = 3_600
OUT_FOR_DELIVERY_AFTER = 86_400
MISSING = 987_654_321  # an id no item creates
REFUSED = {"error": {"code": "parameter_invalid", "message": "refused by the oracle",
                     "param": None}}  # a provider 4xx body, as the provider writes them

# Per-call timeouts (seconds): generous while the service answers, short once it hangs,
# shorter still once it has answered nothing for several calls in a row.
PATIENT_TIMEOUT = 5.0
HURRIED_TIMEOUT = 0.75
STRIKES = 2  # calls that timed out before every later call is hurried
SILENT_TIMEOUT = 0.25
SILENCE = 8  # timeouts in a row, with no answer between them, before calls are cut short
_timeouts = {"count": 0, "in_a_row": 0}
_timeouts_lock = threading.Lock()


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def call_timeout() -> float:
    if _timeouts["in_a_row"] >= SILENCE:
        return SILENT_TIMEOUT
    return HURRIED_TIMEOUT if _timeouts["count"] >= STRIKES else PATIENT_TIMEOUT


def api(method: str, path: str, shop=None, headers=None, **kwargs) -> requests.Response:
    sent = dict(headers or {})
    if shop is not None:
        sent.setdefault("Authorization", f"Bearer {shop['api_key']}")
    try:
        answer = requests.request(method, BASE_URL + path, headers=sent,
                                  timeout=call_timeout(), **kwargs)
    except requests.Timeout:
        with _timeouts_lock:
            _timeouts["count"] += 1
            _timeouts["in_a_row"] += 1
        raise
    _timeouts["in_a_row"] = 0
    return answer


def make_shop() -> dict:
    r = api("POST", "/shops", json={"name": unique("shop")})
    assert r.status_code == 201, f"setup: POST /shops -> {r.status_code} {r.text}"
    return r.json()


def email(name: str = "ada") -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}@example.com"


def make_customer(shop, contacts=None, address=None, name="Ada Lovelace") -> dict:
    body = {"name": name, "address": address or HOME,
            "contacts": contacts or [{"channel": "email", "to": email()}]}
    r = api("POST", "/customers", shop, json=body)
    assert r.status_code == 201, f"setup: POST /customers -> {r.status_code} {r.text}"
    return r.json()


def order(shop, customer, weight=12, reference=None, key=None) -> requests.Response:
    body = {"customer_id": customer["id"], "weight_oz": weight}
    if reference is not None:
        body["reference"] = reference
    headers = {"Idempotency-Key": key} if key else None
    return api("POST", "/orders", shop, headers=headers, json=body)


def make_order(shop, customer, **kwargs) -> dict:
    r = order(shop, customer, **kwargs)
    assert r.status_code == 201, f"POST /orders -> {r.status_code} {r.text}"
    return r.json()


def track(shop, placed) -> requests.Response:
    return api("GET", f"/orders/{placed['id']}/tracking", shop)


def provider_get(path: str, **params) -> dict:
    """The provider's own view of an object or list, read by the oracle."""
    r = requests.get(DELIVERY_URL + path, params=params, headers=PROVIDER_HEADERS, timeout=10)
    assert r.status_code == 200, f"provider GET {path} -> {r.status_code} {r.text}"
    return r.json()


def service_calls(delivery, method=None, path=None) -> list:
    """The provider calls the service made while this item ran (the oracle's own left out)."""
    return [c for c in delivery.requests(method, path) if ORACLE_MARK not in c["headers"]]


def body_of(call) -> dict:
    return json.loads(call["body"] or "null")


def recipients(message) -> list:
    """A message's `to` as a list (the provider takes one string or a list)."""
    return message["to"] if isinstance(message["to"], list) else [message["to"]]


def messages_of(order_id) -> list:
    """The messages the provider holds for an order, oldest first."""
    return provider_get("/v1/messages", reference=f"order-{order_id}", limit=100)["data"]


def shipments_of(order_id) -> list:
    """The shipments the provider holds for an order, oldest first."""
    return provider_get("/v1/shipments", reference=f"order-{order_id}", limit=100)["data"]


@pytest.fixture
def shop() -> dict:
    return make_shop()


@pytest.fixture
def faulty(delivery):
    """The delivery mock, its faults disarmed once the item ends (pass or fail)."""
    delivery.clear_faults()
    yield delivery
    delivery.clear_faults()
