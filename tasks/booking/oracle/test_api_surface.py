"""The service's answers: shapes, formats and reads."""

import pytest
from conftest import MISSING, at, busy_event, day, service, span

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private")]


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-health")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
def test_health_needs_no_token():
    r = service("GET", "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-booking-shape")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
def test_create_answers_the_booking(alice):
    on = day()
    r = alice.book(at(on, "09:00"), at(on, "10:00"), title="Sprint planning")
    booking = r.json()
    assert set(booking) == {"id", "title", "start", "end", "status", "calendar_event_id"}, booking
    assert isinstance(booking["id"], int) and not isinstance(booking["id"], bool) and booking["id"] > 0
    assert booking["title"] == "Sprint planning"
    assert (booking["start"], booking["end"]) == (at(on, "09:00"), at(on, "10:00"))
    assert booking["status"] == "confirmed"
    assert isinstance(booking["calendar_event_id"], str) and booking["calendar_event_id"]


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-times-utc")
@pytest.mark.level("mid")
def test_times_come_back_in_utc(alice):
    """Offsets are honoured on input and every answer is in UTC with a Z."""
    on = day()
    booking = alice.book(at(on, "11:00", "+02:00"), at(on, "12:30", "+02:00")).json()
    assert (booking["start"], booking["end"]) == (at(on, "09:00"), at(on, "10:30")), booking
    again = alice.get(f"/bookings/{booking['id']}").json()
    assert (again["start"], again["end"]) == (at(on, "09:00"), at(on, "10:30")), again


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-times-utc")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("start,end,utc_start,utc_end", [
    pytest.param("04:00-05:00", "05:00-05:00", "09:00", "10:00", id="minus-5h"),
    pytest.param("14:30+05:30", "15:15+05:30", "09:00", "09:45", id="plus-5h30"),
    pytest.param("09:00+00:00", "10:00+00:00", "09:00", "10:00", id="plus-zero"),
])
def test_other_offsets_come_back_in_utc(alice, start, end, utc_start, utc_end):
    on = day()
    booking = alice.book(f"{on}T{start[:5]}:00{start[5:]}", f"{on}T{end[:5]}:00{end[5:]}").json()
    assert (booking["start"], booking["end"]) == (at(on, utc_start), at(on, utc_end)), booking


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-times-utc")
@pytest.mark.level("leaf")
def test_fractional_seconds_are_dropped(alice):
    on = day()
    booking = alice.book(f"{on}T09:00:00.250Z", f"{on}T10:00:00.750Z").json()
    assert (booking["start"], booking["end"]) == (at(on, "09:00"), at(on, "10:00")), booking


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-read-one")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_read_one_answers_the_booking(alice):
    on = day()
    booking = alice.book(at(on, "15:00"), at(on, "16:00"), title="late").json()
    one = alice.get(f"/bookings/{booking['id']}")
    assert one.status_code == 200 and one.json() == booking, one.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-list-order")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_list_is_sorted_by_start(alice):
    on = day()
    late = alice.book(at(on, "15:00"), at(on, "16:00"), title="late").json()
    early = alice.book(at(on, "08:00"), at(on, "09:00"), title="early").json()
    listed = alice.get("/bookings")
    assert listed.status_code == 200, listed.text
    assert listed.json() == [early, late]


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-list-order")
@pytest.mark.level("mid")
def test_list_is_sorted_by_start_across_days_and_offsets(alice):
    first, second = day(), day()
    late = alice.book(at(second, "08:00"), at(second, "09:00")).json()
    early = alice.book(at(first, "23:00", "+01:00"), at(first, "23:30", "+01:00")).json()
    middle = alice.book(at(first, "23:00"), at(first, "23:30")).json()
    assert alice.get("/bookings").json() == [early, middle, late]


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-list-order")
@pytest.mark.level("leaf")
def test_a_new_user_has_no_bookings(alice):
    r = alice.get("/bookings")
    assert r.status_code == 200 and r.json() == [], r.text


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-availability")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
def test_availability_shows_the_calendars_busy_spans(alice):
    """The busy scenario: 09:00-10:00Z, 14:00-15:30 Paris (13:00-14:30Z); a transparent
    event at 15:00-16:00Z is free."""
    r = alice.get("/availability", params={"start": "2026-03-02T00:00:00Z",
                                           "end": "2026-03-02T08:00:00-10:00"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["start"], body["end"]) == ("2026-03-02T00:00:00Z", "2026-03-02T18:00:00Z")
    assert body["busy"] == [{"start": "2026-03-02T09:00:00Z", "end": "2026-03-02T10:00:00Z"},
                            {"start": "2026-03-02T13:00:00Z", "end": "2026-03-02T14:30:00Z"}]


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-availability")
@pytest.mark.level("mid")
def test_availability_sees_bookings_and_other_events(alice):
    on = day()
    alice.book(at(on, "10:00"), at(on, "11:00"))
    busy_event(on, "13:00", "14:00")
    assert alice.busy(at(on, "00:00"), at(on, "23:59")) == [span(on, "10:00", "11:00"),
                                                            span(on, "13:00", "14:00")]


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-availability")
@pytest.mark.level("leaf")
def test_availability_of_a_free_day_is_empty(alice):
    on = day()
    r = alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "23:00")})
    assert r.status_code == 200, r.text
    assert r.json() == {"start": at(on, "00:00"), "end": at(on, "23:00"), "busy": []}


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-availability")
@pytest.mark.level("leaf")
def test_availability_shows_an_all_day_event_whole_day(alice):
    """The busy scenario's all-day event on 2026-03-04 (calendar in UTC)."""
    busy = alice.busy("2026-03-03T12:00:00Z", "2026-03-05T12:00:00Z")
    assert busy == [{"start": "2026-03-04T00:00:00Z", "end": "2026-03-05T00:00:00Z"}], busy


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-availability")
@pytest.mark.level("mid")
def test_availability_spans_are_clipped_to_the_window(alice):
    on = day()
    alice.book(at(on, "10:00"), at(on, "12:00"))
    assert alice.busy(at(on, "11:00"), at(on, "23:00")) == [span(on, "11:00", "12:00")]


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-availability")
@pytest.mark.level("mid")
def test_availability_merges_touching_and_overlapping_spans(alice):
    """The calendar's free/busy spans are merged: a booking and an event back to back are
    one span, and so are two overlapping events."""
    on = day()
    alice.book(at(on, "10:00"), at(on, "11:00"))
    busy_event(on, "11:00", "12:00")
    busy_event(on, "14:00", "15:00")
    busy_event(on, "14:30", "15:30")
    assert alice.busy(at(on, "00:00"), at(on, "23:00")) == [span(on, "10:00", "12:00"),
                                                            span(on, "14:00", "15:30")]


