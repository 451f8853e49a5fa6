"""Bad input is a 422 and never reaches the calendar.

Every limit the spec names is checked on both sides: the last valid value is accepted and
the first invalid one answers 422. 422 wins over 404 and 409.
"""

import pytest
from conftest import MISSING, at, day

pytestmark = [pytest.mark.tier("base"), pytest.mark.visibility("private")]
JSON = {"Content-Type": "application/json"}


def _r1(*values, id=None, public=False):
    """A case added in the first evolved round."""
    marks = [pytest.mark.tier("evolved-r1")]
    if public:
        marks.append(pytest.mark.visibility("public"))
    return pytest.param(*values, marks=marks, id=id)


# ---------------------------------------------------------------- POST /bookings


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-fields")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("drop", ["title", "start", "end"])
def test_missing_field_is_422(alice, calendar, drop):
    on = day()
    body = {"title": "x", "start": at(on, "09:00"), "end": at(on, "10:00")}
    del body[drop]
    r = alice.post("/bookings", json=body)
    assert r.status_code == 422, r.text
    assert calendar.requests() == [], "validation comes before any calendar call"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-duration")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("start,end", [
    pytest.param("10:00:00", "10:00:00", id="empty", marks=pytest.mark.visibility("public")),
    pytest.param("10:00:00", "09:00:00", id="backwards"),
    pytest.param("10:00:00", "10:10:00", id="10-minutes"),
    pytest.param("08:00:00", "12:01:00", id="4h01m"),
    _r1("10:00:00", "10:14:59", id="14m59s", public=True),
    _r1("08:00:00", "12:00:01", id="4h00m01s"),
])
def test_bad_slot_is_422(alice, calendar, start, end):
    on = day()
    r = alice.post("/bookings", json={"title": "x", "start": f"{on}T{start}Z",
                                      "end": f"{on}T{end}Z"})
    assert r.status_code == 422, f"{start}..{end}: {r.status_code} {r.text}"
    assert calendar.requests() == []


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-duration")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("start,end", [pytest.param("08:00", "08:15", id="15-minutes"),
                                       pytest.param("09:00", "13:00", id="4-hours")])
def test_boundary_durations_are_accepted(alice, start, end):
    on = day()
    alice.book(at(on, start), at(on, end))


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-time")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("field,value", [
    pytest.param("start", "{on}T09:00:00", id="start-no-offset"),
    pytest.param("start", "{on}", id="start-date-only"),
    pytest.param("start", "tomorrow at nine", id="start-text"),
    pytest.param("start", 1770000000, id="start-number"),
    pytest.param("start", None, id="start-null"),
    pytest.param("end", "{on}T10:00:00", id="end-no-offset", marks=pytest.mark.visibility("public")),
    pytest.param("end", "{on}", id="end-date-only"),
    pytest.param("end", None, id="end-null"),
    _r1("start", "2026-02-30T09:00:00Z", id="start-february-30"),
    _r1("start", "{on}T24:30:00Z", id="start-hour-24"),
])
def test_time_without_offset_or_not_a_time_is_422(alice, calendar, field, value):
    on = day()
    body = {"title": "x", "start": at(on, "09:00"), "end": at(on, "10:00")}
    body[field] = value.format(on=on) if isinstance(value, str) else value
    r = alice.post("/bookings", json=body)
    assert r.status_code == 422, f"{field}={value!r}: {r.status_code} {r.text}"
    assert calendar.requests() == []


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-title")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("title", [
    pytest.param("", id="empty", marks=pytest.mark.visibility("public")),
    pytest.param("   ", id="spaces"),
    pytest.param("x" * 201, id="201-chars"),
    pytest.param(42, id="number"),
    pytest.param(None, id="null"),
    pytest.param("\t\n ", id="tab-newline", marks=pytest.mark.visibility("public")),
    pytest.param(["Planning"], id="array"),
])
def test_bad_title_is_422(alice, calendar, title):
    on = day()
    r = alice.post("/bookings", json={"title": title, "start": at(on, "09:00"),
                                      "end": at(on, "10:00")})
    assert r.status_code == 422, f"title {title!r}: {r.status_code} {r.text}"
    assert calendar.requests() == []


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-title")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("title", [
    pytest.param("x", id="1-char"),
    pytest.param("x" * 200, id="200-chars", marks=pytest.mark.visibility("public")),
    pytest.param("\u00e9" * 200, id="200-non-ascii-chars", marks=pytest.mark.tier("evolved-r2")),
])
def test_title_length_limits_are_accepted(alice, title):
    on = day()
    r = alice.book(at(on, "09:00"), at(on, "10:00"), title=title)
    assert r.json()["title"] == title


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-body")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("data", [
    pytest.param(b"{not json", id="malformed", marks=pytest.mark.visibility("public")),
    pytest.param(b"[1, 2]", id="array"),
    pytest.param(b'"text"', id="string"),
    pytest.param(b"null", id="null"),
    pytest.param(b"42", id="number", marks=pytest.mark.visibility("public")),
    pytest.param(b"", id="empty"),
])
def test_body_must_be_a_json_object(alice, calendar, data):
    r = alice.post("/bookings", data=data, headers=JSON)
    assert r.status_code == 422, f"body {data!r}: {r.status_code} {r.text}"
    assert calendar.requests() == []


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("leaf")
def test_a_bad_title_over_a_busy_slot_is_422_not_409(alice, calendar):
    """2026-03-02 09:00-10:00 is busy: 422 wins, and the calendar is not even asked."""
    r = alice.post("/bookings", json={"title": "", "start": "2026-03-02T09:00:00Z",
                                      "end": "2026-03-02T10:00:00Z"})
    assert r.status_code == 422, r.text
    assert calendar.requests() == []


