"""The official ``stripe`` library, unchanged, against a served payment instance.

The six everyday flows of the issue (``FLOWS``) are plain functions of a
``stripe.StripeClient``: what a candidate's checkout code does, with what real Stripe
answers asserted. ``bench/payment_mock.py`` runs the same functions against localstripe.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
import requests
import stripe
from anyio.streams.text import TextReceiveStream

import mocks.payment
from mocks import Context, check_mock
from mocks.payment import PaymentMock
from mocks.types import MockAdmin, MockTask
from tests.mocks.conftest import admin, serving

NEVER_REDIRECT = {"enabled": True, "allow_redirects": "never"}


def client_for(url: str, *, retries: int = 0) -> stripe.StripeClient:
    return stripe.StripeClient("sk_test_anvil", base_addresses={"api": url},
                               max_network_retries=retries)


def flow_customer(client: stripe.StripeClient) -> None:
    """Create a customer with metadata, read it back, page through the list, update it."""
    ada = client.v1.customers.create(params={
        "email": "ada@example.com", "name": "Ada Lovelace", "metadata": {"order_id": "7"}})
    assert ada.id.startswith("cus_") and ada.metadata["order_id"] == "7"
    assert client.v1.customers.retrieve(ada.id).email == "ada@example.com"
    others = [client.v1.customers.create(params={"email": f"c{i}@example.com"}).id
              for i in range(3)]
    first = client.v1.customers.list(params={"limit": 2})
    assert [c.id for c in first.data] == others[:0:-1] and first.has_more  # newest first
    second = client.v1.customers.list(params={"limit": 2, "starting_after": first.data[-1].id})
    assert [c.id for c in second.data] == [others[0], ada.id]
    updated = client.v1.customers.update(ada.id, params={"metadata": {"tier": "gold"}})
    assert updated.metadata.to_dict() == {"order_id": "7", "tier": "gold"}


def flow_pay_and_partial_refund(client: stripe.StripeClient) -> None:
    """Pay 20.00, refund 5.00, be refused 16.00 (above what is left), refund the rest."""
    pi = client.v1.payment_intents.create(params={
        "amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True,
        "automatic_payment_methods": NEVER_REDIRECT, "metadata": {"order_id": "7"}})
    assert (pi.status, pi.amount_received, pi.metadata["order_id"]) == ("succeeded", 2000, "7")
    first = client.v1.refunds.create(params={"payment_intent": pi.id, "amount": 500})
    assert (first.status, first.amount, first.payment_intent) == ("succeeded", 500, pi.id)
    with pytest.raises(stripe.InvalidRequestError) as too_much:
        client.v1.refunds.create(params={"payment_intent": pi.id, "amount": 1600})
    assert too_much.value.http_status == 400 and too_much.value.param == "amount"
    rest = client.v1.refunds.create(params={"payment_intent": pi.id})
    assert rest.amount == 1500
    charge = client.v1.charges.retrieve(str(pi.latest_charge))
    assert (charge.amount_refunded, charge.refunded) == (2000, True)
    listed = client.v1.refunds.list(params={"payment_intent": pi.id})
    assert sorted(r.amount for r in listed.data) == [500, 1500]


def flow_declined_card(client: stripe.StripeClient) -> None:
    """A generic decline is a 402 CardError; the intent waits for another card, which pays."""
    with pytest.raises(stripe.CardError) as declined:
        client.v1.payment_intents.create(params={
            "amount": 1500, "currency": "usd", "payment_method": "pm_card_chargeDeclined",
            "confirm": True, "automatic_payment_methods": NEVER_REDIRECT})
    error = declined.value
    assert (error.http_status, error.code) == (402, "card_declined")
    assert error.error is not None and error.error.decline_code == "generic_decline"
    assert error.error.payment_intent is not None
    pi = client.v1.payment_intents.retrieve(error.error.payment_intent.id)
    assert pi.status == "requires_payment_method"
    assert pi.last_payment_error is not None and pi.last_payment_error.code == "card_declined"
    paid = client.v1.payment_intents.confirm(pi.id, params={"payment_method": "pm_card_visa"})
    assert (paid.status, paid.amount_received) == ("succeeded", 1500)


def flow_insufficient_funds(client: stripe.StripeClient) -> None:
    """Create, then confirm with a card that has insufficient funds: nothing received."""
    pi = client.v1.payment_intents.create(params={
        "amount": 4200, "currency": "usd", "automatic_payment_methods": NEVER_REDIRECT})
    assert pi.status == "requires_payment_method"
    with pytest.raises(stripe.CardError) as declined:
        client.v1.payment_intents.confirm(pi.id, params={
            "payment_method": "pm_card_chargeDeclinedInsufficientFunds"})
    assert declined.value.code == "card_declined"
    assert declined.value.error is not None
    assert declined.value.error.decline_code == "insufficient_funds"
    after = client.v1.payment_intents.retrieve(pi.id)
    assert (after.status, after.amount_received) == ("requires_payment_method", 0)
    assert after.last_payment_error is not None
    assert after.last_payment_error.decline_code == "insufficient_funds"


def flow_manual_capture_then_cancel(client: stripe.StripeClient) -> None:
    """Authorize only, cancel the authorization; a capture afterwards is refused."""
    pi = client.v1.payment_intents.create(params={
        "amount": 5000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True,
        "capture_method": "manual", "automatic_payment_methods": NEVER_REDIRECT})
    assert (pi.status, pi.amount_capturable, pi.amount_received) == ("requires_capture", 5000, 0)
    canceled = client.v1.payment_intents.cancel(
        pi.id, params={"cancellation_reason": "requested_by_customer"})
    assert (canceled.status, canceled.amount_received) == ("canceled", 0)
    assert canceled.cancellation_reason == "requested_by_customer"
    with pytest.raises(stripe.InvalidRequestError) as late:
        client.v1.payment_intents.capture(pi.id)
    assert late.value.code == "payment_intent_unexpected_state"


def flow_idempotent_retry(client: stripe.StripeClient) -> None:
    """A retry with the same key and body replays the first answer (one payment); the key
    with another body is refused."""
    params: stripe.params.PaymentIntentCreateParams = {
        "amount": 2500, "currency": "usd", "payment_method": "pm_card_visa", "confirm": True,
        "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"}}
    first = client.v1.payment_intents.create(params=params,
                                             options={"idempotency_key": "order-7-pay"})
    again = client.v1.payment_intents.create(params=params,
                                             options={"idempotency_key": "order-7-pay"})
    assert again.id == first.id and again.status == "succeeded"
    assert again.last_response is not None
    assert again.last_response.headers.get("Idempotent-Replayed") == "true"
    with pytest.raises(stripe.IdempotencyError):
        client.v1.payment_intents.create(params={**params, "amount": 2600},
                                         options={"idempotency_key": "order-7-pay"})
    charges = client.v1.charges.list(params={"payment_intent": first.id})
    assert len(charges.data) == 1


FLOWS: dict[str, Callable[[stripe.StripeClient], None]] = {
    "customer": flow_customer,
    "pay + partial refund (ceiling)": flow_pay_and_partial_refund,
    "declined card": flow_declined_card,
    "insufficient funds": flow_insufficient_funds,
    "manual capture then cancel": flow_manual_capture_then_cancel,
    "idempotent retry + key reuse": flow_idempotent_retry,
}


@pytest.mark.parametrize("name", list(FLOWS))
async def test_the_official_library_runs_each_flow_unchanged(name: str) -> None:
    async with serving(PaymentMock, instance="payment") as hosted:
        await anyio.to_thread.run_sync(FLOWS[name], client_for(hosted.url))


@contextmanager
def module_globals(url: str) -> Iterator[None]:
    """The library's older module-level configuration, put back afterwards."""
    saved = stripe.api_key, stripe.api_base, stripe.max_network_retries
    stripe.api_key, stripe.api_base, stripe.max_network_retries = "sk_test_globals", url, 0
    try:
        yield
    finally:
        stripe.api_key, stripe.api_base, stripe.max_network_retries = saved


