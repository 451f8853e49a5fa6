"""What the service remembers: cancel, move, refusals and calendar failures."""

import pytest

from conftest import at, day


@pytest.mark.category("state")
def test_cancel_is_remembered_and_not_repeated(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = alice.post(f"/bookings/{booking['id']}/cancel")
    assert r.status_code == 200, r.text
    assert r.json() == {**booking, "status": "cancelled"}
    assert alice.get(f"/bookings/{booking['id']}").json()["status"] == "cancelled"
    assert alice.get("/bookings").json() == [{**booking, "status": "cancelled"}]
    again = alice.post(f"/bookings/{booking['id']}/cancel")
    assert again.status_code == 409, again.text
    moved = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"),
                                                            "end": at(on, "12:00")})
    assert moved.status_code == 409, "a cancelled booking cannot be moved"


@pytest.mark.category("state")
def test_move_is_remembered(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="old").json()
    r = alice.patch(f"/bookings/{booking['id']}", json={
        "start": at(on, "13:00", "+01:00"), "end": at(on, "14:30", "+01:00"), "title": "new"})
    assert r.status_code == 200, r.text
    want = {**booking, "title": "new", "start": at(on, "12:00"), "end": at(on, "13:30")}
    assert r.json() == want
    assert alice.get(f"/bookings/{booking['id']}").json() == want


@pytest.mark.category("state")
def test_a_refused_booking_is_not_kept(alice):
    alice.book("2026-03-02T09:15:00Z", "2026-03-02T09:45:00Z", expect=409)
    assert alice.get("/bookings").json() == []


@pytest.mark.category("state")
def test_ids_are_unique_positive_and_increasing(alice, bob):
    on = day()
    ids = [u.book(at(on, f"{h:02}:00"), at(on, f"{h:02}:30")).json()["id"]
           for h, u in zip(range(8, 14), [alice, bob] * 3)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[0] > 0, ids


@pytest.mark.category("state")
def test_a_failed_calendar_insert_is_502_and_keeps_nothing(alice, calendar):
    on = day()
    calendar.fault("/calendar/v3/calendars/*/events", "POST", status=500, times=1)
    r = alice.post("/bookings", json={"title": "x", "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 502, r.text
    assert alice.get("/bookings").json() == []
    # the slot is still free: the same booking goes through once the calendar is back
    alice.book(at(on, "09:00"), at(on, "10:00"))


@pytest.mark.category("state")
def test_an_unreachable_free_busy_is_502_and_books_nothing(alice, calendar):
    on = day()
    calendar.fault("/calendar/v3/freeBusy", "POST", status=503, times=1)
    r = alice.post("/bookings", json={"title": "x", "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 502, r.text
    assert alice.get("/bookings").json() == []
    assert [c for c in calendar.requests("POST") if c["path"].endswith("/events")] == [], \
        "no event without a free/busy answer"
