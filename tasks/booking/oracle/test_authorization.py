"""Who may do what: a bearer token is a user; bookings are private, time is shared.

Every route but /health answers 401 to a missing or malformed token and calls nothing in
the calendar; 401 wins over every other error. Another user's booking is exactly like one
that does not exist (404), and a refused attempt changes nothing.
"""

import pytest
from conftest import MISSING, User, at, day, service, writes

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private")]

HEADERS = {"missing": None, "basic": "Basic dXNlcjpwdw==", "bearer-no-token": "Bearer",
           "bearer-blank": "Bearer   "}
# (method, path, needs a booking)
ROUTES = {
    "create": ("POST", "/bookings", False),
    "list": ("GET", "/bookings", False),
    "read": ("GET", "/bookings/{id}", True),
    "move": ("PATCH", "/bookings/{id}", True),
    "cancel": ("POST", "/bookings/{id}/cancel", True),
    "availability": ("GET", "/availability", False),
}


def _request_kwargs(method, path, on):
    if path == "/availability":
        return {"params": {"start": at(on, "00:00"), "end": at(on, "12:00")}}
    if method == "PATCH" or path == "/bookings" and method == "POST":
        return {"json": {"title": "x", "start": at(on, "14:00"), "end": at(on, "15:00")}}
    return {}


def _matrix():
    for route, (_, _, needs_booking) in ROUTES.items():
        for name in HEADERS:
            marks = [pytest.mark.level("mid" if needs_booking else "leaf")]
            if name in ("missing", "basic"):
                marks.append(pytest.mark.visibility("public"))
            yield pytest.param(route, name, marks=marks, id=f"{route}-{name}")


def _headers(name):
    value = HEADERS[name]
    return {"Authorization": value} if value is not None else {}


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-auth-401")
@pytest.mark.parametrize("route,header", list(_matrix()))
def test_no_usable_token_is_401_and_calls_nothing(route, header, alice, calendar):
    method, path, needs_booking = ROUTES[route]
    on = day()
    if needs_booking:
        booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
        path = path.replace("{id}", str(booking["id"]))
    before = len(calendar.requests())
    r = service(method, path, headers=_headers(header), **_request_kwargs(method, path, on))
    assert r.status_code == 401, f"{method} {path} with {header} token: {r.status_code} {r.text}"
    assert len(calendar.requests()) == before, "a refused request must not reach the calendar"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-401")
@pytest.mark.level("mid")
@pytest.mark.parametrize("route", ["move", "cancel"])
def test_a_request_refused_with_401_changes_nothing(route, alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    method, path, _ = ROUTES[route]
    path = path.replace("{id}", str(booking["id"]))
    before = len(calendar.requests())
    service(method, path, **_request_kwargs(method, path, on))
    assert len(calendar.requests()) == before, "a refused request must not reach the calendar"
    assert alice.get(f"/bookings/{booking['id']}").json() == booking


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("route,kwargs", [
    pytest.param("POST /bookings", {"json": {"title": "", "start": "soon"}}, id="create-bad-body"),
    pytest.param("PATCH /bookings/{id}", {"data": b"{not json",
                                          "headers": {"Content-Type": "application/json"}},
                 id="move-malformed-json"),
    pytest.param("GET /availability", {"params": {"start": "2026-05-02T00:00:00Z",
                                                  "end": "2026-05-01T00:00:00Z"}},
                 id="availability-bad-window"),
])
def test_401_comes_before_422(route, kwargs, calendar):
    method, path = route.split(" ")
    r = service(method, path.replace("{id}", str(MISSING)), **kwargs)
    assert r.status_code == 401, f"no token and a bad request: {r.status_code} {r.text}"
    assert calendar.requests() == []


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("method,path", [
    pytest.param("GET", f"/bookings/{MISSING}", id="read"),
    pytest.param("POST", f"/bookings/{MISSING}/cancel", id="cancel"),
])
def test_401_comes_before_404(method, path):
    r = service(method, path)
    assert r.status_code == 401, f"no token and an unknown booking: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-owner-404")
