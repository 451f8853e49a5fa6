"""Workflow: payments and refunds survive a provider that fails or cuts the connection
after acting, and webhooks keep orders in step with what happened at the provider."""

import pytest
from conftest import (WEBHOOK_URL, api, charge_event, delivered, deliver, event, eventually,
                      get_order, header, intent_event, intents_for, listed, make_order,
                      paid_order, pay, keep_only_endpoint, provider_get, provider_post,
                      register_webhooks, shopper,
                      sign)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"),
              pytest.mark.level("mid")]

NEVER = {"automatic_payment_methods[enabled]": "true",
         "automatic_payment_methods[allow_redirects]": "never"}
SLOW = 10.0  # seconds a call the service must retry may take (pauses between attempts)


def refund(me, order, amount=None):
    body = {} if amount is None else {"amount": amount}
    return api("POST", f"/orders/{order['id']}/refunds", me, json=body, timeout=SLOW)


def pay_slowly(me, order, method="pm_card_visa"):
    return api("POST", f"/orders/{order['id']}/pay", me, json={"payment_method": method},
               timeout=SLOW)


def confirm_at_provider(order, amount=None, currency=None) -> str:
    """A PaymentIntent confirmed at the provider directly, naming ``order``; its id."""
    r = provider_post("/v1/payment_intents", {
        "amount": order["amount"] if amount is None else amount,
        "currency": currency or order["currency"], "payment_method": "pm_card_visa",
        "confirm": "true", "metadata[order_id]": str(order["id"]), **NEVER})
    assert r.status_code == 200, f"setup: provider payment -> {r.status_code} {r.text}"
    return r.json()["id"]


