"""Workflow: payments and refunds survive a provider that fails or cuts the connection
after acting, and webhooks keep orders in step with what happened at the provider."""

import pytest
from conftest import (api, delivered, eventually, get_order, header, intents_for, listed,
                      make_order, paid_order, pay, provider_get, provider_post, shopper)

NEVER = {"automatic_payment_methods[enabled]": "true",
         "automatic_payment_methods[allow_redirects]": "never"}


@pytest.mark.category("workflow")
def test_a_dropped_payment_is_retried_and_charged_once(faults):
    """The provider charges, then the connection drops before the answer: the service
    retries with the same Idempotency-Key, answers 200, and the card is charged once."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", drop=True, times=1)
    r = pay(me, order["id"])
    assert r.status_code == 200, r.text
    calls = faults.requests(method="POST", path="/v1/payment_intents")
    assert len(calls) >= 2 and calls[0]["fault"] == "drop"
    keys = {header(c, "Idempotency-Key") for c in calls}
    assert len(keys) == 1 and None not in keys, f"retries must reuse one key: {keys}"
    intents = intents_for(order["id"])
    assert [pi["status"] for pi in intents] == ["succeeded"], "charged more than once"
    assert r.json()["payment_intent"] == intents[0]["id"]


@pytest.mark.category("workflow")
def test_provider_errors_are_retried(faults):
    """Two 500 answers in a row, then the provider works: the payment still goes through."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", status=500, times=2)
    r = pay(me, order["id"])
    assert r.status_code == 200, r.text
    assert len(faults.requests(method="POST", path="/v1/payment_intents")) == 3
    assert len(intents_for(order["id"])) == 1


@pytest.mark.category("workflow")
def test_an_unreachable_provider_is_502_and_the_order_stays_pending(faults):
    """Every attempt answered 503: at least 3 attempts, then 502; the order is still
    pending and can be paid once the provider is back."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", status=503)
    r = pay(me, order["id"])
    assert r.status_code == 502, r.text
    assert len(faults.requests(method="POST", path="/v1/payment_intents")) >= 3
    assert get_order(me, order["id"])["status"] == "pending"
    faults.clear_faults()
    assert pay(me, order["id"]).status_code == 200
    assert len(intents_for(order["id"])) == 1


@pytest.mark.category("workflow")
def test_a_dropped_refund_is_retried_and_refunded_once(faults):
    """The provider refunds, then drops the connection: the service retries with the same
    key, answers 201, and exactly one refund exists."""
    me = shopper()
    order = paid_order(me)
    faults.fault("/v1/refunds", "POST", drop=True, times=1)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 800})
    assert r.status_code == 201, r.text
    calls = faults.requests(method="POST", path="/v1/refunds")
    assert len(calls) >= 2 and len({header(c, "Idempotency-Key") for c in calls}) == 1
    refunds = listed("/v1/refunds", payment_intent=order["payment_intent"])
    assert [x["amount"] for x in refunds] == [800], "refunded more than once"
    assert get_order(me, order["id"])["amount_refunded"] == 800


@pytest.mark.category("workflow")
def test_an_order_paid_at_the_provider_becomes_paid_by_webhook(payment, webhook_secret):
    """A PaymentIntent confirmed at the provider directly (a hosted payment page) with the
    order's metadata: its payment_intent.succeeded webhook marks the order paid."""
    me = shopper()
    order = make_order(me)
    r = provider_post("/v1/payment_intents", {
        "amount": order["amount"], "currency": order["currency"],
        "payment_method": "pm_card_visa", "confirm": "true",
        "metadata[order_id]": str(order["id"]), **NEVER})
    assert r.status_code == 200, r.text
    pi = r.json()["id"]
    seen = eventually(lambda: (o := get_order(me, order["id"]))["status"] == "paid" and o,
                      "the order becomes paid")
    assert seen["payment_intent"] == pi
    assert all(d["status"] == 200 for d in delivered(payment, "payment_intent.succeeded", pi))


@pytest.mark.category("workflow")
def test_a_mismatched_payment_webhook_changes_nothing(payment, webhook_secret):
    """A succeeded PaymentIntent naming the order but for another amount is acknowledged
    (200) and the order stays pending."""
    me = shopper()
    order = make_order(me)
    r = provider_post("/v1/payment_intents", {
        "amount": order["amount"] - 100, "currency": order["currency"],
        "payment_method": "pm_card_visa", "confirm": "true",
        "metadata[order_id]": str(order["id"]), **NEVER})
    assert r.status_code == 200, r.text
    done = delivered(payment, "payment_intent.succeeded", r.json()["id"])
    assert all(d["status"] == 200 for d in done), done
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("workflow")
def test_a_refund_made_at_the_provider_reaches_the_order(payment, webhook_secret):
    """A refund made at the provider directly: its charge.refunded webhook brings the
    order's amount_refunded and status up to date."""
    me = shopper()
    order = paid_order(me)
    r = provider_post("/v1/refunds", {"payment_intent": order["payment_intent"],
                                      "amount": "600"})
    assert r.status_code == 200, r.text
    seen = eventually(lambda: (o := get_order(me, order["id"]))["amount_refunded"] == 600
                      and o, "amount_refunded becomes 600")
    assert seen["status"] == "partially_refunded"
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 1901})
    assert r.status_code == 422, "the ceiling counts refunds made at the provider"


@pytest.mark.category("workflow")
def test_a_duplicated_webhook_is_applied_once(payment, webhook_secret, webhook_faults):
    """The provider delivers one charge.refunded event twice: the order counts the refund
    once."""
    me = shopper()
    order = paid_order(me)
    webhook_faults({"kind": "duplicate", "times": 1, "type": "charge.refunded"})
    r = provider_post("/v1/refunds", {"payment_intent": order["payment_intent"],
                                      "amount": "300"})
    assert r.status_code == 200, r.text
    pi = provider_get(f"/v1/payment_intents/{order['payment_intent']}")
    done = delivered(payment, "charge.refunded", pi["latest_charge"], count=2)
    assert [d["status"] for d in done] == [200, 200] and done[1]["duplicate"]
    seen = get_order(me, order["id"])
    assert (seen["amount_refunded"], seen["status"]) == (300, "partially_refunded")
