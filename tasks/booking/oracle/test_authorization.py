"""Who may do what: a bearer token is a user; bookings are private, time is shared."""

import pytest
import requests

from conftest import BASE_URL, at, day, writes


@pytest.mark.category("authorization")
@pytest.mark.parametrize("header", [None, "Basic dXNlcjpwdw==", "Bearer", "Bearer   "])
def test_no_usable_token_is_401_and_calls_nothing(header, calendar):
    on = day()
    headers = {"Authorization": header} if header is not None else {}
    r = requests.post(f"{BASE_URL}/bookings", headers=headers, timeout=15,
                      json={"title": "x", "start": at(on, "09:00"), "end": at(on, "10:00")})
    assert r.status_code == 401, r.text
    assert requests.get(f"{BASE_URL}/bookings", headers=headers, timeout=15).status_code == 401
    assert requests.get(f"{BASE_URL}/availability", headers=headers, timeout=15, params={
        "start": at(on, "00:00"), "end": at(on, "12:00")}).status_code == 401
    assert calendar.requests() == [], "a refused request must not reach the calendar"


@pytest.mark.category("authorization")
def test_another_users_booking_is_404_everywhere(alice, bob, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    before = len(writes(calendar))
    bid = booking["id"]
    assert bob.get(f"/bookings/{bid}").status_code == 404
    moved = bob.patch(f"/bookings/{bid}", json={"start": at(on, "12:00"), "end": at(on, "13:00")})
    assert moved.status_code == 404, moved.text
    assert bob.post(f"/bookings/{bid}/cancel").status_code == 404
    assert alice.get(f"/bookings/{bid}").json() == booking, "a refused attempt changes nothing"
    assert len(writes(calendar)) == before, "nothing written to the calendar for bob"


@pytest.mark.category("authorization")
def test_each_user_lists_only_their_own(alice, bob):
    on = day()
    mine = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    theirs = bob.book(at(on, "11:00"), at(on, "12:00")).json()
    assert alice.get("/bookings").json() == [mine]
    assert bob.get("/bookings").json() == [theirs]


@pytest.mark.category("authorization")
def test_time_is_shared_between_users(alice, bob, calendar):
    """Bob cannot book over Alice's booking, and learns nothing more than 409."""
    on = day()
    alice.book(at(on, "09:00"), at(on, "10:00"))
    r = bob.book(at(on, "09:30"), at(on, "10:30"), expect=409)
    assert "calendar_event_id" not in r.text
    assert bob.get("/bookings").json() == []
