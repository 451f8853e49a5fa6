"""Authorization: shoppers see only their orders, the operator key guards webhook
registration, and only correctly signed webhooks are believed."""

import time

import pytest
from conftest import (ADMIN, BASE_URL, api, deliver, get_order, intent_event, make_order,
                      paid_order, shopper, sign)


@pytest.mark.category("authorization")
def test_missing_or_malformed_token_is_401(payment):
    """No Authorization header, or one that is not Bearer, answers 401 and calls no
    provider."""
    for headers in (None, {"Authorization": "Basic Zm9vOmJhcg=="}, {"Authorization": "Bearer "}):
        r = api("POST", "/orders", headers, json={"items": [
            {"sku": "mug", "quantity": 1, "unit_price": 900}]})
        assert r.status_code == 401, f"{headers}: {r.status_code}"
        assert api("GET", "/orders", headers).status_code == 401
    assert payment.requests() == []


@pytest.mark.category("authorization")
def test_another_shoppers_order_is_404_and_never_charged(payment):
    """Another shopper's order answers 404 to read, pay and refund, and nothing reaches
    the provider."""
    owner, other = shopper(), shopper()
    order = make_order(owner)
    assert api("GET", f"/orders/{order['id']}", other).status_code == 404
    r = api("POST", f"/orders/{order['id']}/pay", other, json={"payment_method": "pm_card_visa"})
    assert r.status_code == 404
    assert api("POST", f"/orders/{order['id']}/refunds", other, json={}).status_code == 404
    assert order["id"] not in [o["id"] for o in api("GET", "/orders", other).json()["orders"]]
    assert payment.requests(method="POST") == []
    assert get_order(owner, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
def test_webhook_registration_needs_the_admin_key(payment):
    """POST /webhooks/endpoint without (or with a wrong) X-Admin-Key is 401 and registers
    nothing at the provider."""
    body = {"url": f"{BASE_URL}/webhooks/payment"}
    assert api("POST", "/webhooks/endpoint", None, json=body).status_code == 401
    assert api("POST", "/webhooks/endpoint", {"X-Admin-Key": "guess"},
               json=body).status_code == 401
    assert api("POST", "/webhooks/endpoint", shopper(), json=body).status_code == 401
    assert payment.requests(method="POST", path="/v1/webhook_endpoints") == []


@pytest.mark.category("authorization")
def test_unsigned_webhook_is_refused(webhook_secret):
    """A payment_intent.succeeded event without Stripe-Signature answers 400 and the order
    stays pending."""
    me = shopper()
    order = make_order(me)
    r = deliver(intent_event(order), None)
    assert r.status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
def test_webhook_signed_with_another_secret_is_refused(webhook_secret):
    """A signature made with a secret that is not the registered one answers 400 and the
    order stays pending."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    r = deliver(payload, sign(payload, "whsec_not_the_registered_secret"))
    assert r.status_code == 400
    tampered = sign(intent_event(order, amount=order["amount"]), webhook_secret)
    assert deliver(payload, tampered).status_code == 400  # signed over another body
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
def test_stale_webhook_signature_is_refused(webhook_secret):
    """A correct signature whose timestamp is ten minutes old answers 400 (tolerance 300 s)."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    r = deliver(payload, sign(payload, webhook_secret, int(time.time()) - 600))
    assert r.status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
def test_correctly_signed_webhook_is_believed(webhook_secret):
    """An event signed with the registered secret (HMAC computed by the oracle itself)
    answers 200 and marks the matching pending order paid."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    r = deliver(payload, sign(payload, webhook_secret))
    assert r.status_code == 200, r.text
    seen = get_order(me, order["id"])
    assert seen["status"] == "paid" and seen["payment_intent"].startswith("pi_forged")
    # the operator's view is not a shopper's: the order still belongs to its shopper only
    assert api("GET", f"/orders/{order['id']}", ADMIN).status_code == 401
    assert paid_order(me)["status"] == "paid"
