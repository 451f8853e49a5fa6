"""The calendar mock's own contract: the subset of Google Calendar API v3 it implements."""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_STR, _INT, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema) -> Schema:
    return {"content": {"application/json": {"schema": schema}}}


def _answers(ok: Schema | None, *errors: int) -> Schema:
    found: Schema = {"200": {"description": "OK", **_json(ok)}} if ok is not None else {
        "204": {"description": "Deleted (the event's status becomes cancelled)"}}
    text = {400: "Bad request (invalid, required, timeRangeEmpty, parseError)",
            401: "No `Authorization: Bearer <token>` header", 404: "Not Found",
            409: "An event with the requested id already exists",
            410: "The event was already deleted"}
    for status in (401, *errors):
        found[str(status)] = {"description": text[status], **_json(_ref("Error"))}
    return found


def _q(name: str, schema: Schema, text: str) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": text}


def _path(name: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": _STR}


def _schemas() -> dict[str, Schema]:
    when = {"type": "object", "description": "`dateTime` (RFC 3339; without an offset it is "
            "read in `timeZone`) or `date` (an all-day event, YYYY-MM-DD).",
            "properties": {"dateTime": {"type": "string", "format": "date-time"},
                           "date": {"type": "string", "format": "date"},
                           "timeZone": {"type": "string", "description": "IANA zone name"}}}
    person = {"type": "object", "properties": {"email": _STR, "displayName": _STR,
                                               "self": _BOOL}}
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message", "errors", "status"],
            "properties": {"code": _INT, "message": _STR, "status": _STR, "errors": {
                "type": "array", "items": {"type": "object", "properties": {
                    "domain": _STR, "reason": _STR, "message": _STR, "location": _STR,
                    "locationType": _STR}}}}}}},
        "EventDateTime": when,
        "Calendar": {"type": "object", "required": ["kind", "etag", "id", "summary", "timeZone"],
                     "properties": {"kind": {"type": "string", "enum": ["calendar#calendar"]},
                                    "etag": _STR, "id": _STR, "summary": _STR,
                                    "description": _STR, "timeZone": _STR,
                                    "conferenceProperties": {"type": "object"}}},
        "EventInput": {"type": "object", "required": ["start", "end"], "properties": {
            "id": {"type": "string", "pattern": "^[a-v0-9]{5,1024}$"},
            "summary": _STR, "description": _STR, "location": _STR, "colorId": _STR,
            "status": {"type": "string", "enum": ["confirmed", "tentative", "cancelled"]},
            "start": _ref("EventDateTime"), "end": _ref("EventDateTime"),
            "transparency": {"type": "string", "enum": ["opaque", "transparent"],
                             "description": "transparent events do not block free/busy"},
            "visibility": _STR, "attendees": {"type": "array", "items": {"type": "object"}},
            "extendedProperties": {"type": "object", "properties": {
                "private": {"type": "object", "additionalProperties": _STR},
                "shared": {"type": "object", "additionalProperties": _STR}}},
            "reminders": {"type": "object"}}},
        "Event": {"allOf": [_ref("EventInput"), {"type": "object", "required": [
            "kind", "etag", "id", "status", "htmlLink", "created", "updated", "iCalUID",
            "sequence"], "properties": {
            "kind": {"type": "string", "enum": ["calendar#event"]}, "etag": _STR,
            "htmlLink": _STR, "created": {"type": "string", "format": "date-time"},
            "updated": {"type": "string", "format": "date-time"}, "creator": person,
            "organizer": person, "iCalUID": _STR, "sequence": _INT, "eventType": _STR}}]},
        "Events": {"type": "object", "required": ["kind", "items"], "properties": {
            "kind": {"type": "string", "enum": ["calendar#events"]}, "etag": _STR,
            "summary": _STR, "description": _STR, "updated": _STR, "timeZone": _STR,
            "accessRole": _STR, "defaultReminders": {"type": "array", "items": {}},
            "nextPageToken": _STR, "items": {"type": "array", "items": _ref("Event")}}},
        "FreeBusyRequest": {"type": "object", "required": ["timeMin", "timeMax", "items"],
                            "properties": {
            "timeMin": {"type": "string", "format": "date-time"},
            "timeMax": {"type": "string", "format": "date-time"},
            "timeZone": {"type": "string", "description": "zone of the answer's times "
                                                          "(default UTC)"},
            "items": {"type": "array", "items": {"type": "object", "required": ["id"],
                                                 "properties": {"id": _STR}}}}},
        "FreeBusyResponse": {"type": "object", "properties": {
            "kind": {"type": "string", "enum": ["calendar#freeBusy"]},
            "timeMin": _STR, "timeMax": _STR,
            "calendars": {"type": "object", "description": "by the requested id",
                          "additionalProperties": {"type": "object", "properties": {
                "busy": {"type": "array", "items": {"type": "object", "properties": {
                    "start": _STR, "end": _STR}}},
                "errors": {"type": "array", "items": {"type": "object"}}}}}}},
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.0 document (the same dict every time)."""
    one = [_path("calendarId"), _path("eventId")]
    calendar_id = {**_path("calendarId"), "description": "a calendar id, or `primary`"}
    event_body = {"required": True, **_json(_ref("EventInput"))}
    return {
        "openapi": "3.0.3",
        "info": {"title": "anvil calendar mock (Google Calendar API v3 subset)",
                 "version": "v3",
                 "description": "Every call needs `Authorization: Bearer <any token>`. "
                                "Events that are cancelled or transparent do not block "
                                "free/busy; busy spans are merged and clipped to the query."},
        "servers": [{"url": "/calendar/v3"}],
        "security": [{"bearer": []}],
        "paths": {
            "/calendars/{calendarId}": {"get": {
                "operationId": "calendar.calendars.get", "parameters": [calendar_id],
                "responses": _answers(_ref("Calendar"), 404)}},
            "/calendars/{calendarId}/events": {
                "post": {"operationId": "calendar.events.insert", "parameters": [calendar_id],
                         "requestBody": event_body,
                         "responses": _answers(_ref("Event"), 400, 404, 409)},
                "get": {"operationId": "calendar.events.list", "parameters": [
                    calendar_id,
                    _q("timeMin", {"type": "string", "format": "date-time"},
                       "lower bound (exclusive) of an event's end; needs an offset"),
                    _q("timeMax", {"type": "string", "format": "date-time"},
                       "upper bound (exclusive) of an event's start; needs an offset"),
                    _q("singleEvents", _BOOL, "accepted (the mock has no recurring events)"),
                    _q("orderBy", {"type": "string", "enum": ["startTime", "updated"]},
                       "startTime needs singleEvents=true; default: creation order"),
                    _q("showDeleted", _BOOL, "include cancelled events"),
                    _q("maxResults", {"type": "integer", "minimum": 1, "maximum": 2500},
                       "page size (default 250)"),
                    _q("pageToken", _STR, "nextPageToken of the previous page")],
                    "responses": _answers(_ref("Events"), 400, 404)}},
            "/calendars/{calendarId}/events/{eventId}": {
                "get": {"operationId": "calendar.events.get", "parameters": one,
                        "responses": _answers(_ref("Event"), 404)},
                "patch": {"operationId": "calendar.events.patch", "parameters": one,
                          "requestBody": {"required": True, **_json(_ref("EventInput"))},
                          "responses": _answers(_ref("Event"), 400, 404)},
                "delete": {"operationId": "calendar.events.delete", "parameters": one,
                           "responses": _answers(None, 404, 410)}},
            "/freeBusy": {"post": {
                "operationId": "calendar.freebusy.query",
                "requestBody": {"required": True, **_json(_ref("FreeBusyRequest"))},
                "responses": _answers(_ref("FreeBusyResponse"), 400)}},
        },
        "components": {"schemas": _schemas(), "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
    }
