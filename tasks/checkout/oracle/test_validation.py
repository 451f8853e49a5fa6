"""Validation: bad input is 422 and never reaches the provider; declines are 402."""

import pytest
from conftest import api, get_order, intents_for, make_order, paid_order, pay, shopper

BAD_ORDERS = [
    {},
    {"items": []},
    {"items": "mug"},
    {"items": [{"sku": "", "quantity": 1, "unit_price": 900}]},
    {"items": [{"sku": "mug", "quantity": 0, "unit_price": 900}]},
    {"items": [{"sku": "mug", "quantity": 101, "unit_price": 900}]},
    {"items": [{"sku": "mug", "quantity": True, "unit_price": 900}]},
    {"items": [{"sku": "mug", "quantity": 1, "unit_price": "900"}]},
    {"items": [{"sku": "mug", "quantity": 1, "unit_price": 0}]},
    {"items": [{"sku": "mug", "quantity": 1, "unit_price": 900}], "currency": "btc"},
    {"items": [{"sku": "gum", "quantity": 1, "unit_price": 49}]},  # below the minimum charge
]


@pytest.mark.category("validation")
def test_invalid_orders_are_422(payment):
    """Every order that breaks a rule of POST /orders answers 422, creates nothing and
    calls no provider."""
    me = shopper()
    for body in BAD_ORDERS:
        r = api("POST", "/orders", me, json=body)
        assert r.status_code == 422, f"{body}: {r.status_code} {r.text}"
    r = api("POST", "/orders", {**me, "Content-Type": "application/json"}, data="{not json")
    assert r.status_code == 422, f"malformed JSON: {r.status_code}"
    assert api("GET", "/orders", me).json()["orders"] == []
    assert payment.requests() == []


@pytest.mark.category("validation")
def test_pay_needs_a_payment_method(payment):
    """POST /orders/{id}/pay without a non-empty payment_method string is 422, with no
    provider call."""
    me = shopper()
    order = make_order(me)
    for body in ({}, {"payment_method": ""}, {"payment_method": 42}):
        r = api("POST", f"/orders/{order['id']}/pay", me, json=body)
        assert r.status_code == 422, f"{body}: {r.status_code}"
    assert payment.requests(method="POST") == []
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("validation")
def test_declined_card_is_402_and_the_order_stays_unpaid():
    """A generic decline answers 402 with the provider's code and decline_code; the order
    stays pending and records the decline."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], "pm_card_chargeDeclined")
    assert r.status_code == 402, r.text
    body = r.json()
    assert body["code"] == "card_declined" and body["decline_code"] == "generic_decline"
    assert isinstance(body["detail"], str) and body["detail"]
    seen = get_order(me, order["id"])
    assert seen["status"] == "pending" and seen["payment_intent"] is None
    assert seen["last_payment_error"]["decline_code"] == "generic_decline"
    assert [pi["status"] for pi in intents_for(order["id"])] == ["requires_payment_method"]


@pytest.mark.category("validation")
def test_insufficient_funds_is_402_with_its_decline_code():
    """pm_card_chargeDeclinedInsufficientFunds answers 402, decline_code
    insufficient_funds, and the order is not paid."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], "pm_card_chargeDeclinedInsufficientFunds")
    assert r.status_code == 402, r.text
    assert r.json()["decline_code"] == "insufficient_funds"
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("validation")
def test_unknown_payment_method_is_422():
    """A payment method the provider does not know answers 422; the order stays pending."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], "pm_does_not_exist")
    assert r.status_code == 422, r.text
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("validation")
def test_refund_above_what_remains_is_422_before_the_provider(payment):
    """The refund ceiling: more than amount - amount_refunded is 422 and no refund call
    reaches the provider; the order is unchanged."""
    me = shopper()
    order = paid_order(me)  # 2500
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 2501})
    assert r.status_code == 422, r.text
    assert api("POST", f"/orders/{order['id']}/refunds", me,
               json={"amount": 2000}).status_code == 201
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 501})
    assert r.status_code == 422, r.text
    refunds = payment.requests(method="POST", path="/v1/refunds")
    assert len(refunds) == 1, f"{len(refunds)} refund calls reached the provider"
    assert get_order(me, order["id"])["amount_refunded"] == 2000


@pytest.mark.category("validation")
def test_refund_amount_must_be_a_positive_integer(payment):
    """amount 0, negative, a string, a float or a boolean is 422 with no provider call."""
    me = shopper()
    order = paid_order(me)
    for amount in (0, -5, "500", 5.5, True):
        r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": amount})
        assert r.status_code == 422, f"{amount!r}: {r.status_code}"
    assert payment.requests(method="POST", path="/v1/refunds") == []
    assert get_order(me, order["id"])["status"] == "paid"
