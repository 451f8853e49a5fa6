"""The calendar mock on a real server: Google Calendar v3's shapes, errors, free/busy, and
Google's own Python client (``googleapiclient`` with its bundled discovery document)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
import requests

from mocks import check_mock
from mocks.calendar import CalendarMock
from mocks.calendar._service import OWNER
from tests.mocks.conftest import admin, call, serving

AUTH = {"Authorization": "Bearer ya29.anything"}
V3 = "/calendar/v3"


async def api(url: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    headers = kwargs.pop("headers", AUTH)
    return await call(method, f"{url}{V3}{path}", headers=headers, **kwargs)


def event(start: str, end: str, **more: Any) -> dict[str, Any]:
    return {"start": {"dateTime": start}, "end": {"dateTime": end}, **more}


def test_the_calendar_mock_keeps_the_contract() -> None:
    assert check_mock(CalendarMock) == []


async def test_every_call_needs_a_bearer_token_and_errors_are_googles() -> None:
    async with serving(CalendarMock, instance="calendar") as hosted:
        for headers in ({}, {"Authorization": "Basic eDp5"}, {"Authorization": "Bearer "}):
            answer = await api(hosted.url, "GET", "/calendars/primary", headers=headers)
            assert answer.status_code == 401
            error = answer.json()["error"]
            assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
            assert error["errors"][0]["reason"] == "required"
        missing = await api(hosted.url, "GET", "/calendars/nobody@anvil.test")
        assert missing.status_code == 404
        assert missing.json() == {"error": {"code": 404, "message": "Not Found", "errors": [
            {"domain": "global", "reason": "notFound", "message": "Not Found"}],
            "status": "NOT_FOUND"}}
        primary = (await api(hosted.url, "GET", "/calendars/primary")).json()
        assert (primary["kind"], primary["id"], primary["timeZone"]) == (
            "calendar#calendar", OWNER, "UTC")


async def test_an_event_is_inserted_read_patched_and_deleted() -> None:
    async with serving(CalendarMock, instance="calendar") as hosted:
        made = await api(hosted.url, "POST", "/calendars/primary/events", json={
            "summary": "Dentist", "extendedProperties": {"private": {"booking": "7"}},
            "start": {"dateTime": "2026-03-02T10:00:00", "timeZone": "Europe/Paris"},
            "end": {"dateTime": "2026-03-02T09:30:00Z", "timeZone": "Europe/Paris"}})
        assert made.status_code == 200, made.text
        ev = made.json()
        assert list(ev)[:7] == ["kind", "etag", "id", "status", "htmlLink", "created",
                                "updated"]
        assert (ev["kind"], ev["status"], ev["summary"]) == ("calendar#event", "confirmed",
                                                             "Dentist")
        assert ev["created"] == ev["updated"] == "2026-01-01T00:00:00.000Z"  # virtual clock
        # read in its zone, shown in its zone: 09:30Z is 10:30 in Paris in March
        assert ev["start"] == {"dateTime": "2026-03-02T10:00:00+01:00",
                               "timeZone": "Europe/Paris"}
        assert ev["end"]["dateTime"] == "2026-03-02T10:30:00+01:00"
        assert ev["id"] and set(ev["id"]) <= set("0123456789abcdefghijklmnopqrstuv")
        path = f"/calendars/primary/events/{ev['id']}"
        assert (await api(hosted.url, "GET", path)).json() == ev
        await admin(hosted, "POST", "clock/advance", json={"seconds": 90})
        patched = (await api(hosted.url, "PATCH", path, json={
            "start": {"dateTime": "2026-03-02T11:00:00Z"},
            "end": {"dateTime": "2026-03-02T12:00:00Z"}})).json()
        assert patched["summary"] == "Dentist" and patched["sequence"] == 1
        assert patched["updated"] == "2026-01-01T00:01:30.000Z" and patched["etag"] != ev["etag"]
        assert list(patched) == list(ev)
        gone = await api(hosted.url, "DELETE", path)
        assert gone.status_code == 204 and gone.content == b""
        assert (await api(hosted.url, "GET", path)).json()["status"] == "cancelled"
        again = await api(hosted.url, "DELETE", path)
        assert again.status_code == 410 and again.json()["error"]["errors"][0]["reason"] == \
            "deleted"
        listed = (await api(hosted.url, "GET", "/calendars/primary/events")).json()
        assert listed["kind"] == "calendar#events" and listed["items"] == []
        shown = (await api(hosted.url, "GET", "/calendars/primary/events",
                           params={"showDeleted": "true"})).json()
        assert [e["id"] for e in shown["items"]] == [ev["id"]]


@pytest.mark.parametrize(("body", "reason"), [
    ({"start": {"dateTime": "2026-03-02T10:00:00Z"}}, "required"),
    (event("2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z"), "timeRangeEmpty"),
    ({"start": {"dateTime": "2026-03-02T10:00:00"}, "end": {"dateTime": "2026-03-02T11:00:00"}},
     "required"),
    (event("2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z", id="UPPER_case"), "invalid"),
    ({"start": {"dateTime": "2026-03-02T10:00:00", "timeZone": "Mars/Olympus"},
      "end": {"dateTime": "2026-03-02T11:00:00Z"}}, "invalid"),
])
async def test_an_invalid_event_is_refused_with_googles_reason(body: dict[str, Any],
                                                              reason: str) -> None:
    async with serving(CalendarMock, instance="calendar") as hosted:
        answer = await api(hosted.url, "POST", "/calendars/primary/events", json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["errors"][0]["reason"] == reason
        assert (await api(hosted.url, "GET", "/calendars/primary/events")).json()["items"] == []


async def test_list_filters_by_time_orders_by_start_and_pages() -> None:
    async with serving(CalendarMock, instance="calendar") as hosted:
        for hour in (15, 9, 12, 20):
            await api(hosted.url, "POST", "/calendars/primary/events", json=event(
                f"2026-03-02T{hour:02}:00:00Z", f"2026-03-02T{hour + 1:02}:00:00Z",
                summary=f"h{hour}"))
        window = {"timeMin": "2026-03-02T09:30:00Z", "timeMax": "2026-03-02T20:00:00Z",
                  "singleEvents": "true", "orderBy": "startTime", "maxResults": "2"}
        first = (await api(hosted.url, "GET", "/calendars/primary/events",
                           params=window)).json()
        assert [e["summary"] for e in first["items"]] == ["h9", "h12"]
        second = (await api(hosted.url, "GET", "/calendars/primary/events",
                            params={**window, "pageToken": first["nextPageToken"]})).json()
        assert [e["summary"] for e in second["items"]] == ["h15"]
        assert "nextPageToken" not in second
        unordered = await api(hosted.url, "GET", "/calendars/primary/events",
                              params={"orderBy": "startTime"})
        assert unordered.status_code == 400  # Google wants singleEvents=true for that
        naive = await api(hosted.url, "GET", "/calendars/primary/events",
                          params={"timeMin": "2026-03-02T09:30:00"})
        assert naive.status_code == 400  # timeMin needs an offset


async def test_free_busy_merges_clips_and_ignores_free_events_in_the_busy_scenario() -> None:
    async with serving(CalendarMock, instance="calendar", scenario="busy") as hosted:
        answer = await api(hosted.url, "POST", "/freeBusy", json={
            "timeMin": "2026-03-02T09:30:00Z", "timeMax": "2026-03-03T00:00:00Z",
            "items": [{"id": "primary"}, {"id": "nobody@anvil.test"}]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["kind"] == "calendar#freeBusy"
        # 09:00-10:00 clipped to the query; 14:00-15:30 Paris is 13:00-14:30Z; the
        # transparent 15:00-16:00 is free
        assert body["calendars"]["primary"]["busy"] == [
            {"start": "2026-03-02T09:30:00Z", "end": "2026-03-02T10:00:00Z"},
            {"start": "2026-03-02T13:00:00Z", "end": "2026-03-02T14:30:00Z"}]
        assert body["calendars"]["nobody@anvil.test"]["errors"][0]["reason"] == "notFound"
        await api(hosted.url, "POST", "/calendars/primary/events", json=event(
            "2026-03-02T14:00:00Z", "2026-03-02T17:00:00Z"))
        merged = (await api(hosted.url, "POST", "/freeBusy", json={
            "timeMin": "2026-03-02T12:00:00Z", "timeMax": "2026-03-02T18:00:00Z",
            "timeZone": "Europe/Paris", "items": [{"id": "primary"}]})).json()
        assert merged["calendars"]["primary"]["busy"] == [
            {"start": "2026-03-02T14:00:00+01:00", "end": "2026-03-02T18:00:00+01:00"}]
        allday = (await api(hosted.url, "POST", "/freeBusy", json={
            "timeMin": "2026-03-04T08:00:00Z", "timeMax": "2026-03-04T09:00:00Z",
            "items": [{"id": "primary"}]})).json()
        assert allday["calendars"]["primary"]["busy"] == [
            {"start": "2026-03-04T08:00:00Z", "end": "2026-03-04T09:00:00Z"}]
        empty = await api(hosted.url, "POST", "/freeBusy", json={
            "timeMin": "2026-03-02T10:00:00Z", "timeMax": "2026-03-02T10:00:00Z", "items": []})
        assert empty.status_code == 400
        assert empty.json()["error"]["errors"][0]["reason"] == "timeRangeEmpty"


async def _script(url: str) -> list[bytes]:
    """A fixed sequence of calls; the raw bytes of every answer."""
    out = []
    made = await api(url, "POST", "/calendars/primary/events", json=event(
        "2026-03-02T11:00:00+02:00", "2026-03-02T12:00:00+02:00", summary="x"))
    out.append(made.content)
    eid = made.json()["id"]
    for method, path, body in (
            ("PATCH", f"/calendars/primary/events/{eid}", {"summary": "y"}),
            ("POST", "/freeBusy", {"timeMin": "2026-03-02T00:00:00Z",
                                   "timeMax": "2026-03-03T00:00:00Z",
                                   "items": [{"id": "primary"}]}),
            ("GET", "/calendars/primary/events", None),
            ("DELETE", f"/calendars/primary/events/{eid}", None)):
        out.append((await api(url, method, path, json=body)).content)
    return out


async def test_the_same_calls_give_the_same_bytes_and_journal() -> None:
    runs = []
    for _ in range(2):
        async with serving(CalendarMock, instance="calendar", scenario="busy",
                           seed="same") as hosted:
            answers = await _script(hosted.url)
            journal = (await admin(hosted, "GET", "journal")).content
            runs.append((answers, journal))
    assert runs[0] == runs[1]
    async with serving(CalendarMock, instance="calendar", scenario="busy",
                       seed="other") as hosted:
        assert (await _script(hosted.url))[0] != runs[0][0][0]  # the seed makes the ids


async def test_seed_data_adds_calendars_and_events_and_bad_data_is_refused() -> None:
    async with serving(CalendarMock, instance="calendar") as hosted:
        seeded = await admin(hosted, "POST", "seed", json={"scenario": "rooms", "data": {
            "events": [{"calendarId": "room-a@anvil.test", **event(
                "2026-03-02T09:00:00Z", "2026-03-02T10:00:00Z")}]}})
        assert seeded.status_code == 200, seeded.text
        busy = (await api(hosted.url, "POST", "/freeBusy", json={
            "timeMin": "2026-03-02T00:00:00Z", "timeMax": "2026-03-03T00:00:00Z",
            "items": [{"id": "room-a@anvil.test"}, {"id": "room-b@anvil.test"}]})).json()
        assert [len(c["busy"]) for c in busy["calendars"].values()] == [1, 0]
        bad = await admin(hosted, "POST", "seed", json={"data": {"events": [event(
            "2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z")]}})
        assert bad.status_code == 400 and "time range is empty" in bad.text


def _google_flow(url: str) -> dict[str, Any]:
    """insert, get, list, patch, freeBusy, delete through Google's own client."""
    from google.oauth2.credentials import Credentials
    from googleapiclient.discovery import build  # type: ignore[import-untyped]
    from googleapiclient.errors import HttpError  # type: ignore[import-untyped]

    service = build("calendar", "v3", static_discovery=True,
                    credentials=Credentials("ya29.anvil-test"),  # type: ignore[no-untyped-call]
                    client_options={"api_endpoint": f"{url}/calendar/v3/"})
    try:
        return _google_calls(service, HttpError)
    finally:
        service.close()  # httplib2 keeps its connection open otherwise


