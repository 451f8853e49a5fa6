"""The payment mock's own contract: a reduced subset of Stripe's OpenAPI document covering
exactly the paths, parameters and objects the mock implements."""

from __future__ import annotations

from typing import Any

from ._ledger import EVENT_TYPES
from ._objects import API_VERSION

Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str, **more: Any) -> Schema:
    return {"type": kind, "nullable": True, **more}


_STR, _INT, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}
_META = {"type": "object", "additionalProperties": {"type": "string", "maxLength": 500},
         "description": "Up to 50 keys; an empty value unsets a key on update."}
_EXPAND = {"type": "array", "items": {"type": "string"},
           "description": "Ids to replace by their objects (`expand[]=latest_charge`)."}


def _object(kind: str, props: Schema, required: list[str] | None = None) -> Schema:
    return {"type": "object", "required": required or ["id", "object"],
            "properties": {"id": _STR, "object": {"type": "string", "enum": [kind]}, **props}}


def _schemas() -> dict[str, Schema]:
    expandable = {"anyOf": [_STR, {"type": "object"}], "nullable": True}
    return {
        "error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["type", "message"], "properties": {
                "type": {"type": "string", "enum": [
                    "api_error", "card_error", "idempotency_error", "invalid_request_error"]},
                "code": _STR, "decline_code": _STR, "message": _STR, "param": _STR,
                "doc_url": _STR, "charge": _STR, "payment_intent": _ref("payment_intent"),
                "payment_method": _ref("payment_method")}}}},
        "customer": _object("customer", {
            "created": _INT, "email": _nullable("string"), "name": _nullable("string"),
            "description": _nullable("string"), "phone": _nullable("string"),
            "metadata": _META, "livemode": _BOOL, "deleted": _BOOL}),
        "payment_method": _object("payment_method", {
            "created": _INT, "customer": expandable, "type": {"type": "string", "enum": ["card"]},
            "metadata": _META, "card": {"type": "object", "properties": {
                "brand": _STR, "last4": _STR, "exp_month": _INT, "exp_year": _INT,
                "funding": _STR, "country": _STR, "fingerprint": _STR}}}),
        "payment_intent": _object("payment_intent", {
            "amount": _INT, "amount_capturable": _INT, "amount_received": _INT,
            "automatic_payment_methods": _nullable("object", properties={
                "enabled": _BOOL, "allow_redirects": {"type": "string",
                                                      "enum": ["always", "never"]}}),
            "canceled_at": _nullable("integer"),
            "cancellation_reason": _nullable("string"),
            "capture_method": {"type": "string",
                               "enum": ["automatic", "automatic_async", "manual"]},
            "client_secret": _STR, "created": _INT, "currency": _STR, "customer": expandable,
            "description": _nullable("string"),
            "last_payment_error": _nullable("object"), "latest_charge": expandable,
            "metadata": _META, "payment_method": expandable,
            "payment_method_types": {"type": "array", "items": _STR},
            "status": {"type": "string", "enum": [
                "requires_payment_method", "requires_confirmation", "requires_action",
                "processing", "requires_capture", "canceled", "succeeded"]}}),
        "charge": _object("charge", {
            "amount": _INT, "amount_captured": _INT, "amount_refunded": _INT, "captured": _BOOL,
            "created": _INT, "currency": _STR, "customer": expandable,
            "failure_code": _nullable("string"), "failure_message": _nullable("string"),
            "metadata": _META, "outcome": {"type": "object"}, "paid": _BOOL,
            "payment_intent": expandable, "payment_method": _STR, "refunded": _BOOL,
            "refunds": {"type": "object", "description": "Only with expand[]=refunds."},
            "status": {"type": "string", "enum": ["succeeded", "pending", "failed"]}}),
        "refund": _object("refund", {
            "amount": _INT, "charge": expandable, "created": _INT, "currency": _STR,
            "metadata": _META, "payment_intent": expandable, "reason": _nullable("string"),
            "status": {"type": "string", "enum": ["succeeded"]}}),
        "event": _object("event", {
            "api_version": _STR, "created": _INT, "livemode": _BOOL,
            "data": {"type": "object", "properties": {"object": {"type": "object"},
                                                      "previous_attributes": {"type": "object"}}},
            "pending_webhooks": _INT, "request": {"type": "object"},
            "type": {"type": "string", "enum": list(EVENT_TYPES)}}),
        "webhook_endpoint": _object("webhook_endpoint", {
            "created": _INT, "url": _STR, "enabled_events": {"type": "array", "items": _STR},
            "secret": {"type": "string", "description": "whsec_...: only in the answer to "
                                                        "the creation."},
            "status": {"type": "string", "enum": ["enabled", "disabled"]},
            "metadata": _META, "description": _nullable("string")}),
        "list": {"type": "object", "required": ["object", "data", "has_more", "url"],
                 "properties": {"object": {"type": "string", "enum": ["list"]},
                                "data": {"type": "array", "items": {"type": "object"}},
                                "has_more": _BOOL, "url": _STR}},
    }


