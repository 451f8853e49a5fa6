"""Side effects: what the service sends the provider, and what the provider then holds."""

import json

import pytest
from conftest import (WEBHOOK_URL, api, deliver, form, get_order, header, intent_event,
                      listed, make_order, paid_order, pay, posts, provider_get,
                      register_webhooks, shopper, sign)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"),
              pytest.mark.level("mid")]

R1 = pytest.mark.tier("evolved-r1")


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-no-provider-on-create")
def test_creating_an_order_calls_no_provider(payment):
    """POST /orders and GET /orders make no provider call at all."""
    me = shopper()
    order = make_order(me)
    api("GET", f"/orders/{order['id']}", me)
    assert payment.requests() == []


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-pay-call")
def test_payment_intent_is_created_as_the_spec_says(payment):
    """One POST /v1/payment_intents with the order's amount and currency, the payment
    method, confirm, no redirects, metadata[order_id] and an Idempotency-Key; the provider
    holds it succeeded with amount_received = amount."""
    me = shopper()
    order = make_order(me, items=[{"sku": "book", "quantity": 3, "unit_price": 1999}],
                       currency="gbp")
    r = pay(me, order["id"], "pm_card_visa")
    assert r.status_code == 200, r.text
    calls = payment.requests(method="POST", path="/v1/payment_intents")
    assert len(calls) == 1
    sent = form(calls[0])
    assert sent["amount"] == str(3 * 1999) and sent["currency"] == "gbp"
    assert sent["payment_method"] == "pm_card_visa" and sent["confirm"] == "true"
    assert sent["automatic_payment_methods[enabled]"] == "true"
    assert sent["automatic_payment_methods[allow_redirects]"] == "never"
    assert sent["metadata[order_id]"] == str(order["id"])
    assert header(calls[0], "Idempotency-Key")
    pi = provider_get(f"/v1/payment_intents/{r.json()['payment_intent']}")
    assert pi["status"] == "succeeded" and pi["amount_received"] == 3 * 1999
    assert pi["currency"] == "gbp" and pi["metadata"]["order_id"] == str(order["id"])


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-pay-call")
@pytest.mark.parametrize("currency", ["usd", "eur", "gbp"])
def test_the_order_is_charged_in_its_currency(currency):
    """The provider's PaymentIntent has the order's amount and currency, whichever of the
    three currencies the order is in."""
    me = shopper()
    order = make_order(me, items=[{"sku": "mug", "quantity": 3, "unit_price": 1150}],
                       currency=currency)
    r = pay(me, order["id"])
    assert r.status_code == 200, r.text
    pi = provider_get(f"/v1/payment_intents/{r.json()['payment_intent']}")
    assert (pi["amount"], pi["currency"], pi["status"]) == (3450, currency, "succeeded")


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-pay-call")
@pytest.mark.tier("evolved-r1")
def test_an_amount_in_the_pay_body_is_ignored(payment):
    """The charge is the order's amount: an `amount` field in the pay body is an unknown
    field, ignored."""
    me = shopper()
    order = make_order(me)
    r = api("POST", f"/orders/{order['id']}/pay", me,
            json={"payment_method": "pm_card_visa", "amount": 50})
    assert r.status_code == 200, r.text
    pi = provider_get(f"/v1/payment_intents/{r.json()['payment_intent']}")
    assert pi["amount_received"] == order["amount"] == 2500


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-refund-call")
def test_refund_is_made_at_the_provider(payment):
    """A refund is one POST /v1/refunds on the order's PaymentIntent with the amount and an
    Idempotency-Key; the provider's charge shows it refunded."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 700})
    assert r.status_code == 201, r.text
    calls = payment.requests(method="POST", path="/v1/refunds")
    assert len(calls) == 1 and header(calls[0], "Idempotency-Key")
    sent = form(calls[0])
    assert sent["payment_intent"] == order["payment_intent"] and sent["amount"] == "700"
    refund = provider_get(f"/v1/refunds/{r.json()['id']}")
    assert refund["amount"] == 700 and refund["payment_intent"] == order["payment_intent"]
    pi = provider_get(f"/v1/payment_intents/{order['payment_intent']}")
    assert provider_get(f"/v1/charges/{pi['latest_charge']}")["amount_refunded"] == 700


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-refund-call")
def test_a_refund_carries_the_order_id_in_its_metadata(payment):
    """The refund call sends metadata[order_id]; the provider's refund holds it."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 300})
    assert r.status_code == 201, r.text
    calls = payment.requests(method="POST", path="/v1/refunds")
    assert [form(c).get("metadata[order_id]") for c in calls] == [str(order["id"])]
    assert provider_get(f"/v1/refunds/{r.json()['id']}")["metadata"]["order_id"] == str(
        order["id"])


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-refund-call")
def test_a_refund_without_amount_refunds_what_remains_at_the_provider(payment):
    """After a refund of 900, a refund without amount refunds the remaining 1600 at the
    provider: the charge ends fully refunded."""
    me = shopper()
    order = paid_order(me)
    assert api("POST", f"/orders/{order['id']}/refunds", me,
               json={"amount": 900}).status_code == 201
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={})
    assert r.status_code == 201 and r.json()["amount"] == 1600, r.text
    refunds = listed("/v1/refunds", payment_intent=order["payment_intent"])
    assert sorted(x["amount"] for x in refunds) == [900, 1600]
    pi = provider_get(f"/v1/payment_intents/{order['payment_intent']}")
    assert provider_get(f"/v1/charges/{pi['latest_charge']}")["refunded"] is True


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-idempotency-key")
@pytest.mark.tier("evolved-r2")
def test_each_refund_is_a_new_call_with_a_new_key(payment):
    """Two refunds of the same amount are two logical calls: two new Idempotency-Keys, and
    the provider holds two refunds."""
    me = shopper()
    order = paid_order(me)
    for _ in range(2):
        r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 400})
        assert r.status_code == 201, r.text
    keys = [header(c, "Idempotency-Key")
            for c in payment.requests(method="POST", path="/v1/refunds")]
    assert len(keys) == 2 and all(keys) and keys[0] != keys[1], keys
    refunds = listed("/v1/refunds", payment_intent=order["payment_intent"])
    assert [x["amount"] for x in refunds] == [400, 400], "a refund never reached the provider"


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-idempotency-key")
@pytest.mark.tier("evolved-r1")
def test_payments_of_two_orders_use_two_keys(payment):
    """Each order's payment is its own logical call, with its own Idempotency-Key."""
    me = shopper()
    first, second = make_order(me), make_order(me)
    assert pay(me, first["id"]).status_code == 200
    assert pay(me, second["id"]).status_code == 200
    keys = [header(c, "Idempotency-Key")
            for c in payment.requests(method="POST", path="/v1/payment_intents")]
    assert len(keys) == 2 and all(keys) and keys[0] != keys[1], keys


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-no-retry-on-4xx")
@pytest.mark.level("leaf")
def test_a_declined_payment_is_one_call_not_retried(payment):
    """A decline is a definite answer: exactly one create call, not retried."""
    me = shopper()
    order = make_order(me)
    assert pay(me, order["id"], "pm_card_chargeDeclined").status_code == 402
    assert len(payment.requests(method="POST", path="/v1/payment_intents")) == 1


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-no-retry-on-4xx")
@pytest.mark.level("leaf")
def test_a_refused_payment_method_is_one_call_not_retried(payment):
    """The provider's 400 (an unknown payment method) is definite too: one call only."""
    me = shopper()
    order = make_order(me)
    assert pay(me, order["id"], "pm_does_not_exist").status_code == 422
    assert len(payment.requests(method="POST", path="/v1/payment_intents")) == 1


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-webhook-register")
def test_webhook_registration_keeps_one_endpoint_at_the_provider(payment):
    """Registering creates an endpoint for both events at the given URL; registering again
    deletes the previous one, so the provider holds exactly one; the secret is never
    shown."""
    first = register_webhooks()
    assert first.status_code == 201, first.text
    second = register_webhooks()
    assert second.status_code == 201, second.text
    for answer in (first, second):
        assert answer.json()["id"].startswith("we_") and answer.json()["url"] == WEBHOOK_URL
        assert "whsec_" not in answer.text
        assert set(answer.json()["enabled_events"]) >= {"payment_intent.succeeded",
                                                        "charge.refunded"}
    created = payment.requests(method="POST", path="/v1/webhook_endpoints")
    assert len(created) == 2
    sent = json.loads(created[0]["response"])
    assert sent["url"] == WEBHOOK_URL
    assert set(sent["enabled_events"]) >= {"payment_intent.succeeded", "charge.refunded"}
    endpoints = listed("/v1/webhook_endpoints")
    assert [e["id"] for e in endpoints] == [second.json()["id"]]


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-webhook-register")
@pytest.mark.tier("evolved-r1")
def test_registering_again_deletes_the_previous_endpoint(payment):
    """Registering again sends DELETE /v1/webhook_endpoints/{previous id}: the previous
    endpoint is gone at the provider."""
    first = register_webhooks()
    assert first.status_code == 201, first.text
    second = register_webhooks()
    assert second.status_code == 201, second.text
    deleted = [c["path"] for c in payment.requests(method="DELETE")]
    assert deleted[-1:] == [f"/v1/webhook_endpoints/{first.json()['id']}"], deleted
    assert first.json()["id"] not in [e["id"] for e in listed("/v1/webhook_endpoints")]


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-webhook-paid")
@pytest.mark.tier("evolved-r2")
def test_a_webhook_payment_charges_nothing(payment, webhook_secret):
    """An order paid by a verified payment_intent.succeeded event becomes paid without any
    write to the provider (the money already moved)."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    assert deliver(payload, sign(payload, webhook_secret)).status_code == 200
    assert get_order(me, order["id"])["status"] == "paid"
    assert posts(payment) == 0, "the service charged an order the provider reported paid"
