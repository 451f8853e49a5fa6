"""State: what was created reads back, ids are distinct and never reused, tracking follows
the provider, failures keep nothing, and concurrent orders stay consistent."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import (
    DELIVERED_AFTER,
    IN_TRANSIT_AFTER,
    OUT_FOR_DELIVERY_AFTER,
    api,
    body_of,
    email,
    make_customer,
    make_order,
    make_shop,
    order,
    provider_get,
    service_calls,
    shipments_of,
    track,
)

pytestmark = [pytest.mark.visibility("private"), pytest.mark.level("mid")]


@pytest.mark.category("state")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-customer-read")
@pytest.mark.visibility("public")
def test_a_customer_reads_back_as_created(shop):
    """GET /customers/{id} answers exactly what POST /customers answered."""
    created = make_customer(shop, contacts=[{"channel": "push", "to": "device-77777777"},
                                            {"channel": "email", "to": email()}])
    r = api("GET", f"/customers/{created['id']}", shop)
    assert r.status_code == 200, r.text
    assert r.json() == created


@pytest.mark.category("state")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-read")
@pytest.mark.visibility("public")
def test_an_order_reads_back_as_created(shop):
    """GET /orders/{id} answers what POST /orders answered (before any tracking check)."""
    placed = make_order(shop, make_customer(shop), weight=3, reference="R-3")
    r = api("GET", f"/orders/{placed['id']}", shop)
    assert r.status_code == 200, r.text
    assert r.json() == placed
    assert placed["reference"] == "R-3"


@pytest.mark.category("state")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-read")
@pytest.mark.level("leaf")
def test_an_order_without_a_reference_has_reference_null(shop):
    """An order placed without a reference answers reference null."""
    unnamed = make_order(shop, make_customer(shop))
    assert "reference" in unnamed and unnamed["reference"] is None, unnamed


@pytest.mark.category("state")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-shipment")
def test_each_order_has_its_own_id_shipment_and_label(shop):
    """Two orders for the same customer get different ids, shipments and tracking codes,
    each matching the provider's purchased shipment."""
    customer = make_customer(shop)
    first, second = make_order(shop, customer), make_order(shop, customer)
    assert first["id"] != second["id"]
    assert first["shipment"]["id"] != second["shipment"]["id"]
    assert first["shipment"]["tracking_code"] != second["shipment"]["tracking_code"]
    held = [provider_get(f"/v1/shipments/{p['shipment']['id']}") for p in (first, second)]
    assert [(h["status"], h["tracking_code"], h["tracker_id"]) for h in held] == [
        ("purchased", p["shipment"]["tracking_code"], p["shipment"]["tracker_id"])
        for p in (first, second)], held


@pytest.mark.category("state")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-tracking-live")
@pytest.mark.parametrize("elapsed, status", [
    pytest.param(0, "pre_transit", id="pre-transit"),
    pytest.param(IN_TRANSIT_AFTER, "in_transit", id="in-transit"),
    pytest.param(OUT_FOR_DELIVERY_AFTER, "out_for_delivery", id="out-for-delivery"),
    pytest.param(DELIVERED_AFTER, "delivered", id="delivered"),
])
def test_tracking_follows_the_provider_and_updates_the_order(shop, delivery, elapsed, status):
    """A tracking check reports the tracker's status now (not what an earlier check saw) with
    its events so far, and the order's status becomes it."""
    placed = make_order(shop, make_customer(shop))
    assert track(shop, placed).json()["status"] == "pre_transit"
    delivery.advance(elapsed)
    r = track(shop, placed)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == status, r.json()
    assert r.json()["events"][-1]["status"] == status, r.json()["events"]
    assert api("GET", f"/orders/{placed['id']}", shop).json()["status"] == status


# -- evolved ------------------------------------------------------------------------------


def _ids(kind):
    """Ids of four objects of `kind`, two made by each of two shops."""
    shops = [make_shop(), make_shop()]
    if kind == "shops":
        return [s["id"] for s in shops + [make_shop(), make_shop()]]
    if kind == "customers":
        return [make_customer(s)["id"] for s in shops for _ in range(2)]
    made = []
    for s in shops:
        customer = make_customer(s)
        made += [make_order(s, customer)["id"], make_order(s, customer)["id"]]
    return made


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-ids")
@pytest.mark.parametrize("kind", ["shops", "customers", "orders"])
def test_ids_are_positive_integers_never_reused(kind):
    """Ids of shops, customers and orders (across shops) are positive integers, all
    different."""
    ids = _ids(kind)
    assert all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids), ids
    assert len(set(ids)) == len(ids), f"an id was reused: {ids}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-shop-create")
