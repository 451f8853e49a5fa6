"""The payment mock over raw HTTP on a real served instance: Stripe's wire format, test
cards, idempotency keys, determinism, signed webhooks and the mock's own contract."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import requests
import stripe
from aiohttp import web
from openapi_spec_validator import validate
from starlette.routing import Route

from mocks import Hosted
from mocks.payment import PaymentMock
from mocks.payment._form import decode
from tests.mocks.conftest import admin, call, serving

KEY = {"Authorization": "Bearer sk_test_anvil"}
FORM = {**KEY, "Content-Type": "application/x-www-form-urlencoded"}
PAY = ("amount=2000&currency=usd&payment_method=pm_card_visa&confirm=true"
       "&payment_method_types[]=card")


async def post(hosted: Hosted, path: str, body: str = "", **headers: str) -> requests.Response:
    return await call("POST", hosted.url + path, data=body.encode(), headers={**FORM, **headers})


async def get(hosted: Hosted, path: str, **params: Any) -> requests.Response:
    return await call("GET", hosted.url + path, params=params, headers=KEY)


def error_of(answer: requests.Response) -> dict[str, Any]:
    body = answer.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    return error


# -- authentication -------------------------------------------------------------------------


async def test_any_sk_test_key_is_accepted_as_bearer_or_as_the_basic_user() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        bearer = await call("GET", hosted.url + "/v1/customers",
                            headers={"Authorization": "Bearer sk_test_whatever123"})
        basic = await call("GET", hosted.url + "/v1/customers", auth=("sk_test_4eC39Hq", ""))
        assert (bearer.status_code, basic.status_code) == (200, 200)
        assert bearer.json() == {"object": "list", "data": [], "has_more": False,
                                 "url": "/v1/customers"}


@pytest.mark.parametrize("header", [None, "Bearer pk_test_12345678", "Bearer sk_live_12345678",
                                    "Bearer sk_test_", "Token sk_test_12345678"])
async def test_no_key_or_not_a_secret_test_key_gets_stripes_401(header: str | None) -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        headers = {"Authorization": header} if header else {}
        answer = await call("POST", hosted.url + "/v1/customers", data=b"email=a%40b.c",
                            headers=headers)
        assert answer.status_code == 401
        error = error_of(answer)
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(("You did not provide an API key",
                                            "Invalid API Key provided"))
        assert "12345678" not in error["message"]  # a key is never echoed whole
        customers = await get(hosted, "/v1/customers")
        assert customers.json()["data"] == []  # nothing was created


# -- request encoding ----------------------------------------------------------------------


def test_the_decoder_nests_brackets_like_rack() -> None:
    tree = decode("metadata[order_id]=7&expand[]=a&expand[]=b&card[number]=42"
                  "&items[0][price]=p1&items[1][price]=p2&automatic_payment_methods[enabled]=true")
    assert tree == {"metadata": {"order_id": "7"}, "expand": ["a", "b"],
                    "card": {"number": "42"},
                    "items": {"0": {"price": "p1"}, "1": {"price": "p2"}},
                    "automatic_payment_methods": {"enabled": "true"}}
    assert decode("a[][x]=1&a[][y]=2&a[][x]=3") == {"a": [{"x": "1", "y": "2"}, {"x": "3"}]}


async def test_nested_keys_metadata_expand_and_automatic_payment_methods() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        customer = (await post(hosted, "/v1/customers", "email=ada%40example.com")).json()
        answer = await post(hosted, "/v1/payment_intents",
                            "amount=2000&currency=usd&payment_method=pm_card_visa&confirm=true"
                            f"&customer={customer['id']}&metadata[order_id]=7"
                            "&automatic_payment_methods[enabled]=true"
                            "&automatic_payment_methods[allow_redirects]=never"
                            "&expand[]=latest_charge&expand[]=customer")
        assert answer.status_code == 200, answer.text
        pi = answer.json()
        assert list(pi)[:2] == ["id", "object"] and pi["object"] == "payment_intent"
        assert pi["metadata"] == {"order_id": "7"}
        assert pi["automatic_payment_methods"] == {"allow_redirects": "never", "enabled": True}
        assert (pi["status"], pi["amount_received"]) == ("succeeded", 2000)
        assert pi["customer"]["email"] == "ada@example.com"
        assert pi["latest_charge"]["object"] == "charge"
        assert pi["latest_charge"]["payment_method_details"]["card"]["last4"] == "4242"
        # The official libraries index arrays: expand[0]=...; retrieve expands as well.
        again = await call("GET", f"{hosted.url}/v1/payment_intents/{pi['id']}?"
                           "expand[0]=latest_charge", headers=KEY)
        assert again.json()["latest_charge"]["id"] == pi["latest_charge"]["id"]
        assert again.json()["customer"] == customer["id"]


async def test_redirect_capable_automatic_payment_methods_need_a_return_url() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        answer = await post(hosted, "/v1/payment_intents", "amount=2000&currency=usd"
                            "&payment_method=pm_card_visa&confirm=true")
        assert answer.status_code == 400
        assert "allow_redirects" in error_of(answer)["message"]
        assert (await get(hosted, "/v1/payment_intents")).json()["data"] == []
        with_url = await post(hosted, "/v1/payment_intents", "amount=2000&currency=usd"
                              "&payment_method=pm_card_visa&confirm=true"
                              "&return_url=https%3A%2F%2Fshop.example%2Fdone")
        assert with_url.json()["status"] == "succeeded"


@pytest.mark.parametrize(("body", "param", "message"), [
    ("currency=usd", "amount", "Missing required param: amount."),
    ("amount=abc&currency=usd", "amount", "Invalid integer: abc"),
    ("amount=10&currency=usd", "amount", "Amount must be at least $0.50 usd"),
    ("amount=2000&currency=zzz", "currency", "Invalid currency: zzz"),
    ("amount=2000&currency=usd&colour=red", "colour", "Received unknown parameter: colour"),
    ("amount=2000&currency=usd&automatic_payment_methods[enabled]=yes",
     "automatic_payment_methods[enabled]", "Invalid boolean: yes"),
    ("amount=2000&currency=usd&capture_method=later", "capture_method",
     "Invalid capture_method: must be one of automatic, automatic_async, or manual"),
    ("amount=2000&currency=usd&metadata=x&metadata[a]=1", "metadata", "Invalid hash"),
])
async def test_bad_parameters_get_stripes_400(body: str, param: str, message: str) -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        answer = await post(hosted, "/v1/payment_intents", body)
        assert answer.status_code == 400
        error = error_of(answer)
        assert (error["type"], error["param"]) == ("invalid_request_error", param)
        assert error["message"].startswith(message)


async def test_a_json_body_is_refused() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        answer = await call("POST", hosted.url + "/v1/customers", json={"email": "a@b.c"},
                            headers=KEY)
        assert answer.status_code == 400
        assert "form-encoded" in error_of(answer)["message"]


async def test_missing_objects_are_resource_missing() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        by_path = await get(hosted, "/v1/payment_intents/pi_nope")
        assert by_path.status_code == 404
        assert error_of(by_path) == {
            "code": "resource_missing",
            "doc_url": "https://stripe.com/docs/error-codes/resource-missing",
            "message": "No such payment_intent: 'pi_nope'", "param": "id",
            "type": "invalid_request_error"}
        by_param = await post(hosted, "/v1/refunds", "payment_intent=pi_nope")
        assert by_param.status_code == 400
        assert (error_of(by_param)["code"], error_of(by_param)["param"]) == (
            "resource_missing", "payment_intent")
        unknown_pm = await post(hosted, "/v1/payment_intents", PAY.replace("pm_card_visa",
                                                                           "pm_nope"))
        assert error_of(unknown_pm)["message"] == "No such PaymentMethod: 'pm_nope'"


async def test_an_unknown_url_or_method_is_stripes_404() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        answer = await get(hosted, "/v1/subscriptions")
        assert answer.status_code == 404
        assert error_of(answer)["message"].startswith(
            "Unrecognized request URL (GET: /v1/subscriptions).")
        put = await call("PUT", hosted.url + "/v1/customers", headers=KEY)
        assert put.status_code == 404


# -- test cards ----------------------------------------------------------------------------


@pytest.mark.parametrize(("number", "status", "code", "decline_code"), [
    ("4242424242424242", 200, None, None),
    ("5555555555554444", 200, None, None),
    ("4000000000000002", 402, "card_declined", "generic_decline"),
    ("4000000000009995", 402, "card_declined", "insufficient_funds"),
    ("4000000000000069", 402, "expired_card", "expired_card"),
    ("4000000000000127", 402, "incorrect_cvc", "incorrect_cvc"),
    ("4000000000000119", 402, "processing_error", "processing_error"),
])
async def test_card_numbers_have_their_fixed_outcomes(number: str, status: int,
                                                      code: str | None,
                                                      decline_code: str | None) -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        answer = await post(hosted, "/v1/payment_intents",
                            "amount=2000&currency=usd&confirm=true&payment_method_types[]=card"
                            f"&payment_method_data[type]=card&payment_method_data[card][number]="
                            f"{number}&payment_method_data[card][exp_month]=12"
                            "&payment_method_data[card][exp_year]=2030"
                            "&payment_method_data[card][cvc]=123")
        assert answer.status_code == status, answer.text
        charges = (await get(hosted, "/v1/charges")).json()["data"]
        assert len(charges) == 1 and charges[0]["payment_method_details"]["card"]["last4"] \
            == number[-4:]
        if status == 200:
            assert answer.json()["status"] == "succeeded"
            assert charges[0]["status"] == "succeeded"
            return
        error = error_of(answer)
        assert (error["type"], error["code"], error["decline_code"]) == (
            "card_error", code, decline_code)
        assert error["charge"] == charges[0]["id"] and charges[0]["status"] == "failed"
        assert error["payment_intent"]["status"] == "requires_payment_method"
        assert error["payment_intent"]["last_payment_error"]["decline_code"] == decline_code
        assert charges[0]["failure_code"] == code


@pytest.mark.parametrize(("card", "code"), [
    ("number=4242424242424241&exp_month=12&exp_year=2030", "incorrect_number"),
    ("number=4111111111111111&exp_month=12&exp_year=2030", "card_declined"),
    ("number=4242424242424242&exp_month=13&exp_year=2030", "invalid_expiry_month"),
    ("number=4242424242424242&exp_month=12&exp_year=2020", "invalid_expiry_year"),
    ("number=4242424242424242&exp_month=12&exp_year=2030&cvc=1", "invalid_cvc"),
])
async def test_bad_cards_are_refused_when_the_payment_method_is_made(card: str,
                                                                     code: str) -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        body = "type=card&" + "&".join(f"card[{pair.replace('=', ']=')}" for pair in
                                       card.split("&"))
        answer = await post(hosted, "/v1/payment_methods", body)
        assert answer.status_code == 402
        assert (error_of(answer)["type"], error_of(answer)["code"]) == ("card_error", code)


async def test_test_payment_method_ids_make_a_new_payment_method_each_time() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        one = (await post(hosted, "/v1/payment_intents", PAY)).json()
        two = (await post(hosted, "/v1/payment_intents", PAY)).json()
        assert one["payment_method"].startswith("pm_") and one["payment_method"] != "pm_card_visa"
        assert one["payment_method"] != two["payment_method"]
        pm = (await get(hosted, f"/v1/payment_methods/{one['payment_method']}")).json()
        assert (pm["card"]["brand"], pm["card"]["last4"]) == ("visa", "4242")


# -- lists ---------------------------------------------------------------------------------


async def test_lists_go_newest_first_with_limit_and_both_cursors() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        ids = [(await post(hosted, "/v1/customers", f"name=c{i}")).json()["id"]
               for i in range(5)]
        first = (await get(hosted, "/v1/customers", limit=2)).json()
        assert [c["id"] for c in first["data"]] == [ids[4], ids[3]] and first["has_more"]
        second = (await get(hosted, "/v1/customers", limit=2, starting_after=ids[3])).json()
        assert [c["id"] for c in second["data"]] == [ids[2], ids[1]] and second["has_more"]
        last = (await get(hosted, "/v1/customers", limit=2, starting_after=ids[1])).json()
        assert [c["id"] for c in last["data"]] == [ids[0]] and not last["has_more"]
        back = (await get(hosted, "/v1/customers", limit=2, ending_before=ids[1])).json()
        assert [c["id"] for c in back["data"]] == [ids[3], ids[2]] and back["has_more"]
        default = (await get(hosted, "/v1/customers")).json()
        assert len(default["data"]) == 5 and not default["has_more"]
        for bad in ("0", "101", "x"):
            answer = await get(hosted, "/v1/customers", limit=bad)
            assert (answer.status_code, error_of(answer)["param"]) == (400, "limit")
        gone = await get(hosted, "/v1/customers", starting_after="cus_nope")
        assert error_of(gone)["code"] == "resource_missing"


# -- idempotency ---------------------------------------------------------------------------


async def test_a_retry_with_the_same_key_replays_the_stored_bytes() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        first = await post(hosted, "/v1/payment_intents", PAY + "&metadata[order]=7",
                           **{"Idempotency-Key": "k-1"})
        # The same parameters in another order are the same request.
        reordered = "&".join(reversed((PAY + "&metadata[order]=7").split("&")))
        second = await post(hosted, "/v1/payment_intents", reordered,
                            **{"Idempotency-Key": "k-1"})
        assert second.status_code == first.status_code == 200
        assert second.content == first.content
        assert second.headers["Idempotent-Replayed"] == "true"
        assert "Idempotent-Replayed" not in first.headers
        assert second.headers["Original-Request"] == first.headers["Request-Id"]
        assert second.headers["Request-Id"] != first.headers["Request-Id"]
        assert second.headers["Idempotency-Key"] == "k-1"
        assert len((await get(hosted, "/v1/payment_intents")).json()["data"]) == 1
        assert len((await get(hosted, "/v1/charges")).json()["data"]) == 1


async def test_a_key_reused_with_another_body_or_endpoint_is_an_idempotency_error() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        await post(hosted, "/v1/payment_intents", PAY, **{"Idempotency-Key": "k-2"})
        other_body = await post(hosted, "/v1/payment_intents", PAY.replace("2000", "2001"),
                                **{"Idempotency-Key": "k-2"})
        assert other_body.status_code == 400
        assert error_of(other_body)["type"] == "idempotency_error"
        assert "same parameters" in error_of(other_body)["message"]
        other_path = await post(hosted, "/v1/customers", "", **{"Idempotency-Key": "k-2"})
        assert other_path.status_code == 400
        assert error_of(other_path)["type"] == "idempotency_error"
        assert len((await get(hosted, "/v1/payment_intents")).json()["data"]) == 1
        assert (await get(hosted, "/v1/customers")).json()["data"] == []


async def test_a_request_that_fails_validation_stores_nothing_under_its_key() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        bad = await post(hosted, "/v1/payment_intents", "amount=abc&currency=usd",
                         **{"Idempotency-Key": "k-3"})
        assert bad.status_code == 400
        good = await post(hosted, "/v1/payment_intents", PAY, **{"Idempotency-Key": "k-3"})
        assert good.status_code == 200 and "Idempotent-Replayed" not in good.headers
        assert good.json()["status"] == "succeeded"


async def test_a_declined_payment_is_stored_and_replayed_not_charged_twice() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        body = PAY.replace("pm_card_visa", "pm_card_chargeDeclined")
        first = await post(hosted, "/v1/payment_intents", body, **{"Idempotency-Key": "k-4"})
        again = await post(hosted, "/v1/payment_intents", body, **{"Idempotency-Key": "k-4"})
        assert first.status_code == again.status_code == 402
        assert again.content == first.content and again.headers["Idempotent-Replayed"] == "true"
        assert len((await get(hosted, "/v1/charges")).json()["data"]) == 1


async def test_keys_expire_after_24_hours_of_virtual_time() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        first = await post(hosted, "/v1/customers", "name=a", **{"Idempotency-Key": "k-5"})
        await admin(hosted, "POST", "clock/advance", json={"seconds": 24 * 3600})
        later = await post(hosted, "/v1/customers", "name=a", **{"Idempotency-Key": "k-5"})
        assert later.json()["id"] != first.json()["id"]


# -- determinism ---------------------------------------------------------------------------


async def _script(hosted: Hosted) -> list[bytes]:
    """A fixed sequence of calls touching every kind of object; the answers' bytes."""
    answers = [await post(hosted, "/v1/customers", "email=ada%40example.com&metadata[k]=v"),
               await post(hosted, "/v1/payment_intents", PAY, **{"Idempotency-Key": "d"}),
               await post(hosted, "/v1/payment_intents", PAY, **{"Idempotency-Key": "d"}),
               await post(hosted, "/v1/payment_intents",
                          PAY.replace("pm_card_visa", "pm_card_chargeDeclinedExpiredCard")),
               await post(hosted, "/v1/payment_intents",
                          PAY + "&capture_method=manual"),
               await get(hosted, "/v1/payment_intents", limit=2)]
    paid = answers[1].json()["id"]
    manual = answers[4].json()["id"]
    answers += [await post(hosted, "/v1/refunds", f"payment_intent={paid}&amount=700"),
                await post(hosted, f"/v1/payment_intents/{manual}/capture",
                           "amount_to_capture=1000"),
                await get(hosted, "/v1/events", limit=100),
                await get(hosted, "/v1/refunds")]
    return [a.content for a in answers]


