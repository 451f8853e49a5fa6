"""Stripe's test cards: numbers, PaymentMethod ids and tokens, each with its fixed outcome.

The outcomes are the ones Stripe documents on its "Testing" page: ``4242424242424242``
(``pm_card_visa``) always succeeds, ``4000000000000002`` (``pm_card_chargeDeclined``) is a
generic decline, ``4000000000009995`` is ``insufficient_funds``, ``4000000000000069`` an
expired card, ``4000000000000119`` a processing error, and so on. A number that passes the
Luhn check but is not a test card is refused as a live card used in test mode, as Stripe
does; one that fails the Luhn check is ``incorrect_number``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Decline:
    """How a charge on a declining card fails (the error and the charge's ``outcome``)."""

    code: str  # the error's code: card_declined, expired_card, processing_error, ...
    decline_code: str
    message: str
    outcome_type: str = "issuer_declined"
    network_status: str = "declined_by_network"
    risk_level: str = "normal"

    @property
    def seller_message(self) -> str:
        if self.outcome_type == "blocked":
            return "Stripe blocked this payment as too risky."
        if self.decline_code == "generic_decline":
            return "The bank did not return any further details with this decline."
        return f"The bank returned the decline code `{self.decline_code}`."

    @property
    def reason(self) -> str:
        return "highest_risk_level" if self.outcome_type == "blocked" else self.decline_code


@dataclass(frozen=True)
class Card:
    number: str
    brand: str
    funding: str = "credit"
    country: str = "US"
    decline: Decline | None = None

    @property
    def last4(self) -> str:
        return self.number[-4:]

    @property
    def fingerprint(self) -> str:
        # The same card number always has the same fingerprint, as on one Stripe account.
        return hashlib.sha256(self.number.encode()).hexdigest()[:16]


GENERIC = Decline("card_declined", "generic_decline", "Your card was declined.")
INSUFFICIENT = Decline("card_declined", "insufficient_funds", "Your card has insufficient funds.")
LOST = Decline("card_declined", "lost_card", "Your card was declined.")
STOLEN = Decline("card_declined", "stolen_card", "Your card was declined.")
EXPIRED = Decline("expired_card", "expired_card", "Your card has expired.")
CVC = Decline("incorrect_cvc", "incorrect_cvc", "Your card's security code is incorrect.")
PROCESSING = Decline("processing_error", "processing_error",
                     "An error occurred while processing your card. Try again in a little bit.")
VELOCITY = Decline("card_declined", "card_velocity_exceeded",
                   "Your card was declined for making repeated attempts too frequently or "
                   "exceeding its amount limit.")
FRAUD = Decline("card_declined", "fraudulent", "Your card was declined.",
                outcome_type="blocked", network_status="not_sent_to_network",
                risk_level="highest")

CARDS: dict[str, Card] = {card.number: card for card in (
    Card("4242424242424242", "visa"),
    Card("4000056655665556", "visa", "debit"),
    Card("4000000000000077", "visa"),
    Card("4000000760000002", "visa", country="BR"),
    Card("4000001240000000", "visa", country="CA"),
    Card("5555555555554444", "mastercard"),
    Card("2223003122003222", "mastercard"),
    Card("5200828282828210", "mastercard", "debit"),
    Card("5105105105105100", "mastercard", "prepaid"),
    Card("378282246310005", "amex"),
    Card("371449635398431", "amex"),
    Card("6011111111111117", "discover"),
    Card("6011000990139424", "discover"),
    Card("3056930009020004", "diners"),
    Card("36227206271667", "diners"),
    Card("3566002020360505", "jcb"),
    Card("6200000000000005", "unionpay"),
    Card("4000000000000002", "visa", decline=GENERIC),
    Card("4000000000000341", "visa", decline=GENERIC),
    Card("4000000000009995", "visa", decline=INSUFFICIENT),
    Card("4000000000009987", "visa", decline=LOST),
    Card("4000000000009979", "visa", decline=STOLEN),
    Card("4000000000000069", "visa", decline=EXPIRED),
    Card("4000000000000127", "visa", decline=CVC),
    Card("4000000000000119", "visa", decline=PROCESSING),
    Card("4000000000006975", "visa", decline=VELOCITY),
    Card("4100000000000019", "visa", decline=FRAUD),
)}

#: Stripe's test PaymentMethod ids (``pm_card_*``) and tokens (``tok_*``) by card number.
_ALIASES: dict[str, str] = {
    "visa": "4242424242424242",
    "visa_debit": "4000056655665556",
    "bypassPending": "4000000000000077",
    "br": "4000000760000002",
    "ca": "4000001240000000",
    "mastercard": "5555555555554444",
    "mastercard_debit": "5200828282828210",
    "mastercard_prepaid": "5105105105105100",
    "amex": "378282246310005",
    "discover": "6011111111111117",
    "diners": "3056930009020004",
    "jcb": "3566002020360505",
    "unionpay": "6200000000000005",
    "chargeDeclined": "4000000000000002",
    "visa_chargeDeclined": "4000000000000002",
    "chargeCustomerFail": "4000000000000341",
    "chargeDeclinedInsufficientFunds": "4000000000009995",
    "visa_chargeDeclinedInsufficientFunds": "4000000000009995",
    "chargeDeclinedLostCard": "4000000000009987",
    "visa_chargeDeclinedLostCard": "4000000000009987",
    "chargeDeclinedStolenCard": "4000000000009979",
    "visa_chargeDeclinedStolenCard": "4000000000009979",
    "chargeDeclinedExpiredCard": "4000000000000069",
    "chargeDeclinedIncorrectCvc": "4000000000000127",
    "chargeDeclinedProcessingError": "4000000000000119",
    "visa_chargeDeclinedVelocityLimitExceeded": "4000000000006975",
    "chargeDeclinedFraudulent": "4100000000000019",
    "radarBlock": "4100000000000019",
}
PAYMENT_METHODS: dict[str, Card] = {f"pm_card_{name}": CARDS[number]
                                        for name, number in _ALIASES.items()}
TOKENS: dict[str, Card] = {f"tok_{name}": CARDS[number] for name, number in _ALIASES.items()}


def luhn(number: str) -> bool:
    """Whether ``number`` (digits only) passes the Luhn check."""
    total = 0
    for index, char in enumerate(reversed(number)):
        digit = int(char)
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0