@pytest.mark.level("leaf")
def test_every_shop_gets_its_own_api_key():
    """Two shops with the same name get different API keys, each opening only its own
    customers."""
    first = api("POST", "/shops", json={"name": "Twin"}).json()
    second = api("POST", "/shops", json={"name": "Twin"}).json()
    assert first["api_key"] != second["api_key"]
    mine = make_customer(first)
    assert api("GET", f"/customers/{mine['id']}", first).status_code == 200
    assert api("GET", f"/customers/{mine['id']}", second).status_code == 404


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-tracking-live")
def test_tracking_events_are_the_trackers_details(shop, delivery):
    """events are the tracker's tracking_details as the provider holds them now, `at` being
    their `datetime`."""
    placed = make_order(shop, make_customer(shop))
    delivery.advance(IN_TRANSIT_AFTER)
    r = track(shop, placed)
    assert r.status_code == 200, r.text
    held = provider_get(f"/v1/trackers/{placed['shipment']['tracker_id']}")
    assert r.json()["events"] == [{"status": d["status"], "at": d["datetime"]}
                                  for d in held["tracking_details"]]
    assert r.json()["status"] == held["status"] == "in_transit"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-order-failure")
def test_an_order_that_failed_is_not_kept(shop, faulty):
    """When the label cannot be bought the answer is 502 and no order is kept: the id the
    service gave the provider (reference order-<id>) reads 404."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments/*/buy", "POST", status=500)
    r = order(shop, customer)
    assert r.status_code == 502, r.text
    (first, *_) = service_calls(faulty, "POST", "/v1/shipments")
    reference = body_of(first)["reference"]
    assert reference.startswith("order-"), reference
    r = api("GET", f"/orders/{reference.removeprefix('order-')}", shop)
    assert r.status_code == 404, f"the failed order was kept: {r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-tracking-live")
def test_a_failed_tracking_check_leaves_the_order_as_it_was(shop, faulty):
    """A tracking check the provider fails answers 502 and leaves the order's status at what
    the last good check saw."""
    placed = make_order(shop, make_customer(shop))
    faulty.advance(IN_TRANSIT_AFTER)
    assert track(shop, placed).json()["status"] == "in_transit"
    faulty.advance(DELIVERED_AFTER)
    faulty.fault("/v1/trackers/*", "GET", status=500)
    r = track(shop, placed)
    assert r.status_code == 502, r.text
    assert api("GET", f"/orders/{placed['id']}", shop).json()["status"] == "in_transit"


PARALLEL = 8


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-concurrency")
@pytest.mark.level("root")
def test_parallel_orders_stay_distinct_and_complete(shop, delivery):
    """8 orders placed at once are all 201 with 8 different ids, each with its own shipment
    for its own weight, and each reads back; the provider holds one bought shipment per
    order."""
    customer = make_customer(shop)
    weights = [5 + i for i in range(PARALLEL)]
    with ThreadPoolExecutor(PARALLEL) as pool:
        answers = list(pool.map(lambda w: order(shop, customer, weight=w), weights))
    assert [r.status_code for r in answers] == [201] * PARALLEL, [r.text for r in answers]
    placed = [r.json() for r in answers]
    ids = [p["id"] for p in placed]
    assert len(set(ids)) == PARALLEL, f"ids shared between parallel orders: {ids}"
    assert len({p["shipment"]["id"] for p in placed}) == PARALLEL
    assert [p["weight_oz"] for p in placed] == weights
    held = [shipments_of(p["id"]) for p in placed]
    assert [[(h["id"], h["status"], h["parcel"]["weight_oz"]) for h in found]
            for found in held] == [[(p["shipment"]["id"], "purchased", p["weight_oz"])]
                                   for p in placed], held
    assert [api("GET", f"/orders/{p['id']}", shop).json() for p in placed] == placed
    assert len(service_calls(delivery, "POST", "/v1/shipments/*/buy")) == PARALLEL
