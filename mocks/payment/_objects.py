"""Stripe's resource shapes: customers, payment methods, payment intents, charges, refunds,
events, webhook endpoints and list objects.

Every object is a plain dict in Stripe's key order (``id``, ``object``, then the rest
alphabetically), so its JSON is the same bytes every time it is built from the same values.
Fields anvil does not model keep Stripe's neutral values (``null``, ``{}``, ``false``) so
clients that read them find what they expect.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ._cards import Card, Decline

#: The API version events and endpoints report (the one the current official library pins).
API_VERSION = "2026-10-28.endive"


def stripe_object(object_id: str, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """``{"id", "object", ...fields sorted by name}``."""
    return {"id": object_id, "object": kind, **{key: fields[key] for key in sorted(fields)}}


def _sorted(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: fields[key] for key in sorted(fields)}


def _address() -> dict[str, Any]:
    return _sorted({"city": None, "country": None, "line1": None, "line2": None,
                    "postal_code": None, "state": None})


def customer(object_id: str, created: int, *, email: str | None, name: str | None,
             description: str | None, phone: str | None,
             metadata: dict[str, str]) -> dict[str, Any]:
    return stripe_object(object_id, "customer", {
        "address": None,
        "balance": 0,
        "created": created,
        "currency": None,
        "default_source": None,
        "delinquent": False,
        "description": description,
        "discount": None,
        "email": email,
        "invoice_prefix": object_id[4:12].upper(),
        "invoice_settings": _sorted({"custom_fields": None, "default_payment_method": None,
                                     "footer": None, "rendering_options": None}),
        "livemode": False,
        "metadata": metadata,
        "name": name,
        "next_invoice_sequence": 1,
        "phone": phone,
        "preferred_locales": [],
        "shipping": None,
        "tax_exempt": "none",
        "test_clock": None,
    })


def deleted(object_id: str, kind: str) -> dict[str, Any]:
    return {"id": object_id, "object": kind, "deleted": True}


def expiry(now: int) -> tuple[int, int]:
    """The (month, year) a test card expires: a year after the virtual clock's month."""
    day = dt.datetime.fromtimestamp(now, dt.UTC)
    return day.month, day.year + 1


def card_details(card: Card, exp_month: int, exp_year: int, cvc_check: str | None
                 ) -> dict[str, Any]:
    return _sorted({
        "brand": card.brand,
        "checks": _sorted({"address_line1_check": None, "address_postal_code_check": None,
                           "cvc_check": cvc_check}),
        "country": card.country,
        "display_brand": card.brand,
        "exp_month": exp_month,
        "exp_year": exp_year,
        "fingerprint": card.fingerprint,
        "funding": card.funding,
        "generated_from": None,
        "last4": card.last4,
        "networks": {"available": [card.brand], "preferred": None},
        "regulated_status": "unregulated",
        "three_d_secure_usage": {"supported": True},
        "wallet": None,
    })


def payment_method(object_id: str, created: int, card: dict[str, Any],
                   metadata: dict[str, str]) -> dict[str, Any]:
    return stripe_object(object_id, "payment_method", {
        "allow_redisplay": "unspecified",
        "billing_details": _sorted({"address": _address(), "email": None, "name": None,
                                    "phone": None, "tax_id": None}),
        "card": card,
        "created": created,
        "customer": None,
        "livemode": False,
        "metadata": metadata,
        "type": "card",
    })


def payment_intent(object_id: str, created: int, *, amount: int, currency: str,
                   client_secret: str, capture_method: str,
                   automatic_payment_methods: dict[str, Any] | None,
                   payment_method_types: list[str], customer: str | None,
                   description: str | None, metadata: dict[str, str],
                   receipt_email: str | None, statement_descriptor: str | None,
                   statement_descriptor_suffix: str | None, setup_future_usage: str | None,
                   transfer_group: str | None) -> dict[str, Any]:
    return stripe_object(object_id, "payment_intent", {
        "amount": amount,
        "amount_capturable": 0,
        "amount_details": {"tip": {}},
        "amount_received": 0,
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": automatic_payment_methods,
        "canceled_at": None,
        "cancellation_reason": None,
        "capture_method": capture_method,
        "client_secret": client_secret,
        "confirmation_method": "automatic",
        "created": created,
        "currency": currency,
        "customer": customer,
        "description": description,
        "excluded_payment_method_types": None,
        "last_payment_error": None,
        "latest_charge": None,
        "livemode": False,
        "metadata": metadata,
        "next_action": None,
        "on_behalf_of": None,
        "payment_method": None,
        "payment_method_configuration_details": None,
        "payment_method_options": {"card": _sorted({
            "installments": None, "mandate_options": None, "network": None,
            "request_three_d_secure": "automatic"})},
        "payment_method_types": payment_method_types,
        "processing": None,
        "receipt_email": receipt_email,
        "review": None,
        "setup_future_usage": setup_future_usage,
        "shipping": None,
        "source": None,
        "statement_descriptor": statement_descriptor,
        "statement_descriptor_suffix": statement_descriptor_suffix,
        "status": "requires_payment_method",
        "transfer_data": None,
        "transfer_group": transfer_group,
    })


