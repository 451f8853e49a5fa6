"""Booking flows against what the calendar says is busy, its failures, and user journeys."""

import pytest
import requests
from conftest import (
    CALENDAR_URL,
    EVENTS,
    V3,
    User,
    at,
    busy_event,
    cal,
    day,
    event_of,
    in_parallel,
    inserts,
    instant,
    span,
)

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private")]
others_event = busy_event


# ---------------------------------------------------------------- creating against the calendar


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-free-busy")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("start,end", [
    pytest.param("2026-03-02T08:30:00Z", "2026-03-02T09:15:00Z", id="runs-into-09:00",
                 marks=pytest.mark.visibility("public")),
    pytest.param("2026-03-02T14:30:00+01:00", "2026-03-02T15:00:00+01:00", id="inside-paris-event"),
    pytest.param("2026-03-02T12:00:00Z", "2026-03-02T16:00:00Z", id="covers-13:00-14:30"),
])
def test_a_slot_busy_in_the_calendar_is_refused(alice, calendar, start, end):
    alice.book(start, end, expect=409)
    assert inserts(calendar) == []


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-free-busy")
@pytest.mark.level("leaf")
def test_an_all_day_event_blocks_the_day(alice):
    alice.book("2026-03-04T12:00:00Z", "2026-03-04T13:00:00Z", expect=409)


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-half-open")
@pytest.mark.level("mid")
@pytest.mark.parametrize("start,end,expect", [
    pytest.param("11:00", "12:00", 201, id="right-after", marks=pytest.mark.visibility("public")),
    pytest.param("09:00", "10:00", 201, id="right-before"),
    pytest.param("10:59", "11:30", 409, id="one-minute-overlap"),
])
def test_slots_are_half_open(alice, start, end, expect):
    """Right after or right before a busy 10:00-11:00 event is free."""
    on = day()
    others_event(on, "10:00", "11:00")
    alice.book(at(on, start), at(on, end), expect=expect)


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-half-open")
@pytest.mark.level("mid")
def test_a_slot_between_two_events_that_touches_both_is_free(alice):
    on = day()
    others_event(on, "09:00", "10:00")
    others_event(on, "11:00", "12:00")
    alice.book(at(on, "10:00"), at(on, "11:00"))


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-free-busy")
@pytest.mark.level("mid")
def test_a_transparent_event_does_not_block(alice):
    on = day()
    others_event(on, "15:00", "16:00", transparency="transparent")
    alice.book(at(on, "15:00"), at(on, "16:00"))


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-free-busy")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_an_event_added_outside_the_service_is_respected(alice):
    """The calendar is asked every time: nothing is cached from an earlier answer."""
    on = day()
    alice.book(at(on, "08:00"), at(on, "09:00"))
    others_event(on, "13:00", "14:00")
    alice.book(at(on, "13:30"), at(on, "14:30"), expect=409)


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-free-busy")
@pytest.mark.level("mid")
def test_an_event_deleted_outside_the_service_frees_its_slot(alice):
    on = day()
    event = others_event(on, "13:00", "14:00")
    alice.book(at(on, "13:00"), at(on, "14:00"), expect=409)
    assert cal("DELETE", f"/calendars/primary/events/{event['id']}").status_code == 204
    alice.book(at(on, "13:00"), at(on, "14:00"))


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-free-busy")
@pytest.mark.level("mid")
def test_overlap_is_judged_on_instants_across_offsets(alice):
    """An event at 12:00-13:00 +02:00 (10:00-11:00Z) blocks 05:30-06:30 -05:00 (10:30Z)."""
    on = day()
    r = cal("POST", "/calendars/primary/events", json={
        "summary": "abroad", "start": {"dateTime": at(on, "12:00", "+02:00")},
        "end": {"dateTime": at(on, "13:00", "+02:00")}})
    assert r.status_code == 200, r.text
    alice.book(at(on, "05:30", "-05:00"), at(on, "06:30", "-05:00"), expect=409)
    alice.book(at(on, "06:00", "-05:00"), at(on, "07:00", "-05:00"))


# ---------------------------------------------------------------- cancel and move


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-cancel-frees")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_cancel_frees_the_slot_for_anyone(alice, bob):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    bob.book(at(on, "09:00"), at(on, "10:00"), expect=409)
    assert alice.post(f"/bookings/{booking['id']}/cancel").status_code == 200
    bob.book(at(on, "09:00"), at(on, "10:00"))


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-cancel-frees")
@pytest.mark.level("mid")
def test_a_cancelled_booking_leaves_availability(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.book(at(on, "11:00"), at(on, "12:00"))
    alice.cancel(booking)
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) == [span(on, "11:00", "12:00")]


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-move-own-slot")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_a_move_may_overlap_its_own_slot(alice, bob):
    on = day()
    booking = alice.book(at(on, "10:00"), at(on, "11:00")).json()
    bob.book(at(on, "12:00"), at(on, "13:00"))
    shifted = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "10:30"),
                                                              "end": at(on, "11:30")})
    assert shifted.status_code == 200, f"overlapping only itself: {shifted.status_code} {shifted.text}"


