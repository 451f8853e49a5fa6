"""Side effects: what the service sends the provider, and what the provider then holds."""

import json

import pytest
from conftest import (ADMIN, BASE_URL, api, form, header, listed, make_order, paid_order, pay,
                      provider_get, register_webhooks, shopper)


@pytest.mark.category("side_effects")
def test_creating_an_order_calls_no_provider(payment):
    """POST /orders and GET /orders make no provider call at all."""
    me = shopper()
    order = make_order(me)
    api("GET", f"/orders/{order['id']}", me)
    assert payment.requests() == []


@pytest.mark.category("side_effects")
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
def test_a_declined_payment_is_one_call_not_retried(payment):
    """A decline is a definite answer: exactly one create call, not retried."""
    me = shopper()
    order = make_order(me)
    assert pay(me, order["id"], "pm_card_chargeDeclined").status_code == 402
    assert len(payment.requests(method="POST", path="/v1/payment_intents")) == 1


@pytest.mark.category("side_effects")
def test_webhook_registration_keeps_one_endpoint_at_the_provider(payment):
    """Registering creates an endpoint for both events at the given URL; registering again
    deletes the previous one, so the provider holds exactly one; the secret is never
    shown."""
    url = f"{BASE_URL}/webhooks/payment"
    first = register_webhooks()
    assert first.status_code == 201, first.text
    second = register_webhooks()
    assert second.status_code == 201, second.text
    for answer in (first, second):
        assert answer.json()["id"].startswith("we_") and answer.json()["url"] == url
        assert "whsec_" not in answer.text
        assert set(answer.json()["enabled_events"]) >= {"payment_intent.succeeded",
                                                        "charge.refunded"}
    created = payment.requests(method="POST", path="/v1/webhook_endpoints")
    assert len(created) == 2
    sent = json.loads(created[0]["response"])
    assert sent["url"] == url
    assert set(sent["enabled_events"]) >= {"payment_intent.succeeded", "charge.refunded"}
    endpoints = listed("/v1/webhook_endpoints")
    assert [e["id"] for e in endpoints] == [second.json()["id"]]
    assert api("POST", "/webhooks/endpoint", ADMIN, json={"url": "ftp://x"}).status_code == 422
