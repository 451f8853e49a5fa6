"""A Stripe-like payment mock: customers, payment intents, refunds, test cards, idempotency
keys and signed webhooks, on Stripe's v1 wire format (the official ``stripe`` library runs
against it unchanged)."""

from ._service import PaymentMock as PaymentMock
from ._webhooks import sign as sign

__all__ = ["PaymentMock", "sign"]
