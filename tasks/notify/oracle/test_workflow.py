"""Workflow: per-recipient results, retries of dropped and failed provider calls without
double effects, refusals not retried, client retries, and the one-time delivered notice."""

import pytest
from conftest import (
    DELIVERED_AFTER,
    IN_TRANSIT_AFTER,
    OUT_FOR_DELIVERY_AFTER,
    REFUSED,
    email,
    make_customer,
    make_order,
    messages_of,
    order,
    provider_get,
    service_calls,
    shipments_of,
    track,
    unique,
)

pytestmark = [pytest.mark.visibility("private"), pytest.mark.level("leaf")]


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-recipient-results")
@pytest.mark.visibility("public")
def test_each_contact_gets_the_providers_result(shop):
    """notifications carry each recipient's own result (a bounced email, an invalid number, a
    stale device) and notification_status says partial."""
    good, gone = email("ada"), email("gone").replace("example.com", "bounce.test")
    contacts = [{"channel": "email", "to": good}, {"channel": "sms", "to": "555-0100"},
                {"channel": "email", "to": gone}, {"channel": "push", "to": "stale-device-1"},
                {"channel": "sms", "to": "+15551230003"}]
    placed = make_order(shop, make_customer(shop, contacts=contacts))
    got = [(n["channel"], n["to"], n["status"]) for n in placed["notifications"]]
    assert got == [("email", good, "delivered"), ("sms", "555-0100", "invalid"),
                   ("email", gone, "bounced"), ("push", "stale-device-1", "bounced"),
                   ("sms", "+15551230003", "delivered")], got
    assert placed["notification_status"] == "partial"
    ids = {n["channel"]: n["message_id"] for n in placed["notifications"]}
    held = {m["channel"]: m["id"] for m in messages_of(placed["id"])}
    assert ids == held, "each notification names its channel's message"


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-recipient-results")
def test_when_no_contact_is_reached_the_order_says_so(shop):
    """An order whose every contact bounced or is invalid still answers 201, with
    notification_status none_delivered."""
    contacts = [{"channel": "sms", "to": "+15557770000"},
                {"channel": "email", "to": "nobody@bounce.test"}]
    placed = make_order(shop, make_customer(shop, contacts=contacts))
    assert [n["status"] for n in placed["notifications"]] == ["bounced", "bounced"]
    assert placed["notification_status"] == "none_delivered"


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-retry")
@pytest.mark.visibility("public")
def test_a_dropped_message_call_is_retried_without_sending_twice(shop, faulty):
    """The provider sends the message, then drops the connection: the service retries with the
    same Idempotency-Key, the order is 201 with the real result, and the customer got one
    message."""
    to = email()
    customer = make_customer(shop, contacts=[{"channel": "email", "to": to}])
    faulty.fault("/v1/messages", "POST", drop=True, times=1)
    placed = make_order(shop, customer)
    assert placed["notifications"][0]["status"] == "delivered", placed
    held = messages_of(placed["id"])
    assert len(held) == 1, f"the customer got {len(held)} messages"
    assert placed["notifications"][0]["message_id"] == held[0]["id"]
    calls = service_calls(faulty, "POST", "/v1/messages")
    assert len(calls) == 2, f"{len(calls)} calls: one dropped, one retry"
    assert calls[0]["headers"].get("idempotency-key") == calls[1]["headers"].get(
        "idempotency-key"), "the retry must reuse the key"


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-retry")
def test_a_dropped_purchase_is_retried_and_bought_once(shop, faulty):
    """The provider buys the label, then drops the connection: the service retries safely and
    the order carries the label that was bought."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments/*/buy", "POST", drop=True, times=1)
    r = order(shop, customer)
    assert r.status_code == 201, r.text
    placed = r.json()
    held = provider_get(f"/v1/shipments/{placed['shipment']['id']}")
    assert held["tracking_code"] == placed["shipment"]["tracking_code"]
    assert len(shipments_of(placed["id"])) == 1, "one shipment per order, even after a retry"
    assert len(messages_of(placed["id"])) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-retry")
def test_a_passing_provider_error_is_retried(shop, faulty):
    """A 503 from the provider (once, on creating the shipment) is retried: the order is
    201 and the provider holds exactly one shipment for it."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments", "POST", status=503, times=1)
    r = order(shop, customer)
    assert r.status_code == 201, r.text
    placed = r.json()
    assert len(shipments_of(placed["id"])) == 1
    assert len(service_calls(faulty, "POST", "/v1/shipments")) == 2


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-client-idempotency")
@pytest.mark.level("mid")
@pytest.mark.visibility("public")
def test_a_client_retry_with_the_same_key_creates_nothing_more(shop, delivery):
    """POST /orders twice with the same Idempotency-Key answers the same order and calls the
    provider only for the first; another key makes another order."""
    customer = make_customer(shop)
    first = order(shop, customer, key="retry-1")
    assert first.status_code == 201, first.text
    before = len(service_calls(delivery))
    again = order(shop, customer, key="retry-1")
    assert again.status_code == 201, again.text
    assert again.json() == first.json()
    assert len(service_calls(delivery)) == before, "a retried order must not call the provider"
    assert len(messages_of(first.json()["id"])) == 1
    other = order(shop, customer, key="retry-2")
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-channel-failure")
def test_a_failing_channel_leaves_the_others_delivered(shop, faulty):
    """When the provider keeps failing to send one channel's message, those contacts are
    failed with message_id null, the other channels are delivered, and the order is 201."""
    to = email()
    customer = make_customer(shop, contacts=[{"channel": "sms", "to": "+15551230005"},
                                             {"channel": "email", "to": to}])
    faulty.fault("/v1/messages", "POST", status=500, times=3)
    placed = make_order(shop, customer)
    assert [(n["channel"], n["status"], n["message_id"] is None)
            for n in placed["notifications"]] == [("sms", "failed", True),
                                                  ("email", "delivered", False)], placed
    assert placed["notification_status"] == "partial"


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-delivered-notice")
@pytest.mark.level("root")
@pytest.mark.visibility("public")
def test_the_delivered_notice_is_sent_once(shop, delivery):
    """The first tracking check that sees delivered sends one message per channel; later checks
    send nothing more."""
    customer = make_customer(shop, contacts=[{"channel": "email", "to": email()},
                                             {"channel": "push", "to": "device-55555555"}])
    placed = make_order(shop, customer)
    assert len(messages_of(placed["id"])) == 2
    track(shop, placed)
    assert len(messages_of(placed["id"])) == 2, "nothing more before delivery"
    delivery.advance(DELIVERED_AFTER)
    for _ in range(3):
        r = track(shop, placed)
        assert r.status_code == 200 and r.json()["status"] == "delivered", r.text
    held = messages_of(placed["id"])
    assert [m["channel"] for m in held] == ["email", "push", "email", "push"], held
    assert held[2]["subject"] == "Your order was delivered"


