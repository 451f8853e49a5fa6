"""The HTTP surface: Stripe's ``/v1`` routes, authentication, idempotency and ``expand[]``.

Every route goes through :meth:`Api.serve`, which does what Stripe does around each call:
check the ``Authorization`` header (any ``sk_test_`` key, as ``Bearer`` or as the ``Basic``
user name), decode the form body or query string, replay or refuse a known
``Idempotency-Key``, run the operation, expand what ``expand[]`` names, and answer with
Stripe's headers (``Request-Id``, ``Idempotency-Key``, ``Idempotent-Replayed``,
``Original-Request``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ._errors import StripeError, invalid
from ._form import Params, decode
from ._idempotency import IdempotencyStore, Stored
from ._intents import Payments
from ._ledger import Ledger, Obj
from ._objects import API_VERSION

Operation = Callable[[dict[str, str], Params], Obj]

NO_KEY = ("You did not provide an API key. You need to provide your API key in the "
          "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer "
          "YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we "
          "can help at https://support.stripe.com/.")


def encode(content: Any) -> bytes:
    """The response bytes of ``content`` (insertion order kept: deterministic code, same
    bytes), compact like the fabric's ``json_response``."""
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode()


def _redact(key: str) -> str:
    """``sk_test_****1234``, as Stripe echoes a key it refuses (never the whole key)."""
    prefix = key[: key.find("_", 3) + 1] if key.count("_") >= 2 else ""
    rest = key[len(prefix):]
    return f"{prefix}****{rest[-4:] if len(rest) > 4 else ''}"


