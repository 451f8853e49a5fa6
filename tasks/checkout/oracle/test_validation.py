"""Validation: bad input is 422 and never reaches the provider; declines are 402.

Every limit spec.md names is checked on both sides: the last valid value is accepted and
the first invalid one answers 422.
"""

import pytest
from conftest import (ADMIN, MISSING, api, get_order, intents_for, make_order, paid_order,
                      pay, posts, shopper)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private"),
              pytest.mark.level("leaf")]

R1 = pytest.mark.tier("evolved-r1")
PUBLIC = pytest.mark.visibility("public")
JSON = {"Content-Type": "application/json"}


def _item(**fields):
    return {"items": [{"sku": "mug", "quantity": 1, "unit_price": 900, **fields}]}


def _bad(body, name, *marks):
    return pytest.param(body, id=name, marks=marks)


BAD_ORDERS = [
    _bad({}, "no-items", PUBLIC),
    _bad({"items": []}, "no-item", PUBLIC),
    _bad({"items": "mug"}, "items-a-string"),
    _bad(_item(sku=""), "sku-empty", PUBLIC),
    _bad(_item(quantity=0), "quantity-0", PUBLIC),
    _bad(_item(quantity=101), "quantity-101", PUBLIC),
    _bad(_item(quantity=True), "quantity-boolean"),
    _bad(_item(unit_price="900"), "unit-price-a-string"),
    _bad(_item(unit_price=0), "unit-price-0"),
    _bad({**_item(), "currency": "btc"}, "currency-unknown"),
    _bad({"items": [{"sku": "gum", "quantity": 1, "unit_price": 49}]}, "amount-49"),
    _bad({"items": [{"sku": f"s{i}", "quantity": 1, "unit_price": 100} for i in range(51)]},
         "51-items", R1, PUBLIC),
    _bad(_item(sku="x" * 65), "sku-65-chars", R1),
    _bad(_item(quantity=1.5), "quantity-fractional", R1),
    _bad(_item(unit_price=1_000_001), "unit-price-1000001", R1),
    _bad({"items": [{"sku": "a", "quantity": 100, "unit_price": 1_000_000}]},
         "amount-100000000", R1),
    _bad({**_item(), "currency": "USD"}, "currency-upper-case", R1),
    _bad(_item(quantity=None), "quantity-null", R1),
    _bad([{"sku": "mug", "quantity": 1, "unit_price": 900}], "body-a-list", R1),
]


@pytest.mark.category("validation")
@pytest.mark.requirement("R-order-rules")
@pytest.mark.parametrize("body", BAD_ORDERS)
def test_invalid_order_is_422(payment, body):
    """An order that breaks a rule of POST /orders answers 422, creates nothing and calls
    no provider."""
    me = shopper()
    r = api("POST", "/orders", me, json=body)
    assert r.status_code == 422, f"{r.status_code} {r.text}"
    assert api("GET", "/orders", me).json()["orders"] == [], "a refused order was created"
    assert payment.requests() == []


@pytest.mark.category("validation")
@pytest.mark.requirement("R-json-body")
@pytest.mark.parametrize("route", [
    pytest.param("create", id="create", marks=PUBLIC),
    pytest.param("pay", id="pay", marks=PUBLIC),
    pytest.param("refund", id="refund"),
])
def test_malformed_json_is_422(payment, route):
    """A body that is not JSON answers 422 on every shopper route that takes a body, and
    changes nothing."""
    me = shopper()
    order = {"create": None, "pay": make_order, "refund": paid_order}[route]
    order = order(me) if order else None
    path = {"create": "/orders", "pay": f"/orders/{order and order['id']}/pay",
            "refund": f"/orders/{order and order['id']}/refunds"}[route]
    before = posts(payment)
    r = api("POST", path, {**me, **JSON}, data='{"items": [{not json')
    assert r.status_code == 422, f"malformed JSON: {r.status_code} {r.text}"
    assert posts(payment) == before
    if order:
        assert get_order(me, order["id"]) == order
    else:
        assert api("GET", "/orders", me).json()["orders"] == []


def _ok(items, name, *marks):
    return pytest.param({"items": items}, id=name, marks=marks)


