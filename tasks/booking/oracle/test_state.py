"""What the service remembers: cancel, move, ids, refusals and calendar failures."""

import pytest
from conftest import EVENTS, V3, at, day, in_parallel, inserts

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private")]


@pytest.fixture
def cancelled(alice):
    """One of alice's bookings, cancelled: (booking as created, the cancel answer)."""
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    return booking, alice.post(f"/bookings/{booking['id']}/cancel")


# ---------------------------------------------------------------- cancel


@pytest.mark.category("state")
@pytest.mark.requirement("R-cancel")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_cancel_answers_the_cancelled_booking(cancelled):
    booking, r = cancelled
    assert r.status_code == 200, r.text
    assert r.json() == {**booking, "status": "cancelled"}


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-cancel")
@pytest.mark.level("mid")
def test_a_cancelled_booking_reads_cancelled(alice, cancelled):
    booking, _ = cancelled
    assert alice.get(f"/bookings/{booking['id']}").json() == {**booking, "status": "cancelled"}


@pytest.mark.category("state")
@pytest.mark.requirement("R-cancel")
@pytest.mark.level("mid")
def test_a_cancelled_booking_is_still_listed(alice, cancelled):
    booking, _ = cancelled
    assert alice.get("/bookings").json() == [{**booking, "status": "cancelled"}]


@pytest.mark.category("state")
@pytest.mark.requirement("R-cancel-once")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_cancelling_twice_is_409(alice, cancelled):
    booking, _ = cancelled
    again = alice.post(f"/bookings/{booking['id']}/cancel")
    assert again.status_code == 409, again.text


@pytest.mark.category("state")
@pytest.mark.requirement("R-cancel-once")
@pytest.mark.level("mid")
def test_a_cancelled_booking_cannot_be_moved(alice, cancelled):
    booking, _ = cancelled
    on = booking["start"][:10]
    moved = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"),
                                                            "end": at(on, "12:00")})
    assert moved.status_code == 409, f"a cancelled booking cannot be moved: {moved.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-cancel-once")
@pytest.mark.level("mid")
@pytest.mark.parametrize("action", ["cancel", "move"])
def test_a_refused_action_on_a_cancelled_booking_changes_nothing(alice, cancelled, calendar,
                                                                 action):
    booking, _ = cancelled
    on = booking["start"][:10]
    before = len(calendar.requests())
    if action == "cancel":
        alice.post(f"/bookings/{booking['id']}/cancel")
    else:
        alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"),
                                                        "end": at(on, "12:00")})
    assert alice.get(f"/bookings/{booking['id']}").json() == {**booking, "status": "cancelled"}
    late = [c for c in calendar.requests()[before:] if c["method"] in ("POST", "PATCH", "DELETE")
            and not c["path"].endswith("/freeBusy")]
    assert late == [], f"nothing written to the calendar for a cancelled booking: {late}"


# ---------------------------------------------------------------- move


@pytest.mark.category("state")
@pytest.mark.requirement("R-move")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
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
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move")
@pytest.mark.level("mid")
def test_a_move_without_a_title_keeps_the_title(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="Keep me").json()
    r = alice.move(booking, at(on, "11:00"), at(on, "12:00"))
    assert r.json()["title"] == "Keep me"
    assert alice.get(f"/bookings/{booking['id']}").json()["title"] == "Keep me"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move")
@pytest.mark.level("mid")
def test_a_refused_move_changes_nothing(alice, bob):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    bob.book(at(on, "12:00"), at(on, "13:00"))
    alice.move(booking, at(on, "12:30"), at(on, "13:30"), expect=409, title="moved")
    assert alice.get(f"/bookings/{booking['id']}").json() == booking


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-title-as-sent")
@pytest.mark.level("mid")
@pytest.mark.parametrize("how", ["create", "move"])
def test_the_title_is_stored_as_sent(alice, how):
    on = day()
    title = "  Retro:\tQ3 \u2014 \u00e9quipe  "
    booking = alice.book(at(on, "09:00"), at(on, "10:00"),
                         title=title if how == "create" else "x").json()
    if how == "move":
        alice.move(booking, at(on, "11:00"), at(on, "12:00"), title=title)
    assert alice.get(f"/bookings/{booking['id']}").json()["title"] == title


