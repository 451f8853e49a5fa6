"""Authorization: shop API keys (401), shops see only their own objects (404), and the
service authenticates to the provider."""

import pytest
from conftest import (
    HOME,
    MISSING,
    api,
    make_customer,
    make_order,
    make_shop,
    order,
    service_calls,
    unique,
)

pytestmark = [pytest.mark.visibility("private"), pytest.mark.level("leaf")]

ROUTES = ["POST /customers", "GET /customers/{customer}", "POST /orders", "GET /orders/{order}",
          "GET /orders/{order}/tracking"]
BAD_KEYS = {
    "no-header": lambda key: None,
    "unknown-key": lambda key: f"Bearer nope-{key}",
    "other-scheme": lambda key: f"Token {key}",
    "bare-key": lambda key: key,
}


def _route(route, placed):
    """(method, path, valid body) of one protected route, for an order the shop placed."""
    method, template = route.split(" ")
    path = template.format(customer=placed["customer_id"], order=placed["id"])
    bodies = {"/customers": {"name": "Ada", "address": HOME,
                             "contacts": [{"channel": "email", "to": "ada@example.com"}]},
              "/orders": {"customer_id": placed["customer_id"], "weight_oz": 5}}
    return method, path, bodies.get(path) if method == "POST" else None


@pytest.mark.category("authorization")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-auth-key")
@pytest.mark.visibility("public")
@pytest.mark.parametrize("header", list(BAD_KEYS))
@pytest.mark.parametrize("route", ROUTES)
def test_missing_or_unknown_key_is_401(shop, route, header):
    """Every endpoint but /health and POST /shops answers 401 without a key, with another
    scheme, or with an unknown key (the body is valid: only the key is wrong)."""
    placed = make_order(shop, make_customer(shop))
    method, path, body = _route(route, placed)
    value = BAD_KEYS[header](shop["api_key"])
    r = api(method, path, headers={"Authorization": value} if value else {}, json=body)
    assert r.status_code == 401, f"{method} {path} with {value!r}: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-shop-isolation")
def test_another_shops_customer_is_404(shop):
    """GET /customers/{id} of another shop's customer answers 404."""
    theirs = make_customer(make_shop())
    r = api("GET", f"/customers/{theirs['id']}", shop)
    assert r.status_code == 404, r.text


@pytest.mark.category("authorization")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-shop-isolation")
def test_another_shops_customer_cannot_be_shipped_to(shop, delivery):
    """POST /orders for another shop's customer answers 404 and calls nothing on the
    provider."""
    theirs = make_customer(make_shop())
    r = order(shop, theirs)
    assert r.status_code == 404, r.text
    assert service_calls(delivery) == [], "nothing may be sent for another shop's customer"


@pytest.mark.category("authorization")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-shop-isolation")
@pytest.mark.level("mid")
@pytest.mark.parametrize("suffix", ["", "/tracking"], ids=["order", "tracking"])
def test_another_shops_order_is_404(shop, suffix):
    """GET /orders/{id} and GET /orders/{id}/tracking of another shop's order answer 404;
    its own shop still reads it."""
    other = make_shop()
    theirs = make_order(other, make_customer(other))
    r = api("GET", f"/orders/{theirs['id']}{suffix}", shop)
    assert r.status_code == 404, f"GET /orders/{theirs['id']}{suffix}: {r.status_code} {r.text}"
    assert api("GET", f"/orders/{theirs['id']}{suffix}", other).status_code == 200


@pytest.mark.category("authorization")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-provider-auth")
@pytest.mark.level("mid")
def test_the_service_authenticates_to_the_provider(shop, delivery):
    """Every provider call carries a dk_test_ key, and none is refused with 401."""
    placed = make_order(shop, make_customer(shop))
    assert api("GET", f"/orders/{placed['id']}/tracking", shop).status_code == 200
    calls = service_calls(delivery)
    assert len(calls) >= 4, calls
    for call in calls:
        headers = call["headers"]
        key = headers.get("authorization", "") + headers.get("x-api-key", "")
        assert "dk_test_" in key, f"{call['method']} {call['path']} without a dk_test_ key"
        assert call["status"] != 401, f"{call['method']} {call['path']} was refused"