@pytest.mark.category("workflow")
@pytest.mark.tier("base")
@pytest.mark.requirement("R-retry")
def test_a_garbled_answer_is_retried_and_the_label_bought_once(shop, faulty):
    """The provider buys the label but its answer arrives cut short (not JSON): the service
    retries with the same key and the order carries the one label bought."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments/*/buy", "POST", malformed=True, times=1)
    r = order(shop, customer)
    assert r.status_code == 201, r.text
    placed = r.json()
    held = provider_get(f"/v1/shipments/{placed['shipment']['id']}")
    assert held["status"] == "purchased"
    assert held["tracking_code"] == placed["shipment"]["tracking_code"]
    buys = service_calls(faulty, "POST", "/v1/shipments/*/buy")
    assert len(buys) == 2 and buys[1]["status"] == 200, [(b["status"], b["fault"]) for b in buys]


# -- evolved: one recipient rule per item, refusals, tracking failures, client keys -------


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-recipient-results")
@pytest.mark.parametrize("channel, to, status", [
    pytest.param("email", "someone@bounce.test", "bounced", id="email-bounced"),
    pytest.param("email", "not-an-email-address", "invalid", id="email-invalid"),
    pytest.param("sms", "+15559990000", "bounced", id="sms-bounced"),
    pytest.param("sms", "call me maybe", "invalid", id="sms-invalid"),
    pytest.param("push", "stale-token-0001", "bounced", id="push-bounced"),
    pytest.param("push", "tiny", "invalid", id="push-invalid"),
])
def test_an_unreached_contact_is_reported_as_the_provider_says(shop, channel, to, status):
    """A lone contact the provider could not reach is reported with the provider's status for
    it, and the order's notification_status is none_delivered."""
    placed = make_order(shop, make_customer(shop, contacts=[{"channel": channel, "to": to}]))
    (note,) = placed["notifications"]
    assert (note["channel"], note["to"], note["status"]) == (channel, to, status), note
    assert isinstance(note["message_id"], str), "the message was sent: it has an id"
    assert placed["notification_status"] == "none_delivered"


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-no-retry-4xx")
def test_a_refused_shipment_is_not_retried(shop, faulty):
    """The provider refuses to create the shipment (a 4xx, once): it is not tried again, the
    order answers 502 and nothing is bought."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments", "POST", status=422, body=REFUSED, times=1)
    r = order(shop, customer)
    assert r.status_code == 502, f"a refused shipment was retried? {r.status_code} {r.text}"
    assert len(service_calls(faulty, "POST", "/v1/shipments")) == 1
    assert service_calls(faulty, "POST", "/v1/shipments/*/buy") == []


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-no-retry-4xx")
def test_a_refused_message_is_not_retried(shop, faulty):
    """The provider refuses one channel's message (a 4xx, once): it is not tried again, that
    channel's contacts are failed with message_id null, the next channel is delivered."""
    customer = make_customer(shop, contacts=[{"channel": "sms", "to": "+15551230007"},
                                             {"channel": "email", "to": email()}])
    faulty.fault("/v1/messages", "POST", status=400, body=REFUSED, times=1)
    placed = make_order(shop, customer)
    assert [(n["status"], n["message_id"]) for n in placed["notifications"]][0] == (
        "failed", None), placed["notifications"]
    assert placed["notifications"][1]["status"] == "delivered"
    assert len(service_calls(faulty, "POST", "/v1/messages")) == 2, "one call per channel"


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-retry")
@pytest.mark.parametrize("path", ["/v1/shipments", "/v1/shipments/*/buy"],
                         ids=["shipment", "purchase"])
