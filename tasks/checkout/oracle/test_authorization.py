"""Authorization: shoppers see only their orders, the operator key guards webhook
registration, and only correctly signed webhooks are believed."""

import time

import pytest
from conftest import (ADMIN, MISSING, ONE_ITEM, WEBHOOK_URL, api, current_secret, deliver,
                      get_order, intent_event, make_order, paid_order, posts,
                      register_webhooks, shopper, sign)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"),
              pytest.mark.level("leaf")]

# Every shopper route, with what it needs: (method, path, body) made for the owner `me`.
ROUTES = {
    "create": lambda me: ("POST", "/orders", {"items": ONE_ITEM}),
    "list": lambda me: ("GET", "/orders", None),
    "read": lambda me: ("GET", f"/orders/{make_order(me)['id']}", None),
    "pay": lambda me: ("POST", f"/orders/{make_order(me)['id']}/pay",
                       {"payment_method": "pm_card_visa"}),
    "refund": lambda me: ("POST", f"/orders/{paid_order(me)['id']}/refunds", {"amount": 100}),
}
BAD_CREDENTIALS = {
    "missing": None,
    "basic": {"Authorization": "Basic Zm9vOmJhcg=="},
    "empty-bearer": {"Authorization": "Bearer "},
    "bare-token": {"Authorization": "shopper-token-without-scheme"},
}
R1 = pytest.mark.tier("evolved-r1")
R2 = pytest.mark.tier("evolved-r2")
PUBLIC = pytest.mark.visibility("public")


def _auth_case(route, credentials, *marks):
    return pytest.param(route, credentials, id=f"{route}-{credentials}", marks=marks)


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-bearer")
@pytest.mark.parametrize("route,credentials", [
    _auth_case("create", "missing", PUBLIC),
    _auth_case("list", "missing", PUBLIC),
    _auth_case("create", "basic", PUBLIC),
    _auth_case("list", "basic"),
    _auth_case("create", "empty-bearer"),
    _auth_case("list", "empty-bearer"),
    _auth_case("read", "missing", PUBLIC),
    _auth_case("pay", "missing", PUBLIC),
    _auth_case("refund", "missing"),
    _auth_case("create", "bare-token", R1),
])
def test_missing_or_malformed_token_is_401(payment, route, credentials):
    """Every shopper route answers 401 to a request without `Authorization: Bearer
    <token>`; it changes no order and calls no provider."""
    me = shopper()
    method, path, body = ROUTES[route](me)
    before = posts(payment)
    r = api(method, path, BAD_CREDENTIALS[credentials], json=body)
    assert r.status_code == 401, f"{method} {path} ({credentials}): {r.status_code} {r.text}"
    assert posts(payment) == before, "a refused request reached the provider"
    mine = api("GET", "/orders", me).json()["orders"]
    assert all(o["status"] in ("pending", "paid") and o["amount_refunded"] == 0 for o in mine)


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-bearer")
def test_the_operator_key_is_not_a_shopper_token():
    """X-Admin-Key alone is no shopper credential: GET /orders with it answers 401."""
    r = api("GET", "/orders", ADMIN)
    assert r.status_code == 401, r.text


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-owner")
@pytest.mark.tier("evolved-r2")
def test_tokens_are_compared_exactly():
    """The token is the identity, byte for byte: the same token in another case is another
    shopper, who cannot read the order."""
    token = f"Shopper-{time.time_ns()}"
    order = make_order({"Authorization": f"Bearer {token}"})
    r = api("GET", f"/orders/{order['id']}", {"Authorization": f"Bearer {token.lower()}"})
    assert r.status_code == 404, r.text


def _read(other, order):
    return api("GET", f"/orders/{order['id']}", other)


def _pay(other, order):
    return api("POST", f"/orders/{order['id']}/pay", other, json={"payment_method": "pm_card_visa"})