@pytest.mark.level("mid")
@pytest.mark.parametrize("action", [pytest.param("read", marks=pytest.mark.visibility("public")),
                                    "move", "cancel"])
def test_another_users_booking_is_404(action, alice, bob):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    bid = booking["id"]
    if action == "read":
        r = bob.get(f"/bookings/{bid}")
    elif action == "move":
        r = bob.patch(f"/bookings/{bid}", json={"start": at(on, "12:00"), "end": at(on, "13:00")})
    else:
        r = bob.post(f"/bookings/{bid}/cancel")
    assert r.status_code == 404, f"bob {action}s alice's booking: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-owner-404")
@pytest.mark.level("mid")
@pytest.mark.parametrize("action", [
    pytest.param("move", marks=pytest.mark.tier("base")),
    pytest.param("cancel", marks=pytest.mark.tier("evolved-r1")),
])
def test_another_users_attempt_changes_nothing(action, alice, bob, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    before = len(writes(calendar))
    if action == "move":
        bob.patch(f"/bookings/{booking['id']}", json={"start": at(on, "12:00"),
                                                      "end": at(on, "13:00")})
    else:
        bob.post(f"/bookings/{booking['id']}/cancel")
    assert len(writes(calendar)) == before, "nothing written to the calendar for bob"
    assert alice.get(f"/bookings/{booking['id']}").json() == booking, "a refused attempt changes nothing"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("mid")
@pytest.mark.parametrize("action", ["move", "cancel"])
def test_another_users_cancelled_booking_is_404_not_409(action, alice, bob):
    """404 comes before 409: bob cannot even learn that alice's booking is cancelled."""
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.cancel(booking)
    if action == "move":
        r = bob.patch(f"/bookings/{booking['id']}", json={"start": at(on, "12:00"),
                                                          "end": at(on, "13:00")})
    else:
        r = bob.post(f"/bookings/{booking['id']}/cancel")
    assert r.status_code == 404, f"bob {action}s alice's cancelled booking: {r.status_code} {r.text}"


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("leaf")
def test_an_unknown_booking_moved_onto_a_busy_slot_is_404_not_409(alice):
    """2026-03-02 09:00-10:00 is busy in the calendar; the booking does not exist."""
    r = alice.patch(f"/bookings/{MISSING}", json={"start": "2026-03-02T09:00:00Z",
                                                  "end": "2026-03-02T10:00:00Z"})
    assert r.status_code == 404, r.text


@pytest.mark.category("authorization")
@pytest.mark.requirement("R-owner-list")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_each_user_lists_only_their_own(alice, bob):
    on = day()
    mine = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    theirs = bob.book(at(on, "11:00"), at(on, "12:00")).json()
    assert alice.get("/bookings").json() == [mine]
    assert bob.get("/bookings").json() == [theirs]


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-auth-token-is-user")
@pytest.mark.level("mid")
def test_the_same_token_is_the_same_user(alice):
    """No session: a new client with the same token sees, moves and cancels the booking."""
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    again = User(alice.token)
    assert again.get(f"/bookings/{booking['id']}").json() == booking
    again.move(booking, at(on, "11:00"), at(on, "12:00"))
    assert again.cancel(booking).json()["status"] == "cancelled"


@pytest.mark.category("authorization")
@pytest.mark.visibility("public")
@pytest.mark.requirement("R-shared-time")
@pytest.mark.level("mid")
def test_time_is_shared_between_users(alice, bob, calendar):
    """Bob cannot book over Alice's booking, and learns nothing more than 409."""
    on = day()
    alice.book(at(on, "09:00"), at(on, "10:00"))
    r = bob.book(at(on, "09:30"), at(on, "10:30"), expect=409)
    assert "calendar_event_id" not in r.text
    assert bob.get("/bookings").json() == []


@pytest.mark.category("authorization")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-shared-time")
@pytest.mark.level("mid")
def test_a_move_onto_another_users_booking_is_409(alice, bob):
    on = day()
    alice.book(at(on, "09:00"), at(on, "10:00"))
    theirs = bob.book(at(on, "12:00"), at(on, "13:00")).json()
    bob.move(theirs, at(on, "09:30"), at(on, "10:30"), expect=409)
