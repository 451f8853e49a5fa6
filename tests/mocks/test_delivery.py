"""The delivery mock on a real served instance: API keys, rates, labels, trackers on the
virtual clock, messages with per-recipient results, idempotency, faults, determinism."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from openapi_spec_validator import validate

from mocks import Hosted, check_mock
from mocks.delivery import DeliveryMock
from tests.mocks.conftest import admin, call, serving

KEY = {"Authorization": "Bearer dk_test_anvil"}
HOME = {"street1": "1 Main St", "city": "Springfield", "zip": "12345", "country": "US"}
DEPOT = {"street1": "9 Dock Rd", "city": "Shelbyville", "zip": "54321", "country": "US"}


def serve(**options: Any) -> Any:
    return serving(DeliveryMock, instance="delivery", **options)


async def post(hosted: Hosted, path: str, body: Any, **headers: str) -> requests.Response:
    return await call("POST", hosted.url + path, json=body, headers={**KEY, **headers})


async def get(hosted: Hosted, path: str, **params: Any) -> requests.Response:
    return await call("GET", hosted.url + path, params=params, headers=KEY)


async def shipment(hosted: Hosted, weight: float) -> dict[str, Any]:
    answer = await post(hosted, "/v1/shipments", {"to_address": HOME, "from_address": DEPOT,
                                                  "parcel": {"weight_oz": weight}})
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def cheapest(rates: list[dict[str, Any]]) -> dict[str, Any]:
    return min(rates, key=lambda r: (r["amount"], r["delivery_days"]))


async def test_it_keeps_the_mock_contract_and_its_openapi_document_is_valid() -> None:
    assert check_mock(DeliveryMock) == []
    async with serve() as hosted:
        contract = (await call("GET", hosted.url + "/__mock__/openapi.json")).json()
    validate(contract)
    assert "/v1/messages" in contract["paths"] and "/v1/shipments/{id}/buy" in contract["paths"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer sk_test_123"},
                                     {"X-Api-Key": "dk_test_"}, {"Authorization": "dk_test_1"}])
async def test_a_missing_or_wrong_api_key_gets_401_and_changes_nothing(
        headers: dict[str, str]) -> None:
    async with serve() as hosted:
        answer = await call("POST", hosted.url + "/v1/messages", headers=headers,
                            json={"channel": "sms", "to": "+15551234567", "body": "hi"})
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"
        assert (await get(hosted, "/v1/messages")).json()["data"] == []
        by_header = await call("GET", hosted.url + "/v1/messages",
                               headers={"X-Api-Key": "dk_test_other"})
        assert by_header.status_code == 200


async def test_rates_depend_only_on_service_and_weight_and_the_cheapest_moves_with_it() -> None:
    async with serve() as hosted:
        light, at_30, heavy = [await shipment(hosted, w) for w in (10, 29.2, 31)]
    prices = {(r["carrier"], r["service"]): r["amount"] for r in light["rates"]}
    assert prices == {("FedEx", "Express"): 2850, ("UPS", "Ground"): 800,
                      ("USPS", "GroundAdvantage"): 600, ("USPS", "Priority"): 1200}
    assert light["rates"][0]["service"] == "Express"  # listed by carrier, not by price
    assert cheapest(light["rates"])["service"] == "GroundAdvantage"
    # 29.2 oz bills as 30: a tie at 1000 cents, UPS Ground arrives sooner
    tie = [r for r in at_30["rates"] if r["amount"] == 1000]
    assert {r["carrier"] for r in tie} == {"UPS", "USPS"}
    assert cheapest(at_30["rates"])["carrier"] == "UPS"
    assert cheapest(heavy["rates"])["service"] == "Ground"


async def test_buying_a_rate_gives_a_label_and_a_tracker_once() -> None:
    async with serve() as hosted:
        made = await shipment(hosted, 12)
        other = await shipment(hosted, 12)
        wrong = await post(hosted, f"/v1/shipments/{made['id']}/buy",
                           {"rate": other["rates"][0]["id"]})
        assert wrong.status_code == 404 and wrong.json()["error"]["param"] == "rate"
        rate = cheapest(made["rates"])
        bought = await post(hosted, f"/v1/shipments/{made['id']}/buy", {"rate": rate["id"]})
        assert bought.status_code == 200, bought.text
        body = bought.json()
        assert body["status"] == "purchased" and body["selected_rate"] == rate
        assert body["tracking_code"].startswith("DLV") and body["label"]["format"] == "PDF"
        again = await post(hosted, f"/v1/shipments/{made['id']}/buy", {"rate": rate["id"]})
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "shipment_already_purchased"
        assert (await get(hosted, f"/v1/shipments/{made['id']}")).json() == body


async def test_the_tracker_follows_the_virtual_clock_moved_through_the_admin_surface() -> None:
    async with serve() as hosted:
        made = await shipment(hosted, 12)
        bought = (await post(hosted, f"/v1/shipments/{made['id']}/buy",
                             {"rate": made["rates"][1]["id"]})).json()
        seen = []
        for step in (0, 3_599, 1, 82_800, 14_399, 1):
            moved = await admin(hosted, "POST", "clock/advance", json={"seconds": step})
            assert moved.status_code == 200
            tracker = (await get(hosted, f"/v1/trackers/{bought['tracker_id']}")).json()
            seen.append(tracker["status"])
        assert seen == ["pre_transit", "pre_transit", "in_transit", "out_for_delivery",
                        "out_for_delivery", "delivered"]
        assert [d["status"] for d in tracker["tracking_details"]] == [
            "pre_transit", "in_transit", "out_for_delivery", "delivered"]
        assert tracker["est_delivery_date"] == "2026-01-02T04:00:00Z"
        listed = await get(hosted, "/v1/trackers", tracking_code=bought["tracking_code"])
        assert [t["id"] for t in listed.json()["data"]] == [bought["tracker_id"]]


async def test_a_message_has_a_result_per_recipient() -> None:
    async with serve() as hosted:
        email = await post(hosted, "/v1/messages", {
            "channel": "email", "subject": "Shipped", "body": "on its way", "reference": "o1",
            "to": ["ada@example.com", "gone@bounce.test", "not-an-address"]})
        assert email.status_code == 201, email.text
        sent = email.json()
        assert [(r["to"], r["status"]) for r in sent["recipients"]] == [
            ("ada@example.com", "delivered"), ("gone@bounce.test", "bounced"),
            ("not-an-address", "invalid")]
        assert sent["status"] == "partial" and sent["counts"]["bounced"] == 1
        sms = (await post(hosted, "/v1/messages", {"channel": "sms", "body": "x",
                                                   "to": "+15550000"})).json()
        assert (sms["status"], sms["recipients"][0]["error_code"]) == (
            "failed", "unreachable_number")
        push = (await post(hosted, "/v1/messages", {"channel": "push", "body": "x",
                                                    "to": ["device-1234", "stale-9999"]})).json()
        assert [r["status"] for r in push["recipients"]] == ["delivered", "bounced"]
        assert (await get(hosted, f"/v1/messages/{sent['id']}")).json() == sent
        listed = (await get(hosted, "/v1/messages", reference="o1")).json()
        assert [m["id"] for m in listed["data"]] == [sent["id"]]
        page = (await get(hosted, "/v1/messages", limit=1, starting_after=sent["id"])).json()
        assert [m["id"] for m in page["data"]] == [sms["id"]] and page["has_more"]
        journal = (await admin(hosted, "GET", "journal")).json()["entries"]
        events = [e["event"] for e in journal if e["kind"] == "event"]
        assert [e["type"] for e in events] == ["message.sent"] * 3
        assert events[0]["recipients"][1] == ["gone@bounce.test", "bounced"]


@pytest.mark.parametrize(("body", "param"), [
    ({"channel": "fax", "to": "x", "body": "b"}, "channel"),
    ({"channel": "email", "to": "a@b.co", "body": "b"}, "subject"),
    ({"channel": "sms", "to": [], "body": "b"}, "to"),
    ({"channel": "sms", "to": ["+15551234567", "+15551234567"], "body": "b"}, "to"),
    ({"channel": "sms", "to": "+15551234567"}, "body"),
])
async def test_an_invalid_message_is_refused_and_nothing_is_sent(body: dict[str, Any],
                                                                 param: str) -> None:
    async with serve() as hosted:
        answer = await post(hosted, "/v1/messages", body)
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == param
        assert (await get(hosted, "/v1/messages")).json()["data"] == []


async def test_an_invalid_shipment_creates_no_address_or_parcel() -> None:
    async with serve() as hosted:
        answer = await post(hosted, "/v1/shipments", {
            "to_address": HOME, "from_address": DEPOT, "parcel": {"weight_oz": 2000}})
        assert answer.status_code == 400
        assert answer.json()["error"]["param"] == "parcel.weight_oz"
        made = await post(hosted, "/v1/addresses", HOME)
        assert made.json()["id"].startswith("adr_")
        # the refused call used no id: the address is the instance's first object
        async with serve() as fresh:
            first = await post(fresh, "/v1/addresses", HOME)
        assert first.json()["id"] == made.json()["id"]


async def test_the_flaky_sms_scenario_and_seeded_outcomes_fail_some_recipients() -> None:
    async with serve(scenario="flaky_sms") as hosted:
        sent = (await post(hosted, "/v1/messages", {
            "channel": "sms", "body": "x", "to": ["+15551234567", "+15551234568"]})).json()
        assert [(r["status"], r["error_code"]) for r in sent["recipients"]] == [
            ("failed", "carrier_unavailable"), ("delivered", None)]
        seeded = await admin(hosted, "POST", "seed", json={
            "scenario": "default", "data": {"outcomes": {"ada@example.com": "bounced"}}})
        assert seeded.status_code == 200
        again = (await post(hosted, "/v1/messages", {
            "channel": "sms", "body": "x", "to": "+15551234567"})).json()
        assert again["status"] == "delivered"
        forced = (await post(hosted, "/v1/messages", {
            "channel": "email", "subject": "s", "body": "x", "to": "ada@example.com"})).json()
        assert forced["recipients"][0]["status"] == "bounced"


async def test_an_idempotency_key_replays_conflicts_and_never_stores_failures() -> None:
    async with serve() as hosted:
        message = {"channel": "push", "body": "x", "to": "device-1234"}
        first = await post(hosted, "/v1/messages", message, **{"Idempotency-Key": "k1"})
        second = await post(hosted, "/v1/messages", message, **{"Idempotency-Key": "k1"})
        assert second.content == first.content
        assert second.headers["Idempotent-Replayed"] == "true"
        other = await post(hosted, "/v1/messages", {**message, "body": "y"},
                           **{"Idempotency-Key": "k1"})
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "idempotency_conflict"
        bad = await post(hosted, "/v1/messages", {"channel": "push", "to": "device-1234"},
                         **{"Idempotency-Key": "k2"})
        fixed = await post(hosted, "/v1/messages", message, **{"Idempotency-Key": "k2"})
        assert (bad.status_code, fixed.status_code) == (400, 201)
        assert len((await get(hosted, "/v1/messages")).json()["data"]) == 2


async def test_a_dropped_send_commits_and_a_retry_with_the_key_sends_nothing_more() -> None:
    async with serve() as hosted:
        armed = await admin(hosted, "POST", "faults",
                            json={"method": "POST", "path": "/v1/messages", "drop": True,
                                  "times": 1})
        assert armed.status_code == 200
        message = {"channel": "sms", "body": "x", "to": "+15551234567"}
        with pytest.raises(requests.ConnectionError):
            await post(hosted, "/v1/messages", message, **{"Idempotency-Key": "order-1"})
        retry = await post(hosted, "/v1/messages", message, **{"Idempotency-Key": "order-1"})
        assert retry.status_code == 201 and retry.headers["Idempotent-Replayed"] == "true"
        assert [m["id"] for m in (await get(hosted, "/v1/messages")).json()["data"]] == [
            retry.json()["id"]]


async def test_the_same_requests_give_the_same_bytes_and_journal() -> None:
    async def session() -> tuple[list[bytes], str]:
        async with serve(seed="same") as hosted:
            answers = []
            made = await shipment(hosted, 8)
            for method, path, body in [
                ("POST", f"/v1/shipments/{made['id']}/buy", {"rate": made["rates"][2]["id"]}),
                ("POST", "/v1/messages", {"channel": "email", "subject": "s", "body": "b",
                                          "to": ["a@b.co", "c@bounce.test"]}),
                ("GET", "/v1/shipments", None),
            ]:
                answer = await call(method, hosted.url + path, json=body, headers=KEY)
                answers.append(answer.content)
            await admin(hosted, "POST", "clock/advance", json={"seconds": 7200})
            answers.append((await get(hosted, "/v1/trackers")).content)
            journal = (await admin(hosted, "GET", "journal")).json()
        return answers, json.dumps(journal)

    first, second = await session(), await session()
    assert first == second
    assert b'"status":"in_transit"' in first[0][3]  # the clock moved the tracker
