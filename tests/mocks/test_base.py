"""The fabric every mock is built on: determinism, the admin surface and its token, faults as
a real client sees them, the bounded journal."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

import pytest
import requests
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mocks import Hosted, MockContext, MockService
from mocks._base import EPOCH, Context
from tests.mocks.conftest import admin, call, serving


async def _session(hosted: Hosted) -> list[Any]:
    """A fixed sequence of provider and admin calls; what a client sees of each."""
    seen: list[Any] = []
    token = {"X-Mock-Token": hosted.token}
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/echoes", {"json": {"n": 1, "nested": {"b": 2, "a": 1}}}),
        ("GET", "/v1/echoes", {}),
        ("POST", "/__mock__/clock/advance", {"json": {"seconds": 90}, "headers": token}),
        ("POST", "/v1/echoes", {"data": "not json", "headers": {"Authorization": "Bearer sk_x"}}),
        ("POST", "/v1/notify", {"data": b"ping"}),
        ("POST", "/__mock__/faults", {"json": {"path": "/v1/echoes", "malformed": True,
                                               "times": 1}, "headers": token}),
        ("POST", "/v1/echoes", {"json": [1, 2, 3]}),
        ("GET", "/v1/echoes/nope", {}),
        ("GET", "/v1/echoes", {"params": {"b": "2", "a": "1"}}),
    ]
    for method, path, kwargs in steps:
        answer = await call(method, hosted.url + path, **kwargs)
        seen.append((answer.status_code, sorted(answer.headers.items()), answer.content))
    journal = await admin(hosted, "GET", "journal")
    seen.append(journal.content)
    return seen


async def test_same_requests_give_byte_identical_answers_and_journal() -> None:
    async with serving(seed="s1") as first, serving(seed="s1") as second:
        assert first.url != second.url
        one, two = await _session(first), await _session(second)
    assert one == two
    ids = re.findall(rb'"id":"(echo_[^"]+)"', one[0][2])
    assert ids and all(re.fullmatch(rb"echo_[0-9A-Za-z]{24}", i) for i in ids)
    async with serving(seed="s2") as other:
        three = await _session(other)
    assert three[0][2] != one[0][2]  # another seed, other ids


def test_the_context_is_a_mock_context_and_its_ids_are_a_pure_function() -> None:
    one, two = Context("s", "payment"), Context("s", "payment")
    assert isinstance(one, MockContext)
    assert [one.new_id("pi") for _ in range(3)] == [two.new_id("pi") for _ in range(3)]
    assert Context("s", "payment").new_id("pi") != Context("s", "other").new_id("pi")
    assert one.now() == EPOCH and one.advance(10) == EPOCH + 10


async def test_answers_carry_no_wall_clock_and_the_virtual_clock_moves_only_when_told() -> None:
    async with serving() as hosted:
        created = (await call("POST", hosted.url + "/v1/echoes", json={})).json()
        assert created["created"] == EPOCH
        assert (await admin(hosted, "GET", "clock")).json() == {"now": EPOCH}
        moved = await admin(hosted, "POST", "clock/advance", json={"seconds": 3600})
        assert moved.json() == {"now": EPOCH + 3600}
        later = (await call("POST", hosted.url + "/v1/echoes", json={})).json()
        assert later["created"] == EPOCH + 3600
        back = await admin(hosted, "POST", "clock/advance", json={"seconds": -1})
        assert back.status_code == 400
        answer = await call("GET", hosted.url + "/v1/echoes")
        assert "date" not in answer.headers and "server" not in answer.headers


async def test_the_admin_surface_needs_this_instance_token() -> None:
    async with serving(seed="a") as hosted, serving(seed="b") as other:
        journal = hosted.url + "/__mock__/journal"
        assert (await call("GET", journal)).status_code == 401
        assert (await call("GET", journal, headers={"X-Mock-Token": "wrong"})).status_code == 401
        stolen = {"X-Mock-Token": other.token}  # another evaluation's token
        assert (await call("GET", journal, headers=stolen)).status_code == 401
        assert (await call("POST", hosted.url + "/__mock__/reset")).status_code == 401
        bearer = {"Authorization": f"Bearer {hosted.token}"}
        assert (await call("GET", journal, headers=bearer)).status_code == 200
        assert (await admin(hosted, "GET", "journal")).status_code == 200
        contract = await call("GET", hosted.url + "/__mock__/openapi.json")  # public, like docs
        assert contract.status_code == 200 and "/v1/echoes" in contract.json()["paths"]


async def test_a_status_fault_answers_without_running_the_mock() -> None:
    async with serving() as hosted:
        armed = await admin(hosted, "POST", "faults",
                            json={"method": "POST", "path": "/v1/echoes", "status": 503,
                                  "times": 1})
        assert armed.status_code == 200 and armed.json()["faults"][0]["status"] == 503
        answer = await call("POST", hosted.url + "/v1/echoes", json={"x": 1})
        assert answer.status_code == 503
        assert answer.json() == {"error": {"type": "mock_fault",
                                           "message": "injected fault: status 503"}}
        assert (await call("GET", hosted.url + "/v1/echoes")).json()["data"] == []  # not stored
        assert (await call("POST", hosted.url + "/v1/echoes", json={})).status_code == 201
        custom = {"error": {"type": "api_error", "message": "try later"}}
        await admin(hosted, "POST", "faults", json={"status": 429, "body": custom})
        answer = await call("GET", hosted.url + "/v1/echoes")
        assert answer.status_code == 429 and answer.json() == custom


async def test_a_latency_fault_delays_the_answer() -> None:
    async with serving() as hosted:
        await admin(hosted, "POST", "faults", json={"path": "/v1/echoes", "latency": 0.6,
                                                    "times": 1})
        started = time.monotonic()
        answer = await call("GET", hosted.url + "/v1/echoes")
        assert time.monotonic() - started >= 0.6
        assert answer.status_code == 200
        with pytest.raises(requests.Timeout):  # a client deadline shorter than the latency
            await admin(hosted, "POST", "faults", json={"latency": 5, "times": 1})
            await call("GET", hosted.url + "/v1/echoes", timeout=0.3)


async def test_a_drop_fault_commits_the_effect_then_closes_the_connection() -> None:
    async with serving() as hosted:
        await admin(hosted, "POST", "faults", json={"method": "POST", "drop": True, "times": 1})
        with pytest.raises(requests.ConnectionError):
            await call("POST", hosted.url + "/v1/echoes", json={"committed": True})
        stored = (await call("GET", hosted.url + "/v1/echoes")).json()["data"]
        assert [e["body"] for e in stored] == [{"committed": True}]
        (entry,) = (await admin(hosted, "GET", "journal", params={"method": "POST"})).json()[
            "entries"]
        assert entry["fault"] == "drop" and entry["status"] is None and entry["response"] is None


async def test_a_malformed_fault_sends_half_a_body_after_committing() -> None:
    async with serving() as hosted:
        await admin(hosted, "POST", "faults", json={"path": "/v1/echoes", "malformed": True,
                                                    "times": 1})
        answer = await call("POST", hosted.url + "/v1/echoes", json={"text": "hello world"})
        assert answer.status_code == 201
        assert answer.headers["content-length"] == str(len(answer.content))
        with pytest.raises(ValueError):
            json.loads(answer.content)
        stored = (await call("GET", hosted.url + "/v1/echoes")).json()["data"]
        assert [e["body"] for e in stored] == [{"text": "hello world"}]


async def test_faults_hit_matching_calls_for_the_next_n_then_disarm() -> None:
    async with serving() as hosted:
        await admin(hosted, "POST", "faults", json={"method": "GET", "path": "/v1/echoes/*",
                                                    "status": 500, "times": 2})
        assert (await call("POST", hosted.url + "/v1/echoes", json={})).status_code == 201
        assert (await call("GET", hosted.url + "/v1/echoes")).status_code == 200  # no match
        statuses = [(await call("GET", hosted.url + "/v1/echoes/x")).status_code
                    for _ in range(3)]
        assert statuses == [500, 500, 404]
        assert (await admin(hosted, "GET", "faults")).json() == {"faults": []}
        await admin(hosted, "POST", "faults", json={"status": 502})  # every call, until cleared
        assert (await call("GET", hosted.url + "/v1/echoes")).status_code == 502
        await admin(hosted, "DELETE", "faults")
        assert (await call("GET", hosted.url + "/v1/echoes")).status_code == 200


async def test_a_fault_an_item_armed_ends_with_that_item() -> None:
    """Item A arms a one-shot fault its service never triggers; item B's call is not hit.
    A fault armed outside any item (by a scenario, before the oracle) stays."""
    async with serving() as hosted:
        await admin(hosted, "POST", "faults", json={"path": "/v1/notify", "status": 500})
        await admin(hosted, "POST", "item", json={"nodeid": "t.py::a"})
        await admin(hosted, "POST", "faults", json={"method": "POST", "path": "/v1/echoes",
                                                    "status": 503, "times": 1})
        await admin(hosted, "POST", "item", json={"nodeid": "t.py::b"})
        assert (await call("POST", hosted.url + "/v1/echoes", json={})).status_code == 201
        assert (await call("POST", hosted.url + "/v1/notify", json={})).status_code == 500


async def _pattern(seed: str) -> list[int]:
    async with serving(seed=seed) as hosted:
        await admin(hosted, "POST", "faults", json={"status": 503, "fraction": 0.5})
        return [(await call("GET", hosted.url + "/v1/echoes")).status_code for _ in range(24)]


async def test_a_fraction_fault_is_a_seeded_reproducible_choice() -> None:
    first, again, other = await _pattern("s"), await _pattern("s"), await _pattern("t")
    assert first == again
    assert 503 in first and 200 in first
    assert other != first


@pytest.mark.parametrize("spec", [
    {"status": 503, "colour": "red"},
    {"status": 503, "fraction": 1.5},
    {"status": 99},
    {"path": "/v1/*"},
    {"latency": -1},
    {"status": 500, "times": 0},
    {"status": "teapot"},
    {"drop": "false"},
])
async def test_invalid_faults_are_refused(spec: dict[str, Any]) -> None:
    async with serving() as hosted:
        answer = await admin(hosted, "POST", "faults", json=spec)
        assert answer.status_code == 400 and answer.json()["error"]
        assert (await admin(hosted, "GET", "faults")).json() == {"faults": []}


async def test_the_journal_is_bounded_and_counts_what_it_dropped() -> None:
    async with serving(journal_entries=5, body_limit=10) as hosted:
        for n in range(8):
            await call("POST", hosted.url + "/v1/echoes", json={"n": n, "pad": "x" * 20})
        journal = (await admin(hosted, "GET", "journal")).json()
        assert journal["dropped"] == 3
        assert [e["seq"] for e in journal["entries"]] == [4, 5, 6, 7, 8]
        body = journal["entries"][0]["body"]
        assert body.startswith('{"n": 3, ') and body.endswith(" more bytes]")
    async with serving(journal_bytes=2000) as hosted:
        for n in range(20):
            await call("POST", hosted.url + "/v1/echoes", json={"n": n, "pad": "y" * 100})
        journal = (await admin(hosted, "GET", "journal")).json()
        assert journal["dropped"] > 0
        assert len(json.dumps(journal["entries"])) <= 2000 + 100
        assert journal["entries"][-1]["seq"] == 20


async def test_the_journal_can_be_off() -> None:
    async with serving(journal_entries=0) as hosted:
        await call("POST", hosted.url + "/v1/echoes", json={})
        assert (await admin(hosted, "GET", "journal")).json() == {"dropped": 1, "entries": []}


async def test_the_journal_redacts_secrets_and_filters() -> None:
    async with serving() as hosted:
        await call("POST", hosted.url + "/v1/echoes?x=1", json={},
                   headers={"Authorization": "Bearer sk_test_abcdef", "Cookie": "s=secret"})
        await call("GET", hosted.url + "/v1/echoes/none")
        await call("POST", hosted.url + "/v1/notify", data=b"hi")
        entries = (await admin(hosted, "GET", "journal")).json()["entries"]
        first = entries[0]
        assert first["headers"]["authorization"] == "Bearer sk_test_***"
        assert first["headers"]["cookie"] == "***"
        assert "host" not in first["headers"] and first["query"] == "x=1"
        assert "sk_test_abcdef" not in json.dumps(entries)
        assert [e["kind"] for e in entries] == ["request", "request", "event", "request"]
        assert entries[2]["event"] == {"type": "notified", "body": "hi"}
        posts = (await admin(hosted, "GET", "journal", params={"method": "post"})).json()
        assert [e["path"] for e in posts["entries"]] == ["/v1/echoes", "/v1/notify"]
        globbed = (await admin(hosted, "GET", "journal", params={"path": "/v1/echoes*"})).json()
        assert [e["path"] for e in globbed["entries"]] == ["/v1/echoes", "/v1/echoes/none"]
        since = (await admin(hosted, "GET", "journal", params={"since": 2})).json()
        assert [e["seq"] for e in since["entries"]] == [3, 4]
        assert all(not e["path"].startswith("/__mock__") for e in entries if "path" in e)


async def test_calls_belong_to_the_item_running_when_they_came() -> None:
    async with serving() as hosted:
        await call("GET", hosted.url + "/v1/echoes")
        await admin(hosted, "POST", "item", json={"nodeid": "t.py::first"})
        await call("GET", hosted.url + "/v1/echoes")
        hosted.app.mark_item("t.py::second")  # what the engine does, in process
        await call("GET", hosted.url + "/v1/echoes")
        entries = (await admin(hosted, "GET", "journal")).json()["entries"]
        assert [e["item"] for e in entries] == [None, "t.py::first", "t.py::second"]
        mine = (await admin(hosted, "GET", "journal", params={"item": "t.py::first"})).json()
        assert [e["seq"] for e in mine["entries"]] == [2]


async def test_reset_and_seed_give_a_fresh_deterministic_state() -> None:
    async with serving(scenario="preloaded") as hosted:
        listed = (await call("GET", hosted.url + "/v1/echoes")).json()["data"]
        assert [e["body"] for e in listed] == [{"preloaded": True}]
        first_id = listed[0]["id"]
        await call("POST", hosted.url + "/v1/echoes", json={"more": 1})
        await admin(hosted, "POST", "clock/advance", json={"seconds": 5})
        await admin(hosted, "POST", "faults", json={"status": 500})
        assert (await admin(hosted, "POST", "reset")).status_code == 200
        listed = (await call("GET", hosted.url + "/v1/echoes")).json()["data"]
        assert [e["id"] for e in listed] == [first_id]  # the same ids again, clock at EPOCH
        assert listed[0]["created"] == EPOCH
        journal = (await admin(hosted, "GET", "journal")).json()
        assert journal["entries"] == [journal["entries"][0]] and journal["entries"][0]["seq"] == 1
        seeded = await admin(hosted, "POST", "seed",
                             json={"scenario": "default", "data": {"echoes": [{"a": 1}]}})
        assert seeded.json() == {"seeded": "default"}
        listed = (await call("GET", hosted.url + "/v1/echoes")).json()["data"]
        assert [e["body"] for e in listed] == [{"a": 1}]
        unknown = await admin(hosted, "POST", "seed", json={"scenario": "nope"})
        assert unknown.status_code == 400 and "nope" in unknown.json()["error"]
        assert len((await call("GET", hosted.url + "/v1/echoes")).json()["data"]) == 1


class _Broken:
    """A mock with a bug: its route raises."""

    kind = "broken"
    scenarios: Sequence[str] = ("default",)

    def __init__(self, ctx: MockContext) -> None:
        self.ctx = ctx

    def routes(self) -> Sequence[BaseRoute]:
        async def boom(_request: Request) -> Response:
            raise RuntimeError("bug in the mock")

        async def fine(_request: Request) -> Response:
            return Response(b"fine")

        return [Route("/boom", boom), Route("/fine", fine)]

    def seed(self, scenario: str, data: Any = None) -> None: ...

    def openapi(self) -> dict[str, Any]:
        return {"openapi": "3.1.0", "info": {"title": "b", "version": "1"}, "paths": {}}


async def test_a_bug_in_a_mock_is_a_500_and_the_instance_goes_on() -> None:
    assert isinstance(_Broken(None), MockService)  # type: ignore[arg-type]
    async with serving(_Broken, instance="broken") as hosted:
        answer = await call("GET", hosted.url + "/boom")
        assert answer.status_code == 500 and "bug in the mock" in answer.json()["error"]["message"]
        assert (await call("GET", hosted.url + "/fine")).content == b"fine"