# -- retries ------------------------------------------------------------------------------


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-retry")
def test_a_dropped_payment_is_retried_and_charged_once(faults):
    """The provider charges, then the connection drops before the answer: the service
    retries with the same Idempotency-Key, answers 200, and the card is charged once."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", drop=True, times=1)
    r = pay_slowly(me, order)
    assert r.status_code == 200, r.text
    calls = faults.requests(method="POST", path="/v1/payment_intents")
    assert len(calls) >= 2 and calls[0]["fault"] == "drop"
    keys = {header(c, "Idempotency-Key") for c in calls}
    assert len(keys) == 1 and None not in keys, f"retries must reuse one key: {keys}"
    intents = intents_for(order["id"])
    assert [pi["status"] for pi in intents] == ["succeeded"], "charged more than once"
    assert r.json()["payment_intent"] == intents[0]["id"]


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-retry")
def test_provider_errors_are_retried(faults):
    """Two 500 answers in a row, then the provider works: the payment still goes through."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", status=500, times=2)
    r = pay_slowly(me, order)
    assert r.status_code == 200, r.text
    assert len(faults.requests(method="POST", path="/v1/payment_intents")) == 3
    assert len(intents_for(order["id"])) == 1


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-retry")
@pytest.mark.tier("evolved-r2")
def test_a_half_sent_answer_is_retried_and_charged_once(faults):
    """The provider charges, then sends half its JSON answer: no usable answer, so the
    service retries with the same key and the card is charged once."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", malformed=True, times=1)
    r = pay_slowly(me, order)
    assert r.status_code == 200, r.text
    calls = faults.requests(method="POST", path="/v1/payment_intents")
    assert len(calls) >= 2 and len({header(c, "Idempotency-Key") for c in calls}) == 1
    assert [pi["status"] for pi in intents_for(order["id"])] == ["succeeded"]


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-502")
def test_an_unreachable_provider_is_502_and_the_order_stays_pending(faults):
    """Every attempt answered 503: at least 3 attempts, then 502; the order is still
    pending and can be paid once the provider is back."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", status=503)
    r = pay_slowly(me, order)
    assert r.status_code == 502, r.text
    assert len(faults.requests(method="POST", path="/v1/payment_intents")) >= 3
    assert get_order(me, order["id"])["status"] == "pending"
    faults.clear_faults()
    assert pay_slowly(me, order).status_code == 200
    assert len(intents_for(order["id"])) == 1


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-idempotency-key")
@pytest.mark.tier("evolved-r2")
def test_every_attempt_of_one_payment_carries_one_key(faults):
    """When every attempt fails, all of them (at least 3) carry the same Idempotency-Key:
    they are one logical call."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", status=500)
    assert pay_slowly(me, order).status_code == 502
    keys = [header(c, "Idempotency-Key")
            for c in faults.requests(method="POST", path="/v1/payment_intents")]
    assert len(keys) >= 3 and len(set(keys)) == 1 and keys[0], keys


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-retry")
@pytest.mark.tier("evolved-r2")
def test_a_dropped_decline_is_still_a_decline(faults):
    """The provider declines, then drops the connection: the retry gets the stored decline
    back, so the answer is 402, the order stays pending and nothing is charged."""
    me = shopper()
    order = make_order(me)
    faults.fault("/v1/payment_intents", "POST", drop=True, times=1)
    r = pay_slowly(me, order, "pm_card_chargeDeclined")
    assert r.status_code == 402, r.text
    seen = get_order(me, order["id"])
    assert seen["status"] == "pending" and seen["last_payment_error"]["code"] == "card_declined"
    assert [pi["status"] for pi in intents_for(order["id"])] == ["requires_payment_method"]


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-retry")
def test_a_dropped_refund_is_retried_and_refunded_once(faults):
    """The provider refunds, then drops the connection: the service retries with the same
    key, answers 201, and exactly one refund exists."""
    me = shopper()
    order = paid_order(me)
    faults.fault("/v1/refunds", "POST", drop=True, times=1)
    r = refund(me, order, 800)
    assert r.status_code == 201, r.text
    calls = faults.requests(method="POST", path="/v1/refunds")
    assert len(calls) >= 2 and len({header(c, "Idempotency-Key") for c in calls}) == 1
    refunds = listed("/v1/refunds", payment_intent=order["payment_intent"])
    assert [x["amount"] for x in refunds] == [800], "refunded more than once"
    assert get_order(me, order["id"])["amount_refunded"] == 800


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-retry")
def test_refund_provider_errors_are_retried(faults):
    """Two 500 answers to a refund, then the provider works: 201 and one refund."""
    me = shopper()
    order = paid_order(me)
    faults.fault("/v1/refunds", "POST", status=500, times=2)
    r = refund(me, order, 600)
    assert r.status_code == 201, r.text
    assert len(faults.requests(method="POST", path="/v1/refunds")) == 3
    assert [x["amount"] for x in listed("/v1/refunds",
                                        payment_intent=order["payment_intent"])] == [600]


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-502")
@pytest.mark.tier("evolved-r2")
def test_an_unreachable_provider_on_refund_is_502_and_nothing_changes(faults):
    """Every refund attempt answered 503: at least 3 attempts, then 502; the order is as
    it was, and the refund goes through once the provider is back."""
    me = shopper()
    order = paid_order(me)
    faults.fault("/v1/refunds", "POST", status=503)
    r = refund(me, order, 500)
    assert r.status_code == 502, r.text
    assert len(faults.requests(method="POST", path="/v1/refunds")) >= 3
    assert get_order(me, order["id"]) == order
    faults.clear_faults()
    assert refund(me, order, 500).status_code == 201
    assert get_order(me, order["id"])["amount_refunded"] == 500


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-retry")
@pytest.mark.tier("evolved-r2")
def test_a_dropped_registration_leaves_one_endpoint(faults):
    """The provider creates the webhook endpoint, then drops the connection: the retry
    (same key) gets it back, so the provider holds exactly the endpoint the service
    answered."""
    faults.fault("/v1/webhook_endpoints", "POST", drop=True, times=1)
    r = api("POST", "/webhooks/endpoint", {"X-Admin-Key": "checkout-admin-key"},
            json={"url": WEBHOOK_URL}, timeout=SLOW)
    answered = r.json().get("id") if r.status_code == 201 else None
    try:
        assert r.status_code == 201, r.text
        assert [e["id"] for e in listed("/v1/webhook_endpoints")] == [answered]
    finally:  # a second endpoint would sign every later event twice: leave only one
        faults.clear_faults()
        again = register_webhooks()
        if again.status_code == 201:
            keep_only_endpoint(again.json()["id"])


# -- webhooks -----------------------------------------------------------------------------


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-webhook-paid")
def test_an_order_paid_at_the_provider_becomes_paid_by_webhook(payment, webhook_secret):
    """A PaymentIntent confirmed at the provider directly (a hosted payment page) with the
    order's metadata: its payment_intent.succeeded webhook marks the order paid."""
    me = shopper()
    order = make_order(me)
    pi = confirm_at_provider(order)
    seen = eventually(lambda: (o := get_order(me, order["id"]))["status"] == "paid" and o,
                      "the order becomes paid")
    assert seen["payment_intent"] == pi
    assert all(d["status"] == 200 for d in delivered(payment, "payment_intent.succeeded", pi))


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-paid")
def test_a_mismatched_payment_webhook_changes_nothing(payment, webhook_secret):
    """A succeeded PaymentIntent naming the order but for another amount is acknowledged
    (200) and the order stays pending."""
    me = shopper()
    order = make_order(me)
    pi = confirm_at_provider(order, amount=order["amount"] - 100)
    done = delivered(payment, "payment_intent.succeeded", pi)
    assert all(d["status"] == 200 for d in done), done
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-paid")
@pytest.mark.tier("evolved-r1")
@pytest.mark.level("leaf")
def test_a_payment_event_in_another_currency_changes_nothing(webhook_secret):
    """payment_intent.succeeded for the order's amount but another currency: acknowledged,
    the order stays pending."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order, currency="eur")
    assert deliver(payload, sign(payload, webhook_secret)).status_code == 200
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-paid")
@pytest.mark.tier("evolved-r2")
def test_a_payment_event_for_a_paid_order_changes_nothing(webhook_secret):
    """payment_intent.succeeded about an order already paid (another intent): acknowledged,
    the order keeps the PaymentIntent that paid it."""
    me = shopper()
    order = paid_order(me)
    payload = intent_event(order)
    assert deliver(payload, sign(payload, webhook_secret)).status_code == 200
    assert get_order(me, order["id"]) == order


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-ignored")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("kind,subject", [
    pytest.param("payment_intent.succeeded",
                 {"id": "pi_forgedunknown", "object": "payment_intent", "amount": 2500,
                  "currency": "usd", "metadata": {"order_id": "987654321"},
                  "status": "succeeded"}, id="unknown-order"),
    pytest.param("customer.created", {"id": "cus_forged", "object": "customer"},
                 id="other-type"),
])
def test_an_event_the_service_does_not_handle_is_acknowledged(webhook_secret, kind, subject):
    """A verified event about an unknown order, or of another type, answers 200 and is
    ignored."""
    payload = event(kind, subject)
    r = deliver(payload, sign(payload, webhook_secret))
    assert r.status_code == 200, r.text


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-refunded")
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
@pytest.mark.requirement("R-webhook-refunded")
def test_a_full_refund_at_the_provider_marks_the_order_refunded(webhook_secret):
    """A full refund made at the provider: the order becomes refunded and refuses another
    refund (409)."""
    me = shopper()
    order = paid_order(me)
    r = provider_post("/v1/refunds", {"payment_intent": order["payment_intent"]})
    assert r.status_code == 200, r.text
    eventually(lambda: get_order(me, order["id"])["status"] == "refunded",
               "the order becomes refunded")
    assert api("POST", f"/orders/{order['id']}/refunds", me, json={}).status_code == 409


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-webhook-refunded")
@pytest.mark.tier("evolved-r2")
def test_a_smaller_refund_event_changes_nothing(webhook_secret):
    """charge.refunded with an amount_refunded below the order's changes nothing (only a
    larger one is taken)."""
    me = shopper()
    order = paid_order(me)
    assert refund(me, order, 1000).status_code == 201
    payload = charge_event(order, 600)
    assert deliver(payload, sign(payload, webhook_secret)).status_code == 200
    seen = get_order(me, order["id"])
    assert (seen["amount_refunded"], seen["status"]) == (1000, "partially_refunded")


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-refunded")
@pytest.mark.tier("evolved-r2")
@pytest.mark.level("leaf")
def test_a_refund_event_is_matched_by_its_payment_intent(webhook_secret):
    """charge.refunded whose charge has no order_id metadata is matched by its
    payment_intent."""
    me = shopper()
    order = paid_order(me)
    payload = charge_event(order, 700, metadata=False)
    assert deliver(payload, sign(payload, webhook_secret)).status_code == 200
    seen = get_order(me, order["id"])
    assert (seen["amount_refunded"], seen["status"]) == (700, "partially_refunded")


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-idempotent")
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


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-refunded")
@pytest.mark.tier("evolved-r2")
def test_refund_events_out_of_order_keep_the_larger_amount(payment, webhook_secret,
                                                          webhook_faults):
    """Two refunds at the provider (300, then 500) whose charge.refunded events arrive in
    the wrong order (800 first, then 300): the order ends with 800 refunded."""
    me = shopper()
    order = paid_order(me)
    webhook_faults({"kind": "out_of_order", "times": 1, "type": "charge.refunded"})
    first = provider_post("/v1/refunds", {"payment_intent": order["payment_intent"],
                                          "amount": "300"})
    second = provider_post("/v1/refunds", {"payment_intent": order["payment_intent"],
                                           "amount": "500"})
    assert (first.status_code, second.status_code) == (200, 200), (first.text, second.text)
    pi = provider_get(f"/v1/payment_intents/{order['payment_intent']}")
    done = delivered(payment, "charge.refunded", pi["latest_charge"], count=2)
    assert [d["status"] for d in done] == [200, 200], done
    seen = get_order(me, order["id"])
    assert (seen["amount_refunded"], seen["status"]) == (800, "partially_refunded")


# -- journeys -----------------------------------------------------------------------------


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-webhook-paid")
@pytest.mark.tier("evolved-r2")
@pytest.mark.level("root")
def test_an_order_paid_by_webhook_can_be_refunded(payment, webhook_secret):
    """Paid on a hosted page (learned by webhook), then refunded through the service: the
    refund is made on the webhook's PaymentIntent."""
    me = shopper()
    order = make_order(me)
    pi = confirm_at_provider(order)
    eventually(lambda: get_order(me, order["id"])["status"] == "paid", "the order is paid")
    r = refund(me, order, 1000)
    assert r.status_code == 201, r.text
    refunds = listed("/v1/refunds", payment_intent=pi)
    assert [x["amount"] for x in refunds] == [1000]
    assert get_order(me, order["id"])["status"] == "partially_refunded"


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-journey")
@pytest.mark.level("root")
def test_a_shopper_pays_after_a_decline_and_is_refunded_in_two_steps():
    """Create; a declined card; a good card; a partial refund; the rest refunded: every
    step answers as documented and the list shows the final order."""
    me = shopper()
    order = make_order(me, items=[{"sku": "lamp", "quantity": 2, "unit_price": 2150}])
    assert pay(me, order["id"], "pm_card_chargeDeclined").status_code == 402
    r = pay(me, order["id"], "pm_card_mastercard")
    assert r.status_code == 200 and r.json()["last_payment_error"] is None, r.text
    assert refund(me, order, 1300).status_code == 201
    r = refund(me, order)
    assert r.status_code == 201 and r.json()["amount"] == 3000, r.text
    final = api("GET", "/orders", me).json()["orders"]
    assert [(o["id"], o["status"], o["amount_refunded"]) for o in final] == [
        (order["id"], "refunded", 4300)]
    assert sorted(pi["status"] for pi in intents_for(order["id"])) == [
        "requires_payment_method", "succeeded"]


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-journey")
@pytest.mark.tier("evolved-r2")
@pytest.mark.level("root")
def test_a_shopper_with_two_orders_pays_and_refunds_each_independently():
    """Two orders of one shopper: paying and refunding one leaves the other as it was, and
    each is charged its own amount."""
    me = shopper()
    first = make_order(me)
    second = make_order(me, items=[{"sku": "pen", "quantity": 4, "unit_price": 250}],
                        currency="eur")
    assert pay(me, first["id"]).status_code == 200
    assert refund(me, first, 500).status_code == 201
    assert get_order(me, second["id"]) == second
    r = pay(me, second["id"])
    assert r.status_code == 200, r.text
    pi = provider_get(f"/v1/payment_intents/{r.json()['payment_intent']}")
    assert (pi["amount"], pi["currency"]) == (1000, "eur")
    assert get_order(me, first["id"])["amount_refunded"] == 500