GOOD_ORDERS = [
    _ok([{"sku": f"s{i}", "quantity": 1, "unit_price": 100} for i in range(50)], "50-items",
        PUBLIC),
    _ok([{"sku": "x" * 64, "quantity": 1, "unit_price": 900}], "sku-64-chars"),
    _ok([{"sku": "mug", "quantity": 100, "unit_price": 900}], "quantity-100"),
    _ok([{"sku": "tv", "quantity": 1, "unit_price": 1_000_000}], "unit-price-1000000"),
    _ok([{"sku": "gum", "quantity": 1, "unit_price": 50}], "amount-50", PUBLIC),
    _ok([{"sku": "a", "quantity": 100, "unit_price": 999_999},
         {"sku": "b", "quantity": 1, "unit_price": 99}], "amount-99999999"),
]


@pytest.mark.category("validation")
@pytest.mark.requirement("R-order-rules")
@pytest.mark.tier("evolved-r1")
@pytest.mark.parametrize("body", GOOD_ORDERS)
def test_order_at_a_limit_is_accepted(body):
    """Values on the valid side of every limit are accepted (201) with the right amount."""
    r = api("POST", "/orders", shopper(), json=body)
    assert r.status_code == 201, f"{r.status_code} {r.text}"
    order = r.json()
    assert order["amount"] == sum(i["quantity"] * i["unit_price"] for i in body["items"])
    assert len(order["items"]) == len(body["items"]) and order["status"] == "pending"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-pay-method")
@pytest.mark.parametrize("body", [
    pytest.param({}, id="missing", marks=PUBLIC),
    pytest.param({"payment_method": ""}, id="empty", marks=PUBLIC),
    pytest.param({"payment_method": 42}, id="a-number"),
    pytest.param({"payment_method": None}, id="null", marks=R1),
])
def test_pay_needs_a_payment_method(payment, body):
    """POST /orders/{id}/pay without a non-empty payment_method string is 422, with no
    provider call; the order stays pending."""
    me = shopper()
    order = make_order(me)
    r = api("POST", f"/orders/{order['id']}/pay", me, json=body)
    assert r.status_code == 422, f"{body}: {r.status_code} {r.text}"
    assert payment.requests(method="POST") == []
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("validation")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-pay-decline")
@pytest.mark.level("mid")
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
@pytest.mark.requirement("R-pay-decline")
@pytest.mark.parametrize("method,code,decline_code", [
    pytest.param("pm_card_chargeDeclinedInsufficientFunds", "card_declined",
                 "insufficient_funds", id="insufficient-funds"),
    pytest.param("pm_card_chargeDeclinedExpiredCard", "expired_card", "expired_card",
                 id="expired-card"),
])
def test_a_decline_is_402_with_its_codes(method, code, decline_code):
    """Each declining test card answers 402 with the provider's code and decline_code, and
    the order is not paid."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], method)
    assert r.status_code == 402, r.text
    assert (r.json()["code"], r.json()["decline_code"]) == (code, decline_code), r.text
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-pay-refused")
def test_unknown_payment_method_is_422():
    """A payment method the provider does not know answers 422; the order stays pending."""
    me = shopper()
    order = make_order(me)
    r = pay(me, order["id"], "pm_does_not_exist")
    assert r.status_code == 422, r.text
    assert get_order(me, order["id"])["status"] == "pending"


@pytest.mark.category("validation")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-refund-ceiling")
@pytest.mark.level("mid")
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
@pytest.mark.requirement("R-refund-ceiling")
@pytest.mark.tier("evolved-r1")
@pytest.mark.parametrize("first,second", [
    pytest.param(None, 2501, id="above-the-amount"),
    pytest.param(2000, 501, id="above-what-remains"),
])
def test_a_refund_above_the_ceiling_never_reaches_the_provider(payment, first, second):
    """A refund above amount - amount_refunded is refused by the service itself: 422 and
    no refund call for it at the provider."""
    me = shopper()
    order = paid_order(me)  # 2500
    if first:
        r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": first})
        assert r.status_code == 201, f"setup: {r.status_code} {r.text}"
    before = posts(payment, "/v1/refunds")
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": second})
    assert r.status_code == 422, r.text
    assert posts(payment, "/v1/refunds") == before, "the refund reached the provider"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-refund-ceiling")
@pytest.mark.tier("evolved-r1")
def test_a_refund_of_exactly_what_remains_is_accepted():
    """After a refund of 1000, a refund of exactly the remaining 1500 is accepted (201):
    the order ends refunded."""
    me = shopper()
    order = paid_order(me)  # 2500
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 1000})
    assert r.status_code == 201, f"setup: {r.status_code} {r.text}"
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 1500})
    assert r.status_code == 201, r.text
    seen = get_order(me, order["id"])
    assert (seen["status"], seen["amount_refunded"]) == ("refunded", 2500)


@pytest.mark.category("validation")
@pytest.mark.requirement("R-refund-amount")
@pytest.mark.parametrize("amount", [
    pytest.param(0, id="zero", marks=PUBLIC),
    pytest.param(-5, id="negative", marks=PUBLIC),
    pytest.param("500", id="a-string"),
    pytest.param(5.5, id="fractional"),
    pytest.param(True, id="a-boolean"),
])
def test_refund_amount_must_be_a_positive_integer(payment, amount):
    """A refund amount that is not an integer >= 1 is 422 with no provider call."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": amount})
    assert r.status_code == 422, f"{amount!r}: {r.status_code} {r.text}"
    assert payment.requests(method="POST", path="/v1/refunds") == []
    assert get_order(me, order["id"])["status"] == "paid"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-refund-amount")
