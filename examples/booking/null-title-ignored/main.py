"""Reference booking service: standard library only (http.server + urllib)."""

import json
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALENDAR = os.environ["CALENDAR_URL"].rstrip("/") + "/calendar/v3"
CALENDAR_AUTH = "Bearer booking-service"
MIN_LENGTH, MAX_LENGTH = timedelta(minutes=15), timedelta(hours=4)
MAX_WINDOW = timedelta(days=7)

LOCK = threading.Lock()  # one writer at a time: check-then-insert must not race
BOOKINGS = {}  # id -> booking (with "owner")
NEXT_ID = [1]


class Problem(Exception):
    def __init__(self, status, detail):
        super().__init__(detail)
        self.status, self.detail = status, detail


class CalendarDown(Exception):
    pass


# -- calendar -----------------------------------------------------------------------------


def calendar(method, path, body=None, query=None):
    """One call to the calendar; the decoded answer (None for 204).

    Raises CalendarDown for an error answer or no answer at all.
    """
    url = CALENDAR + path + ("?" + urllib.parse.urlencode(query) if query else "")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": CALENDAR_AUTH, "Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        raise CalendarDown(f"calendar {method} {path}: {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CalendarDown(f"calendar {method} {path}: {exc}") from None
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise CalendarDown(f"calendar {method} {path}: not JSON") from None


def busy_spans(start, end):
    answer = calendar("POST", "/freeBusy", {"timeMin": utc(start), "timeMax": utc(end),
                                            "items": [{"id": "primary"}]})
    entry = (answer.get("calendars") or {}).get("primary") or {}
    if entry.get("errors"):
        raise CalendarDown("calendar: free/busy of primary failed")
    return entry.get("busy") or []


def taken_by_others(start, end, own_event):
    """Whether an event other than ``own_event`` blocks [start, end)."""
    query = {"timeMin": utc(start), "timeMax": utc(end), "singleEvents": "true",
             "orderBy": "startTime", "maxResults": "250"}
    while True:
        page = calendar("GET", "/calendars/primary/events", query=query)
        for event in page.get("items") or []:
            if event.get("id") == own_event or event.get("status") == "cancelled":
                continue
            if event.get("transparency") == "transparent":
                continue
            return True
        token = page.get("nextPageToken")
        if not token:
            return False
        query = {**query, "pageToken": token}


# -- times --------------------------------------------------------------------------------


def parse_time(value, name):
    if not isinstance(value, str) or not re.match(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}", value):
        raise Problem(422, f"{name} must be an RFC 3339 date-time with an offset")
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise Problem(422, f"{name} must be an RFC 3339 date-time with an offset") from None
    if parsed.tzinfo is None:
        raise Problem(422, f"{name} needs an offset (Z or +HH:MM)")
    return parsed.astimezone(timezone.utc).replace(microsecond=0)


def utc(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def slot(body):
    start, end = parse_time(body.get("start"), "start"), parse_time(body.get("end"), "end")
    if end <= start:
        raise Problem(422, "end must be after start")
    if not MIN_LENGTH <= end - start <= MAX_LENGTH:
        raise Problem(422, "a booking lasts between 15 minutes and 4 hours")
    return start, end


def title_of(body, required):
    title = body.get("title")
    if title is None and not required:
        return None
    if not isinstance(title, str) or not title.strip() or len(title) > 200:
        raise Problem(422, "title must be a non-blank string of at most 200 characters")
    return title


# -- bookings -----------------------------------------------------------------------------


def public(booking):
    return {"id": booking["id"], "title": booking["title"], "start": utc(booking["start"]),
            "end": utc(booking["end"]), "status": booking["status"],
            "calendar_event_id": booking["calendar_event_id"]}


def owned(user, raw_id):
    booking = BOOKINGS.get(int(raw_id)) if raw_id.isdigit() else None
    if booking is None or booking["owner"] != user:
        raise Problem(404, "no such booking")
    return booking


def create(user, body):
    title = title_of(body, required=True)
    start, end = slot(body)
    with LOCK:
        if busy_spans(start, end):
            raise Problem(409, "the room is not free then")
        booking_id = NEXT_ID[0]
        event = calendar("POST", "/calendars/primary/events", {
            "summary": title, "start": {"dateTime": utc(start)}, "end": {"dateTime": utc(end)},
            "extendedProperties": {"private": {"booking_id": str(booking_id)}}})
        NEXT_ID[0] += 1
        booking = {"id": booking_id, "owner": user, "title": title, "start": start, "end": end,
                   "status": "confirmed", "calendar_event_id": event["id"]}
        BOOKINGS[booking_id] = booking
    return 201, public(booking)


def move(user, raw_id, body):
    title = title_of(body, required=False)
    start, end = slot(body)
    with LOCK:
        booking = owned(user, raw_id)
        if booking["status"] == "cancelled":
            raise Problem(409, "the booking is cancelled")
        if taken_by_others(start, end, booking["calendar_event_id"]):
            raise Problem(409, "the room is not free then")
        patch = {"start": {"dateTime": utc(start)}, "end": {"dateTime": utc(end)}}
        if title is not None:
            patch["summary"] = title
        calendar("PATCH", f"/calendars/primary/events/{booking['calendar_event_id']}", patch)
        booking.update(start=start, end=end, title=title or booking["title"])
    return 200, public(booking)


def cancel(user, raw_id):
    with LOCK:
        booking = owned(user, raw_id)
        if booking["status"] == "cancelled":
            raise Problem(409, "the booking is already cancelled")
        calendar("DELETE", f"/calendars/primary/events/{booking['calendar_event_id']}")
        booking["status"] = "cancelled"
    return 200, public(booking)


def availability(query):
    start = parse_time((query.get("start") or [None])[0], "start")
    end = parse_time((query.get("end") or [None])[0], "end")
    if end <= start or end - start > MAX_WINDOW:
        raise Problem(422, "the window must be non-empty and at most 7 days")
    spans = [{"start": utc(parse_time(s["start"], "busy start")),
              "end": utc(parse_time(s["end"], "busy end"))} for s in busy_spans(start, end)]
    return 200, {"start": utc(start), "end": utc(end),
                 "busy": sorted(spans, key=lambda s: (s["start"], s["end"]))}


# -- HTTP ---------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def user(self):
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Problem(401, "a bearer token is required")
        return token.strip()

    def body(self):
        try:
            body = json.loads(self.raw or b"null")
        except ValueError:
            raise Problem(422, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise Problem(422, "the body must be a JSON object")
        return body

    def handle_any(self, method):
        # read the whole body first: an answer sent before it would break keep-alive
        self.raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urllib.parse.urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        try:
            if method == "GET" and parts == ["health"]:
                return self.send_json(200, {"status": "ok"})
            route = self.route(method, parts)
            if route is None:
                raise Problem(404, "no such route")
            status, body = route(self.user(), url)
        except Problem as exc:
            return self.send_json(exc.status, {"detail": exc.detail})
        except CalendarDown as exc:
            return self.send_json(502, {"detail": str(exc)})
        return self.send_json(status, body)

    def route(self, method, parts):
        booking = len(parts) >= 2 and parts[0] == "bookings"
        if parts == ["bookings"] and method == "POST":
            return lambda user, url: create(user, self.body())
        if parts == ["bookings"] and method == "GET":
            return lambda user, url: (200, [public(b) for b in sorted(
                (b for b in BOOKINGS.values() if b["owner"] == user),
                key=lambda b: (b["start"], b["id"]))])
        if booking and len(parts) == 2 and method == "GET":
            return lambda user, url: (200, public(owned(user, parts[1])))
        if booking and len(parts) == 2 and method == "PATCH":
            return lambda user, url: move(user, parts[1], self.body())
        if booking and len(parts) == 3 and parts[2] == "cancel" and method == "POST":
            return lambda user, url: cancel(user, parts[1])
        if parts == ["availability"] and method == "GET":
            return lambda user, url: availability(urllib.parse.parse_qs(url.query))
        return None

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PATCH(self):
        self.handle_any("PATCH")

    def do_DELETE(self):
        self.handle_any("DELETE")


if __name__ == "__main__":
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
