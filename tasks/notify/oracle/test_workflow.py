"""Workflow: per-recipient results, retries of dropped and failed provider calls without
double effects, client retries, and the one-time delivered notice."""

import pytest
from conftest import (
    DELIVERED_AFTER,
    api,
    email,
    make_customer,
    make_order,
    messages_of,
    order,
    provider_get,
    service_calls,
)


@pytest.mark.category("workflow")
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
def test_when_no_contact_is_reached_the_order_says_so(shop):
    """An order whose every contact bounced or is invalid still answers 201, with
    notification_status none_delivered."""
    contacts = [{"channel": "sms", "to": "+15557770000"},
                {"channel": "email", "to": "nobody@bounce.test"}]
    placed = make_order(shop, make_customer(shop, contacts=contacts))
    assert [n["status"] for n in placed["notifications"]] == ["bounced", "bounced"]
    assert placed["notification_status"] == "none_delivered"


@pytest.mark.category("workflow")
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
    shipments = provider_get("/v1/shipments", reference=f"order-{placed['id']}")["data"]
    assert len(shipments) == 1, "one shipment per order, even after a retry"
    assert len(messages_of(placed["id"])) == 1


@pytest.mark.category("workflow")
def test_a_passing_provider_error_is_retried(shop, faulty):
    """A 503 from the provider (once, on creating the shipment) is retried: the order is
    201 and the provider holds exactly one shipment for it."""
    customer = make_customer(shop)
    faulty.fault("/v1/shipments", "POST", status=503, times=1)
    r = order(shop, customer)
    assert r.status_code == 201, r.text
    placed = r.json()
    assert len(provider_get("/v1/shipments", reference=f"order-{placed['id']}")["data"]) == 1
    assert len(service_calls(faulty, "POST", "/v1/shipments")) == 2


@pytest.mark.category("workflow")
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
def test_the_delivered_notice_is_sent_once(shop, delivery):
    """The first tracking check that sees delivered sends one message per channel; later checks
    send nothing more."""
    customer = make_customer(shop, contacts=[{"channel": "email", "to": email()},
                                             {"channel": "push", "to": "device-55555555"}])
    placed = make_order(shop, customer)
    assert len(messages_of(placed["id"])) == 2
    api("GET", f"/orders/{placed['id']}/tracking", shop)
    assert len(messages_of(placed["id"])) == 2, "nothing more before delivery"
    delivery.advance(DELIVERED_AFTER)
    for _ in range(3):
        r = api("GET", f"/orders/{placed['id']}/tracking", shop)
        assert r.status_code == 200 and r.json()["status"] == "delivered", r.text
    held = messages_of(placed["id"])
    assert [m["channel"] for m in held] == ["email", "push", "email", "push"], held
    assert held[2]["subject"] == "Your order was delivered"


@pytest.mark.category("workflow")
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
