"""Shared helpers for the booking oracle.

The service runs against one calendar instance (the `busy` scenario) for the whole
oracle. Every item makes its own users (fresh bearer tokens) and books on its own
days (`day()` never hands out the same date twice), so items are independent of
each other and of their order. The busy scenario's own events sit on 2026-03-02
and 2026-03-04, which only the items about them use.

The `calendar` fixture (anvil's mock fixtures) reads the calendar's journal: by
default only the calls made while the current item ran.
"""

import itertools
import os
import uuid
from datetime import date, timedelta

import pytest
import requests

BASE_URL = os.environ.get("BASE_URL", "http://127.0.0.1:8000")
CALENDAR_URL = os.environ.get("CALENDAR_URL", "http://127.0.0.1:9")
V3 = "/calendar/v3"
EVENTS = V3 + "/calendars/*/events"
WRITES = ("POST", "PATCH", "DELETE", "PUT")
_DAYS = itertools.count()


def pytest_configure(config):
    config.addinivalue_line("markers", "category(name): oracle item category")


class User:
    def __init__(self):
        self.token = "user-" + uuid.uuid4().hex
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def call(self, method, path, headers=None, **kw):
        return requests.request(method, BASE_URL + path, headers={**self.headers, **(headers or {})},
                                timeout=15, **kw)

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


def cal(method, path, **kw):
    """A call to the calendar itself (as the room's other users would make it)."""
    return requests.request(method, CALENDAR_URL + V3 + path, timeout=10,
                            headers={"Authorization": "Bearer oracle"}, **kw)


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


@pytest.fixture(autouse=True)
def _no_fault_outlives_its_item(calendar):
    yield
    calendar.clear_faults()
