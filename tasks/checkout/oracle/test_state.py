"""State: the order's status follows payments and refunds, ids are never reused, amounts
agree with the provider's ledger, and a paid order is never charged again."""

import threading

import pytest
from conftest import (api, get_order, header, intents_for, listed, make_order,
                      paid_order, pay, posts, provider_get, shopper)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"),
              pytest.mark.level("mid")]

R1 = pytest.mark.tier("evolved-r1")


def _together(count: int, call, deadline: float = 15.0) -> list:
    """Run ``call(i)`` in ``count`` threads released at once; their results, in order."""
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def one(i: int) -> None:
        barrier.wait(timeout=deadline)
        results[i] = call(i)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=deadline)
    assert not any(t.is_alive() for t in threads), f"requests still running after {deadline} s"
    return results


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-pay-once")
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
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-pay-decline")
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
@pytest.mark.requirement("R-pay-decline")
def test_a_decline_is_recorded_as_the_provider_gave_it():
    """last_payment_error holds the decline's code, decline_code and message, the same the
    402 answer carried."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], "pm_card_chargeDeclinedInsufficientFunds")
    assert r.status_code == 402, r.text
    error = get_order(me, order["id"])["last_payment_error"]
    assert error == {"code": "card_declined", "decline_code": "insufficient_funds",
                     "message": r.json()["detail"]}, error
    assert "insufficient funds" in error["message"]


@pytest.mark.category("state")
@pytest.mark.requirement("R-pay-decline")
@pytest.mark.tier("evolved-r2")
def test_a_later_decline_replaces_the_recorded_one():
    """Two declines in a row: last_payment_error records the last one."""
    me = shopper()
    order = make_order(me)
    assert pay(me, order["id"], "pm_card_chargeDeclinedInsufficientFunds").status_code == 402
    assert pay(me, order["id"], "pm_card_chargeDeclinedExpiredCard").status_code == 402
    seen = get_order(me, order["id"])
    assert seen["status"] == "pending"
    assert seen["last_payment_error"]["decline_code"] == "expired_card", seen


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-refund-status")
@pytest.mark.level("root")
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
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-ledger")
@pytest.mark.tier("evolved-r1")
def test_several_refunds_add_up_here_and_at_the_provider():
    """Three refunds of 500: amount_refunded is 1500, and so is the provider's charge's;
    the provider holds three refunds."""
    me = shopper()
    order = paid_order(me)
    for _ in range(3):
        r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 500})
        assert r.status_code == 201, r.text
    seen = get_order(me, order["id"])
    assert (seen["status"], seen["amount_refunded"]) == ("partially_refunded", 1500)
    pi = provider_get(f"/v1/payment_intents/{order['payment_intent']}")
    charge = provider_get(f"/v1/charges/{pi['latest_charge']}")
    assert charge["amount_refunded"] == 1500, "the provider refunded another amount"
    refunds = listed("/v1/refunds", payment_intent=order["payment_intent"])
    assert [x["amount"] for x in refunds] == [500, 500, 500]


@pytest.mark.category("state")
@pytest.mark.requirement("R-status-guards")
@pytest.mark.parametrize("refunded,action", [
    pytest.param(1000, "pay", id="pay-a-partially-refunded-order", marks=R1),
    pytest.param(2500, "pay", id="pay-a-refunded-order", marks=R1),
    pytest.param(2500, "refunds", id="refund-a-refunded-order"),
])
def test_an_action_the_status_refuses_is_409(payment, refunded, action):
    """Paying anything but a pending order, or refunding a refunded one, is 409 with no
    provider call; the order is unchanged."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": refunded})
    assert r.status_code == 201, f"setup: refund -> {r.status_code} {r.text}"
    before, seen = posts(payment), get_order(me, order["id"])
    body = {"payment_method": "pm_card_visa"} if action == "pay" else {"amount": 1}
    r = api("POST", f"/orders/{order['id']}/{action}", me, json=body)
    assert r.status_code == 409, f"{action} on {seen['status']}: {r.status_code} {r.text}"
    assert posts(payment) == before, "a refused action reached the provider"
    assert get_order(me, order["id"]) == seen


