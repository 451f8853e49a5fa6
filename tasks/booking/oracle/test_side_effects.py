"""What the service does to the calendar, read from the calendar's journal and API."""

import json

import pytest
from conftest import V3, at, cal, day, event_of, inserts, instant, writes

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private")]


@pytest.fixture
def design_review(alice, calendar):
    """Alice's booking 10:00-11:15 +02:00 titled "Design review", and the insert calls."""
    on = day()
    booking = alice.book(at(on, "10:00", "+02:00"), at(on, "11:15", "+02:00"),
                         title="Design review").json()
    return on, booking, inserts(calendar)


# ---------------------------------------------------------------- create


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-create-event")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
def test_a_booking_creates_exactly_one_event(design_review):
    _, booking, calls = design_review
    (insert,) = calls
    assert insert["status"] == 200, insert
    assert json.loads(insert["response"])["id"] == booking["calendar_event_id"]


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-create-event")
@pytest.mark.level("leaf")
def test_the_event_has_the_bookings_times(design_review):
    on, booking, _ = design_review
    event = event_of(booking)
    assert event["status"] == "confirmed"
    assert instant(event["start"]["dateTime"]) == instant(at(on, "08:00"))
    assert instant(event["end"]["dateTime"]) == instant(at(on, "09:15"))


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-create-event")
@pytest.mark.level("leaf")
def test_the_event_summary_is_the_title(design_review):
    _, booking, _ = design_review
    assert event_of(booking)["summary"] == "Design review"


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-create-event")
@pytest.mark.level("leaf")
def test_the_event_carries_the_booking_id(design_review):
    _, booking, _ = design_review
    event = event_of(booking)
    private = (event.get("extendedProperties") or {}).get("private") or {}
    assert private.get("booking_id") == str(booking["id"]), event


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-free-busy-first")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
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
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-calendar-auth")
@pytest.mark.level("mid")
def test_every_calendar_call_is_authorized(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.move(booking, at(on, "11:00"), at(on, "12:00"), expect=None)
    alice.cancel(booking, expect=None)
    alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "12:00")})
    calls = calendar.requests()  # this item makes no calendar call of its own
    assert calls, "the service called the calendar"
    bare = [(c["method"], c["path"]) for c in calls if c["status"] == 401
            or not c["headers"].get("authorization", "").lower().startswith("bearer ")]
    assert bare == [], f"calendar calls without a bearer token: {bare}"


# ---------------------------------------------------------------- cancel and move


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-cancel-event")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
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
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-cancel-event")
@pytest.mark.level("mid")
def test_cancelling_twice_deletes_once(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.cancel(booking)
    alice.post(f"/bookings/{booking['id']}/cancel")
    assert len(calendar.requests("DELETE")) == 1


@pytest.fixture
def moved(alice, calendar):
    """Alice's booking 09:00-10:00 "a", moved to 14:00-15:30 as "b": (day, booking, answer,
    inserts before the move)."""
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="a").json()
    before = len(inserts(calendar))
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "14:00"),
                                                        "end": at(on, "15:30"), "title": "b"})
    assert r.status_code == 200, r.text
    return on, booking, r.json(), before


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-move-patches")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_a_move_patches_the_same_event(moved, calendar):
    _, booking, answer, _ = moved
    assert answer["calendar_event_id"] == booking["calendar_event_id"]
    (patch,) = calendar.requests("PATCH")
    assert patch["path"].endswith("/events/" + booking["calendar_event_id"])


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-move-patches")
@pytest.mark.level("mid")
def test_a_move_creates_and_deletes_no_event(moved, calendar):
    _, _, _, before = moved
    assert len(inserts(calendar)) == before, "a move creates no event"
    assert calendar.requests("DELETE") == [], "a move deletes no event"


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-move-patches")
@pytest.mark.level("mid")
def test_a_move_updates_the_events_times_and_summary(moved):
    on, booking, _, _ = moved
    event = event_of(booking)
    assert (instant(event["start"]["dateTime"]), instant(event["end"]["dateTime"])) == (
        instant(at(on, "14:00")), instant(at(on, "15:30")))
    assert event["summary"] == "b" and event["status"] == "confirmed"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-move-patches")
@pytest.mark.level("mid")
def test_a_move_without_a_title_keeps_the_summary(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="Keep me").json()
    alice.move(booking, at(on, "11:00"), at(on, "12:00"))
    assert event_of(booking)["summary"] == "Keep me"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-move-patches")
