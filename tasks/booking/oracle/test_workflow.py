"""Booking flows against what the calendar says is busy."""

import threading

import pytest

from conftest import at, cal, day, inserts


def others_event(on, start, end, **more):
    r = cal("POST", "/calendars/primary/events", json={
        "summary": "not a booking", "start": {"dateTime": at(on, start)},
        "end": {"dateTime": at(on, end)}, **more})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.category("workflow")
@pytest.mark.parametrize("start,end", [
    ("2026-03-02T08:30:00Z", "2026-03-02T09:15:00Z"),  # runs into the 09:00 event
    ("2026-03-02T14:30:00+01:00", "2026-03-02T15:00:00+01:00"),  # inside 13:00-14:30Z
    ("2026-03-02T12:00:00Z", "2026-03-02T16:00:00Z"),  # covers 13:00-14:30Z whole
])
def test_a_slot_busy_in_the_calendar_is_refused(alice, calendar, start, end):
    alice.book(start, end, expect=409)
    assert inserts(calendar) == []


@pytest.mark.category("workflow")
def test_an_all_day_event_blocks_the_day(alice):
    alice.book("2026-03-04T12:00:00Z", "2026-03-04T13:00:00Z", expect=409)


@pytest.mark.category("workflow")
def test_slots_are_half_open(alice):
    """Right after or right before a busy event is free."""
    on = day()
    others_event(on, "10:00", "11:00")
    alice.book(at(on, "11:00"), at(on, "12:00"))
    alice.book(at(on, "09:00"), at(on, "10:00"))
    alice.book(at(on, "10:59"), at(on, "11:30"), expect=409)


@pytest.mark.category("workflow")
def test_a_transparent_event_does_not_block(alice):
    on = day()
    others_event(on, "15:00", "16:00", transparency="transparent")
    alice.book(at(on, "15:00"), at(on, "16:00"))


@pytest.mark.category("workflow")
def test_an_event_added_outside_the_service_is_respected(alice):
    """The calendar is asked every time: nothing is cached from an earlier answer."""
    on = day()
    alice.book(at(on, "08:00"), at(on, "09:00"))
    others_event(on, "13:00", "14:00")
    alice.book(at(on, "13:30"), at(on, "14:30"), expect=409)


@pytest.mark.category("workflow")
def test_cancel_frees_the_slot_for_anyone(alice, bob):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    bob.book(at(on, "09:00"), at(on, "10:00"), expect=409)
    assert alice.post(f"/bookings/{booking['id']}/cancel").status_code == 200
    bob.book(at(on, "09:00"), at(on, "10:00"))


@pytest.mark.category("workflow")
def test_a_move_may_overlap_its_own_slot_but_not_others(alice, bob, calendar):
    on = day()
    booking = alice.book(at(on, "10:00"), at(on, "11:00")).json()
    bob.book(at(on, "12:00"), at(on, "13:00"))
    shifted = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "10:30"),
                                                              "end": at(on, "11:30")})
    assert shifted.status_code == 200, f"overlapping only itself: {shifted.status_code} {shifted.text}"
    blocked = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:30"),
                                                              "end": at(on, "12:30")})
    assert blocked.status_code == 409, blocked.text
    assert alice.get(f"/bookings/{booking['id']}").json()["start"] == at(on, "10:30")
    assert len(calendar.requests("PATCH")) == 1, "the refused move patches nothing"


@pytest.mark.category("workflow")
def test_a_move_onto_a_calendar_event_is_refused(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    others_event(on, "15:00", "16:00")
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "15:30"),
                                                        "end": at(on, "16:30")})
    assert r.status_code == 409, r.text


@pytest.mark.category("workflow")
def test_racing_for_one_slot_only_one_wins(calendar):
    from conftest import User

    on = day()
    users = [User() for _ in range(6)]
    codes = []
    barrier = threading.Barrier(len(users))

    def attempt(user):
        barrier.wait(timeout=10)
        codes.append(user.book(at(on, "09:00"), at(on, "10:00"), expect=None).status_code)

    threads = [threading.Thread(target=attempt, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(codes) == [201] + [409] * (len(users) - 1), codes
    assert len(inserts(calendar)) == 1
