"""API surface: routes, status codes and response shapes."""

import re

import pytest
from conftest import (
    DELIVERED_AFTER,
    MISSING,
    api,
    email,
    make_customer,
    make_order,
    track,
)

pytestmark = [pytest.mark.visibility("public"), pytest.mark.level("leaf")]

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


@pytest.mark.category("api_surface")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-health")
def test_health_returns_ok():
    """GET /health answers 200 {"status": "ok"} without authentication."""
    r = api("GET", "/health")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok"}


@pytest.mark.category("api_surface")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-shop-create")
def test_create_shop_returns_id_name_and_api_key():
    """POST /shops answers 201 {id (integer), name, api_key (non-empty string)}."""
    r = api("POST", "/shops", json={"name": "Forge & Co"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert isinstance(body.get("id"), int) and not isinstance(body["id"], bool), body
    assert body.get("name") == "Forge & Co", body
    assert isinstance(body.get("api_key"), str) and body["api_key"].strip(), body


@pytest.mark.category("api_surface")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-customer-create")
def test_create_customer_echoes_address_and_contacts(shop):
    """POST /customers answers 201 with an integer id, the name, the address and the
    contacts in the order given."""
    contacts = [{"channel": "sms", "to": "+15551230001"},
                {"channel": "email", "to": email()}, {"channel": "push", "to": "device-abcd1234"}]
    address = {"street1": "1 Main St", "street2": "Apt 4", "city": "Springfield",
               "state": "IL", "zip": "62701", "country": "US"}
    r = api("POST", "/customers", shop, json={"name": "Grace Hopper", "address": address,
                                              "contacts": contacts})
    assert r.status_code == 201, r.text
    body = r.json()
    assert isinstance(body.get("id"), int), body
    assert body["name"] == "Grace Hopper"
    assert body["address"] == address, body
    assert body["contacts"] == contacts, body


@pytest.mark.category("api_surface")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-shape")
def test_create_order_answers_the_documented_shape(shop):
    """POST /orders answers 201 with id, customer_id, reference, weight_oz, status
    label_purchased, shipment {id, carrier, service, amount, tracking_code, tracker_id},
    one notification per contact and notification_status."""
    to = email()
    customer = make_customer(shop, contacts=[{"channel": "email", "to": to}])
    r = api("POST", "/orders", shop, json={"customer_id": customer["id"], "weight_oz": 12.5,
                                           "reference": "A-1001"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert isinstance(body.get("id"), int), body
    assert (body["customer_id"], body["reference"], body["weight_oz"]) == (
        customer["id"], "A-1001", 12.5)
    assert body["status"] == "label_purchased"
    shipment = body["shipment"]
    assert set(shipment) >= {"id", "carrier", "service", "amount", "tracking_code",
                             "tracker_id"}, shipment
    assert shipment["id"].startswith("shp_") and shipment["tracker_id"].startswith("trk_")
    assert isinstance(shipment["amount"], int)
    (note,) = body["notifications"]
    assert note["channel"] == "email" and note["to"] == to
    assert note["status"] == "delivered" and note["message_id"].startswith("msg_"), note
    assert body["notification_status"] == "all_delivered"


@pytest.mark.category("api_surface")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-tracking-shape")
@pytest.mark.level("mid")
def test_tracking_answers_status_and_events(shop):
    """GET /orders/{id}/tracking answers 200 {order_id, tracking_code, status, events:
    [{status, at}]} with RFC 3339 times."""
    placed = make_order(shop, make_customer(shop))
    r = track(shop, placed)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["order_id"] == placed["id"]
    assert body["tracking_code"] == placed["shipment"]["tracking_code"]
    assert body["status"] == "pre_transit"
    assert [e["status"] for e in body["events"]] == ["pre_transit"], body
    assert all(TIME.fullmatch(e["at"]) for e in body["events"]), body


def _unauthenticated(shop):
    return api("GET", f"/customers/{make_customer(shop)['id']}")


def _missing(shop):
    return api("GET", f"/customers/{MISSING}", shop)


def _invalid(shop):
    return api("POST", "/shops", json={"name": ""})


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-error-shape")
@pytest.mark.visibility("private")
@pytest.mark.parametrize("status, send", [
    pytest.param(401, _unauthenticated, id="401"),
    pytest.param(404, _missing, id="404"),
    pytest.param(422, _invalid, id="422"),
])
def test_errors_answer_a_detail_message(shop, status, send):
    """An error answers its status with a JSON body {"detail": "<a message>"}."""
    r = send(shop)
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body, dict) and isinstance(body.get("detail"), str), body


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-tracking-shape")
@pytest.mark.level("root")
@pytest.mark.visibility("private")
def test_a_delivered_parcel_lists_every_event_in_time_order(shop, delivery):
    """Once delivered, tracking lists the four statuses, each at an RFC 3339 time, oldest
    first."""
    placed = make_order(shop, make_customer(shop))
    delivery.advance(DELIVERED_AFTER)
    r = track(shop, placed)
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    assert [e["status"] for e in events] == ["pre_transit", "in_transit", "out_for_delivery",
                                             "delivered"], events
    assert all(TIME.fullmatch(e["at"]) for e in events), events
    stamps = [e["at"] for e in events]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4, stamps