def _form(props: Schema, required: list[str] | None = None) -> Schema:
    """A form-encoded request body; hashes and arrays use bracketed keys (deepObject)."""
    nested = {name: {"style": "deepObject", "explode": True} for name, schema in props.items()
              if schema.get("type") in ("object", "array")}
    schema: Schema = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    content: Schema = {"schema": schema}
    if nested:
        content["encoding"] = nested
    return {"required": bool(required),
            "content": {"application/x-www-form-urlencoded": content}}


def _answers(name: str, *errors: int) -> Schema:
    found: Schema = {"200": {"description": f"The {name}.", "content": {
        "application/json": {"schema": _ref(name)}}}}
    for status in errors:
        found[str(status)] = {"description": {
            400: "invalid_request_error or idempotency_error", 401: "No or invalid API key",
            402: "card_error (a declined card)", 404: "resource_missing",
            409: "idempotency_error: a request with this key is still running"}[status],
            "content": {"application/json": {"schema": _ref("error")}}}
    return found


def _op(summary: str, name: str, *, body: Schema | None = None, query: list[Schema] | None = None,
        errors: tuple[int, ...] = (400, 401, 404), idempotent: bool = False) -> Schema:
    op: Schema = {"summary": summary, "responses": _answers(name, *errors)}
    parameters = list(query or [])
    if idempotent:
        parameters.append({"name": "Idempotency-Key", "in": "header", "required": False,
                           "schema": {"type": "string", "maxLength": 255}})
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = body
    return op


def _q(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema}


