"""The delivery mock's own contract (OpenAPI 3.0), served at ``/__mock__/openapi.json``."""

from __future__ import annotations

from typing import Any

from ._domain import CHANNELS, MAX_WEIGHT_OZ, OUTCOME_RULES, RECIPIENT_STATUSES, SERVICES, TIMELINE

Schema = dict[str, Any]

_STR, _INT, _NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}
_OPT_STR = {"type": "string", "nullable": True}
_TIME = {"type": "string", "format": "date-time"}
_META = {"type": "object", "additionalProperties": {"type": "string"}}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: str) -> dict[str, Schema]:
    words = {"400": "invalid parameters (nothing created)", "401": "no or bad API key",
             "404": "no such object", "409": "a conflict (see error.code)"}
    return {status: _json(_ref("Error"), words[status]) for status in statuses}


def _object(kind: str, props: Schema) -> Schema:
    return {"type": "object", "required": ["id", "object", *props],
            "properties": {"id": _STR, "object": {"type": "string", "enum": [kind]}, **props}}


def _schemas() -> dict[str, Schema]:
    address_props: Schema = {name: _STR for name in (
        "name", "company", "street1", "street2", "city", "state", "zip", "email", "phone")}
    address_props["country"] = {"type": "string", "pattern": "^[A-Z]{2}$"}
    address_in = {"type": "object", "required": ["street1", "city", "zip", "country"],
                  "properties": address_props}
    size = {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 200}
    parcel_props: Schema = {
        "weight_oz": {"type": "number", "exclusiveMinimum": True, "minimum": 0,
                      "maximum": MAX_WEIGHT_OZ,
                      "description": "Billed by the ounce started (2.1 oz bills as 3)."},
        "length": size, "width": size, "height": size}
    parcel_in = {"type": "object", "required": ["weight_oz"], "properties": parcel_props}
    prices = "; ".join(f"{c} {s}: {b} + {p} x ounces, {d} day(s)"
                       for c, s, b, p, d in SERVICES)
    timeline = ", ".join(f"{status} at +{offset}s" for status, offset in TIMELINE)
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message", "param"], "properties": {
                "code": {"type": "string", "enum": [
                    "unauthorized", "parameter_missing", "parameter_invalid", "invalid_json",
                    "resource_missing", "shipment_already_purchased",
                    "idempotency_conflict"]},
                "message": _STR, "param": _OPT_STR}}}},
        "AddressCreate": address_in,
        "Address": _object("address", {**address_props, "created_at": _TIME}),
        "ParcelCreate": parcel_in,
        "Parcel": _object("parcel", {**parcel_props, "created_at": _TIME}),
        "Rate": _object("rate", {
            "shipment_id": _STR, "carrier": _STR, "service": _STR,
            "amount": {"type": "integer", "description": f"Cents. {prices}."},
            "currency": {"type": "string", "enum": ["USD"]}, "delivery_days": _INT}),
        "ShipmentCreate": {"type": "object", "required": ["to_address", "from_address", "parcel"],
                           "properties": {
                               "to_address": {"oneOf": [_STR, _ref("AddressCreate")]},
                               "from_address": {"oneOf": [_STR, _ref("AddressCreate")]},
                               "parcel": {"oneOf": [_STR, _ref("ParcelCreate")]},
                               "reference": _STR, "metadata": _META}},
        "Shipment": _object("shipment", {
            "status": {"type": "string", "enum": ["unpurchased", "purchased"]},
            "reference": _OPT_STR, "metadata": _META, "to_address": _ref("Address"),
            "from_address": _ref("Address"), "parcel": _ref("Parcel"),
            "rates": {"type": "array", "items": _ref("Rate"),
                      "description": "By carrier, then service (not by price)."},
            "selected_rate": {"allOf": [_ref("Rate")], "nullable": True},
            "tracking_code": _OPT_STR, "tracker_id": _OPT_STR,
            "label": {"type": "object", "nullable": True, "properties": {
                "object": _STR, "format": _STR, "label_url": _STR}},
            "created_at": _TIME, "purchased_at": {**_TIME, "nullable": True}}),
        "Tracker": _object("tracker", {
            "tracking_code": _STR, "shipment_id": _STR, "carrier": _STR,
            "status": {"type": "string", "enum": [s for s, _ in TIMELINE],
                       "description": f"From the label's purchase, virtual clock: {timeline}."},
            "est_delivery_date": _TIME, "updated_at": _TIME,
            "tracking_details": {"type": "array", "items": {"type": "object", "properties": {
                "status": _STR, "datetime": _TIME}}}}),
        "MessageCreate": {"type": "object", "required": ["channel", "to", "body"], "properties": {
            "channel": {"type": "string", "enum": list(CHANNELS)},
            "to": {"oneOf": [_STR, {"type": "array", "items": _STR, "minItems": 1,
                                    "maxItems": 100, "uniqueItems": True}]},
            "subject": {"type": "string", "description": "Required for email."},
            "body": _STR, "reference": _STR, "metadata": _META}},
        "Message": _object("message", {
            "channel": {"type": "string", "enum": list(CHANNELS)},
            "status": {"type": "string", "enum": ["delivered", "partial", "failed"],
                       "description": "Every, some or no recipient delivered."},
            "subject": _OPT_STR, "body": _STR, "reference": _OPT_STR, "metadata": _META,
            "recipients": {"type": "array", "items": {
                "type": "object", "required": ["to", "status", "error_code"], "properties": {
                    "to": _STR,
                    "status": {"type": "string", "enum": list(RECIPIENT_STATUSES),
                               "description": "; ".join(f"{c}: {rule}" for c, rule
                                                        in OUTCOME_RULES.items())},
                    "error_code": _OPT_STR}}},
            "counts": {"type": "object", "properties": {s: _INT for s in RECIPIENT_STATUSES}},
            "created_at": _TIME}),
    }