# ---------------------------------------------------------------- refusals keep nothing


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-refusal-keeps-nothing")
@pytest.mark.level("mid")
def test_a_refused_booking_is_not_kept(alice):
    alice.book("2026-03-02T09:15:00Z", "2026-03-02T09:45:00Z", expect=409)
    assert alice.get("/bookings").json() == []


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-refusal-keeps-nothing")
@pytest.mark.level("mid")
def test_an_invalid_booking_is_not_kept(alice):
    on = day()
    alice.post("/bookings", json={"title": "x", "start": at(on, "10:00"), "end": at(on, "09:00")})
    assert alice.get("/bookings").json() == []


# ---------------------------------------------------------------- ids


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-ids")
@pytest.mark.level("mid")
def test_ids_are_unique_positive_and_increasing(alice, bob):
    on = day()
    ids = [u.book(at(on, f"{h:02}:00"), at(on, f"{h:02}:30")).json()["id"]
           for h, u in zip(range(8, 14), [alice, bob] * 3, strict=True)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[0] > 0, ids


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-ids")
@pytest.mark.level("mid")
def test_ids_are_never_reused_after_a_cancel(alice):
    on = day()
    first = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    second = alice.book(at(on, "11:00"), at(on, "12:00")).json()
    alice.cancel(second)
    third = alice.book(at(on, "13:00"), at(on, "14:00")).json()
    assert third["id"] not in (first["id"], second["id"]) and third["id"] > second["id"], third


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-list-order")
@pytest.mark.level("mid")
def test_bookings_with_the_same_start_are_listed_by_id(alice):
    """A cancelled booking and its replacement share a start: the older id comes first."""
    on = day()
    later = alice.book(at(on, "13:00"), at(on, "14:00")).json()
    first = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.cancel(first)
    second = alice.book(at(on, "09:00"), at(on, "09:30")).json()
    assert [b["id"] for b in alice.get("/bookings").json()] == [
        first["id"], second["id"], later["id"]]


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-concurrency")
@pytest.mark.level("mid")
def test_parallel_bookings_of_free_slots_all_count(alice, calendar):
    """8 creates at once on distinct free slots: 8 bookings, 8 ids, 8 events, one each."""
    on = day()
    calls = [lambda h=h: alice.book(at(on, f"{h:02}:00"), at(on, f"{h:02}:30"), expect=None)
             for h in range(8, 16)]
    answers = in_parallel(calls)
    assert [r.status_code for r in answers] == [201] * 8, [(r.status_code, r.text) for r in answers]
    ids = [r.json()["id"] for r in answers]
    assert len(set(ids)) == 8, ids
    listed = alice.get("/bookings").json()
    assert sorted(b["id"] for b in listed) == sorted(ids)
    assert [b["start"] for b in listed] == [at(on, f"{h:02}:00") for h in range(8, 16)]
    assert len(inserts(calendar)) == 8
    assert len({r.json()["calendar_event_id"] for r in answers}) == 8


# ---------------------------------------------------------------- calendar failures


@pytest.mark.category("state")
@pytest.mark.requirement("R-502")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_a_failed_calendar_insert_is_502_and_keeps_nothing(alice, calendar):
    on = day()
    calendar.fault(EVENTS, "POST", status=500, times=1)
    r = alice.post("/bookings", json={"title": "x", "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 502, r.text
    assert alice.get("/bookings").json() == []
    # the slot is still free: the same booking goes through once the calendar is back
    alice.book(at(on, "09:00"), at(on, "10:00"))


@pytest.mark.category("state")
@pytest.mark.requirement("R-502")
@pytest.mark.level("mid")
def test_an_unreachable_free_busy_is_502_and_books_nothing(alice, calendar):
    on = day()
    calendar.fault(V3 + "/freeBusy", "POST", status=503, times=1)
    r = alice.post("/bookings", json={"title": "x", "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 502, r.text
    assert alice.get("/bookings").json() == []
    assert inserts(calendar) == [], "no event without a free/busy answer"


@pytest.mark.category("state")
@pytest.mark.visibility("public")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-502")
@pytest.mark.level("mid")
@pytest.mark.parametrize("fault", [
    pytest.param({"status": 400}, id="insert-refused-400"),
    pytest.param({"malformed": True}, id="insert-answer-malformed"),
    pytest.param({"drop": True}, id="insert-connection-dropped"),
])
def test_a_calendar_insert_that_fails_otherwise_is_502_and_keeps_nothing(alice, calendar, fault):
    on = day()
    calendar.fault(EVENTS, "POST", times=1, **fault)
    r = alice.post("/bookings", json={"title": "x", "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 502, f"{fault}: {r.status_code} {r.text}"
    assert alice.get("/bookings").json() == []


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-502")
@pytest.mark.level("mid")
@pytest.mark.parametrize("action", ["move", "cancel", "availability"])
def test_a_calendar_failure_on_other_routes_is_502(alice, calendar, action):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    calendar.fault(V3 + "/*", None, status=500)
    if action == "move":
        r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"),
                                                            "end": at(on, "12:00")})
    elif action == "cancel":
        r = alice.post(f"/bookings/{booking['id']}/cancel")
    else:
        r = alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "12:00")})
    assert r.status_code == 502, f"{action} with the calendar down: {r.status_code} {r.text}"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("mid")
@pytest.mark.parametrize("action", ["move", "cancel"])
def test_a_cancelled_booking_is_409_even_with_the_calendar_down(alice, cancelled, calendar,
                                                                action):
    """409 comes before 502: the service knows the booking is cancelled without asking."""
    booking, _ = cancelled
    on = booking["start"][:10]
    calendar.fault(V3 + "/*", None, status=500)
    if action == "move":
        r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"),
                                                            "end": at(on, "12:00")})
    else:
        r = alice.post(f"/bookings/{booking['id']}/cancel")
    assert r.status_code == 409, f"{action} a cancelled booking: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("mid")