def _google_calls(service: Any, HttpError: type[Exception]) -> dict[str, Any]:
    events = service.events()
    made = events.insert(calendarId="primary", body={
        "summary": "Room 1", "start": {"dateTime": "2026-03-02T11:00:00Z"},
        "end": {"dateTime": "2026-03-02T12:00:00Z"}}).execute()
    assert events.get(calendarId="primary", eventId=made["id"]).execute() == made
    listed = events.list(calendarId="primary", timeMin="2026-03-02T00:00:00Z",
                         timeMax="2026-03-03T00:00:00Z", singleEvents=True,
                         orderBy="startTime").execute()
    patched = events.patch(calendarId="primary", eventId=made["id"],
                           body={"summary": "Room 2"}).execute()
    busy = service.freebusy().query(body={
        "timeMin": "2026-03-02T00:00:00Z", "timeMax": "2026-03-03T00:00:00Z",
        "items": [{"id": "primary"}]}).execute()
    events.delete(calendarId="primary", eventId=made["id"]).execute()
    try:
        events.delete(calendarId="primary", eventId=made["id"]).execute()
        status = 0
    except HttpError as exc:
        status = exc.resp.status  # type: ignore[attr-defined]
    return {"listed": [e["summary"] for e in listed["items"]], "patched": patched["summary"],
            "busy": busy["calendars"]["primary"]["busy"], "second_delete": status}


async def test_googles_own_python_client_runs_the_flows_unchanged() -> None:
    pytest.importorskip("googleapiclient")
    async with serving(CalendarMock, instance="calendar", scenario="busy") as hosted:
        got = await anyio.to_thread.run_sync(_google_flow, hosted.url)
        calls = (await admin(hosted, "GET", "journal")).json()["entries"]
    assert got == {"listed": ["Team standup block", "Room 1", "Client review",
                              "Focus time (free)"],
                   "patched": "Room 2", "second_delete": 410,
                   "busy": [{"start": "2026-03-02T09:00:00Z", "end": "2026-03-02T10:00:00Z"},
                            {"start": "2026-03-02T11:00:00Z", "end": "2026-03-02T12:00:00Z"},
                            {"start": "2026-03-02T13:00:00Z", "end": "2026-03-02T14:30:00Z"}]}
    assert [(c["method"], c["path"].removeprefix(V3)) for c in calls][:2] == [
        ("POST", "/calendars/primary/events"), ("GET", f"/calendars/primary/events/"
                                                       f"{json.loads(calls[0]['response'])['id']}")]
    assert all(c["headers"]["authorization"] == "Bearer ***" for c in calls)