@pytest.mark.category("api_surface")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-not-found")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("path", [
    pytest.param(f"/bookings/{MISSING}", id="unknown-booking"),
    pytest.param("/no-such-route", id="unknown-route"),
    pytest.param("/bookings/abc", id="id-not-a-number", marks=pytest.mark.tier("evolved-r1")),
    pytest.param("/bookings/0", id="id-zero", marks=pytest.mark.tier("evolved-r1")),
])
def test_unknown_booking_and_route_are_404(alice, path):
    r = alice.get(path)
    assert r.status_code == 404, f"GET {path}: {r.status_code} {r.text}"


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-not-found")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("method,path", [
    pytest.param("PATCH", f"/bookings/{MISSING}", id="move"),
    pytest.param("POST", f"/bookings/{MISSING}/cancel", id="cancel"),
])
def test_moving_or_cancelling_an_unknown_booking_is_404(alice, calendar, method, path):
    on = day()
    r = alice.call(method, path, json={"start": at(on, "09:00"), "end": at(on, "10:00")}
                   if method == "PATCH" else None)
    assert r.status_code == 404, f"{method} {path}: {r.status_code} {r.text}"
    assert [c for c in calendar.requests() if c["method"] != "GET" and
            not c["path"].endswith("/freeBusy")] == [], "nothing written for an unknown booking"


def _error(alice, code):
    on = day()
    if code == 401:
        return service("GET", "/bookings")
    if code == 404:
        return alice.get(f"/bookings/{MISSING}")
    if code == 409:  # cancelling twice: a 409 that does not depend on the calendar
        booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
        alice.post(f"/bookings/{booking['id']}/cancel")
        return alice.post(f"/bookings/{booking['id']}/cancel")
    return alice.post("/bookings", json={"title": "x", "start": at(on, "10:00"), "end": "later"})


@pytest.mark.category("api_surface")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-json")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("code", [401, 404, 409, 422])
def test_error_bodies_are_json_objects(alice, code):
    r = _error(alice, code)
    assert r.status_code == code, r.text
    try:
        body = r.json()
    except ValueError:
        raise AssertionError(f"a {code} answer is not JSON: {r.text[:200]!r}") from None
    assert isinstance(body, dict), f"a {code} answer is not a JSON object: {body!r}"


@pytest.mark.category("api_surface")
@pytest.mark.requirement("R-json")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("what", ["create", "list", "availability"])
def test_answers_are_labelled_json(alice, what):
    on = day()
    if what == "create":
        r = alice.book(at(on, "09:00"), at(on, "10:00"))
    elif what == "list":
        r = alice.get("/bookings")
    else:
        r = alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "12:00")})
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