@pytest.mark.category("workflow")
@pytest.mark.requirement("R-move-free")
@pytest.mark.level("mid")
def test_a_move_onto_another_booking_is_refused(alice, bob, calendar):
    on = day()
    booking = alice.book(at(on, "10:00"), at(on, "11:00")).json()
    bob.book(at(on, "12:00"), at(on, "13:00"))
    blocked = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:30"),
                                                              "end": at(on, "12:30")})
    assert blocked.status_code == 409, blocked.text
    assert alice.get(f"/bookings/{booking['id']}").json()["start"] == at(on, "10:00")
    assert calendar.requests("PATCH") == [], "the refused move patches nothing"


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-move-free")
@pytest.mark.level("mid")
def test_a_move_onto_a_calendar_event_is_refused(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    others_event(on, "15:00", "16:00")
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "15:30"),
                                                        "end": at(on, "16:30")})
    assert r.status_code == 409, r.text


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move-free")
@pytest.mark.level("mid")
def test_a_move_onto_an_all_day_event_is_refused(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.move(booking, "2026-03-04T12:00:00Z", "2026-03-04T13:00:00Z", expect=409)


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move-free")
@pytest.mark.level("mid")
@pytest.mark.parametrize("what", [
    pytest.param("transparent-event", marks=pytest.mark.visibility("public")),
    "cancelled-booking",
    "touching-event",
])
def test_a_move_onto_a_free_slot_is_accepted(alice, what):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    if what == "transparent-event":
        others_event(on, "14:00", "15:00", transparency="transparent")
    elif what == "cancelled-booking":
        alice.cancel(alice.book(at(on, "14:00"), at(on, "15:00")).json())
    else:
        others_event(on, "13:00", "14:00")
        others_event(on, "15:00", "16:00")
    alice.move(booking, at(on, "14:00"), at(on, "15:00"))


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move-frees")
@pytest.mark.level("mid")
def test_a_move_frees_the_old_slot(alice, bob):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.move(booking, at(on, "15:00"), at(on, "16:00"))
    bob.book(at(on, "09:00"), at(on, "10:00"))
    bob.book(at(on, "15:30"), at(on, "16:00"), expect=409)


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move-frees")
@pytest.mark.level("mid")
def test_availability_follows_a_move(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.move(booking, at(on, "15:00"), at(on, "16:30"))
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) == [span(on, "15:00", "16:30")]


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-move-free")
@pytest.mark.level("mid")
def test_a_move_counts_events_on_every_page(alice):
    """260 transparent events fill the first page of the window's listing; the opaque
    one that blocks the move comes after them."""
    on = day()
    booking = alice.book(at(on, "07:00"), at(on, "08:00")).json()
    with requests.Session() as session:
        session.headers["Authorization"] = "Bearer oracle"
        for _ in range(260):
            r = session.post(CALENDAR_URL + V3 + "/calendars/primary/events", timeout=10, json={
                "summary": "free", "transparency": "transparent",
                "start": {"dateTime": at(on, "10:00")}, "end": {"dateTime": at(on, "10:30")}})
            assert r.status_code == 200, r.text
    others_event(on, "10:45", "11:00")
    alice.move(booking, at(on, "10:00"), at(on, "11:00"), expect=409)
    alice.move(booking, at(on, "10:00"), at(on, "10:45"))


# ---------------------------------------------------------------- races


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-race")
@pytest.mark.level("mid")
def test_racing_for_one_slot_only_one_wins(calendar):
    on = day()
    users = [User() for _ in range(6)]
    answers = in_parallel([lambda u=u: u.book(at(on, "09:00"), at(on, "10:00"), expect=None)
                           for u in users])
    codes = [r.status_code for r in answers]
    assert sorted(codes) == [201] + [409] * (len(users) - 1), codes
    assert len(inserts(calendar)) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-race")
@pytest.mark.level("mid")
def test_racing_moves_into_one_slot_only_one_wins(calendar):
    on = day()
    users = [User() for _ in range(4)]
    bookings = [u.book(at(on, f"{8 + i:02}:00"), at(on, f"{8 + i:02}:30")).json()
                for i, u in enumerate(users)]
    answers = in_parallel([
        lambda u=u, b=b: u.move(b, at(on, "15:00"), at(on, "16:00"), expect=None)
        for u, b in zip(users, bookings, strict=True)])
    codes = [r.status_code for r in answers]
    assert sorted(codes) == [200] + [409] * (len(users) - 1), codes
    assert len(calendar.requests("PATCH")) == 1


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-race")
@pytest.mark.level("mid")
def test_a_create_and_a_move_racing_for_one_slot_only_one_wins(alice, bob):
    on = day()
    booking = alice.book(at(on, "08:00"), at(on, "09:00")).json()
    moved, created = in_parallel([
        lambda: alice.move(booking, at(on, "12:00"), at(on, "13:00"), expect=None),
        lambda: bob.book(at(on, "12:30"), at(on, "13:30"), expect=None)])
    assert sorted([moved.status_code, created.status_code]) in ([200, 409], [201, 409]), (
        moved.status_code, created.status_code)
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) in (
        [span(on, "12:00", "13:00")], [span(on, "08:00", "09:00"), span(on, "12:30", "13:30")])