def authenticate(header: str | None) -> str:
    """The API key of an ``Authorization`` header.

    Raises:
        StripeError: 401, with Stripe's message, unless it is a ``sk_test_`` key.
    """
    if not header:
        raise invalid(NO_KEY, status=401)
    scheme, _, credential = header.strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() == "basic":
        try:
            credential = base64.b64decode(credential, validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            raise invalid("Invalid API Key provided: (unreadable Basic credentials)",
                          status=401) from None
    elif scheme.lower() != "bearer":
        raise invalid(NO_KEY, status=401)
    if not credential.startswith("sk_test_") or len(credential) <= len("sk_test_"):
        raise invalid(f"Invalid API Key provided: {_redact(credential)}", status=401)
    return credential


class Api:
    """The routes of one payment instance over its state."""

    def __init__(self, ledger: Ledger, payments: Payments, keys: IdempotencyStore) -> None:
        self.ledger = ledger
        self.payments = payments
        self.keys = keys
        self.ctx = ledger.ctx

    async def serve(self, request: Request, operation: Operation, route: str) -> Response:
        """One API call, end to end (see the module docstring)."""
        method = request.method
        request_id = self.ctx.new_id("req")
        headers = {"Request-Id": request_id,
                   "Stripe-Version": request.headers.get("stripe-version") or API_VERSION,
                   "Cache-Control": "no-cache, no-store"}
        key: str | None = None
        try:
            authenticate(request.headers.get("authorization"))
            tree = decode(request.url.query)
            if method == "POST":
                body = await request.body()
                if body.strip() and "json" in request.headers.get("content-type", ""):
                    raise invalid("Invalid request: Stripe's v1 API takes form-encoded bodies "
                                  "(application/x-www-form-urlencoded), not JSON.")
                tree.update(decode(body))
                key = request.headers.get("idempotency-key") or None
            params = Params(tree)
            expand = params.strings("expand")
            if key is not None:
                headers["Idempotency-Key"] = key
                stored = self.keys.check(key, f"{method} {route}", self.keys.fingerprint(tree),
                                         self.ctx.now())
                if stored is not None:
                    headers["Idempotent-Replayed"] = "true"
                    headers["Original-Request"] = stored.request_id
                    return self._answer(stored.body, stored.status, headers)
        except StripeError as exc:
            return self._error(exc, headers)
        self.ledger.request = (request_id, key)
        status, done = 200, False
        try:
            result = operation(dict(request.path_params), params)
            done = True  # the effect is committed: whatever follows is the stored answer
            if expand:
                result = self.ledger.expand(result, expand)
            body = encode(result)
        except StripeError as exc:
            status, body = exc.status, encode(exc.body())
            done = done or exc.committed
        finally:
            self.ledger.request = (None, None)
        if key is not None and done:
            self.keys.store(key, Stored(f"{method} {route}", self.keys.fingerprint(tree), status,
                                        body, request_id, self.ctx.now()))
        return self._answer(body, status, headers)

    @staticmethod
    def _answer(body: bytes, status: int, headers: dict[str, str]) -> Response:
        return Response(body, status, headers, media_type="application/json")

    def _error(self, exc: StripeError, headers: dict[str, str]) -> Response:
        if exc.status == 401:
            headers = {**headers, "WWW-Authenticate": 'Basic realm="Stripe"'}
        return self._answer(encode(exc.body()), exc.status, headers)

    async def unrecognized(self, request: Request) -> Response:
        """Stripe's answer to a path or method it does not serve."""
        headers = {"Request-Id": self.ctx.new_id("req")}
        try:
            authenticate(request.headers.get("authorization"))
        except StripeError as exc:
            return self._error(exc, headers)
        message = (f"Unrecognized request URL ({request.method}: {request.url.path}). Please "
                   "see https://stripe.com/docs or we can help at https://support.stripe.com/.")
        return self._error(invalid(message, status=404), headers)

    # -- the route table -----------------------------------------------------------------

    def routes(self) -> Sequence[BaseRoute]:
        ledger, payments = self.ledger, self.payments
        table: list[tuple[str, str, Operation]] = [
            ("POST", "/v1/customers", lambda p, q: ledger.create_customer(q)),
            ("GET", "/v1/customers", lambda p, q: ledger.list_customers(q)),
            ("GET", "/v1/customers/{id}", lambda p, q: _read(q, ledger.customer(p["id"]))),
            ("POST", "/v1/customers/{id}", lambda p, q: ledger.update_customer(p["id"], q)),
            ("DELETE", "/v1/customers/{id}", lambda p, q: _read(q, ledger.delete_customer(
                p["id"]))),
            ("GET", "/v1/customers/{id}/payment_methods",
             lambda p, q: ledger.list_payment_methods(q, p["id"])),
            ("POST", "/v1/payment_methods", lambda p, q: ledger.create_payment_method(q)),
            ("GET", "/v1/payment_methods", lambda p, q: ledger.list_payment_methods(q)),
            ("GET", "/v1/payment_methods/{id}", lambda p, q: _read(q, ledger.get("pm",
                                                                                  p["id"]))),
            ("POST", "/v1/payment_methods/{id}/attach",
             lambda p, q: ledger.attach_payment_method(p["id"], q)),
            ("POST", "/v1/payment_methods/{id}/detach",
             lambda p, q: ledger.detach_payment_method(p["id"], q)),
            ("POST", "/v1/payment_intents", lambda p, q: payments.create(q)),
            ("GET", "/v1/payment_intents", lambda p, q: payments.list_intents(q)),
            ("GET", "/v1/payment_intents/{id}", lambda p, q: _read(q, payments.intent(
                p["id"]), "client_secret")),
            ("POST", "/v1/payment_intents/{id}", lambda p, q: payments.update(p["id"], q)),
            ("POST", "/v1/payment_intents/{id}/confirm",
             lambda p, q: payments.confirm(p["id"], q)),
            ("POST", "/v1/payment_intents/{id}/capture",
             lambda p, q: payments.capture(p["id"], q)),
            ("POST", "/v1/payment_intents/{id}/cancel",
             lambda p, q: payments.cancel(p["id"], q)),
            ("GET", "/v1/charges", lambda p, q: payments.list_charges(q)),
            ("GET", "/v1/charges/{id}", lambda p, q: _read(q, ledger.get("ch", p["id"]))),
            ("POST", "/v1/refunds", lambda p, q: payments.refund(q)),
            ("GET", "/v1/refunds", lambda p, q: payments.list_refunds(q)),
            ("GET", "/v1/refunds/{id}", lambda p, q: _read(q, ledger.get("re", p["id"]))),
            ("POST", "/v1/refunds/{id}", lambda p, q: payments.update_refund(p["id"], q)),
            ("GET", "/v1/events", lambda p, q: ledger.list_events(q)),
            ("GET", "/v1/events/{id}", lambda p, q: _read(q, ledger.get("evt", p["id"]))),
            ("POST", "/v1/webhook_endpoints", lambda p, q: ledger.create_endpoint(q)),
            ("GET", "/v1/webhook_endpoints", lambda p, q: ledger.list_endpoints(q)),
            ("GET", "/v1/webhook_endpoints/{id}", lambda p, q: _read(q, ledger.endpoint(
                p["id"]))),
            ("POST", "/v1/webhook_endpoints/{id}",
             lambda p, q: ledger.update_endpoint(p["id"], q)),
            ("DELETE", "/v1/webhook_endpoints/{id}", lambda p, q: _read(
                q, ledger.delete_endpoint(p["id"]))),
        ]
        routes: list[BaseRoute] = [Route(path, self._endpoint(operation, path), methods=[method])
                                   for method, path, operation in table]
        routes.append(Route("/v1/{rest:path}", self.unrecognized,
                            methods=["GET", "POST", "DELETE", "PUT", "PATCH"]))
        return routes

    def _endpoint(self, operation: Operation, route: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return await self.serve(request, operation, route)

        return endpoint


def _read(params: Params, found: Obj, *extra: str) -> Obj:
    """A retrieve (or delete): only ``expand`` (and ``extra``) may be given."""
    params.only(("expand", *extra))
    return found