def outcome(decline: Decline | None) -> dict[str, Any]:
    if decline is None:
        return _sorted({"advice_code": None, "network_advice_code": None,
                        "network_decline_code": None, "network_status": "approved_by_network",
                        "reason": None, "risk_level": "normal", "risk_score": 32,
                        "seller_message": "Payment complete.", "type": "authorized"})
    return _sorted({"advice_code": None, "network_advice_code": None,
                    "network_decline_code": None, "network_status": decline.network_status,
                    "reason": decline.reason, "risk_level": decline.risk_level,
                    "risk_score": 99 if decline.risk_level == "highest" else 40,
                    "seller_message": decline.seller_message, "type": decline.outcome_type})


def charge(object_id: str, created: int, *, intent: dict[str, Any], pm: dict[str, Any],
           decline: Decline | None, captured: bool) -> dict[str, Any]:
    amount = intent["amount"]
    paid = decline is None
    card = pm["card"]
    return stripe_object(object_id, "charge", {
        "amount": amount,
        "amount_captured": amount if paid and captured else 0,
        "amount_refunded": 0,
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "balance_transaction": None,
        "billing_details": pm["billing_details"],
        "calculated_statement_descriptor": "ANVIL MOCK",
        "captured": paid and captured,
        "created": created,
        "currency": intent["currency"],
        "customer": intent["customer"],
        "description": intent["description"],
        "destination": None,
        "dispute": None,
        "disputed": False,
        "failure_balance_transaction": None,
        "failure_code": None if decline is None else decline.code,
        "failure_message": None if decline is None else decline.message,
        "fraud_details": {},
        "livemode": False,
        "metadata": dict(intent["metadata"]),
        "on_behalf_of": None,
        "outcome": outcome(decline),
        "paid": paid,
        "payment_intent": intent["id"],
        "payment_method": pm["id"],
        "payment_method_details": {"card": _sorted({
            "amount_authorized": amount if paid else None,
            "brand": card["brand"],
            "checks": card["checks"],
            "country": card["country"],
            "exp_month": card["exp_month"],
            "exp_year": card["exp_year"],
            "fingerprint": card["fingerprint"],
            "funding": card["funding"],
            "last4": card["last4"],
            "network": card["brand"],
            "three_d_secure": None,
            "wallet": None,
        }), "type": "card"},
        "receipt_email": intent["receipt_email"],
        "receipt_number": None,
        "receipt_url": None,
        "refunded": False,
        "review": None,
        "shipping": None,
        "source": None,
        "source_transfer": None,
        "statement_descriptor": intent["statement_descriptor"],
        "statement_descriptor_suffix": intent["statement_descriptor_suffix"],
        "status": "succeeded" if paid else "failed",
        "transfer_data": None,
        "transfer_group": intent["transfer_group"],
    })


def refund(object_id: str, created: int, *, amount: int, charge: dict[str, Any],
           reason: str | None, metadata: dict[str, str]) -> dict[str, Any]:
    return stripe_object(object_id, "refund", {
        "amount": amount,
        "balance_transaction": None,
        "charge": charge["id"],
        "created": created,
        "currency": charge["currency"],
        "destination_details": {"card": _sorted({"reference_status": "pending",
                                                 "reference_type": "acquirer_reference_number",
                                                 "type": "refund"}), "type": "card"},
        "metadata": metadata,
        "payment_intent": charge["payment_intent"],
        "reason": reason,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "succeeded",
        "transfer_reversal": None,
    })


def webhook_endpoint(object_id: str, created: int, *, url: str, enabled_events: list[str],
                     secret: str, description: str | None, metadata: dict[str, str],
                     api_version: str | None) -> dict[str, Any]:
    return stripe_object(object_id, "webhook_endpoint", {
        "api_version": api_version,
        "application": None,
        "created": created,
        "description": description,
        "enabled_events": enabled_events,
        "livemode": False,
        "metadata": metadata,
        "secret": secret,
        "status": "enabled",
        "url": url,
    })


def event(object_id: str, created: int, *, type: str, data: dict[str, Any],
          pending_webhooks: int, request_id: str | None,
          idempotency_key: str | None) -> dict[str, Any]:
    return stripe_object(object_id, "event", {
        "api_version": API_VERSION,
        "created": created,
        "data": data,
        "livemode": False,
        "pending_webhooks": pending_webhooks,
        "request": {"id": request_id, "idempotency_key": idempotency_key},
        "type": type,
    })


def list_object(url: str, data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": has_more, "url": url}
