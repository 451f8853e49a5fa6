"""API surface: the endpoints answer with the documented shapes."""

import pytest
from conftest import api, make_order, paid_order, pay, shopper


@pytest.mark.category("api_surface")
def test_health_answers_ok():
    """GET /health needs no credentials and answers {"status": "ok"}."""
    r = api("GET", "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


@pytest.mark.category("api_surface")
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
def test_unknown_order_is_404():
    """An id that was never created answers 404 with a JSON detail."""
    me = shopper()
    for method, path, body in (("GET", "/orders/987654321", None),
                               ("POST", "/orders/987654321/pay",
                                {"payment_method": "pm_card_visa"})):
        r = api(method, path, me, json=body)
        assert r.status_code == 404, f"{method} {path}: {r.status_code}"
        assert isinstance(r.json().get("detail"), str)


@pytest.mark.category("api_surface")
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
def test_refund_answers_the_refund():
    """POST /orders/{id}/refunds answers 201 with the provider's refund id and status."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 500})
    assert r.status_code == 201, r.text
    refund = r.json()
    assert refund["id"].startswith("re_") and refund["order_id"] == order["id"]
    assert refund["amount"] == 500 and refund["status"] == "succeeded"
