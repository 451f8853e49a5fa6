"""notify: order dispatch through the delivery provider at DELIVERY_URL."""

import http.client
import json
import os
import secrets
import threading
import urllib.error
import urllib.request

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

DELIVERY_URL = os.environ["DELIVERY_URL"].rstrip("/")
PROVIDER_KEY = "dk_test_notify"
ATTEMPTS = 3
WAREHOUSE = {"name": "Anvil Goods", "street1": "500 Forge Way", "city": "Portland",
             "state": "OR", "zip": "97201", "country": "US"}
CHANNELS = ("email", "sms", "push")

app = FastAPI()
lock = threading.Lock()
shops: dict[str, dict] = {}  # api_key -> shop
customers: dict[int, dict] = {}  # id -> {"shop", "data"}
orders: dict[int, dict] = {}  # id -> {"shop", "data", "delivered_sent"}
order_keys: dict[tuple[int, str], int] = {}  # (shop id, Idempotency-Key) -> order id
counters = {"shop": 0, "customer": 0, "order": 0}


class Problem(Exception):
    def __init__(self, status: int, detail: str):
        self.status, self.detail = status, detail


class ProviderFailed(Exception):
    """The provider gave no usable answer after every attempt, or refused the call."""


@app.exception_handler(Problem)
async def problem_handler(_request: Request, exc: Problem) -> JSONResponse:
    return JSONResponse({"detail": exc.detail}, exc.status)


def next_id(kind: str) -> int:
    with lock:
        counters[kind] += 1
        return counters[kind]