# -- evolved: precedence, leaks and what an unauthorized call may not do ------------------


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-precedence")
@pytest.mark.parametrize("path", [f"/customers/{MISSING}", f"/orders/{MISSING}",
                                  f"/orders/{MISSING}/tracking"],
                         ids=["customer", "order", "tracking"])
def test_no_key_is_401_even_for_an_id_that_does_not_exist(path):
    """Without a key the answer is 401, whether or not the object exists (not 404)."""
    r = api("GET", path)
    assert r.status_code == 401, f"GET {path}: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-auth-precedence")
def test_an_unauthenticated_invalid_order_is_401(shop):
    """POST /orders without a key and with an invalid body answers 401: the key is checked
    before the body."""
    r = api("POST", "/orders", json={"customer_id": "three", "weight_oz": -1})
    assert r.status_code == 401, r.text


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-precedence")
def test_an_unauthenticated_order_for_another_shops_customer_is_401(shop, delivery):
    """POST /orders without a valid key for a customer of another shop answers 401 (not
    404), and nothing reaches the provider."""
    theirs = make_customer(make_shop())
    r = api("POST", "/orders", headers={"Authorization": f"Bearer nope-{shop['api_key']}"},
            json={"customer_id": theirs["id"], "weight_oz": 5})
    assert r.status_code == 401, r.text
    assert service_calls(delivery) == []


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-key")
def test_an_unauthenticated_order_calls_nothing_on_the_provider(shop, delivery):
    """POST /orders with a valid body for the shop's own customer but no key answers 401
    and buys nothing."""
    mine = make_customer(shop)
    r = api("POST", "/orders", json={"customer_id": mine["id"], "weight_oz": 5})
    assert r.status_code == 401, r.text
    assert service_calls(delivery) == [], "an unauthenticated order reached the provider"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-shop-isolation")
@pytest.mark.level("mid")
def test_another_shops_tracking_asks_the_provider_nothing(shop, delivery):
    """GET /orders/{id}/tracking of another shop's order answers 404 without asking the
    provider for the tracker."""
    other = make_shop()
    theirs = make_order(other, make_customer(other))
    r = api("GET", f"/orders/{theirs['id']}/tracking", shop)
    assert r.status_code == 404, r.text
    assert service_calls(delivery, "GET", "/v1/trackers/*") == [], "the tracker was read"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-shop-isolation")
@pytest.mark.level("mid")
@pytest.mark.parametrize("kind", ["customers", "orders"])
def test_another_shops_object_answers_like_a_missing_one(shop, kind):
    """Another shop's customer or order answers exactly what an id that does not exist
    answers: the same status and the same body."""
    other = make_shop()
    theirs = make_order(other, make_customer(other))
    object_id = theirs["customer_id"] if kind == "customers" else theirs["id"]
    taken = api("GET", f"/{kind}/{object_id}", shop)
    missing = api("GET", f"/{kind}/{MISSING}", shop)
    assert (taken.status_code, taken.json()) == (missing.status_code, missing.json()), (
        taken.text, missing.text)
    assert taken.status_code == 404


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-client-idempotency")
@pytest.mark.level("mid")
def test_another_shops_idempotency_key_never_answers_this_shops_order(shop):
    """A key remembered for one shop's order means nothing to another shop: the second shop
    sending the same key gets an order of its own, for its own customer."""
    key = unique("shared-key")
    first = make_order(shop, make_customer(shop), key=key)
    other = make_shop()
    theirs = make_customer(other)
    r = order(other, theirs, key=key)
    assert r.status_code == 201, r.text
    assert r.json()["id"] != first["id"], "another shop got this shop's order"
    assert r.json()["customer_id"] == theirs["id"]