def _refund(other, order):
    return api("POST", f"/orders/{order['id']}/refunds", other, json={"amount": 100})


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-owner")
@pytest.mark.parametrize("action,paid", [
    pytest.param(_read, False, id="read", marks=PUBLIC),
    pytest.param(_pay, False, id="pay", marks=PUBLIC),
    pytest.param(_refund, True, id="refund"),
])
def test_another_shoppers_order_is_404_and_untouched(payment, action, paid):
    """Another shopper's order answers 404 to read, pay and refund; the order is unchanged
    and nothing reaches the provider."""
    owner, other = shopper(), shopper()
    order = paid_order(owner) if paid else make_order(owner)
    before = posts(payment)
    r = action(other, order)
    assert r.status_code == 404, f"{r.status_code} {r.text}"
    assert posts(payment) == before, "another shopper's request reached the provider"
    assert get_order(owner, order["id"]) == order


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-owner")
def test_another_shoppers_orders_are_not_listed():
    """GET /orders lists the caller's orders only."""
    owner, other = shopper(), shopper()
    order = make_order(owner)
    mine = make_order(other)
    listed = [o["id"] for o in api("GET", "/orders", other).json()["orders"]]
    assert listed == [mine["id"]], f"{order['id']} must not be listed: {listed}"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-owner")
@pytest.mark.tier("evolved-r2")
def test_another_shoppers_order_looks_like_a_missing_one():
    """Another shopper's order is treated exactly like one that does not exist: the same
    404 answer as an id never created."""
    owner, other = shopper(), shopper()
    order = make_order(owner)
    theirs = api("GET", f"/orders/{order['id']}", other)
    missing = api("GET", f"/orders/{MISSING}", other)
    assert theirs.status_code == missing.status_code == 404, (theirs.text, missing.text)
    assert theirs.json() == missing.json(), "the answer tells the order exists"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-precedence")
@pytest.mark.tier("evolved-r2")
@pytest.mark.parametrize("action,paid", [
    pytest.param(_pay, True, id="pay-a-paid-order", marks=PUBLIC),
    pytest.param(_refund, False, id="refund-a-pending-order"),
])
def test_404_wins_over_409_for_another_shoppers_order(payment, action, paid):
    """An action another shopper's order would refuse with 409 answers 404 to a stranger
    (404 before 409), with no provider call."""
    owner, other = shopper(), shopper()
    order = paid_order(owner) if paid else make_order(owner)
    before = posts(payment)
    r = action(other, order)
    assert r.status_code == 404, f"{r.status_code} {r.text}"
    assert posts(payment) == before


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-precedence")
@pytest.mark.tier("evolved-r1")
@pytest.mark.parametrize("method,path,body,headers", [
    pytest.param("POST", "/orders", {"items": []}, None, id="create", marks=PUBLIC),
    pytest.param("POST", f"/orders/{MISSING}/pay", {}, None, id="pay"),
    pytest.param("POST", f"/orders/{MISSING}/refunds", {"amount": 0}, None, id="refund"),
    pytest.param("POST", "/webhooks/endpoint", {"url": "ftp://x"}, {"X-Admin-Key": "guess"},
                 id="webhook-endpoint"),
])
def test_401_wins_over_422(payment, method, path, body, headers):
    """A request both unauthenticated and invalid answers 401 (401 before 422, before 404)."""
    r = api(method, path, headers, json=body)
    assert r.status_code == 401, f"{method} {path}: {r.status_code} {r.text}"
    assert posts(payment) == 0


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-admin")
@pytest.mark.parametrize("headers", [
    pytest.param(None, id="missing", marks=PUBLIC),
    pytest.param({"X-Admin-Key": "guess"}, id="wrong", marks=PUBLIC),
    pytest.param({"Authorization": "Bearer shopper-token"}, id="shopper-token"),
    pytest.param({"X-Admin-Key": "CHECKOUT-ADMIN-KEY"}, id="wrong-case", marks=R1),
])
def test_webhook_registration_needs_the_admin_key(payment, headers):
    """POST /webhooks/endpoint without the exact X-Admin-Key is 401 and registers nothing
    at the provider."""
    r = api("POST", "/webhooks/endpoint", headers, json={"url": WEBHOOK_URL})
    assert r.status_code == 401, f"{headers}: {r.status_code} {r.text}"
    assert payment.requests(path="/v1/webhook_endpoints*") == []


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-webhook-signature")
def test_unsigned_webhook_is_refused(webhook_secret):
    """A payment_intent.succeeded event without Stripe-Signature answers 400 and the order
    stays pending."""
    me = shopper()
    order = make_order(me)
    r = deliver(intent_event(order), None)
    assert r.status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-webhook-signature")
