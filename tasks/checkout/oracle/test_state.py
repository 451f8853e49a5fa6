"""State: the order's status follows payments and refunds, and a paid order is never
charged again."""

import threading

import pytest
from conftest import (api, get_order, header, intents_for, make_order, paid_order, pay,
                      shopper)


@pytest.mark.category("state")
def test_paying_twice_is_409_and_charges_once(payment):
    """A client retrying a payment that went through gets 409 and is not charged again:
    one PaymentIntent at the provider, one create call."""
    me = shopper()
    order = paid_order(me)
    r = pay(me, order["id"])
    assert r.status_code == 409, r.text
    assert get_order(me, order["id"])["payment_intent"] == order["payment_intent"]
    assert len(payment.requests(method="POST", path="/v1/payment_intents")) == 1
    succeeded = [pi for pi in intents_for(order["id"]) if pi["status"] == "succeeded"]
    assert [pi["id"] for pi in succeeded] == [order["payment_intent"]]


@pytest.mark.category("state")
def test_declined_order_can_be_paid_with_another_card(payment):
    """After a decline the order can be paid with another card: a new call with a new
    Idempotency-Key, and exactly one succeeded PaymentIntent."""
    me = shopper()
    order = make_order(me)
    assert pay(me, order["id"], "pm_card_chargeDeclinedExpiredCard").status_code == 402
    r = pay(me, order["id"], "pm_card_visa")
    assert r.status_code == 200, r.text
    paid = r.json()
    assert paid["status"] == "paid" and paid["last_payment_error"] is None
    calls = payment.requests(method="POST", path="/v1/payment_intents")
    keys = [header(c, "Idempotency-Key") for c in calls]
    assert len(calls) == 2 and all(keys) and keys[0] != keys[1], keys
    statuses = sorted(pi["status"] for pi in intents_for(order["id"]))
    assert statuses == ["requires_payment_method", "succeeded"]


@pytest.mark.category("state")
def test_partial_then_full_refund_moves_the_status():
    """paid -> partially_refunded -> refunded; a refunded order refuses more refunds (409)."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 1000})
    assert r.status_code == 201, r.text
    seen = get_order(me, order["id"])
    assert (seen["status"], seen["amount_refunded"]) == ("partially_refunded", 1000)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={})
    assert r.status_code == 201 and r.json()["amount"] == 1500, r.text
    seen = get_order(me, order["id"])
    assert (seen["status"], seen["amount_refunded"]) == ("refunded", 2500)
    assert api("POST", f"/orders/{order['id']}/refunds", me,
               json={"amount": 1}).status_code == 409
    assert pay(me, order["id"]).status_code == 409


@pytest.mark.category("state")
def test_a_pending_order_cannot_be_refunded(payment):
    """Refunding an order that was never paid is 409 with no provider call."""
    me = shopper()
    order = make_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 100})
    assert r.status_code == 409, r.text
    assert payment.requests(method="POST", path="/v1/refunds") == []


@pytest.mark.category("state")
def test_concurrent_payments_of_one_order_charge_once():
    """Four pay requests for one order at once: one 200, the others 409, and a single
    succeeded PaymentIntent at the provider."""
    me = shopper()
    order = make_order(me)
    barrier = threading.Barrier(4)
    codes: list[int] = []

    def one() -> None:
        barrier.wait(timeout=10)
        codes.append(pay(me, order["id"]).status_code)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(codes) == [200, 409, 409, 409], codes
    succeeded = [pi for pi in intents_for(order["id"]) if pi["status"] == "succeeded"]
    assert len(succeeded) == 1
    assert get_order(me, order["id"])["payment_intent"] == succeeded[0]["id"]
