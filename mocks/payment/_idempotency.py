"""Stripe's idempotency keys on ``POST`` requests.

- The first request with a key runs; if it began executing (it passed validation), its
  status and body bytes are stored under the key.
- The same key, endpoint and parameters again: the stored answer is replayed, byte for byte,
  with ``Idempotent-Replayed: true`` and ``Original-Request`` naming the first request.
- The same key with other parameters or another endpoint: 400 ``idempotency_error``.
- A request that failed validation stores nothing: the key can be used again (with a
  corrected body, typically).

Stripe answers 409 to a request whose key is still in use by a running one. Here an
operation runs without yielding to the event loop between its check and its store, so two
requests with one key never overlap: the second one always finds the first one's answer.

Keys are kept for 24 hours of the instance's virtual clock, as Stripe keeps them for 24 hours.
Parameters are compared decoded, so ``a=1&b=2`` and ``b=2&a=1`` are the same request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._errors import StripeError

TTL = 24 * 3600
MAX_KEY = 255


@dataclass(frozen=True)
class Stored:
    """One stored answer."""

    endpoint: str  # "POST /v1/payment_intents"
    fingerprint: str  # the decoded parameters, canonical JSON
    status: int
    body: bytes
    request_id: str
    created: int


class IdempotencyStore:
    """The keys of one instance."""

    def __init__(self) -> None:
        self._stored: dict[str, Stored] = {}

    @staticmethod
    def fingerprint(params: dict[str, Any]) -> str:
        return json.dumps(params, sort_keys=True, separators=(",", ":"))

    def check(self, key: str, endpoint: str, fingerprint: str, now: int) -> Stored | None:
        """The stored answer to replay for ``key``, or None when the request should run.

        Raises:
            StripeError: the key is too long, or was used with another endpoint or other
                parameters (400 ``idempotency_error``).
        """
        if len(key) > MAX_KEY:
            raise StripeError(400, "invalid_request_error",
                              f"Idempotency-Key must be at most {MAX_KEY} characters long.",
                              param="Idempotency-Key")
        self._expire(now)
        stored = self._stored.get(key)
        if stored is None:
            return None
        if stored.endpoint != endpoint:
            raise StripeError(400, "idempotency_error",
                              "Keys for idempotent requests can only be used for the same "
                              f"endpoint they were first used for ('{stored.endpoint}' vs "
                              f"'{endpoint}'). Try using a key other than '{key}' if you meant "
                              "to execute a different request.")
        if stored.fingerprint != fingerprint:
            raise StripeError(400, "idempotency_error",
                              "Keys for idempotent requests can only be used with the same "
                              "parameters they were first used with. Try using a key other "
                              f"than '{key}' if you meant to execute a different request.")
        return stored

    def store(self, key: str, stored: Stored) -> None:
        """Keep the answer of the request that first used ``key``."""
        self._stored[key] = stored

    def _expire(self, now: int) -> None:
        # Stored in the order of the clock, which never goes back: the oldest come first.
        while self._stored:
            key, stored = next(iter(self._stored.items()))
            if now - stored.created < TTL:
                return
            del self._stored[key]
