"""Stripe's error object, raised by the domain code and rendered by the HTTP layer.

Stripe answers every failure with ``{"error": {...}}`` whose ``type`` tells the SDK which
exception to raise (``invalid_request_error`` on 400/404, ``card_error`` on 402,
``idempotency_error`` on 400/409, an authentication failure on 401).

Whether an error is kept for idempotent replay follows Stripe: a request that failed
*validation* stores nothing (the same key may be retried with a corrected body), one that
began executing (a card declined after the charge was attempted) stores its answer.
"""

from __future__ import annotations

from typing import Any

DOCS = "https://stripe.com/docs/error-codes/"


class StripeError(Exception):
    """One Stripe error answer.

    Args:
        status: the HTTP status (400, 401, 402, 404, 409).
        type: Stripe's error type (``invalid_request_error``, ``card_error``, ...).
        message: the human message, as Stripe words it.
        code: Stripe's error code (``resource_missing``, ``card_declined``, ...).
        param: the request parameter at fault, if one is.
        decline_code: the issuer's reason for a card decline.
        extra: more members of the error object (``payment_intent``, ``charge``, ...).
        committed: the request had an effect before failing: its answer is stored for
            idempotent replay.
    """

    def __init__(self, status: int, type: str, message: str, *, code: str | None = None,
                 param: str | None = None, decline_code: str | None = None,
                 extra: dict[str, Any] | None = None, committed: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.code = code
        self.param = param
        self.decline_code = decline_code
        self.extra = extra or {}
        self.committed = committed

    def body(self) -> dict[str, Any]:
        """``{"error": {...}}`` with Stripe's members in alphabetical order, absent ones left
        out (Stripe omits them rather than sending null)."""
        fields: dict[str, Any] = dict(self.extra)
        if self.code is not None:
            fields["code"] = self.code
            fields["doc_url"] = DOCS + self.code.replace("_", "-")
        if self.decline_code is not None:
            fields["decline_code"] = self.decline_code
        fields["message"] = self.message
        if self.param is not None:
            fields["param"] = self.param
        fields["type"] = self.type
        return {"error": {key: fields[key] for key in sorted(fields)}}


def invalid(message: str, *, param: str | None = None, code: str | None = None,
            status: int = 400, extra: dict[str, Any] | None = None) -> StripeError:
    """An ``invalid_request_error`` (validation: nothing stored for replay)."""
    return StripeError(status, "invalid_request_error", message, code=code, param=param,
                       extra=extra)


def missing(kind: str, object_id: str, *, param: str = "id", status: int = 404) -> StripeError:
    """Stripe's ``resource_missing``: ``No such customer: 'cus_x'``."""
    return invalid(f"No such {kind}: '{object_id}'", param=param, code="resource_missing",
                   status=status)


def unexpected_state(message: str, *, extra: dict[str, Any] | None = None) -> StripeError:
    """An action the object's status does not allow (``payment_intent_unexpected_state``)."""
    return invalid(message, code="payment_intent_unexpected_state", extra=extra)
