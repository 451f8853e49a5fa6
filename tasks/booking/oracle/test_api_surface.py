"""The service's answers: shapes, formats and reads."""

import requests
import pytest

from conftest import BASE_URL, at, cal, day


@pytest.mark.category("api_surface")
def test_health_needs_no_token():
    r = requests.get(f"{BASE_URL}/health", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}, r.text


@pytest.mark.category("api_surface")
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
def test_times_come_back_in_utc(alice):
    """Offsets are honoured on input and every answer is in UTC with a Z."""
    on = day()
    booking = alice.book(at(on, "11:00", "+02:00"), at(on, "12:30", "+02:00")).json()
    assert (booking["start"], booking["end"]) == (at(on, "09:00"), at(on, "10:30")), booking
    again = alice.get(f"/bookings/{booking['id']}").json()
    assert (again["start"], again["end"]) == (at(on, "09:00"), at(on, "10:30")), again


@pytest.mark.category("api_surface")
def test_read_one_and_list_sorted_by_start(alice):
    on = day()
    late = alice.book(at(on, "15:00"), at(on, "16:00"), title="late").json()
    early = alice.book(at(on, "08:00"), at(on, "09:00"), title="early").json()
    one = alice.get(f"/bookings/{late['id']}")
    assert one.status_code == 200 and one.json() == late, one.text
    listed = alice.get("/bookings")
    assert listed.status_code == 200, listed.text
    assert listed.json() == [early, late]


@pytest.mark.category("api_surface")
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
def test_availability_sees_bookings_and_other_events(alice):
    on = day()
    alice.book(at(on, "10:00"), at(on, "11:00"))
    r = cal("POST", "/calendars/primary/events", json={
        "summary": "someone else", "start": {"dateTime": at(on, "13:00", "+01:00")},
        "end": {"dateTime": at(on, "14:00", "+01:00")}})
    assert r.status_code == 200, r.text
    got = alice.get("/availability", params={"start": at(on, "00:00"), "end": at(on, "23:59")})
    assert got.status_code == 200, got.text
    assert got.json()["busy"] == [{"start": at(on, "10:00"), "end": at(on, "11:00")},
                                  {"start": at(on, "12:00"), "end": at(on, "13:00")}]


@pytest.mark.category("api_surface")
def test_unknown_booking_and_route_are_404(alice):
    assert alice.get("/bookings/987654321").status_code == 404
    assert alice.get("/no-such-route").status_code == 404
