"""Authorization: shop API keys (401), shops see only their own objects (404), and the
service authenticates to the provider."""

import pytest
from conftest import HOME, api, make_customer, make_order, make_shop, order, service_calls


@pytest.mark.category("authorization")
def test_missing_or_unknown_key_is_401(shop):
    """Every endpoint but /health and POST /shops answers 401 without a key, with another
    scheme, or with an unknown key."""
    placed = make_order(shop, make_customer(shop))
    customer = {"name": "Ada", "address": HOME,
                "contacts": [{"channel": "email", "to": "ada@example.com"}]}
    paths = [("POST", "/customers", customer),
             ("GET", f"/customers/{placed['customer_id']}", None),
             ("POST", "/orders", {"customer_id": placed["customer_id"], "weight_oz": 5}),
             ("GET", f"/orders/{placed['id']}", None),
             ("GET", f"/orders/{placed['id']}/tracking", None)]
    for header in [None, "Bearer nope-" + shop["api_key"], f"Token {shop['api_key']}",
                   shop["api_key"]]:
        for method, path, body in paths:  # valid bodies: only the key is wrong
            headers = {"Authorization": header} if header else {}
            r = api(method, path, headers=headers, json=body)
            assert r.status_code == 401, f"{method} {path} with {header!r}: {r.status_code}"


@pytest.mark.category("authorization")
def test_another_shops_customer_is_404_and_cannot_be_shipped_to(shop, delivery):
    """GET /customers/{id} and POST /orders for another shop's customer answer 404, and
    the provider is not called."""
    theirs = make_customer(make_shop())
    r = api("GET", f"/customers/{theirs['id']}", shop)
    assert r.status_code == 404, r.text
    r = order(shop, theirs)
    assert r.status_code == 404, r.text
    assert service_calls(delivery) == [], "nothing may be sent for another shop's customer"


@pytest.mark.category("authorization")
def test_another_shops_order_is_404(shop):
    """GET /orders/{id} and GET /orders/{id}/tracking of another shop's order answer 404."""
    other = make_shop()
    theirs = make_order(other, make_customer(other))
    for path in (f"/orders/{theirs['id']}", f"/orders/{theirs['id']}/tracking"):
        r = api("GET", path, shop)
        assert r.status_code == 404, f"GET {path}: {r.status_code} {r.text}"
    assert api("GET", f"/orders/{theirs['id']}", other).status_code == 200


@pytest.mark.category("authorization")
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