async def test_the_same_requests_give_byte_identical_answers_and_journals() -> None:
    runs = []
    for _ in range(2):
        async with serving(PaymentMock, instance="payment", seed="same") as hosted:
            answers = await _script(hosted)
            journal = (await admin(hosted, "GET", "journal")).content
            runs.append((answers, journal))
    assert runs[0] == runs[1]
    async with serving(PaymentMock, instance="payment", seed="other") as hosted:
        other = await _script(hosted)
    assert json.loads(other[0])["id"] != json.loads(runs[0][0][0])["id"]


async def test_reset_forgets_everything_and_starts_the_ids_again() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        first = (await post(hosted, "/v1/customers", "name=a")).json()["id"]
        await post(hosted, "/v1/customers", "name=b", **{"Idempotency-Key": "r"})
        assert (await admin(hosted, "POST", "reset")).status_code == 200
        assert (await post(hosted, "/v1/customers", "name=a")).json()["id"] == first
        assert len((await get(hosted, "/v1/customers")).json()["data"]) == 1
        replay = await post(hosted, "/v1/customers", "name=b", **{"Idempotency-Key": "r"})
        assert "Idempotent-Replayed" not in replay.headers


async def test_seed_data_and_the_customers_scenario() -> None:
    async with serving(PaymentMock, instance="payment", scenario="customers") as hosted:
        names = [c["name"] for c in (await get(hosted, "/v1/customers")).json()["data"]]
        assert names == ["Alan Turing", "Grace Hopper", "Ada Lovelace"]
        seeded = await admin(hosted, "POST", "seed", json={"scenario": "default", "data": {
            "customers": [{"email": "x@example.com", "metadata": {"n": 1}}],
            "webhook_endpoints": [{"url": "http://127.0.0.1:9/hook", "enabled_events": ["*"],
                                   "secret": "whsec_fixed"}]}})
        assert seeded.status_code == 200, seeded.text
        customers = (await get(hosted, "/v1/customers")).json()["data"]
        assert [(c["email"], c["metadata"]) for c in customers] == [("x@example.com",
                                                                      {"n": "1"})]
        endpoints = (await get(hosted, "/v1/webhook_endpoints")).json()["data"]
        assert [e["url"] for e in endpoints] == ["http://127.0.0.1:9/hook"]
        assert "secret" not in endpoints[0]  # only shown when created