async def test_module_level_api_base_works_too() -> None:
    """``stripe.api_base = URL`` and the resource classes (``stripe.PaymentIntent``)."""
    def pay(url: str) -> None:
        with module_globals(url):
            customer = stripe.Customer.create(email="grace@example.com")
            pi = stripe.PaymentIntent.create(
                amount=1234, currency="eur", customer=customer.id,
                payment_method="pm_card_mastercard", confirm=True,
                payment_method_types=["card"], expand=["latest_charge", "customer"])
            assert pi.status == "succeeded" and pi.customer.email == "grace@example.com"
            assert pi.latest_charge.payment_method_details.card.brand == "mastercard"
            refund = stripe.Refund.create(payment_intent=pi.id, amount=234)
            assert stripe.Refund.retrieve(refund.id).amount == 234

    async with serving(PaymentMock, instance="payment") as hosted:
        await anyio.to_thread.run_sync(pay, hosted.url)


async def test_partial_capture_sets_the_refund_ceiling() -> None:
    def flow(client: stripe.StripeClient) -> None:
        pi = client.v1.payment_intents.create(params={
            "amount": 5000, "currency": "usd", "payment_method": "pm_card_visa",
            "confirm": True, "capture_method": "manual",
            "allowed_payment_method_types": ["card"]})
        with pytest.raises(stripe.InvalidRequestError) as over:
            client.v1.payment_intents.capture(pi.id, params={"amount_to_capture": 5001})
        assert over.value.param == "amount_to_capture"
        captured = client.v1.payment_intents.capture(pi.id, params={"amount_to_capture": 3000})
        assert (captured.status, captured.amount_received) == ("succeeded", 3000)
        with pytest.raises(stripe.InvalidRequestError) as ceiling:
            client.v1.refunds.create(params={"payment_intent": pi.id, "amount": 3001})
        assert "greater than charge amount ($30.00)" in str(ceiling.value.user_message)
        assert client.v1.refunds.create(params={"payment_intent": pi.id}).amount == 3000
        with pytest.raises(stripe.InvalidRequestError) as done:
            client.v1.refunds.create(params={"payment_intent": pi.id, "amount": 1})
        assert done.value.code == "charge_already_refunded"

    async with serving(PaymentMock, instance="payment") as hosted:
        await anyio.to_thread.run_sync(flow, client_for(hosted.url))