def provider(method: str, path: str, body: dict | None = None, key: str | None = None):
    """(status, JSON) of a provider call, retried on no answer or 5xx with the same key.

    Raises ProviderFailed when every attempt went unanswered or answered 5xx."""
    headers = {"Authorization": f"Bearer {PROVIDER_KEY}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    data = json.dumps(body).encode() if body is not None else None
    last = "no attempt"
    for _ in range(ATTEMPTS):
        request = urllib.request.Request(DELIVERY_URL + path, data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            text = exc.read()
            if exc.code >= 500:
                last = f"{exc.code}"
                continue
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, {}
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            last = repr(exc)
            continue
    raise ProviderFailed(f"{method} {path}: {last}")


async def json_body(request: Request) -> dict:
    try:
        body = await request.json()
    except ValueError:
        raise Problem(422, "the body must be JSON") from None
    if not isinstance(body, dict):
        raise Problem(422, "the body must be a JSON object")
    return body


def shop_of(request: Request) -> dict:
    auth = request.headers.get("authorization", "")
    if not auth.startswith("Bearer "):
        raise Problem(401, "missing bearer token")
    shop = shops.get(auth[7:].strip())
    if shop is None:
        raise Problem(401, "unknown api key")
    return shop


def text(value, what: str, limit: int, required: bool = True):
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise Problem(422, f"{what} must be a non-empty string of at most {limit} characters")
    return value


@app.get("/health")
def health():
    return {"status": "ok"}


@app.post("/shops", status_code=201)
async def create_shop(request: Request):
    body = await json_body(request)
    name = text(body.get("name"), "name", 100)
    shop = {"id": next_id("shop"), "name": name, "api_key": "shop_" + secrets.token_hex(16)}
    with lock:
        shops[shop["api_key"]] = shop
    return shop


def check_address(value) -> dict:
    if not isinstance(value, dict):
        raise Problem(422, "address must be an object")
    address = {}
    for field in ("street1", "city", "zip"):
        address[field] = text(value.get(field), f"address.{field}", 200)
    country = value.get("country")
    if not (isinstance(country, str) and len(country) == 2 and country.isascii()
            and country.isalpha() and country.isupper()):
        raise Problem(422, "address.country must be two upper-case letters")
    address["country"] = country
    for field in ("street2", "state"):
        if value.get(field) is not None:
            if not isinstance(value[field], str):
                raise Problem(422, f"address.{field} must be a string")
            address[field] = value[field]
    return address


def check_contacts(value) -> list:
    if not isinstance(value, list) or not 1 <= len(value) <= 10:
        raise Problem(422, "contacts must be a list of 1 to 10 contacts")
    contacts, seen = [], set()
    for contact in value:
        if not isinstance(contact, dict) or contact.get("channel") not in CHANNELS:
            raise Problem(422, "each contact needs a channel: email, sms or push")
        to = text(contact.get("to"), "contact.to", 500)
        pair = (contact["channel"], to)
        if pair in seen:
            raise Problem(422, "a contact is listed twice")
        seen.add(pair)
        contacts.append({"channel": contact["channel"], "to": to})
    return contacts


@app.post("/customers", status_code=201)
async def create_customer(request: Request):
    shop = shop_of(request)
    body = await json_body(request)
    name = text(body.get("name"), "name", 100)
    address = check_address(body.get("address"))
    contacts = check_contacts(body.get("contacts"))
    customer = {"id": next_id("customer"), "name": name, "address": address,
                "contacts": contacts}
    with lock:
        customers[customer["id"]] = {"shop": shop["id"], "data": customer}
    return customer


def owned(store: dict, shop: dict, object_id: int, what: str) -> dict:
    found = store.get(object_id)
    if found is None or found["shop"] != shop["id"]:
        raise Problem(404, f"no such {what}")
    return found


@app.get("/customers/{customer_id}")
def get_customer(customer_id: int, request: Request):
    return owned(customers, shop_of(request), customer_id, "customer")["data"]


def by_channel(contacts: list) -> dict:
    grouped: dict[str, list] = {}
    for contact in contacts:
        grouped.setdefault(contact["channel"], []).append(contact["to"])
    return grouped


def notify(order_id: int, customer: dict, step: str, subject: str, body: str) -> dict:
    """Send one message per channel; return {(channel, to): (status, message id)}."""
    results = {}
    for channel, recipients in by_channel(customer["contacts"]).items():
        message = {"channel": channel, "to": recipients, "body": body,
                   "reference": f"order-{order_id}"}
        if channel == "email":
            message["subject"] = subject
        try:
            status, answer = provider("POST", "/v1/messages", message,
                                      key=f"order-{order_id}-{step}{channel}")
        except ProviderFailed:
            status, answer = 502, {}
        if status == 201:
            for result in answer["recipients"]:
                results[(channel, result["to"])] = (result["status"], answer["id"])
        else:
            for to in recipients:
                results[(channel, to)] = ("failed", None)
    return results


def cheapest(rates: list) -> dict:
    return min(enumerate(rates), key=lambda p: (p[1]["amount"], p[1]["delivery_days"], p[0]))[1]


@app.post("/orders", status_code=201)
async def create_order(request: Request):
    shop = shop_of(request)
    body = await json_body(request)
    customer_id = body.get("customer_id")
    if not isinstance(customer_id, int) or isinstance(customer_id, bool):
        raise Problem(422, "customer_id must be an integer")
    weight = body.get("weight_oz")
    if (not isinstance(weight, int | float) or isinstance(weight, bool)
            or not 0 < weight <= 1120):
        raise Problem(422, "weight_oz must be a number greater than 0 and at most 1120")
    reference = body.get("reference")
    if reference is not None and (not isinstance(reference, str) or len(reference) > 64):
        raise Problem(422, "reference must be a string of at most 64 characters")
    customer = owned(customers, shop, customer_id, "customer")["data"]
    client_key = request.headers.get("idempotency-key")
    if client_key:
        with lock:
            known = order_keys.get((shop["id"], client_key))
        if known is not None:
            return JSONResponse(orders[known]["data"], 201)
    order_id = next_id("order")
    order = await run_in_threadpool(dispatch, shop, customer, order_id, weight, reference,
                                    client_key)  # blocking provider calls off the event loop
    return JSONResponse(order, 201)


def dispatch(shop, customer, order_id, weight, reference, client_key) -> dict:
    to_address = {"name": customer["name"], **customer["address"]}
    try:
        status, shipment = provider("POST", "/v1/shipments", {
            "to_address": to_address, "from_address": WAREHOUSE,
            "parcel": {"weight_oz": weight}, "reference": f"order-{order_id}"},
            key=f"order-{order_id}-shipment")
        if status != 201:
            raise Problem(502, f"the provider refused the shipment: {shipment}")
        rate = cheapest(shipment["rates"])
        status, bought = provider("POST", f"/v1/shipments/{shipment['id']}/buy",
                                  {"rate": rate["id"]}, key=f"order-{order_id}-buy")
        if status != 200:
            raise Problem(502, f"the provider refused the purchase: {bought}")
    except ProviderFailed as exc:
        raise Problem(502, f"the delivery provider failed: {exc}") from None
    code = bought["tracking_code"]
    results = notify(order_id, customer, "", "Your order has shipped",
                     f"Your order {reference or order_id} has shipped. Tracking code: {code}")
    notifications = []
    for contact in customer["contacts"]:
        status, message_id = results.get((contact["channel"], contact["to"]), ("failed", None))
        notifications.append({"channel": contact["channel"], "to": contact["to"],
                              "status": status, "message_id": message_id})
    delivered = sum(n["status"] == "delivered" for n in notifications)
    order = {
        "id": order_id, "customer_id": customer["id"], "reference": reference,
        "weight_oz": weight, "status": "label_purchased",
        "shipment": {"id": bought["id"], "carrier": bought["selected_rate"]["carrier"],
                     "service": bought["selected_rate"]["service"],
                     "amount": bought["selected_rate"]["amount"], "tracking_code": code,
                     "tracker_id": bought["tracker_id"]},
        "notifications": notifications,
        "notification_status": ("all_delivered" if delivered == len(notifications)
                                else "none_delivered" if delivered == 0 else "partial"),
    }
    with lock:
        orders[order_id] = {"shop": shop["id"], "data": order, "delivered_sent": False,
                            "customer": customer}
        if client_key:
            order_keys[(shop["id"], client_key)] = order_id
    return order


@app.get("/orders/{order_id}")
def get_order(order_id: int, request: Request):
    return owned(orders, shop_of(request), order_id, "order")["data"]


@app.get("/orders/{order_id}/tracking")
def get_tracking(order_id: int, request: Request):
    # BROKEN (tracking-without-auth): tracking links are meant to be shared, so no key is
    # asked for, and any order id answers
    found = orders.get(order_id)
    if found is None:
        raise Problem(404, "no such order")
    order = found["data"]
    try:
        status, tracker = provider("GET", f"/v1/trackers/{order['shipment']['tracker_id']}")
    except ProviderFailed as exc:
        raise Problem(502, f"the delivery provider failed: {exc}") from None
    if status != 200:
        raise Problem(502, f"the provider refused the tracker: {tracker}")
    order["status"] = tracker["status"]
    if tracker["status"] == "delivered":
        with lock:
            send = not found["delivered_sent"]
            found["delivered_sent"] = True
        if send:
            notify(order_id, found["customer"], "delivered-", "Your order was delivered",
                   f"Your order {order['reference'] or order_id} was delivered "
                   f"(tracking code {order['shipment']['tracking_code']}).")
    return {"order_id": order_id, "tracking_code": tracker["tracking_code"],
            "status": tracker["status"],
            "events": [{"status": d["status"], "at": d["datetime"]}
                       for d in tracker["tracking_details"]]}