_PATH_ID = {"name": "id", "in": "path", "required": True, "schema": _STR}
_PAGING = [_q("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
           _q("starting_after", _STR), _q("ending_before", _STR)]
_EXPAND_Q = _q("expand[]", _EXPAND)


def document() -> dict[str, Any]:
    """The OpenAPI 3.0 document (the same dict every time)."""
    card: Schema = {"type": "object", "properties": {
        "number": _STR, "exp_month": _INT, "exp_year": _INT, "cvc": _STR, "token": _STR}}
    pm_data: Schema = {"type": "object", "properties": {
        "type": {"type": "string", "enum": ["card"]}, "card": card}}
    apm = {"type": "object", "properties": {"enabled": _BOOL, "allow_redirects": {
        "type": "string", "enum": ["always", "never"]}}}
    pi_create = _form({
        "amount": _INT, "currency": _STR, "customer": _STR, "description": _STR,
        "metadata": _META, "payment_method": {"type": "string", "description":
                                              "pm_... or a test id such as pm_card_visa"},
        "payment_method_data": pm_data, "payment_method_types": {"type": "array", "items": _STR},
        "automatic_payment_methods": apm, "confirm": _BOOL,
        "capture_method": {"type": "string", "enum": ["automatic", "automatic_async", "manual"]},
        "return_url": _STR, "receipt_email": _STR, "setup_future_usage": _STR,
        "statement_descriptor": _STR, "expand": _EXPAND}, ["amount", "currency"])
    pi_confirm = _form({"payment_method": _STR, "payment_method_data": pm_data,
                        "return_url": _STR, "capture_method": _STR, "expand": _EXPAND})
    customer_form = _form({"email": _STR, "name": _STR, "description": _STR, "phone": _STR,
                           "metadata": _META, "payment_method": _STR, "expand": _EXPAND})
    paths: dict[str, Any] = {
        "/v1/customers": {
            "post": _op("Create a customer", "customer", body=customer_form, idempotent=True),
            "get": _op("List customers", "list", query=[*_PAGING, _q("email", _STR)])},
        "/v1/customers/{id}": {
            "parameters": [_PATH_ID],
            "get": _op("Retrieve a customer", "customer", query=[_EXPAND_Q]),
            "post": _op("Update a customer", "customer", body=customer_form, idempotent=True),
            "delete": _op("Delete a customer", "customer")},
        "/v1/customers/{id}/payment_methods": {
            "parameters": [_PATH_ID],
            "get": _op("List a customer's payment methods", "list", query=_PAGING)},
        "/v1/payment_methods": {
            "post": _op("Create a card payment method", "payment_method", body=_form({
                "type": {"type": "string", "enum": ["card"]},
                "card": card, "metadata": _META}, ["type", "card"]),
                errors=(400, 401, 402), idempotent=True),
            "get": _op("List payment methods", "list", query=[*_PAGING, _q("customer", _STR)])},
        "/v1/payment_methods/{id}": {"parameters": [_PATH_ID], "get": _op(
            "Retrieve a payment method", "payment_method", query=[_EXPAND_Q])},
        "/v1/payment_methods/{id}/attach": {"parameters": [_PATH_ID], "post": _op(
            "Attach to a customer", "payment_method", body=_form({"customer": _STR},
                                                                  ["customer"]),
            idempotent=True)},
        "/v1/payment_methods/{id}/detach": {"parameters": [_PATH_ID], "post": _op(
            "Detach from its customer", "payment_method", idempotent=True)},
        "/v1/payment_intents": {
            "post": _op("Create a payment intent (confirm=true charges at once)",
                        "payment_intent", body=pi_create, errors=(400, 401, 402, 409),
                        idempotent=True),
            "get": _op("List payment intents", "list", query=[*_PAGING, _q("customer", _STR)])},
        "/v1/payment_intents/{id}": {
            "parameters": [_PATH_ID],
            "get": _op("Retrieve a payment intent", "payment_intent", query=[_EXPAND_Q]),
            "post": _op("Update a payment intent", "payment_intent", body=_form({
                "amount": _INT, "currency": _STR, "customer": _STR, "description": _STR,
                "metadata": _META, "payment_method": _STR}), idempotent=True)},
        "/v1/payment_intents/{id}/confirm": {"parameters": [_PATH_ID], "post": _op(
            "Confirm a payment intent", "payment_intent", body=pi_confirm,
            errors=(400, 401, 402, 404, 409), idempotent=True)},
        "/v1/payment_intents/{id}/capture": {"parameters": [_PATH_ID], "post": _op(
            "Capture an authorized payment intent (all or amount_to_capture)", "payment_intent",
            body=_form({"amount_to_capture": _INT, "metadata": _META, "expand": _EXPAND}),
            idempotent=True)},
        "/v1/payment_intents/{id}/cancel": {"parameters": [_PATH_ID], "post": _op(
            "Cancel a payment intent", "payment_intent", body=_form({
                "cancellation_reason": {"type": "string", "enum": [
                    "duplicate", "fraudulent", "requested_by_customer", "abandoned"]}}),
            idempotent=True)},
        "/v1/charges": {"get": _op("List charges", "list", query=[
            *_PAGING, _q("payment_intent", _STR), _q("customer", _STR)])},
        "/v1/charges/{id}": {"parameters": [_PATH_ID], "get": _op(
            "Retrieve a charge", "charge", query=[_EXPAND_Q])},
        "/v1/refunds": {
            "post": _op("Refund all or part of a captured payment (never above what is left)",
                        "refund", body=_form({
                            "payment_intent": _STR, "charge": _STR, "amount": _INT,
                            "reason": {"type": "string", "enum": [
                                "duplicate", "fraudulent", "requested_by_customer"]},
                            "metadata": _META, "expand": _EXPAND}), idempotent=True),
            "get": _op("List refunds", "list", query=[
                *_PAGING, _q("payment_intent", _STR), _q("charge", _STR)])},
        "/v1/refunds/{id}": {
            "parameters": [_PATH_ID],
            "get": _op("Retrieve a refund", "refund", query=[_EXPAND_Q]),
            "post": _op("Update a refund's metadata", "refund", body=_form({"metadata": _META}),
                        idempotent=True)},
        "/v1/events": {"get": _op("List events", "list", query=[
            *_PAGING, _q("type", _STR)])},
        "/v1/events/{id}": {"parameters": [_PATH_ID], "get": _op("Retrieve an event", "event")},
        "/v1/webhook_endpoints": {
            "post": _op("Register a webhook endpoint (the answer carries its whsec_ secret)",
                        "webhook_endpoint", body=_form({
                            "url": _STR, "enabled_events": {"type": "array", "items": _STR},
                            "description": _STR, "metadata": _META},
                            ["url", "enabled_events"]), idempotent=True),
            "get": _op("List webhook endpoints", "list", query=_PAGING)},
        "/v1/webhook_endpoints/{id}": {
            "parameters": [_PATH_ID],
            "get": _op("Retrieve a webhook endpoint", "webhook_endpoint"),
            "post": _op("Update a webhook endpoint", "webhook_endpoint", body=_form({
                "url": _STR, "enabled_events": {"type": "array", "items": _STR},
                "disabled": _BOOL, "metadata": _META}), idempotent=True),
            "delete": _op("Delete a webhook endpoint", "webhook_endpoint")},
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "anvil payment mock (a Stripe API subset)", "version": API_VERSION,
                 "description": (
                     "Stripe's v1 wire format: form-encoded bodies with bracketed keys, "
                     "`Authorization: Bearer sk_test_...`, Stripe's error object, "
                     "Idempotency-Key on POST, test cards (pm_card_visa, "
                     "pm_card_chargeDeclined, 4000000000009995, ...). Webhooks are signed "
                     "`Stripe-Signature: t=<unix time>,v1=<HMAC-SHA256 of t.body>` with the "
                     "endpoint's whsec_ secret, as Stripe signs them.")},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"basic": []}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "Any sk_test_ key."},
                "basic": {"type": "http", "scheme": "basic",
                          "description": "The sk_test_ key as the user name."}},
            "schemas": _schemas()},
        "paths": paths,
    }