async def test_a_dropped_answer_is_retried_by_the_library_and_charges_once() -> None:
    """The fabric's ``drop`` fault commits the payment and closes the connection; the
    library retries with the same generated Idempotency-Key and gets the stored answer."""
    async with serving(PaymentMock, instance="payment") as hosted:
        armed = await admin(hosted, "POST", "faults", json={
            "method": "POST", "path": "/v1/payment_intents", "drop": True, "times": 1})
        assert armed.status_code == 200

        def pay() -> stripe.PaymentIntent:
            return client_for(hosted.url, retries=2).v1.payment_intents.create(params={
                "amount": 2000, "currency": "usd", "payment_method": "pm_card_visa",
                "confirm": True, "allowed_payment_method_types": ["card"]})

        pi = await anyio.to_thread.run_sync(pay)
        assert pi.status == "succeeded"
        assert pi.last_response is not None
        assert pi.last_response.headers.get("Idempotent-Replayed") == "true"
        journal = (await admin(hosted, "GET", "journal",
                               params={"method": "POST", "path": "/v1/payment_intents"})).json()
        assert [e["fault"] for e in journal["entries"]] == ["drop", None]
        listed = await anyio.to_thread.run_sync(
            lambda: client_for(hosted.url).v1.payment_intents.list())
        assert [p.id for p in listed.data] == [pi.id]


async def test_the_six_flows_run_against_anvil_mocks_serve_payment() -> None:
    """The standalone server a candidate develops against (``anvil mocks serve payment``),
    in its own process."""
    anvil = Path(sys.executable).with_name("anvil")
    assert anvil.exists(), "the venv has no anvil script (pip install -e .)"
    async with await anyio.open_process([str(anvil), "mocks", "serve", "payment", "--port",
                                         "0", "--seed", "sdk"]) as process:
        try:
            assert process.stdout is not None
            lines = TextReceiveStream(process.stdout)
            text = ""
            with anyio.fail_after(20):
                while "X-Mock-Token: " not in text:
                    text += await lines.receive()
            url = re.search(r" at (http://127\.0\.0\.1:\d+)", text)
            token = re.search(r"X-Mock-Token: (\S+)", text)
            assert url is not None and token is not None, text

            def run_all(base: str, secret: str) -> None:
                for flow in FLOWS.values():
                    requests.post(f"{base}/__mock__/reset", headers={"X-Mock-Token": secret},
                                  timeout=10).raise_for_status()
                    flow(client_for(base))

            await anyio.to_thread.run_sync(run_all, url[1], token[1])
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(10, shield=True):
                assert await process.wait() == 0


def test_the_mock_keeps_the_fabric_contract_and_exports_what_it_names() -> None:
    assert check_mock(PaymentMock) == []
    ctx = Context("s", "payment")
    assert isinstance(PaymentMock(ctx), MockTask) and isinstance(PaymentMock(ctx), MockAdmin)
    public = {name for name in vars(mocks.payment) if not name.startswith("_")}
    assert set(mocks.payment.__all__) == public