def test_webhook_signed_with_another_secret_is_refused(webhook_secret):
    """A signature made with a secret that is not the registered one answers 400 and the
    order stays pending."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    r = deliver(payload, sign(payload, "whsec_not_the_registered_secret"))
    assert r.status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-webhook-signature")
def test_webhook_signed_over_another_body_is_refused(webhook_secret):
    """A signature by the registered secret but over another body answers 400."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    tampered = sign(intent_event(order, amount=order["amount"]), webhook_secret)
    assert deliver(payload, tampered).status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-webhook-signature")
@pytest.mark.parametrize("header", [
    pytest.param("garbage", id="no-fields"),
    pytest.param("v1={sig}", id="no-timestamp", marks=R1),
    pytest.param("t={t}", id="no-v1", marks=R1),
])
def test_malformed_signature_header_is_refused(webhook_secret, header):
    """A Stripe-Signature header without a timestamp or without a v1 signature answers
    400 and changes nothing."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    good = sign(payload, webhook_secret)
    stamp, digest = good.split(",")[0][2:], good.split(",")[1][3:]
    r = deliver(payload, header.format(sig=digest, t=stamp))
    assert r.status_code == 400, r.text
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-webhook-tolerance")
def test_stale_webhook_signature_is_refused(webhook_secret):
    """A correct signature whose timestamp is ten minutes old answers 400 (tolerance 300 s)."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    r = deliver(payload, sign(payload, webhook_secret, int(time.time()) - 600))
    assert r.status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-webhook-tolerance")
@pytest.mark.tier("evolved-r2")
def test_a_signature_inside_the_tolerance_is_believed(webhook_secret):
    """A correct signature made 200 s ago is within the 300 s tolerance: believed."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    r = deliver(payload, sign(payload, webhook_secret, int(time.time()) - 200))
    assert r.status_code == 200, r.text
    assert get_order(me, order["id"])["status"] == "paid"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-webhook-signature")
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


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-webhook-signature")
@pytest.mark.tier("evolved-r2")
def test_one_matching_signature_among_several_is_enough(webhook_secret):
    """A header with several v1 signatures verifies when one of them matches (Stripe sends
    several while a secret is rolled)."""
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    good = sign(payload, webhook_secret)
    stamp, digest = good.split(",")
    wrong = sign(payload, "whsec_an_older_secret", int(stamp[2:])).split(",")[1]
    r = deliver(payload, f"{stamp},{wrong},{digest}")
    assert r.status_code == 200, r.text
    assert get_order(me, order["id"])["status"] == "paid"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-webhook-rotation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.level("mid")
def test_after_registering_again_only_the_new_secret_verifies():
    """Registering again replaces the secret: an event signed with the previous secret
    answers 400, one signed with the new secret is believed."""
    assert register_webhooks().status_code == 201
    old = current_secret()
    assert register_webhooks().status_code == 201
    new = current_secret()
    assert old and new and old != new, "setup: the provider gave no new secret"
    me = shopper()
    order = make_order(me)
    payload = intent_event(order)
    assert deliver(payload, sign(payload, old)).status_code == 400
    assert get_order(me, order["id"])["status"] == "pending"
    r = deliver(payload, sign(payload, new))
    assert r.status_code == 200, r.text
    assert get_order(me, order["id"])["status"] == "paid"