def _list_of(name: str) -> Schema:
    return {"type": "object", "required": ["object", "data", "has_more"], "properties": {
        "object": {"type": "string", "enum": ["list"]},
        "data": {"type": "array", "items": _ref(name)}, "has_more": {"type": "boolean"}}}


def _query(*names: str) -> list[Schema]:
    paging = [{"name": "limit", "in": "query", "schema": {
                   "type": "integer", "minimum": 1, "maximum": 100, "default": 20}},
              {"name": "starting_after", "in": "query", "schema": _STR}]
    return [{"name": n, "in": "query", "schema": _STR} for n in names] + paging


_ID = [{"name": "id", "in": "path", "required": True, "schema": _STR}]
_IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "schema": {
    "type": "string", "maxLength": 255}, "description": (
    "The same key and request again: the stored answer, header Idempotent-Replayed: true, "
    "nothing done; the same key with another request: 409 idempotency_conflict. "
    "Only successes are stored.")}


def _create(schema: str, result: str, what: str, *errors: str) -> Schema:
    return {"summary": what, "parameters": [_IDEMPOTENCY],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": _ref(schema)}}},
            "responses": {"201": _json(_ref(result), "created"),
                          **_errors("400", "401", *errors)}}


def _read(result: str, what: str) -> Schema:
    return {"summary": what, "parameters": _ID,
            "responses": {"200": _json(_ref(result), what), **_errors("401", "404")}}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "anvil delivery mock (shipping and notifications)", "version": "1",
                 "description": "Send an API key: Authorization: Bearer dk_test_... or "
                                "X-Api-Key: dk_test_... (any key with that prefix)."},
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "apiKey": {"type": "apiKey", "in": "header",
                                           "name": "X-Api-Key"}},
        },
        "security": [{"bearer": []}, {"apiKey": []}],
        "paths": {
            "/v1/addresses": {"post": _create("AddressCreate", "Address", "create an address")},
            "/v1/addresses/{id}": {"get": _read("Address", "an address")},
            "/v1/parcels": {"post": _create("ParcelCreate", "Parcel", "create a parcel")},
            "/v1/parcels/{id}": {"get": _read("Parcel", "a parcel")},
            "/v1/shipments": {
                "post": _create("ShipmentCreate", "Shipment",
                                "create a shipment and quote its rates", "404"),
                "get": {"summary": "shipments, oldest first",
                        "parameters": _query("reference", "status"),
                        "responses": {"200": _json(_list_of("Shipment"), "a page"),
                                      **_errors("400", "401")}}},
            "/v1/shipments/{id}": {"get": _read("Shipment", "a shipment")},
            "/v1/shipments/{id}/buy": {"post": {
                "summary": "buy one of the shipment's rates: a label and a tracker",
                "parameters": [*_ID, _IDEMPOTENCY],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["rate"], "properties": {"rate": {
                        "oneOf": [_STR, {"type": "object", "properties": {"id": _STR}}]}}}}}},
                "responses": {"200": _json(_ref("Shipment"), "purchased"),
                              **_errors("400", "401", "404", "409")}}},
            "/v1/trackers": {"get": {
                "summary": "trackers, oldest first",
                "parameters": _query("tracking_code", "status", "shipment_id"),
                "responses": {"200": _json(_list_of("Tracker"), "a page"),
                              **_errors("400", "401")}}},
            "/v1/trackers/{id}": {"get": _read("Tracker", "a tracker, as of the clock now")},
            "/v1/messages": {
                "post": _create("MessageCreate", "Message",
                                "send a message; 201 whatever each recipient's result"),
                "get": {"summary": "messages, oldest first",
                        "parameters": _query("channel", "reference", "status"),
                        "responses": {"200": _json(_list_of("Message"), "a page"),
                                      **_errors("400", "401")}}},
            "/v1/messages/{id}": {"get": _read("Message", "a message")},
        },
    }
