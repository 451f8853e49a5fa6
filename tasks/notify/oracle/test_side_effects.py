"""Side effects: what the service asks of the provider, read from the provider's journal
and from its objects."""

import pytest
from conftest import (
    DELIVERED_AFTER,
    HOME,
    REFUSED,
    WAREHOUSE,
    api,
    body_of,
    email,
    make_customer,
    make_order,
    messages_of,
    order,
    provider_get,
    recipients,
    service_calls,
    shipments_of,
    track,
)

pytestmark = [pytest.mark.visibility("private"), pytest.mark.level("leaf")]

R1 = pytest.mark.tier("evolved-r1")
R2 = pytest.mark.tier("evolved-r2")


@pytest.mark.category("side_effects")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-shipment")
@pytest.mark.visibility("public")
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
    assert len(shipments_of(placed["id"])) == 1


@pytest.mark.category("side_effects")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-cheapest")
@pytest.mark.visibility("public")
@pytest.mark.parametrize("weight, service", [
    pytest.param(10, "GroundAdvantage", id="10oz"),
    pytest.param(29.5, "Ground", id="29.5oz"),
    pytest.param(48, "Ground", id="48oz"),
    pytest.param(0.5, "GroundAdvantage", id="0.5oz", marks=R1),
    pytest.param(1120, "Ground", id="1120oz", marks=R1),
    pytest.param(30, "Ground", id="30oz-tie-fewer-days", marks=R2),
])
def test_the_cheapest_rate_is_bought(shop, delivery, weight, service):
    """The rate bought is the lowest amount (ties: fewer delivery_days), whichever carrier
    that is for the weight: light parcels and heavy ones differ, and at 30 oz two rates cost
    the same."""
    placed = make_order(shop, make_customer(shop), weight=weight)
    held = provider_get(f"/v1/shipments/{placed['shipment']['id']}")
    best = min(held["rates"], key=lambda r: (r["amount"], r["delivery_days"]))
    assert held["selected_rate"]["id"] == best["id"], (weight, held["selected_rate"])
    assert best["service"] == service
    assert (placed["shipment"]["carrier"], placed["shipment"]["service"],
            placed["shipment"]["amount"]) == (best["carrier"], best["service"], best["amount"])
    assert len(service_calls(delivery, "POST", "/v1/shipments/*/buy")) == 1


@pytest.mark.category("side_effects")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-messages")
@pytest.mark.visibility("public")
def test_one_message_per_channel_to_all_its_contacts(shop, delivery):
    """One message per channel, in the order channels first appear, to every contact of that
    channel in order, with reference order-<id>, the tracking code in the body and, for
    email, the subject 'Your order has shipped'."""
    first, second = email("ada"), email("bob")
    contacts = [{"channel": "sms", "to": "+15551230001"}, {"channel": "email", "to": first},
                {"channel": "sms", "to": "+15551230002"}, {"channel": "email", "to": second}]
    placed = make_order(shop, make_customer(shop, contacts=contacts))
    sent = [body_of(c) for c in service_calls(delivery, "POST", "/v1/messages")]
    assert [(m["channel"], recipients(m)) for m in sent] == [
        ("sms", ["+15551230001", "+15551230002"]), ("email", [first, second])]
    code = placed["shipment"]["tracking_code"]
    for message in sent:
        assert message["reference"] == f"order-{placed['id']}"
        assert code in message["body"], message
    assert sent[1]["subject"] == "Your order has shipped"
    assert len(messages_of(placed["id"])) == 2


@pytest.mark.category("side_effects")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-provider-keys")
@pytest.mark.level("mid")
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
@pytest.mark.tier("base")
@pytest.mark.requirement("R-no-extra-calls")
@pytest.mark.level("mid")
def test_customers_and_reads_never_call_the_provider(shop, delivery):
    """Creating and reading customers, and reading an order, call nothing on the provider."""
    customer = make_customer(shop)
    assert api("GET", f"/customers/{customer['id']}", shop).status_code == 200
    assert service_calls(delivery) == []
    placed = make_order(shop, customer)
    before = len(service_calls(delivery))
    assert api("GET", f"/orders/{placed['id']}", shop).status_code == 200
    assert len(service_calls(delivery)) == before, "reading an order called the provider"


@pytest.mark.category("side_effects")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-no-extra-calls")
def test_an_order_makes_only_its_three_kinds_of_call(shop, delivery):
    """An order calls exactly: create the shipment, buy it, one message per channel."""
    placed = make_order(shop, make_customer(shop))
    calls = [(c["method"], c["path"]) for c in service_calls(delivery)]
    assert calls == [("POST", "/v1/shipments"),
                     ("POST", f"/v1/shipments/{placed['shipment']['id']}/buy"),
                     ("POST", "/v1/messages")], calls


@pytest.mark.category("side_effects")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-order-failure")
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