# ---------------------------------------------------------------- PATCH /bookings/{id}


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-move")
@pytest.mark.visibility("public")
@pytest.mark.level("mid")
def test_a_bad_move_is_422_and_changes_nothing(alice, calendar):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "12:00"),
                                                        "end": at(on, "11:00")})
    assert r.status_code == 422, r.text
    assert alice.get(f"/bookings/{booking['id']}").json() == booking
    assert calendar.requests("PATCH") == []


BAD_MOVES = {
    "no-start": {"end": "11:00"},
    "no-end": {"start": "10:00"},
    "null-start": {"start": None, "end": "11:00"},
    "null-end": {"start": "10:00", "end": None},
    "null-title": {"start": "10:00", "end": "11:00", "title": None},
    "empty-title": {"start": "10:00", "end": "11:00", "title": ""},
    "blank-title": {"start": "10:00", "end": "11:00", "title": "   "},
    "201-char-title": {"start": "10:00", "end": "11:00", "title": "x" * 201},
    "number-title": {"start": "10:00", "end": "11:00", "title": 7},
    "10-minutes": {"start": "10:00", "end": "10:10"},
    "4h01m": {"start": "10:00", "end": "14:01"},
    "no-offset": {"start": "10:00", "end": "11:00", "naive": True},
}


def _move_body(on, spec):
    body = {}
    for name in ("start", "end"):
        if name in spec:
            value = spec[name]
            body[name] = None if value is None else (
                f"{on}T{value}:00" if spec.get("naive") else at(on, value))
    if "title" in spec:
        body["title"] = spec["title"]
    return body


# the first round's cases; the others (null on every patchable field, odd titles, no
# offset) came with the first evolved round
BASE_MOVES = ("no-start", "no-end", "empty-title", "10-minutes", "4h01m")
PUBLIC_MOVES = ("no-end", "null-title", "4h01m", "null-start")


def _move_case(name):
    marks = [pytest.mark.tier("base" if name in BASE_MOVES else "evolved-r1")]
    if name in PUBLIC_MOVES:
        marks.append(pytest.mark.visibility("public"))
    return pytest.param(name, marks=marks)


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-move")
@pytest.mark.level("mid")
@pytest.mark.parametrize("case", [_move_case(name) for name in BAD_MOVES])
def test_a_move_with_a_bad_body_is_422(alice, case):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = alice.patch(f"/bookings/{booking['id']}", json=_move_body(on, BAD_MOVES[case]))
    assert r.status_code == 422, f"move {case}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-body")