@pytest.mark.level("mid")
def test_a_moved_event_still_carries_the_booking_id(moved):
    _, booking, _, _ = moved
    private = (event_of(booking).get("extendedProperties") or {}).get("private") or {}
    assert private.get("booking_id") == str(booking["id"])


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-refusal-writes-nothing")
@pytest.mark.level("mid")
@pytest.mark.parametrize("body", [
    pytest.param({"start": "11:00", "end": "12:00", "title": None}, id="null-title",
                 marks=[pytest.mark.tier("evolved-r1"), pytest.mark.visibility("public")]),
    pytest.param({"start": "11:00", "end": "11:10"}, id="too-short",
                 marks=pytest.mark.tier("evolved-r1")),
    pytest.param({"start": "11:00", "end": None}, id="null-end",
                 marks=pytest.mark.tier("evolved-r1")),
    pytest.param({"start": "2026-03-02T09:00:00Z", "end": "2026-03-02T10:00:00Z"}, id="busy",
                 marks=pytest.mark.tier("evolved-r2")),
])
def test_a_refused_move_writes_nothing(alice, calendar, body):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00"), title="kept").json()
    before = len(writes(calendar))
    sent = {k: (at(on, v) if k in ("start", "end") and v and len(v) == 5 else v)
            for k, v in body.items()}
    r = alice.patch(f"/bookings/{booking['id']}", json=sent)
    assert r.status_code in (409, 422), r.text
    assert len(writes(calendar)) == before, "a refused move writes nothing to the calendar"
    event = event_of(booking)
    assert event["summary"] == "kept"
    assert instant(event["start"]["dateTime"]) == instant(at(on, "09:00"))


# ---------------------------------------------------------------- reads and refusals


@pytest.mark.category("side_effects")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-reads-write-nothing")
@pytest.mark.level("mid")
@pytest.mark.parametrize("read", ["list", "one", "availability"])
def test_reads_write_nothing_to_the_calendar(alice, calendar, read):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    count = len(writes(calendar))
    if read == "list":
        r = alice.get("/bookings")
    elif read == "one":
        r = alice.get(f"/bookings/{booking['id']}")
    else:
        r = alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "12:00")})
    assert r.status_code == 200, r.text
    assert len(writes(calendar)) == count


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-availability")
@pytest.mark.level("leaf")
def test_availability_asks_free_busy_for_the_window(alice, calendar):
    on = day()
    alice.busy(at(on, "06:00", "+02:00"), at(on, "18:00", "+02:00"))
    (query,) = [json.loads(c["body"]) for c in calendar.requests("POST", V3 + "/freeBusy")]
    assert {"id": "primary"} in query["items"], query
    assert instant(query["timeMin"]) <= instant(at(on, "04:00"))
    assert instant(query["timeMax"]) >= instant(at(on, "16:00"))


@pytest.mark.category("side_effects")
@pytest.mark.requirement("R-refusal-writes-nothing")
@pytest.mark.level("leaf")
def test_a_refused_slot_creates_no_event(alice, calendar):
    """09:30-10:00 on 2026-03-02 overlaps the calendar's 09:00-10:00 event."""
    alice.book("2026-03-02T09:30:00Z", "2026-03-02T10:00:00Z", expect=409)
    assert inserts(calendar) == []
    assert calendar.requests("POST", V3 + "/freeBusy"), "the calendar must be asked"


@pytest.mark.category("side_effects")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-calendar-mirrors-bookings")
@pytest.mark.level("root")
def test_the_calendar_mirrors_the_bookings_after_a_day_of_changes(alice, bob):
    """Book, move, cancel and rebook: the day's events in the calendar are exactly the
    confirmed bookings, each with its times, title and booking id."""
    on = day()
    a = alice.book(at(on, "09:00"), at(on, "10:00"), title="a").json()
    b = alice.book(at(on, "11:00"), at(on, "12:00"), title="b").json()
    alice.move(a, at(on, "14:00"), at(on, "15:00"), title="a2")
    alice.cancel(b)
    bob.book(at(on, "11:00"), at(on, "11:30"), title="c")
    alice.move(a, at(on, "09:00"), at(on, "10:30"))
    r = cal("GET", "/calendars/primary/events", params={
        "timeMin": at(on, "00:00"), "timeMax": at(on, "23:59"), "singleEvents": "true",
        "orderBy": "startTime"})
    assert r.status_code == 200, r.text
    events = [((e.get("extendedProperties") or {}).get("private", {}).get("booking_id"),
               e.get("summary"), instant(e["start"]["dateTime"]), instant(e["end"]["dateTime"]))
              for e in r.json()["items"]]
    confirmed = [b for b in alice.get("/bookings").json() + bob.get("/bookings").json()
                 if b["status"] == "confirmed"]
    want = sorted((str(b["id"]), b["title"], instant(b["start"]), instant(b["end"]))
                  for b in confirmed)
    assert sorted(events) == want
    assert [title for _, title, _, _ in want] == ["a2", "c"]
