"""The calendar mock: Google Calendar API v3's calendars, events and free/busy subset."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .._base import json_response
from ..types import MockContext
from ._errors import CalendarError
from ._openapi import document
from ._times import at_utc, parse_instant, parse_when, stamp, zone

BASE = "/calendar/v3"
OWNER = "owner@anvil.test"
#: The ``busy`` scenario's events on the primary calendar (UTC): two that block time
#: and a transparent one that must not (free/busy ignores it).
BUSY_EVENTS = (
    {"summary": "Team standup block", "start": {"dateTime": "2026-03-02T09:00:00Z"},
     "end": {"dateTime": "2026-03-02T10:00:00Z"}},
    {"summary": "Client review", "start": {"dateTime": "2026-03-02T14:00:00+01:00",
                                           "timeZone": "Europe/Paris"},
     "end": {"dateTime": "2026-03-02T15:30:00+01:00", "timeZone": "Europe/Paris"}},
    {"summary": "Focus time (free)", "transparency": "transparent",
     "start": {"dateTime": "2026-03-02T15:00:00Z"}, "end": {"dateTime": "2026-03-02T16:00:00Z"}},
    {"summary": "Offsite", "start": {"date": "2026-03-04"}, "end": {"date": "2026-03-05"}},
)
#: Event fields a client may write (insert, patch); the rest are the server's.
WRITABLE = ("summary", "description", "location", "colorId", "transparency", "visibility",
            "attendees", "extendedProperties", "reminders")
EVENT_ID = re.compile(r"[a-v0-9]{5,1024}")
MAX_RESULTS = 2500
Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class Stored:
    """One event: its API resource and the instants it spans (UTC)."""

    resource: dict[str, Any]
    start: datetime
    end: datetime
    order: int  # creation order: the list order without orderBy

    @property
    def blocks_time(self) -> bool:
        return (self.resource["status"] != "cancelled"
                and self.resource.get("transparency") != "transparent")


@dataclass
class Calendar:
    id: str
    summary: str
    time_zone: str
    description: str = ""

    def resource(self) -> dict[str, Any]:
        body = {"kind": "calendar#calendar", "etag": "", "id": self.id, "summary": self.summary,
                "description": self.description, "timeZone": self.time_zone,
                "conferenceProperties": {"allowedConferenceSolutionTypes": ["hangoutsMeet"]}}
        body["etag"] = _etag(body)
        return body


def _etag(body: Mapping[str, Any]) -> str:
    text = json.dumps({k: v for k, v in body.items() if k != "etag"}, sort_keys=True)
    return '"' + str(int(hashlib.sha256(text.encode()).hexdigest()[:13], 16)) + '"'


def _bool(value: str | None, name: str, default: bool = False) -> bool:
    if value is None or value == "":
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise CalendarError.bad_request(f"Invalid value for: {name}", "invalid")


class CalendarMock:
    """Google Calendar API v3 (calendars.get; events insert, get, list, patch, delete;
    freebusy.query) on its real paths and resource shapes.

    Every call needs ``Authorization: Bearer <any token>`` (401 in Google's format
    otherwise). ``primary`` names the owner's calendar (id ``owner@anvil.test``, time
    zone UTC). Scenarios: ``default`` (an empty primary calendar), ``busy`` (the events of
    :data:`BUSY_EVENTS` on 2026-03-02 and 2026-03-04), ``rooms`` (``default`` plus two room
    calendars ``room-a@anvil.test``, ``room-b@anvil.test``). Seed data may add
    ``calendars`` (``{"id", "summary", "timeZone"}``) and ``events`` (event bodies with a
    ``calendarId``, default ``primary``).
    """

    kind: ClassVar[str] = "calendar"
    scenarios: ClassVar[Sequence[str]] = ("default", "busy", "rooms")

    def __init__(self, ctx: MockContext) -> None:
        self.ctx = ctx
        self.calendars: dict[str, Calendar] = {}
        self.events: dict[str, dict[str, Stored]] = {}  # calendar id -> event id -> event
        self._order = 0

    # -- the fabric's side ---------------------------------------------------------------

    def routes(self) -> Sequence[BaseRoute]:
        one = BASE + "/calendars/{calendarId}/events/{eventId}"
        return [
            Route(BASE + "/calendars/{calendarId}", self._auth(self.get_calendar),
                  methods=["GET"]),
            Route(BASE + "/calendars/{calendarId}/events", self._auth(self.insert_event),
                  methods=["POST"]),
            Route(BASE + "/calendars/{calendarId}/events", self._auth(self.list_events),
                  methods=["GET"]),
            Route(one, self._auth(self.get_event), methods=["GET"]),
            Route(one, self._auth(self.patch_event), methods=["PATCH"]),
            Route(one, self._auth(self.delete_event), methods=["DELETE"]),
            Route(BASE + "/freeBusy", self._auth(self.free_busy), methods=["POST"]),
        ]

    def seed(self, scenario: str, data: Mapping[str, Any] | None = None) -> None:
        """Load ``scenario`` then ``data`` (see the class docstring).

        Raises:
            KeyError: an unknown scenario.
            ValueError: seed data the API would refuse (the message is Google's).
        """
        if scenario not in self.scenarios:
            raise KeyError(scenario)
        self._add_calendar(OWNER, OWNER, "UTC")
        if scenario == "rooms":
            self._add_calendar("room-a@anvil.test", "Room A", "UTC")
            self._add_calendar("room-b@anvil.test", "Room B", "Europe/Paris")
        data = dict(data or {})
        try:
            for spec in data.get("calendars") or []:
                zone(spec.get("timeZone", "UTC"), "calendar")
                self._add_calendar(str(spec["id"]), str(spec.get("summary") or spec["id"]),
                                   str(spec.get("timeZone", "UTC")))
            events = [{**e, "calendarId": "primary"} for e in BUSY_EVENTS] \
                if scenario == "busy" else []
            for spec in [*events, *(data.get("events") or [])]:
                body = dict(spec)
                calendar = self._calendar(str(body.pop("calendarId", "primary")))
                self._insert(calendar, body)
        except CalendarError as exc:
            raise ValueError(exc.message) from None
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"bad seed data: {exc!r}") from None

    def openapi(self) -> dict[str, Any]:
        return document()

    # -- state ---------------------------------------------------------------------------

    def _add_calendar(self, calendar_id: str, summary: str, time_zone: str) -> None:
        self.calendars[calendar_id] = Calendar(calendar_id, summary, time_zone)
        self.events.setdefault(calendar_id, {})

    def _calendar(self, calendar_id: str) -> Calendar:
        found = self.calendars.get(OWNER if calendar_id == "primary" else calendar_id)
        if found is None:
            raise CalendarError.not_found()
        return found

    def _event(self, calendar: Calendar, event_id: str) -> Stored:
        found = self.events[calendar.id].get(event_id)
        if found is None:
            raise CalendarError.not_found()
        return found

    def _times(self, calendar: Calendar, body: Mapping[str, Any],
               old: Stored | None = None) -> tuple[datetime, dict[str, Any], datetime,
                                                   dict[str, Any]]:
        if old is not None and "start" not in body:
            start, start_shown = old.start, old.resource["start"]
        else:
            start, start_shown = parse_when(body.get("start"), "start", calendar.time_zone)
        if old is not None and "end" not in body:
            end, end_shown = old.end, old.resource["end"]
        else:
            end, end_shown = parse_when(body.get("end"), "end", calendar.time_zone)
        if ("date" in start_shown) != ("date" in end_shown):
            raise CalendarError.bad_request("Start and end times must either both be date or "
                                            "both be dateTime.", "invalid")
        if end < start:
            raise CalendarError.bad_request("The specified time range is empty.",
                                            "timeRangeEmpty")
        return start, start_shown, end, end_shown

    @staticmethod
    def _writable(body: Mapping[str, Any]) -> dict[str, Any]:
        fields = {k: body[k] for k in WRITABLE if k in body}
        for name in ("summary", "description", "location"):
            if name in fields and not isinstance(fields[name], str | None):
                raise CalendarError.bad_request(f"Invalid value for: {name}", "invalid")
        if fields.get("transparency") not in (None, "opaque", "transparent"):
            raise CalendarError.bad_request("Invalid value for: transparency", "invalid")
        return fields

    def _insert(self, calendar: Calendar, body: Mapping[str, Any]) -> Stored:
        if not isinstance(body, Mapping):
            raise CalendarError.bad_request("Parse Error", "parseError")
        start, start_shown, end, end_shown = self._times(calendar, body)
        fields = self._writable(body)
        event_id = body.get("id")
        if event_id is not None:
            if not isinstance(event_id, str) or not EVENT_ID.fullmatch(event_id):
                raise CalendarError.bad_request("Invalid resource id value.", "invalid")
            if any(event_id in events for events in self.events.values()):
                raise CalendarError(409, "The requested identifier already exists.",
                                    "duplicate")
        else:
            # Google's ids are base32hex (a-v, 0-9): keep the fabric's deterministic token,
            # folded into that alphabet.
            token = self.ctx.new_id("evt").partition("_")[2]
            event_id = "".join("0123456789abcdefghijklmnopqrstuv"[ord(c) % 32] for c in token)
        now = stamp(self.ctx.now())
        eid = base64.urlsafe_b64encode(f"{event_id} {calendar.id}".encode()).decode().rstrip("=")
        resource: dict[str, Any] = {
            "kind": "calendar#event", "etag": "", "id": event_id,
            "status": "tentative" if body.get("status") == "tentative" else "confirmed",
            "htmlLink": f"https://www.google.com/calendar/event?eid={eid}",
            "created": now, "updated": now,
        }
        resource.update({k: fields[k] for k in ("summary", "description", "location",
                                                "colorId") if fields.get(k) is not None})
        resource["creator"] = {"email": OWNER, "self": True}
        resource["organizer"] = {"email": calendar.id, "displayName": calendar.summary,
                                 "self": True}
        resource["start"], resource["end"] = start_shown, end_shown
        for name in ("transparency", "visibility", "attendees", "extendedProperties"):
            if fields.get(name) is not None:
                resource[name] = fields[name]
        resource["iCalUID"] = f"{event_id}@google.com"
        resource["sequence"] = 0
        resource["reminders"] = fields.get("reminders") or {"useDefault": True}
        resource["eventType"] = "default"
        resource = _in_order(resource)
        resource["etag"] = _etag(resource)
        self._order += 1
        stored = Stored(resource, start, end, self._order)
        self.events[calendar.id][event_id] = stored
        return stored

    # -- routes --------------------------------------------------------------------------

    def _auth(self, handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return CalendarError.unauthenticated().response()
            try:
                return await handler(request)
            except CalendarError as exc:
                return exc.response()

        return guarded

    @staticmethod
    async def _body(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            raise CalendarError.bad_request("Parse Error", "parseError") from None
        if not isinstance(body, dict):
            raise CalendarError.bad_request("Parse Error", "parseError")
        return body

    async def get_calendar(self, request: Request) -> Response:
        return json_response(self._calendar(request.path_params["calendarId"]).resource())

    async def insert_event(self, request: Request) -> Response:
        calendar = self._calendar(request.path_params["calendarId"])
        stored = self._insert(calendar, await self._body(request))
        return json_response(stored.resource)

    async def get_event(self, request: Request) -> Response:
        calendar = self._calendar(request.path_params["calendarId"])
        return json_response(self._event(calendar, request.path_params["eventId"]).resource)

    async def patch_event(self, request: Request) -> Response:
        calendar = self._calendar(request.path_params["calendarId"])
        stored = self._event(calendar, request.path_params["eventId"])
        body = await self._body(request)
        start, start_shown, end, end_shown = self._times(calendar, body, stored)
        fields = self._writable(body)
        status = body.get("status", stored.resource["status"])
        if status not in ("confirmed", "tentative", "cancelled"):
            raise CalendarError.bad_request("Invalid value for: status", "invalid")
        resource = dict(stored.resource)
        moved = (start, end) != (stored.start, stored.end)
        for name, value in fields.items():
            if value is None:
                resource.pop(name, None)
            else:
                resource[name] = value
        resource["status"] = status
        resource["start"], resource["end"] = start_shown, end_shown
        if moved:
            resource["sequence"] = stored.resource["sequence"] + 1
        resource["updated"] = stamp(self.ctx.now())
        ordered = _in_order(resource)
        ordered["etag"] = _etag(ordered)
        stored.resource, stored.start, stored.end = ordered, start, end
        return json_response(ordered)

    async def delete_event(self, request: Request) -> Response:
        calendar = self._calendar(request.path_params["calendarId"])
        stored = self._event(calendar, request.path_params["eventId"])
        if stored.resource["status"] == "cancelled":
            raise CalendarError.gone()
        resource = {**stored.resource, "status": "cancelled",
                    "updated": stamp(self.ctx.now())}
        resource["etag"] = _etag(resource)
        stored.resource = resource
        return Response(status_code=204)

    async def list_events(self, request: Request) -> Response:
        calendar = self._calendar(request.path_params["calendarId"])
        q = request.query_params
        low = parse_instant(q["timeMin"], "timeMin") if q.get("timeMin") else None
        high = parse_instant(q["timeMax"], "timeMax") if q.get("timeMax") else None
        if low is not None and high is not None and high <= low:
            raise CalendarError.bad_request("The specified time range is empty.",
                                            "timeRangeEmpty")
        single = _bool(q.get("singleEvents"), "singleEvents")
        deleted = _bool(q.get("showDeleted"), "showDeleted")
        order = q.get("orderBy")
        if order not in (None, "startTime", "updated"):
            raise CalendarError.bad_request("Invalid value for: orderBy", "invalid")
        if order == "startTime" and not single:
            raise CalendarError.bad_request(
                "The requested ordering is not available for the particular query.",
                "badRequest")
        try:
            limit = int(q.get("maxResults") or 250)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_RESULTS:
            raise CalendarError.bad_request("Invalid value for: maxResults", "invalid")
        offset = _page(q.get("pageToken"))
        found = [e for e in self.events[calendar.id].values()
                 if (deleted or e.resource["status"] != "cancelled")
                 and (low is None or e.end > low) and (high is None or e.start < high)]
        if order == "startTime":
            found.sort(key=lambda e: (e.start, e.end, e.order))
        elif order == "updated":
            found.sort(key=lambda e: (e.resource["updated"], e.order))
        else:
            found.sort(key=lambda e: e.order)
        page = found[offset:offset + limit]
        cal = calendar.resource()
        body: dict[str, Any] = {
            "kind": "calendar#events", "etag": "", "summary": calendar.summary,
            "description": calendar.description,
            "updated": max((e.resource["updated"] for e in page), default=stamp(self.ctx.now())),
            "timeZone": calendar.time_zone, "accessRole": "owner", "defaultReminders": [],
        }
        if offset + limit < len(found):
            body["nextPageToken"] = _token(offset + limit)
        body["items"] = [e.resource for e in page]
        body["etag"] = _etag({"cal": cal["etag"], **body})
        return json_response(body)

    async def free_busy(self, request: Request) -> Response:
        body = await self._body(request)
        for name in ("timeMin", "timeMax"):
            if not body.get(name):
                raise CalendarError.bad_request(f"Missing {name} parameter.", "required")
        low = parse_instant(body["timeMin"], "timeMin")
        high = parse_instant(body["timeMax"], "timeMax")
        if high <= low:
            raise CalendarError.bad_request("The specified time range is empty.",
                                            "timeRangeEmpty")
        tz = zone(body["timeZone"], "query") if body.get("timeZone") else None
        items = body.get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(
                i.get("id"), str) for i in items):
            raise CalendarError.bad_request("Invalid value for: items", "invalid")
        calendars: dict[str, Any] = {}
        for item in items:
            try:
                calendar = self._calendar(item["id"])
            except CalendarError:
                calendars[item["id"]] = {"errors": [{"domain": "global", "reason": "notFound"}],
                                         "busy": []}
                continue
            spans = sorted((max(e.start, low), min(e.end, high))
                           for e in self.events[calendar.id].values()
                           if e.blocks_time and e.end > low and e.start < high)
            merged: list[list[datetime]] = []
            for start, end in spans:
                if merged and start <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([start, end])
            calendars[item["id"]] = {"busy": [{"start": at_utc(s, tz), "end": at_utc(e, tz)}
                                              for s, e in merged]}
        return json_response({"kind": "calendar#freeBusy", "timeMin": at_utc(low, tz),
                              "timeMax": at_utc(high, tz), "calendars": calendars})


ORDER = ("kind", "etag", "id", "status", "htmlLink", "created", "updated", "summary",
         "description", "location", "colorId", "creator", "organizer", "start", "end",
         "transparency", "visibility", "iCalUID", "sequence", "attendees",
         "extendedProperties", "reminders", "eventType")


def _in_order(resource: Mapping[str, Any]) -> dict[str, Any]:
    """``resource``'s keys in the order an insert writes them (stable bytes after a patch)."""
    return {k: resource[k] for k in ORDER if k in resource}


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"page:{offset}".encode()).decode().rstrip("=")


def _page(token: str | None) -> int:
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        kind, _, number = text.partition(":")
        if kind != "page":
            raise ValueError(token)
        return max(0, int(number))
    except ValueError:
        raise CalendarError.bad_request("Invalid value for: pageToken", "invalid") from None
