"""API surface: the endpoints answer with the documented shapes."""

import pytest
from conftest import (MISSING, WEBHOOK_URL, api, deliver, intent_event,
                      make_order, paid_order, pay, register_webhooks, shopper, sign)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"),
              pytest.mark.level("leaf")]


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-health")
def test_health_answers_ok():
    """GET /health needs no credentials and answers {"status": "ok"}."""
    r = api("GET", "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-order-shape")
def test_created_order_has_the_documented_shape():
    """POST /orders answers 201 with a pending Order whose amount sums the items."""
    me = shopper()
    r = api("POST", "/orders", me, json={"items": [
        {"sku": "mug", "quantity": 2, "unit_price": 1250},
        {"sku": "tea", "quantity": 3, "unit_price": 499}], "currency": "eur"})
    assert r.status_code == 201, r.text
    order = r.json()
    assert isinstance(order["id"], int) and order["id"] > 0
    assert order["status"] == "pending" and order["currency"] == "eur"
    assert order["amount"] == 2 * 1250 + 3 * 499
    assert order["amount_refunded"] == 0
    assert order["payment_intent"] is None and order["last_payment_error"] is None
    assert [i["sku"] for i in order["items"]] == ["mug", "tea"]


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-order-shape")
def test_order_items_are_echoed_as_given():
    """The Order's items are the ones sent, in order, with their sku, quantity and
    unit_price; the currency defaults to usd."""
    me = shopper()
    items = [{"sku": "kettle-XL", "quantity": 1, "unit_price": 3999},
             {"sku": "filter", "quantity": 12, "unit_price": 150},
             {"sku": "beans", "quantity": 3, "unit_price": 1275}]
    r = api("POST", "/orders", me, json={"items": items})
    assert r.status_code == 201, r.text
    assert r.json()["items"] == items and r.json()["currency"] == "usd"
    assert r.json()["amount"] == 3999 + 12 * 150 + 3 * 1275


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-order-list")
@pytest.mark.level("mid")
def test_orders_are_read_back_and_listed_by_id():
    """GET /orders/{id} returns the order; GET /orders lists the caller's by ascending id,
    with the currency defaulting to usd."""
    me = shopper()
    first, second = make_order(me), make_order(me)
    assert first["currency"] == "usd"
    r = api("GET", f"/orders/{first['id']}", me)
    assert r.status_code == 200 and r.json() == first
    r = api("GET", "/orders", me)
    assert r.status_code == 200
    assert [o["id"] for o in r.json()["orders"]] == [first["id"], second["id"]]


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-order-list")
@pytest.mark.level("mid")
def test_listed_orders_are_whole_orders():
    """Each entry of GET /orders is the whole Order, equal to what GET /orders/{id} gives
    (a paid one included)."""
    me = shopper()
    pending, paid = make_order(me), paid_order(me)
    r = api("GET", "/orders", me)
    assert r.status_code == 200, r.text
    assert r.json()["orders"] == [api("GET", f"/orders/{o['id']}", me).json()
                                  for o in (pending, paid)]
    assert r.json()["orders"][1]["status"] == "paid"


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-order-list")
def test_a_new_shopper_has_no_orders():
    """GET /orders for a shopper who never ordered answers 200 with {"orders": []}."""
    r = api("GET", "/orders", shopper())
    assert r.status_code == 200 and r.json() == {"orders": []}, r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-unknown-id")