# -- webhooks ------------------------------------------------------------------------------


Delivery = tuple[dict[str, str], bytes]


@asynccontextmanager
async def receiver(status: int = 200) -> AsyncIterator[tuple[str, Any]]:
    """A webhook receiver (aiohttp's server on 127.0.0.1): its URL and a stream of what it
    was sent."""
    send, received = anyio.create_memory_object_stream[Delivery](100)

    async def hook(request: web.Request) -> web.Response:
        headers = {key.lower(): value for key, value in request.headers.items()}
        await send.send((headers, await request.read()))
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post("/hooks/stripe", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with send, received:
            yield f"http://127.0.0.1:{port}/hooks/stripe", received
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()


async def _collect(received: Any, count: int) -> list[Delivery]:
    with anyio.fail_after(10):
        return [await received.receive() for _ in range(count)]


async def _sent(hosted: Hosted, count: int) -> list[dict[str, Any]]:
    """The journal's webhook records, once there are ``count`` (a delivery is recorded
    when the receiver's answer has been read, just after the receiver saw it)."""
    with anyio.fail_after(10):
        while True:
            journal = (await admin(hosted, "GET", "journal")).json()["entries"]
            sent = [e["event"] for e in journal if e["kind"] == "event"
                    and e["event"]["type"] == "webhook"]
            if len(sent) >= count:
                return sent


async def _register(hosted: Hosted, url: str, events: Sequence[str]) -> str:
    body = f"url={url}&" + "&".join(f"enabled_events[]={e}" for e in events)
    endpoint = (await post(hosted, "/v1/webhook_endpoints", body)).json()
    secret: str = endpoint["secret"]
    assert secret.startswith("whsec_")
    return secret


def _verified(delivery: Delivery, secret: str) -> stripe.Event:
    """The library's own verification (independent of the mock's signing code), as a
    candidate calls it: with its default five-minute tolerance against the wall clock."""
    headers, body = delivery
    return stripe.Webhook.construct_event(body, headers["stripe-signature"], secret)


async def test_webhooks_are_signed_and_delivered_in_order() -> None:
    async with receiver() as (url, received), serving(PaymentMock, instance="payment",
                                                       seed="hooks") as hosted:
        secret = await _register(hosted, url, ["payment_intent.succeeded",
                                               "payment_intent.payment_failed",
                                               "charge.refunded"])
        paid = (await post(hosted, "/v1/payment_intents", PAY)).json()
        await post(hosted, "/v1/payment_intents", PAY.replace("pm_card_visa",
                                                              "pm_card_chargeDeclined"))
        await post(hosted, "/v1/customers", "name=not-subscribed")
        await post(hosted, "/v1/refunds", f"payment_intent={paid['id']}&amount=500")
        deliveries = await _collect(received, 3)
        events = [_verified(d, secret) for d in deliveries]
        assert [e.type for e in events] == ["payment_intent.succeeded",
                                            "payment_intent.payment_failed", "charge.refunded"]
        assert events[0].data.object.id == paid["id"]
        assert events[2].data.object.amount_refunded == 500
        headers = deliveries[0][0]
        assert headers["content-type"].startswith("application/json")
        with pytest.raises(stripe.SignatureVerificationError):
            stripe.Webhook.construct_event(deliveries[0][1], headers["stripe-signature"],
                                           "whsec_wrong")
        stored = (await get(hosted, f"/v1/events/{events[0].id}")).json()
        assert stored["type"] == "payment_intent.succeeded" and stored["pending_webhooks"] == 1
        sent = await _sent(hosted, 3)
        assert [(s["event_type"], s["status"]) for s in sent] == [(e.type, 200) for e in events]


async def test_webhook_deliveries_are_the_same_bytes_for_the_same_requests() -> None:
    """Bodies always; the signatures too on the virtual clock (``webhook_clock``)."""
    runs = []
    for clock in ("wall", "virtual", "virtual"):
        async with receiver() as (url, received), serving(PaymentMock, instance="payment",
                                                           seed="same") as hosted:
            await admin(hosted, "POST", "seed", json={"data": {"webhook_clock": clock}})
            secret = await _register(hosted, url, ["*"])
            await post(hosted, "/v1/payment_intents", PAY)
            deliveries = await _collect(received, 3)
            runs.append([(h["stripe-signature"], body) for h, body in deliveries])
            for headers, body in deliveries:
                event = stripe.Webhook.construct_event(body, headers["stripe-signature"],
                                                       secret, tolerance=None)
                if clock == "virtual":
                    assert headers["stripe-signature"].startswith(f"t={event.created},v1=")
    assert runs[1] == runs[2]
    assert [body for _, body in runs[0]] == [body for _, body in runs[1]]
    assert [json.loads(body)["type"] for _, body in runs[0]] == [
        "payment_intent.created", "charge.succeeded", "payment_intent.succeeded"]


async def test_duplicate_and_out_of_order_delivery_faults() -> None:
    async with receiver() as (url, received), serving(PaymentMock, instance="payment") as hosted:
        secret = await _register(hosted, url, ["*"])
        refused = await call("POST", f"{hosted.url}/__mock__/payment/webhooks/faults",
                             json={"kind": "duplicate"})
        assert refused.status_code == 401  # the instance's token is needed
        for spec in ({"kind": "duplicate", "type": "payment_intent.succeeded"},
                     {"kind": "out_of_order", "type": "payment_intent.created"}):
            armed = await admin(hosted, "POST", "payment/webhooks/faults", json=spec)
            assert armed.status_code == 200, armed.text
        bad = await admin(hosted, "POST", "payment/webhooks/faults", json={"kind": "late"})
        assert bad.status_code == 400
        await post(hosted, "/v1/payment_intents", PAY)
        events = [_verified(d, secret) for d in await _collect(received, 4)]
        assert [e.type for e in events] == ["charge.succeeded", "payment_intent.created",
                                            "payment_intent.succeeded",
                                            "payment_intent.succeeded"]
        assert events[2].id == events[3].id  # the same event, twice
        left = (await admin(hosted, "GET", "payment/webhooks/faults")).json()
        assert left == {"faults": []}  # each was armed for one event
        sent = await _sent(hosted, 4)
        assert [s["duplicate"] for s in sent] == [False, False, False, True]


async def test_an_out_of_order_event_with_no_follower_is_still_delivered() -> None:
    async with receiver() as (url, received), serving(PaymentMock, instance="payment") as hosted:
        await _register(hosted, url, ["customer.created"])
        await admin(hosted, "POST", "payment/webhooks/faults", json={"kind": "out_of_order"})
        await post(hosted, "/v1/customers", "name=alone")
        (headers, body), = await _collect(received, 1)
        assert json.loads(body)["type"] == "customer.created"


async def test_a_failing_receiver_is_recorded_in_the_journal() -> None:
    async with receiver(status=500) as (url, received), serving(PaymentMock,
                                                                 instance="payment") as hosted:
        await _register(hosted, url, ["customer.created"])
        await post(hosted, "/v1/customers", "name=a")
        await _collect(received, 1)
        (sent,) = await _sent(hosted, 1)
        assert (sent["event_type"], sent["status"], sent["error"]) == ("customer.created", 500,
                                                                       None)


# -- the contract --------------------------------------------------------------------------


async def test_the_openapi_document_is_valid_and_covers_every_route() -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        answer = await call("GET", hosted.url + "/__mock__/openapi.json")  # public
        document = answer.json()
        validate(document)
        served = {(method.lower(), route.path) for route in hosted.app.service.routes()
                  if isinstance(route, Route) and route.path != "/v1/{rest:path}"
                  for method in (route.methods or ()) if method != "HEAD"}
        documented = {(method, path) for path, item in document["paths"].items()
                      for method in item if method != "parameters"}
        assert served == documented