@pytest.mark.category("state")
@pytest.mark.requirement("R-pay-succeeds")
def test_the_paid_order_is_stored_as_answered():
    """The Order a successful payment answers is the one GET /orders/{id} then gives."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"])
    assert r.status_code == 200, r.text
    assert get_order(me, order["id"]) == r.json()


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-order-ids")
@pytest.mark.tier("evolved-r1")
def test_ids_are_never_reused():
    """Orders of two shoppers made one after another get distinct ids, each greater than
    the last; each shopper lists exactly theirs."""
    alice, bob = shopper(), shopper()
    made = [make_order(who)["id"] for who in (alice, bob, alice, bob, alice)]
    assert made == sorted(set(made)), f"ids must be new and ascending: {made}"
    assert [o["id"] for o in api("GET", "/orders", alice).json()["orders"]] == made[0::2]
    assert [o["id"] for o in api("GET", "/orders", bob).json()["orders"]] == made[1::2]


@pytest.mark.category("state")
@pytest.mark.requirement("R-order-ids")
@pytest.mark.tier("evolved-r2")
def test_parallel_creates_get_distinct_ids():
    """Twelve POST /orders at once by one shopper: all 201 with twelve distinct ids, and
    GET /orders lists exactly those, by ascending id."""
    me = shopper()
    answers = _together(12, lambda i: api("POST", "/orders", me, json={
        "items": [{"sku": f"sku-{i}", "quantity": 1, "unit_price": 100 + i}]}))
    assert [r.status_code for r in answers] == [201] * 12, [r.text for r in answers]
    ids = [r.json()["id"] for r in answers]
    assert len(set(ids)) == 12, f"ids were reused: {ids}"
    for i, r in enumerate(answers):
        assert r.json()["amount"] == 100 + i, "an order got another request's items"
    assert [o["id"] for o in api("GET", "/orders", me).json()["orders"]] == sorted(ids)


@pytest.mark.category("state")
@pytest.mark.requirement("R-refund-status")
@pytest.mark.level("leaf")
def test_a_pending_order_cannot_be_refunded(payment):
    """Refunding an order that was never paid is 409 with no provider call."""
    me = shopper()
    order = make_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 100})
    assert r.status_code == 409, r.text
    assert payment.requests(method="POST", path="/v1/refunds") == []


@pytest.mark.category("state")
@pytest.mark.requirement("R-pay-once")
def test_concurrent_payments_of_one_order_charge_once():
    """Four pay requests for one order at once: one 200, the others 409, and a single
    succeeded PaymentIntent at the provider."""
    me = shopper()
    order = make_order(me)
    codes = [r.status_code for r in _together(4, lambda i: pay(me, order["id"]))]
    assert sorted(codes) == [200, 409, 409, 409], codes
    succeeded = [pi for pi in intents_for(order["id"]) if pi["status"] == "succeeded"]
    assert len(succeeded) == 1
    assert get_order(me, order["id"])["payment_intent"] == succeeded[0]["id"]


@pytest.mark.category("state")
@pytest.mark.requirement("R-refund-ceiling")
@pytest.mark.tier("evolved-r2")
def test_concurrent_refunds_never_exceed_the_amount():
    """Two refunds of 1500 on a 2500 order at once: one 201, one 422; 1500 refunded here
    and at the provider."""
    me = shopper()
    order = paid_order(me)
    answers = _together(2, lambda i: api("POST", f"/orders/{order['id']}/refunds", me,
                                         json={"amount": 1500}))
    assert sorted(r.status_code for r in answers) == [201, 422], [r.text for r in answers]
    assert get_order(me, order["id"])["amount_refunded"] == 1500
    refunds = listed("/v1/refunds", payment_intent=order["payment_intent"])
    assert sum(x["amount"] for x in refunds) == 1500

