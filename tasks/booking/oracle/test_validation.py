"""Bad input is a 422 and never reaches the calendar."""

import pytest

from conftest import at, day


@pytest.mark.category("validation")
@pytest.mark.parametrize("drop", ["title", "start", "end"])
def test_missing_field_is_422(alice, calendar, drop):
    on = day()
    body = {"title": "x", "start": at(on, "09:00"), "end": at(on, "10:00")}
    del body[drop]
    r = alice.post("/bookings", json=body)
    assert r.status_code == 422, r.text
    assert calendar.requests() == [], "validation comes before any calendar call"


@pytest.mark.category("validation")
@pytest.mark.parametrize("start,end", [
    ("10:00", "10:00"), ("10:00", "09:00"),  # empty or backwards
    ("10:00", "10:10"),  # shorter than 15 minutes
    ("08:00", "12:01"),  # longer than 4 hours
])
def test_bad_slot_is_422(alice, calendar, start, end):
    on = day()
    r = alice.post("/bookings", json={"title": "x", "start": at(on, start), "end": at(on, end)})
    assert r.status_code == 422, r.text
    assert calendar.requests() == []


@pytest.mark.category("validation")
def test_boundary_durations_are_accepted(alice):
    on = day()
    alice.book(at(on, "08:00"), at(on, "08:15"))
    alice.book(at(on, "09:00"), at(on, "13:00"))


@pytest.mark.category("validation")
@pytest.mark.parametrize("value", ["2026-05-04T09:00:00", "2026-05-04", "tomorrow at nine",
                                   1770000000, None])
def test_time_without_offset_or_not_a_time_is_422(alice, calendar, value):
    on = day()
    r = alice.post("/bookings", json={"title": "x", "start": value, "end": at(on, "10:00")})
    assert r.status_code == 422, r.text
    assert calendar.requests() == []


@pytest.mark.category("validation")
@pytest.mark.parametrize("title", ["", "   ", "x" * 201, 42, None])
def test_bad_title_is_422(alice, calendar, title):
    on = day()
    r = alice.post("/bookings", json={"title": title, "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 422, r.text
    assert calendar.requests() == []


@pytest.mark.category("validation")
def test_body_must_be_a_json_object(alice, calendar):
    for data in (b"{not json", b"[1, 2]", b'"text"'):
        r = alice.post("/bookings", data=data, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, (data, r.text)
    assert calendar.requests() == []


@pytest.mark.category("validation")
def test_a_bad_move_is_422_and_changes_nothing(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "12:00"),
                                                        "end": at(on, "11:00")})
    assert r.status_code == 422, r.text
    assert alice.get(f"/bookings/{booking['id']}").json() == booking
    assert calendar.requests("PATCH") == []


@pytest.mark.category("validation")
@pytest.mark.parametrize("params", [
    {}, {"start": "2026-05-01T00:00:00Z"}, {"start": "2026-05-01T00:00:00",
                                             "end": "2026-05-02T00:00:00Z"},
    {"start": "2026-05-02T00:00:00Z", "end": "2026-05-01T00:00:00Z"},
    {"start": "2026-05-01T00:00:00Z", "end": "2026-05-08T00:00:01Z"},  # over 7 days
])
def test_bad_availability_window_is_422(alice, params):
    r = alice.get("/availability", params=params)
    assert r.status_code == 422, r.text