# ---------------------------------------------------------------- calendar failures


@pytest.mark.category("workflow")
@pytest.mark.visibility("public")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-502-recovers")
@pytest.mark.level("mid")
@pytest.mark.parametrize("fault", [pytest.param({"drop": True}, id="connection-dropped"),
                                   pytest.param({"status": 503}, id="503")])
def test_a_booking_retried_after_a_free_busy_failure_goes_through(alice, calendar, fault):
    on = day()
    calendar.fault(V3 + "/freeBusy", "POST", times=1, **fault)
    first = alice.post("/bookings", json={"title": "x", "start": at(on, "09:00"),
                                          "end": at(on, "10:00")})
    assert first.status_code == 502, first.text
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    assert alice.get("/bookings").json() == [booking]


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-502-recovers")
@pytest.mark.level("mid")
def test_a_move_retried_after_a_calendar_failure_goes_through(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    calendar.fault(EVENTS + "/*", "PATCH", status=500, times=1)
    first = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "12:00"),
                                                            "end": at(on, "13:00")})
    assert first.status_code == 502, first.text
    alice.move(booking, at(on, "12:00"), at(on, "13:00"))
    assert instant(event_of(booking)["start"]["dateTime"]) == instant(at(on, "12:00"))


# ---------------------------------------------------------------- journeys


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-journey")
@pytest.mark.visibility("public")
@pytest.mark.level("root")
def test_a_booking_lifecycle(alice):
    """Book, read, move twice, cancel, then book the same slot again."""
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="Kickoff").json()
    assert alice.get(f"/bookings/{booking['id']}").json() == booking
    alice.move(booking, at(on, "09:30"), at(on, "10:30"))
    alice.move(booking, at(on, "14:00"), at(on, "15:00"), title="Kickoff (moved)")
    assert alice.cancel(booking).json() == {**booking, "title": "Kickoff (moved)",
                                            "start": at(on, "14:00"), "end": at(on, "15:00"),
                                            "status": "cancelled"}
    again = alice.book(at(on, "14:00"), at(on, "15:00"), title="Kickoff").json()
    assert again["id"] != booking["id"]
    assert [b["status"] for b in alice.get("/bookings").json()] == ["cancelled", "confirmed"]
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) == [span(on, "14:00", "15:00")]


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-journey")
@pytest.mark.level("root")
def test_two_users_share_the_room_through_a_day(alice, bob):
    """Alice books; Bob is refused; Alice moves away; Bob takes the old slot; someone puts
    an event in the calendar; Alice cannot move onto it; Alice cancels; only Bob's booking
    and the event are left busy."""
    on = day()
    mine = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    bob.book(at(on, "09:00"), at(on, "10:00"), expect=409)
    alice.move(mine, at(on, "11:00"), at(on, "12:00"))
    theirs = bob.book(at(on, "09:00"), at(on, "10:00")).json()
    others_event(on, "13:00", "14:00")
    alice.move(mine, at(on, "13:30"), at(on, "14:30"), expect=409)
    alice.cancel(mine)
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) == [span(on, "09:00", "10:00"),
                                                            span(on, "13:00", "14:00")]
    assert bob.get("/bookings").json() == [theirs]
    assert [b["status"] for b in alice.get("/bookings").json()] == ["cancelled"]


@pytest.mark.category("workflow")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-journey")
@pytest.mark.level("root")
def test_a_journey_through_a_calendar_outage(alice, calendar):
    """Book; the calendar goes down: moving and cancelling fail with 502 and change
    nothing visible; it comes back: the move and the cancel go through."""
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    calendar.fault(V3 + "/*", None, status=503)
    assert alice.patch(f"/bookings/{booking['id']}", json={
        "start": at(on, "11:00"), "end": at(on, "12:00")}).status_code == 502
    assert alice.post(f"/bookings/{booking['id']}/cancel").status_code == 502
    calendar.clear_faults()
    alice.move(booking, at(on, "11:00"), at(on, "12:00"))
    alice.cancel(booking)
    assert event_of(booking)["status"] == "cancelled"
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) == []