@pytest.mark.level("mid")
@pytest.mark.parametrize("data", [pytest.param(b"{not json", id="malformed",
                                               marks=pytest.mark.visibility("public")),
                                  pytest.param(b"[]", id="array")])
def test_a_move_body_must_be_a_json_object(alice, data):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = alice.patch(f"/bookings/{booking['id']}", data=data, headers=JSON)
    assert r.status_code == 422, f"body {data!r}: {r.status_code} {r.text}"


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-val-duration")
@pytest.mark.level("mid")
@pytest.mark.parametrize("start,end", [pytest.param("12:00", "12:15", id="15-minutes"),
                                       pytest.param("12:00", "16:00", id="4-hours")])
def test_a_move_to_a_boundary_duration_is_accepted(alice, start, end):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = alice.move(booking, at(on, start), at(on, end))
    assert (r.json()["start"], r.json()["end"]) == (at(on, start), at(on, end))


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.visibility("public")
@pytest.mark.level("leaf")
def test_a_bad_move_of_an_unknown_booking_is_422_not_404(alice):
    on = day()
    r = alice.patch(f"/bookings/{MISSING}", json={"start": at(on, "12:00"), "end": at(on, "11:00")})
    assert r.status_code == 422, r.text


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("mid")
def test_a_bad_move_of_another_users_booking_is_422_not_404(alice, bob):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    r = bob.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"), "end": None})
    assert r.status_code == 422, r.text


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r2")
@pytest.mark.requirement("R-precedence")
@pytest.mark.level("mid")
def test_a_bad_move_of_a_cancelled_booking_is_422_not_409(alice):
    on = day()
    booking = alice.book(at(on, "09:00"), at(on, "10:00")).json()
    alice.cancel(booking)
    r = alice.patch(f"/bookings/{booking['id']}", json={"start": at(on, "11:00"),
                                                        "end": at(on, "11:05")})
    assert r.status_code == 422, r.text


# ---------------------------------------------------------------- GET /availability


@pytest.mark.category("validation")
@pytest.mark.requirement("R-val-window")
@pytest.mark.level("leaf")
@pytest.mark.parametrize("params", [
    pytest.param({}, id="none", marks=pytest.mark.visibility("public")),
    pytest.param({"start": "2026-05-01T00:00:00Z"}, id="no-end"),
    pytest.param({"start": "2026-05-01T00:00:00", "end": "2026-05-02T00:00:00Z"}, id="no-offset"),
    pytest.param({"start": "2026-05-02T00:00:00Z", "end": "2026-05-01T00:00:00Z"}, id="backwards"),
    pytest.param({"start": "2026-05-01T00:00:00Z", "end": "2026-05-08T00:00:01Z"}, id="7d+1s"),
    pytest.param({"end": "2026-05-02T00:00:00Z"}, id="no-start"),
    pytest.param({"start": "2026-05-01T00:00:00Z", "end": "2026-05-01T00:00:00Z"}, id="empty",
                 marks=pytest.mark.visibility("public")),
    pytest.param({"start": "2026-05-01", "end": "2026-05-02T00:00:00Z"}, id="date-only"),
    pytest.param({"start": "2026-05-01T00:00:00Z", "end": "next week"}, id="text"),
])
def test_bad_availability_window_is_422(alice, calendar, params):
    r = alice.get("/availability", params=params)
    assert r.status_code == 422, f"{params}: {r.status_code} {r.text}"
    assert calendar.requests() == []


@pytest.mark.category("validation")
@pytest.mark.tier("evolved-r1")
@pytest.mark.requirement("R-val-window")
@pytest.mark.level("leaf")
def test_a_window_of_exactly_7_days_is_accepted(alice):
    r = alice.get("/availability", params={"start": "2026-06-01T00:00:00Z",
                                           "end": "2026-06-08T00:00:00Z"})
    assert r.status_code == 200, r.text