@pytest.mark.parametrize("method,path,body", [
    pytest.param("GET", f"/orders/{MISSING}", None, id="read"),
    pytest.param("POST", f"/orders/{MISSING}/pay", {"payment_method": "pm_card_visa"},
                 id="pay"),
    pytest.param("POST", f"/orders/{MISSING}/refunds", {"amount": 100}, id="refund"),
])
def test_unknown_order_is_404(method, path, body):
    """An id that was never created answers 404 with a JSON detail."""
    r = api(method, path, shopper(), json=body)
    assert r.status_code == 404, f"{method} {path}: {r.status_code} {r.text}"
    assert isinstance(r.json().get("detail"), str)


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-unknown-route")
@pytest.mark.parametrize("path", [
    pytest.param("/no-such-route", id="top-level", marks=pytest.mark.visibility("public")),
    pytest.param("/orders/1/receipt", id="under-orders"),
])
def test_unknown_route_is_404(path):
    """A route the API does not have answers 404."""
    r = api("GET", path, shopper())
    assert r.status_code == 404, f"GET {path}: {r.status_code} {r.text}"


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-pay-succeeds")
@pytest.mark.level("mid")
def test_pay_answers_the_paid_order():
    """A payment that goes through answers 200 with the order paid by a pi_ PaymentIntent."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], "pm_card_mastercard")
    assert r.status_code == 200, r.text
    paid = r.json()
    assert paid["id"] == order["id"] and paid["status"] == "paid"
    assert paid["payment_intent"].startswith("pi_")
    assert paid["amount_refunded"] == 0 and paid["last_payment_error"] is None


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-refund-answer")
@pytest.mark.level("mid")
def test_refund_answers_the_refund():
    """POST /orders/{id}/refunds answers 201 with the provider's refund id and status."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 500})
    assert r.status_code == 201, r.text
    refund = r.json()
    assert refund["id"].startswith("re_") and refund["order_id"] == order["id"]
    assert refund["amount"] == 500 and refund["status"] == "succeeded"


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-webhook-register")
def test_webhook_registration_answers_its_endpoint():
    """POST /webhooks/endpoint answers 201 with the endpoint's id (we_), url and
    enabled_events, and no secret in any field."""
    r = register_webhooks()
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["id"].startswith("we_") and body["url"] == WEBHOOK_URL
    assert set(body["enabled_events"]) >= {"payment_intent.succeeded", "charge.refunded"}
    assert "secret" not in body and "whsec_" not in r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-webhook-ack")
def test_a_verified_webhook_answers_received(webhook_secret):
    """A correctly signed event answers 200 with {"received": true}."""
    order = make_order(shopper())
    payload = intent_event(order)
    r = deliver(payload, sign(payload, webhook_secret))
    assert r.status_code == 200 and r.json() == {"received": True}, r.text


def _paid_again(me):
    order = paid_order(me)
    return "POST", f"/orders/{order['id']}/pay", {"payment_method": "pm_card_visa"}, me


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-error-body")
@pytest.mark.tier("evolved-r1")
@pytest.mark.parametrize("status,make", [
    pytest.param(401, lambda me: ("GET", "/orders", None, None), id="401"),
    pytest.param(422, lambda me: ("POST", "/orders", {"items": []}, me), id="422",
                 marks=pytest.mark.visibility("public")),
    pytest.param(404, lambda me: ("GET", f"/orders/{MISSING}", None, me), id="404"),
    pytest.param(409, _paid_again, id="409"),
])
def test_error_bodies_are_json_with_a_detail_string(status, make):
    """Every error answer is a JSON object with a non-empty `detail` string."""
    method, path, body, headers = make(shopper())
    r = api(method, path, headers, json=body)
    assert r.status_code == status, f"{method} {path}: {r.status_code} {r.text}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    detail = r.json().get("detail")
    assert isinstance(detail, str) and detail, r.text


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-extra-fields")
@pytest.mark.tier("evolved-r1")
def test_unknown_fields_in_an_order_are_ignored():
    """Unknown fields, at the top and in an item, are ignored: the order is created with
    the amount its items make."""
    me = shopper()
    r = api("POST", "/orders", me, json={
        "items": [{"sku": "mug", "quantity": 2, "unit_price": 700, "color": "blue"}],
        "coupon": "HALF-OFF", "amount": 1, "status": "paid"})
    assert r.status_code == 201, r.text
    order = r.json()
    assert (order["amount"], order["status"]) == (1400, "pending"), order