def test_a_call_that_keeps_failing_is_tried_three_times(shop, faulty, path):
    """A provider call that answers 5xx every time is tried exactly 3 times in all, then the
    order answers 502."""
    customer = make_customer(shop)
    faulty.fault(path, "POST", status=503)
    r = order(shop, customer)
    assert r.status_code == 502, r.text
    attempts = service_calls(faulty, "POST", path)
    assert len(attempts) == 3, f"{len(attempts)} attempts, 3 expected"
    keys = {a["headers"].get("idempotency-key") for a in attempts}
    assert len(keys) == 1 and None not in keys, f"every attempt carries the same key: {keys}"


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-retry")
def test_a_dropped_shipment_call_creates_one_shipment(shop, faulty):
    """The provider creates the shipment, then drops the connection: the retry carries the
    same key and the order has the one shipment the provider made."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments", "POST", drop=True, times=1)
    r = order(shop, customer)
    assert r.status_code == 201, r.text
    placed = r.json()
    (held,) = shipments_of(placed["id"])
    assert held["id"] == placed["shipment"]["id"]
    calls = service_calls(faulty, "POST", "/v1/shipments")
    assert len(calls) == 2 and len({c["headers"].get("idempotency-key") for c in calls}) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-tracking-failure")
@pytest.mark.level("mid")
def test_a_passing_tracker_error_is_retried(shop, faulty):
    """A 503 (once) reading the tracker is retried: the tracking check answers 200."""
    placed = make_order(shop, make_customer(shop))
    faulty.fault("/v1/trackers/*", "GET", status=503, times=1)
    r = track(shop, placed)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "pre_transit"
    assert len(service_calls(faulty, "GET", "/v1/trackers/*")) == 2


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-tracking-failure")
@pytest.mark.level("mid")
def test_a_tracker_that_keeps_failing_answers_502(shop, faulty):
    """When reading the tracker fails on every attempt, the tracking check answers 502 after 3
    attempts."""
    placed = make_order(shop, make_customer(shop))
    faulty.fault("/v1/trackers/*", "GET", status=500)
    r = track(shop, placed)
    assert r.status_code == 502, r.text
    assert len(service_calls(faulty, "GET", "/v1/trackers/*")) == 3


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-no-retry-4xx")
@pytest.mark.level("mid")
def test_a_refused_tracker_read_answers_502_at_once(shop, faulty):
    """The provider refuses the tracker read (a 4xx, once): it is not tried again and the
    tracking check answers 502."""
    placed = make_order(shop, make_customer(shop))
    faulty.fault("/v1/trackers/*", "GET", status=404, body=REFUSED, times=1)
    r = track(shop, placed)
    assert r.status_code == 502, r.text
    assert len(service_calls(faulty, "GET", "/v1/trackers/*")) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-client-idempotency")
@pytest.mark.level("mid")
def test_a_client_retry_with_another_body_answers_the_first_order(shop, delivery):
    """A key already used for a created order answers that order, even when the retry's body
    differs, and calls nothing on the provider."""
    customer = make_customer(shop)
    key = unique("key")
    first = make_order(shop, customer, weight=5, key=key)
    before = len(service_calls(delivery))
    r = order(shop, customer, weight=9, key=key)
    assert r.status_code == 201, r.text
    assert r.json()["id"] == first["id"] and r.json()["weight_oz"] == 5, r.json()
    assert len(service_calls(delivery)) == before


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-client-idempotency")
@pytest.mark.level("mid")
def test_a_key_whose_order_failed_is_not_remembered(shop, faulty):
    """An order that answered 502 is not remembered under its key: the client retrying with
    the same key once the provider recovered gets a new order, made on the provider."""
    customer = make_customer(shop)
    key = unique("key")
    faulty.fault("/v1/shipments", "POST", status=500, times=3)
    assert order(shop, customer, key=key).status_code == 502
    faulty.clear_faults()
    r = order(shop, customer, key=key)
    assert r.status_code == 201, r.text
    assert len(shipments_of(r.json()["id"])) == 1
    assert len(messages_of(r.json()["id"])) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-client-idempotency")
@pytest.mark.level("mid")
def test_orders_without_a_key_are_never_merged(shop, delivery):
    """Two identical orders sent without an Idempotency-Key are two orders, each shipped and
    notified."""
    customer = make_customer(shop)
    first, second = make_order(shop, customer), make_order(shop, customer)
    assert first["id"] != second["id"]
    assert len(service_calls(delivery, "POST", "/v1/shipments")) == 2
    assert len(messages_of(first["id"])) == len(messages_of(second["id"])) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-delivered-notice")
@pytest.mark.level("root")
@pytest.mark.parametrize("elapsed, status", [
    pytest.param(IN_TRANSIT_AFTER, "in_transit", id="in-transit"),
    pytest.param(OUT_FOR_DELIVERY_AFTER, "out_for_delivery", id="out-for-delivery"),
])
def test_no_delivered_notice_before_delivery(shop, delivery, elapsed, status):
    """Tracking checks before the parcel is delivered send no message."""
    placed = make_order(shop, make_customer(shop))
    delivery.advance(elapsed)
    for _ in range(2):
        r = track(shop, placed)
        assert r.status_code == 200 and r.json()["status"] == status, r.text
    assert len(messages_of(placed["id"])) == 1, "a notice went out before delivery"


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-delivered-notice")
@pytest.mark.level("root")
def test_a_dropped_delivered_notice_is_retried_without_sending_twice(shop, faulty):
    """The provider sends the delivered notice, then drops the connection: the service retries
    with the same key, and the customer gets the notice once."""
    placed = make_order(shop, make_customer(shop))
    faulty.advance(DELIVERED_AFTER)
    faulty.fault("/v1/messages", "POST", drop=True, times=1)
    before = len(service_calls(faulty, "POST", "/v1/messages"))
    r = track(shop, placed)
    assert r.status_code == 200 and r.json()["status"] == "delivered", r.text
    held = messages_of(placed["id"])
    assert len(held) == 2, f"{len(held)} messages: one shipped and one delivered notice"
    assert held[1]["subject"] == "Your order was delivered"
    calls = service_calls(faulty, "POST", "/v1/messages")[before:]
    assert len(calls) == 2 and len({c["headers"].get("idempotency-key") for c in calls}) == 1
