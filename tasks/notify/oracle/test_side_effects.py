"""Side effects: what the service asks of the provider, read from the provider's journal
and from its objects."""

import pytest
from conftest import (
    HOME,
    WAREHOUSE,
    api,
    body_of,
    email,
    make_customer,
    make_order,
    messages_of,
    provider_get,
    service_calls,
)


@pytest.mark.category("side_effects")
def test_one_shipment_from_the_warehouse_to_the_customer(shop, delivery):
    """An order creates exactly one shipment: to the customer's address and name, from the
    warehouse, for a parcel of weight_oz, with reference order-<id>."""
    customer = make_customer(shop, name="Ada Lovelace")
    placed = make_order(shop, customer, weight=21.5)
    (call,) = service_calls(delivery, "POST", "/v1/shipments")
    sent = body_of(call)
    assert {k: sent["to_address"].get(k) for k in HOME} == HOME, sent["to_address"]
    assert sent["to_address"].get("name") == "Ada Lovelace", sent["to_address"]
    assert {k: sent["from_address"].get(k) for k in WAREHOUSE} == WAREHOUSE, sent
    assert sent["parcel"]["weight_oz"] == 21.5, sent["parcel"]
    assert sent["reference"] == f"order-{placed['id']}"
    assert len(provider_get("/v1/shipments", reference=f"order-{placed['id']}")["data"]) == 1


@pytest.mark.category("side_effects")
def test_the_cheapest_rate_is_bought(shop, delivery):
    """The rate bought is the lowest amount (ties: fewer delivery_days), whichever carrier
    that is for the weight: light parcels and heavy ones differ."""
    customer = make_customer(shop)
    for weight, service in [(10, "GroundAdvantage"), (29.5, "Ground"), (48, "Ground")]:
        placed = make_order(shop, customer, weight=weight)
        held = provider_get(f"/v1/shipments/{placed['shipment']['id']}")
        best = min(held["rates"], key=lambda r: (r["amount"], r["delivery_days"]))
        assert held["selected_rate"]["id"] == best["id"], (weight, held["selected_rate"])
        assert best["service"] == service
        assert (placed["shipment"]["carrier"], placed["shipment"]["service"],
                placed["shipment"]["amount"]) == (best["carrier"], best["service"],
                                                  best["amount"])
    assert len(service_calls(delivery, "POST", "/v1/shipments/*/buy")) == 3


@pytest.mark.category("side_effects")
def test_one_message_per_channel_to_all_its_contacts(shop, delivery):
    """One message per channel, in the order channels first appear, to every contact of that
    channel in order, with reference order-<id>, the tracking code in the body and, for
    email, the subject 'Your order has shipped'."""
    first, second = email("ada"), email("bob")
    contacts = [{"channel": "sms", "to": "+15551230001"}, {"channel": "email", "to": first},
                {"channel": "sms", "to": "+15551230002"}, {"channel": "email", "to": second}]
    placed = make_order(shop, make_customer(shop, contacts=contacts))
    calls = service_calls(delivery, "POST", "/v1/messages")
    sent = [body_of(c) for c in calls]
    assert [(m["channel"], m["to"] if isinstance(m["to"], list) else [m["to"]]) for m in sent] == [
        ("sms", ["+15551230001", "+15551230002"]), ("email", [first, second])]
    code = placed["shipment"]["tracking_code"]
    for message in sent:
        assert message["reference"] == f"order-{placed['id']}"
        assert code in message["body"], message
    assert sent[1]["subject"] == "Your order has shipped"
    assert len(messages_of(placed["id"])) == 2


@pytest.mark.category("side_effects")
def test_every_provider_post_has_its_own_idempotency_key(shop, delivery):
    """Every POST to the provider carries an Idempotency-Key; no two steps of one order and no
    two orders share one."""
    customer = make_customer(shop, contacts=[{"channel": "email", "to": email()},
                                             {"channel": "push", "to": "device-12345678"}])
    make_order(shop, customer)
    make_order(shop, customer)
    posts = service_calls(delivery, "POST")
    assert len(posts) == 8, [c["path"] for c in posts]
    keys = [c["headers"].get("idempotency-key") for c in posts]
    assert all(keys), f"a POST without Idempotency-Key: {[c['path'] for c in posts]}"
    assert len(set(keys)) == len(keys), f"a key is shared: {keys}"


@pytest.mark.category("side_effects")
def test_customers_and_reads_never_call_the_provider(shop, delivery):
    """Creating and reading customers, and reading an order, call nothing on the provider;
    an order calls exactly shipments, buy and one message per channel."""
    customer = make_customer(shop)
    api("GET", f"/customers/{customer['id']}", shop)
    assert service_calls(delivery) == []
    placed = make_order(shop, customer)
    api("GET", f"/orders/{placed['id']}", shop)
    calls = [(c["method"], c["path"]) for c in service_calls(delivery)]
    assert calls == [("POST", "/v1/shipments"),
                     ("POST", f"/v1/shipments/{placed['shipment']['id']}/buy"),
                     ("POST", "/v1/messages")], calls


@pytest.mark.category("side_effects")
def test_a_refused_shipment_sends_no_message(shop, faulty):
    """When the provider keeps failing to create the shipment, POST /orders answers 502,
    nothing is bought and no message is sent."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments", "POST", status=500)
    r = api("POST", "/orders", shop, json={"customer_id": customer["id"], "weight_oz": 4})
    assert r.status_code == 502, r.text
    assert service_calls(faulty, "POST", "/v1/messages") == []
    assert service_calls(faulty, "POST", "/v1/shipments/*/buy") == []
    attempts = service_calls(faulty, "POST", "/v1/shipments")
    assert 1 <= len(attempts) <= 3, f"{len(attempts)} attempts (at most 3)"