@pytest.mark.tier("evolved-r1")
def test_a_refund_of_1_is_accepted():
    """amount 1 is the smallest refund: 201, and the order is partially refunded by 1."""
    me = shopper()
    order = paid_order(me)
    r = api("POST", f"/orders/{order['id']}/refunds", me, json={"amount": 1})
    assert r.status_code == 201 and r.json()["amount"] == 1, r.text
    seen = get_order(me, order["id"])
    assert (seen["status"], seen["amount_refunded"]) == ("partially_refunded", 1)


@pytest.mark.category("validation")
@pytest.mark.requirement("R-webhook-url")
@pytest.mark.parametrize("body", [
    pytest.param({"url": "ftp://example.com/hook"}, id="ftp", marks=PUBLIC),
    pytest.param({}, id="missing"),
    pytest.param({"url": "example.com/webhooks/payment"}, id="no-scheme"),
])
def test_webhook_endpoint_needs_an_http_url(payment, body):
    """POST /webhooks/endpoint without an http:// or https:// url is 422 and registers
    nothing at the provider."""
    r = api("POST", "/webhooks/endpoint", ADMIN, json=body)
    assert r.status_code == 422, f"{body}: {r.status_code} {r.text}"
    assert payment.requests(path="/v1/webhook_endpoints*") == []


@pytest.mark.category("validation")
@pytest.mark.requirement("R-precedence")
@pytest.mark.tier("evolved-r1")
@pytest.mark.parametrize("path,body", [
    pytest.param(f"/orders/{MISSING}/pay", {}, id="pay-unknown-order", marks=PUBLIC),
    pytest.param(f"/orders/{MISSING}/refunds", {"amount": 0}, id="refund-unknown-order"),
])
def test_422_wins_over_404(payment, path, body):
    """An invalid body for an order that does not exist answers 422 (422 before 404)."""
    r = api("POST", path, shopper(), json=body)
    assert r.status_code == 422, f"{path} {body}: {r.status_code} {r.text}"
    assert posts(payment) == 0


@pytest.mark.category("validation")
@pytest.mark.requirement("R-precedence")
@pytest.mark.tier("evolved-r2")
@pytest.mark.parametrize("paid,action,body", [
    pytest.param(True, "pay", {"payment_method": ""}, id="pay-a-paid-order"),
    pytest.param(False, "refunds", {"amount": -1}, id="refund-a-pending-order"),
])
def test_422_wins_over_409(payment, paid, action, body):
    """An invalid body for an order whose status refuses the action answers 422 (422
    before 409), with no provider call."""
    me = shopper()
    order = paid_order(me) if paid else make_order(me)
    before = posts(payment)
    r = api("POST", f"/orders/{order['id']}/{action}", me, json=body)
    assert r.status_code == 422, f"{action} {body}: {r.status_code} {r.text}"
    assert posts(payment) == before
