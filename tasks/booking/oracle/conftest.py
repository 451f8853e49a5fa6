"""Shared helpers for the booking oracle.

The service runs against one calendar instance (the `busy` scenario) for the whole
oracle. Every item makes its own users (fresh bearer tokens) and books on its own
days (`day()` never hands out the same date twice), so items are independent of
each other and of their order. The busy scenario's own events sit on 2026-03-02
and 2026-03-04, which only the items about them use.

The `calendar` fixture (anvil's mock fixtures) reads the calendar's journal: by
default only the calls made while the current item ran.

Time budget: every call to the service waits at most `READ_TIMEOUT` seconds, and a
route that has timed out `HUNG_LIMIT` times is not called again (the items that need it
fail at once). So a service that hangs costs at most routes x HUNG_LIMIT x READ_TIMEOUT
seconds in all, well inside the oracle's timeout, and one hanging route cannot starve
the items of the others.
"""

import itertools
import os
import threading
import time
import uuid
from datetime import date, timedelta

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
CALENDAR_URL = os.environ.get("CALENDAR_URL", "http://127.0.0.1:9")
V3 = "/calendar/v3"
EVENTS = V3 + "/calendars/*/events"
WRITES = ("POST", "PATCH", "DELETE", "PUT")
MISSING = 987654321  # a booking id no item creates
CONNECT_TIMEOUT, READ_TIMEOUT = 3, 6
HUNG_LIMIT = 2
_DAYS = itertools.count()
_hung: dict[str, int] = {}
_hung_lock = threading.Lock()


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


def route_of(method, path):
    """`PATCH /bookings/{id}` for `PATCH /bookings/17?x=1`: the key timeouts are counted by."""
    parts = path.split("?", 1)[0].split("/")
    if len(parts) >= 3 and parts[1] == "bookings":
        parts[2] = "{id}"
    return f"{method} {'/'.join(parts)}"


def service(method, path, headers=None, **kw):
    """One call to the service, bounded in time (see the module docstring)."""
    route = route_of(method, path)
    with _hung_lock:
        hung = _hung.get(route, 0)
    if hung >= HUNG_LIMIT:
        raise AssertionError(f"{route} already took over {READ_TIMEOUT}s {hung} times; "
                             "not called again")
    try:
        return requests.request(method, BASE_URL + path, headers=headers or {},
                                timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), **kw)
    except requests.Timeout:
        with _hung_lock:
            _hung[route] = _hung.get(route, 0) + 1
        raise AssertionError(f"{route}: no answer within {READ_TIMEOUT}s") from None


class User:
    def __init__(self, token=None):
        self.token = token or "user-" + uuid.uuid4().hex
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def call(self, method, path, headers=None, **kw):
        return service(method, path, headers={**self.headers, **(headers or {})}, **kw)

    def post(self, path, **kw):
        return self.call("POST", path, **kw)

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def patch(self, path, **kw):
        return self.call("PATCH", path, **kw)

    def book(self, start, end, title="Planning", expect=201):
        r = self.post("/bookings", json={"title": title, "start": start, "end": end})
        if expect is not None:
            assert r.status_code == expect, f"POST /bookings {start}..{end}: {r.status_code} {r.text}"
        return r

    def move(self, booking, start, end, expect=200, **more):
        r = self.patch(f"/bookings/{booking['id']}", json={"start": start, "end": end, **more})
        if expect is not None:
            assert r.status_code == expect, (
                f"PATCH /bookings/{booking['id']} {start}..{end}: {r.status_code} {r.text}")
        return r

    def cancel(self, booking, expect=200):
        r = self.post(f"/bookings/{booking['id']}/cancel")
        if expect is not None:
            assert r.status_code == expect, (
                f"POST /bookings/{booking['id']}/cancel: {r.status_code} {r.text}")
        return r

    def busy(self, start, end):
        r = self.get("/availability", params={"start": start, "end": end})
        assert r.status_code == 200, f"GET /availability {start}..{end}: {r.status_code} {r.text}"
        return r.json()["busy"]


@pytest.fixture
def alice():
    return User()


@pytest.fixture
def bob():
    return User()


def day():
    """A date no other item books on (from 2026-05-01 on)."""
    return (date(2026, 5, 1) + timedelta(days=next(_DAYS))).isoformat()


def at(on, hhmm, offset="Z"):
    return f"{on}T{hhmm}:00{offset}"


def span(on, start, end):
    """A busy span as /availability answers it (UTC)."""
    return {"start": at(on, start), "end": at(on, end)}


def cal(method, path, **kw):
    """A call to the calendar itself (as the room's other users would make it)."""
    return requests.request(method, CALENDAR_URL + V3 + path, timeout=10,
                            headers={"Authorization": "Bearer oracle"}, **kw)


def busy_event(on, start, end, **more):
    """An event someone else puts straight into the room's calendar."""
    r = cal("POST", "/calendars/primary/events", json={
        "summary": "not a booking", "start": {"dateTime": at(on, start)},
        "end": {"dateTime": at(on, end)}, **more})
    assert r.status_code == 200, r.text
    return r.json()


def event_of(booking):
    r = cal("GET", f"/calendars/primary/events/{booking['calendar_event_id']}")
    assert r.status_code == 200, f"the booking's event {booking['calendar_event_id']}: {r.status_code} {r.text}"
    return r.json()


def instant(text):
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def writes(calendar):
    """Calls of this item that changed the calendar."""
    return [c for c in calendar.requests() if c["method"] in WRITES and c["path"] != V3 + "/freeBusy"]


def inserts(calendar):
    return [c for c in calendar.requests("POST", EVENTS) if c["path"].endswith("/events")]


def in_parallel(calls, deadline=10.0):
    """Run the callables at once (released together); their results in order.

    Bounded: the threads are daemons and the wait ends at ``deadline`` seconds, so a
    service that hangs fails the item instead of holding the oracle.
    """
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(i, call):
        try:
            barrier.wait(timeout=deadline / 2)
            results[i] = call()
        except BaseException as exc:  # noqa: BLE001 - reported by the item, in its thread's place
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    end = time.monotonic() + deadline
    for t in threads:
        t.join(timeout=max(0.0, end - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"parallel calls still running after {deadline}s"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


@pytest.fixture(autouse=True)
def _no_fault_outlives_its_item(calendar):
    yield
    calendar.clear_faults()
