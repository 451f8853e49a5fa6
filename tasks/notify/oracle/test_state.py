"""State: what was created reads back, orders are distinct, tracking follows the provider."""

import pytest
from conftest import DELIVERED_AFTER, api, email, make_customer, make_order, provider_get


@pytest.mark.category("state")
def test_a_customer_reads_back_as_created(shop):
    """GET /customers/{id} answers exactly what POST /customers answered."""
    created = make_customer(shop, contacts=[{"channel": "push", "to": "device-77777777"},
                                            {"channel": "email", "to": email()}])
    r = api("GET", f"/customers/{created['id']}", shop)
    assert r.status_code == 200, r.text
    assert r.json() == created


@pytest.mark.category("state")
def test_an_order_reads_back_as_created(shop):
    """GET /orders/{id} answers what POST /orders answered (before any tracking check)."""
    placed = make_order(shop, make_customer(shop), weight=3, reference="R-3")
    r = api("GET", f"/orders/{placed['id']}", shop)
    assert r.status_code == 200, r.text
    assert r.json() == placed
    assert placed["reference"] == "R-3"
    unnamed = make_order(shop, make_customer(shop))
    assert unnamed["reference"] is None, unnamed


@pytest.mark.category("state")
def test_each_order_has_its_own_id_shipment_and_label(shop):
    """Two orders for the same customer get different ids, shipments and tracking codes,
    each matching the provider's purchased shipment."""
    customer = make_customer(shop)
    first, second = make_order(shop, customer), make_order(shop, customer)
    assert first["id"] != second["id"]
    assert first["shipment"]["id"] != second["shipment"]["id"]
    assert first["shipment"]["tracking_code"] != second["shipment"]["tracking_code"]
    for placed in (first, second):
        held = provider_get(f"/v1/shipments/{placed['shipment']['id']}")
        assert held["status"] == "purchased"
        assert held["tracking_code"] == placed["shipment"]["tracking_code"]
        assert held["tracker_id"] == placed["shipment"]["tracker_id"]


@pytest.mark.category("state")
def test_tracking_follows_the_provider_and_updates_the_order(shop, delivery):
    """Each tracking check reports the tracker's status now (never cached), and the order's
    status becomes it."""
    placed = make_order(shop, make_customer(shop))
    seen = []
    for step in (0, 3_600, 86_400 - 3_600, DELIVERED_AFTER - 86_400):
        delivery.advance(step)
        r = api("GET", f"/orders/{placed['id']}/tracking", shop)
        assert r.status_code == 200, r.text
        seen.append(r.json()["status"])
        assert api("GET", f"/orders/{placed['id']}", shop).json()["status"] == seen[-1]
    assert seen == ["pre_transit", "in_transit", "out_for_delivery", "delivered"]
    events = r.json()["events"]
    assert [e["status"] for e in events] == seen