def test_another_users_booking_is_404_even_with_the_calendar_down(alice, bob, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    calendar.fault(V3 + "/*", None, status=500)
    r = bob.post(f"/bookings/{booking['id']}/cancel")
    assert r.status_code == 404, r.text
    calendar.clear_faults()
    assert alice.get(f"/bookings/{booking['id']}").json()["status"] == "confirmed"


@pytest.mark.category("state")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-journey")
@pytest.mark.visibility("public")
@pytest.mark.level("root")
def test_a_week_of_bookings_is_remembered(alice):
    """Bookings over three days, made out of order, one moved to another day and one
    cancelled: every read agrees with what was done."""
    mon, tue, wed = day(), day(), day()
    made = {name: alice.book(at(on, start), at(on, end), title=name).json()
            for name, on, start, end in [("wed", wed, "09:00", "10:00"),
                                         ("mon", mon, "15:00", "16:00"),
                                         ("tue", tue, "08:00", "08:30"),
                                         ("mon-early", mon, "07:00", "08:00")]}
    moved = alice.move(made["wed"], at(tue, "12:00"), at(tue, "13:00")).json()
    cancelled = alice.cancel(made["mon"]).json()
    listed = alice.get("/bookings").json()
    assert [b["title"] for b in listed] == ["mon-early", "mon", "tue", "wed"]
    assert listed[1] == cancelled and listed[3] == moved
    assert (moved["start"], moved["end"]) == (at(tue, "12:00"), at(tue, "13:00"))
    assert [alice.get(f"/bookings/{b['id']}").json() for b in listed] == listed
