"""What the service does to the calendar, read from the calendar's journal and API."""

import json

import pytest

from conftest import V3, at, day, event_of, inserts, instant, writes


@pytest.mark.category("side_effects")
def test_a_booking_creates_exactly_one_event_with_its_times(alice, calendar):
    on = day()
    booking = alice.book(at(on, "10:00", "+02:00"), at(on, "11:15", "+02:00"),
                         title="Design review").json()
    (insert,) = inserts(calendar)
    assert insert["status"] == 200, insert
    assert json.loads(insert["response"])["id"] == booking["calendar_event_id"]
    event = event_of(booking)
    assert event["summary"] == "Design review" and event["status"] == "confirmed"
    assert instant(event["start"]["dateTime"]) == instant(at(on, "08:00"))
    assert instant(event["end"]["dateTime"]) == instant(at(on, "09:15"))
    private = (event.get("extendedProperties") or {}).get("private") or {}
    assert private.get("booking_id") == str(booking["id"]), event


@pytest.mark.category("side_effects")
def test_free_busy_is_asked_before_the_event_is_made(alice, calendar):
    on = day()
    alice.book(at(on, "09:00"), at(on, "10:00"))
    calls = [(c["method"], c["path"]) for c in calendar.requests()]
    assert ("POST", V3 + "/freeBusy") in calls, calls
    first_query = calls.index(("POST", V3 + "/freeBusy"))
    first_insert = next(i for i, c in enumerate(calls)
                        if c[0] == "POST" and c[1].endswith("/events"))
    assert first_query < first_insert, calls
    query = json.loads(calendar.requests("POST", V3 + "/freeBusy")[0]["body"])
    assert {"id": "primary"} in query["items"], query
    assert instant(query["timeMin"]) <= instant(at(on, "09:00"))
    assert instant(query["timeMax"]) >= instant(at(on, "10:00"))


@pytest.mark.category("side_effects")
def test_cancel_deletes_exactly_that_event(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    other = alice.book(at(on, "11:00"), at(on, "12:00")).json()
    alice.post(f"/bookings/{booking['id']}/cancel")
    deletes = calendar.requests("DELETE")
    assert [c["path"] for c in deletes] == [
        f"{V3}/calendars/primary/events/{booking['calendar_event_id']}"], deletes
    assert event_of(booking)["status"] == "cancelled"
    assert event_of(other)["status"] == "confirmed"


@pytest.mark.category("side_effects")
def test_a_move_patches_the_same_event(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="a").json()
    before = len(inserts(calendar))
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "14:00"),
                                                        "end": at(on, "15:30"), "title": "b"})
    assert r.status_code == 200, r.text
    assert r.json()["calendar_event_id"] == booking["calendar_event_id"]
    assert len(inserts(calendar)) == before, "a move creates no event"
    assert calendar.requests("DELETE") == [], "a move deletes no event"
    (patch,) = calendar.requests("PATCH")
    assert patch["path"].endswith("/events/" + booking["calendar_event_id"])
    event = event_of(booking)
    assert (instant(event["start"]["dateTime"]), instant(event["end"]["dateTime"])) == (
        instant(at(on, "14:00")), instant(at(on, "15:30")))
    assert event["summary"] == "b" and event["status"] == "confirmed"


@pytest.mark.category("side_effects")
def test_reads_write_nothing_to_the_calendar(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    count = len(writes(calendar))
    alice.get("/bookings")
    alice.get(f"/bookings/{booking['id']}")
    alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "12:00")})
    assert len(writes(calendar)) == count


@pytest.mark.category("side_effects")
def test_a_refused_slot_creates_no_event(alice, calendar):
    """09:30-10:30 on 2026-03-02 overlaps the calendar's 09:00-10:00 event."""
    alice.book("2026-03-02T09:30:00Z", "2026-03-02T10:30:00Z", expect=409)
    assert inserts(calendar) == []
    assert calendar.requests("POST", V3 + "/freeBusy"), "the calendar must be asked"