# -- evolved ------------------------------------------------------------------------------


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-shipment")
def test_addresses_and_parcel_are_sent_inline(shop, delivery):
    """The shipment carries both addresses and the parcel as objects, and nothing else is
    created on the provider first (no addresses, no parcels)."""
    make_order(shop, make_customer(shop))
    (call,) = service_calls(delivery, "POST", "/v1/shipments")
    sent = body_of(call)
    for name in ("to_address", "from_address", "parcel"):
        assert isinstance(sent[name], dict), f"{name} = {sent[name]!r}"
    created = [c["path"] for c in service_calls(delivery, "POST")
               if c["path"].startswith(("/v1/addresses", "/v1/parcels"))]
    assert created == [], created


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-shipment")
def test_the_optional_address_fields_reach_the_shipment(shop, delivery):
    """A customer's street2 and state are part of the address shipped to."""
    address = {"street1": "1 Main St", "street2": "Apt 4", "city": "Springfield",
               "state": "IL", "zip": "62701", "country": "US"}
    make_order(shop, make_customer(shop, address=address, name="Grace Hopper"))
    (call,) = service_calls(delivery, "POST", "/v1/shipments")
    to_address = body_of(call)["to_address"]
    assert {k: to_address.get(k) for k in address} == address, to_address


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-messages")
def test_the_contacts_of_one_channel_share_one_message(shop, delivery):
    """Three email contacts get one email message with the three of them as recipients, in
    contact order, not three messages."""
    addresses = [email("ann"), email("ben"), email("cy")]
    placed = make_order(shop, make_customer(
        shop, contacts=[{"channel": "email", "to": a} for a in addresses]))
    (call,) = service_calls(delivery, "POST", "/v1/messages")
    assert recipients(body_of(call)) == addresses
    assert len({n["message_id"] for n in placed["notifications"]}) == 1, placed


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-tracking-live")
@pytest.mark.level("mid")
def test_every_tracking_check_asks_the_provider(shop, delivery):
    """Each tracking check reads the order's tracker on the provider (never a cached copy),
    and does nothing else before delivery."""
    placed = make_order(shop, make_customer(shop))
    before = len(service_calls(delivery))
    for _ in range(3):
        assert track(shop, placed).status_code == 200
    calls = [(c["method"], c["path"]) for c in service_calls(delivery)][before:]
    assert calls == [("GET", f"/v1/trackers/{placed['shipment']['tracker_id']}")] * 3, calls


def _deliver(shop, delivery, contacts):
    """Place an order, let the parcel arrive and check tracking once: (order, the messages
    sent for that check)."""
    placed = make_order(shop, make_customer(shop, contacts=contacts))
    before = len(service_calls(delivery, "POST", "/v1/messages"))
    delivery.advance(DELIVERED_AFTER)
    r = track(shop, placed)
    assert r.status_code == 200 and r.json()["status"] == "delivered", r.text
    return placed, service_calls(delivery, "POST", "/v1/messages")[before:]


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-delivered-notice")
@pytest.mark.level("root")
def test_the_delivered_notice_reaches_the_same_contacts(shop, delivery):
    """The delivered notice is one message per channel, channels in first-appearance order,
    each to that channel's contacts in order, with reference order-<id>, a body saying the
    parcel was delivered and, for email, the subject 'Your order was delivered'."""
    mail = email()
    contacts = [{"channel": "sms", "to": "+15551230011"}, {"channel": "email", "to": mail},
                {"channel": "sms", "to": "+15551230012"}, {"channel": "push", "to": "device-4242"}]
    placed, calls = _deliver(shop, delivery, contacts)
    sent = [body_of(c) for c in calls]
    assert [(m["channel"], recipients(m)) for m in sent] == [
        ("sms", ["+15551230011", "+15551230012"]), ("email", [mail]),
        ("push", ["device-4242"])], sent
    for message in sent:
        assert message["reference"] == f"order-{placed['id']}"
        assert "deliver" in message["body"].lower(), message["body"]
    assert sent[1]["subject"] == "Your order was delivered"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-provider-keys")
@pytest.mark.level("root")
def test_the_delivered_notice_has_keys_of_its_own(shop, delivery):
    """The delivered notice's messages carry Idempotency-Keys of their own, unlike any key the
    order used when it shipped (a reused key would get the shipped notice answered again, or
    a conflict), and the provider sends them."""
    placed, calls = _deliver(shop, delivery, [{"channel": "email", "to": email()},
                                              {"channel": "push", "to": "device-31313131"}])
    posts = service_calls(delivery, "POST")
    earlier = {c["headers"].get("idempotency-key") for c in posts[:len(posts) - len(calls)]}
    keys = [c["headers"].get("idempotency-key") for c in calls]
    assert all(keys) and len(set(keys)) == len(keys) == 2, keys
    assert not set(keys) & earlier, f"a delivered notice reuses a key: {keys} vs {earlier}"
    assert [c["status"] for c in calls] == [201, 201], [c["response"] for c in calls]
    assert len(messages_of(placed["id"])) == 4, "shipped and delivered notices, per channel"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-delivered-notice")
@pytest.mark.level("root")
def test_checks_after_delivery_only_read_the_tracker(shop, delivery):
    """Once the delivered notice went out, later tracking checks read the tracker and send
    nothing."""
    placed, _ = _deliver(shop, delivery, [{"channel": "email", "to": email()}])
    before = len(service_calls(delivery))
    for _ in range(2):
        assert track(shop, placed).status_code == 200
    calls = [(c["method"], c["path"]) for c in service_calls(delivery)][before:]
    assert calls == [("GET", f"/v1/trackers/{placed['shipment']['tracker_id']}")] * 2, calls


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-no-retry-4xx")
def test_a_refused_purchase_sends_no_message(shop, faulty):
    """The provider refuses the purchase (a 4xx): the order answers 502 at once, the purchase
    is not tried again, and no message is sent."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments/*/buy", "POST", status=422, body=REFUSED, times=1)
    r = order(shop, customer)
    assert r.status_code == 502, r.text
    assert len(service_calls(faulty, "POST", "/v1/shipments/*/buy")) == 1
    assert service_calls(faulty, "POST", "/v1/messages") == []
