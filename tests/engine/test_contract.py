"""The contract check: every proxied call is checked against the task's openapi.yaml;
violations become span events that `anvil traces` shows next to the call, and the
check changes neither the bytes the caller gets nor the verdict."""

from __future__ import annotations

import io
import json
import shutil
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml
from aiohttp import web
from rich.console import Console

from engine import Store, Task, Verdict, load_task
from engine._proxy import _Checker, serve_proxy
from engine._traces import load_trace, waterfall
from engine._tracing import EvaluationTrace, TraceRecorder
from telemetry import (
    VIOLATION_EVENT,
    VIOLATION_KIND,
    VIOLATION_MESSAGE,
    CallRecord,
    Contract,
    SpanData,
    Tracing,
    Violation,
)
from tests.conftest import FIXTURES, MakeSubmission, run_engine

MESSAGE = {"type": "object", "required": ["date", "text"],
           "properties": {"date": {"type": "string"}, "text": {"type": "string"}}}
SPEC: dict[str, Any] = {
    "openapi": "3.0.3", "info": {"title": "t", "version": "1"},
    "servers": [{"url": "https://elsewhere.example/api"}],  # ignored: method and path match
    "paths": {"/messages": {
        "get": {"responses": {"200": {"description": "ok", "content": {"application/json": {
            "schema": {"type": "array", "items": MESSAGE}}}}}},
        "post": {"requestBody": {"required": True, "content": {"application/json": {
            "schema": {"type": "object", "required": ["text"],
                       "properties": {"text": {"type": "string"}}}}}},
            "responses": {"201": {"description": "made"}}},
    }},
}
JSON = [("Content-Type", "application/json")]


def call(method: str, path: str, status: int, body: Any = None, sent: Any = None) -> CallRecord:
    return CallRecord(
        method, path, (), JSON if sent is not None else (),
        json.dumps(sent).encode() if sent is not None else None, status, JSON,
        body if isinstance(body, bytes) else json.dumps(body).encode())


@pytest.fixture(scope="module")
def contract() -> Contract:
    return Contract(SPEC, requests=True)


def test_by_default_only_what_the_service_controls_is_checked() -> None:
    """A request is the oracle's (the same for every candidate, invalid on purpose in a
    validation item): by default it is not checked; the route and the response are."""
    default = Contract(SPEC)
    invalid_request = call("POST", "/messages", 201, b"", sent={"x": 1})
    assert default.check(invalid_request) == []
    assert [v.kind for v in Contract(SPEC, requests=True).check(invalid_request)] == ["request"]
    assert [(v.kind, v.message) for v in default.check(call("DELETE", "/messages", 405, b""))
            ] == [("route", "DELETE /messages is not in the contract")]
    bad = call("GET", "/messages", 200, [{"text": "a"}])
    assert default.inspect(bad) == (
        [Violation("response", "response to GET /messages: 'date' missing from item 0")],
        "/messages")


@pytest.mark.parametrize(("record", "expected"), [
    (call("GET", "/messages", 200, [{"date": "d", "text": "a"}]), []),
    (call("GET", "/messages", 200, [{"text": "a"}]),
     [("response", "response to GET /messages: 'date' missing from item 0")]),
    (call("GET", "/messages", 200, [{"date": "d", "text": "a"}, {"date": 5, "text": "b"}]),
     [("response", "response to GET /messages: 'date' of item 1: 5 is not of type 'string'")]),
    (call("GET", "/messages", 500, {}),
     [("response", "response to GET /messages: status 500 is not one the contract lists")]),
    (call("GET", "/messages", 200, b"<html>"),
     [("response", "response to GET /messages: data validation error: Failed to deserialize "
                   "value with application/json mimetype: <html>")]),
    (call("POST", "/messages", 201, b"", sent={"x": 1}),
     [("request", "request to POST /messages: 'text' missing from the body")]),
    (call("DELETE", "/messages", 405, b""), [("route", "DELETE /messages is not in the contract")]),
    (call("GET", "/nowhere", 404, b""), [("route", "GET /nowhere is not in the contract")]),
])
def test_violations_read_as_one_line_each(contract: Contract, record: CallRecord,
                                          expected: list[tuple[str, str]]) -> None:
    assert [(v.kind, v.message) for v in contract.check(record)] == expected


ITEM_SPEC: dict[str, Any] = {
    "openapi": "3.0.3", "info": {"title": "t", "version": "1"},
    "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    "security": [{"bearer": []}],
    "paths": {"/items/{key}": {
        "parameters": [{"name": "key", "in": "path", "required": True,
                        "schema": {"type": "string", "maxLength": 4}}],
        "get": {"responses": {"200": {"description": "ok", "content": {"application/json": {
            "schema": MESSAGE}}}}}}},
}


def test_a_remembered_check_says_what_a_fresh_one_says() -> None:
    """Outcomes are remembered by what the check reads; whatever it does not read (the
    token after its scheme, Host, Date) varies freely, and a remembered response message
    names this call's own path."""
    def get(key: str, body: Any, token: str = "Bearer t1", host: str = "a:1",
            date: str = "d1") -> CallRecord:
        return CallRecord("GET", f"/items/{key}", (),
                          [("Host", host), ("Authorization", token)], b"", 200,
                          [*JSON, ("Date", date)], json.dumps(body).encode())

    bad = {"text": "no date"}
    calls = [
        get("a", bad), get("a", bad, token="Bearer t2", host="b:2", date="d2"),  # the same
        get("b", bad),  # another path: its request is checked, its response remembered
        get("toolong", bad),  # the path parameter breaks its schema: the request differs
        get("a", bad, token="Basic eA=="),  # another scheme: the security check differs
        get("c", {"date": "x", "text": "y"}), get("d", {"date": "x", "text": "y"}),
    ]
    fresh = [Contract(ITEM_SPEC, memo=0, requests=True).check(c) for c in calls]
    memo = Contract(ITEM_SPEC, requests=True)
    assert [memo.check(c) for c in calls] == fresh
    # a's second request and response; the responses of b, toolong and a-Basic (the valid
    # responses of c and d need no memory: the fast path finds them valid)
    assert memo.remembered == 5
    assert memo.fast_hits == 2
    assert [v.message for v in fresh[2] if v.kind == "response"] == [
        "response to GET /items/b: 'date' missing from the body"]
    assert [v.kind for v in fresh[3]] == ["request", "response"]
    assert any(v.kind == "request" for v in fresh[4]) and not fresh[5]


EDGE_SPEC: dict[str, Any] = {
    "openapi": "3.1.0", "info": {"title": "t", "version": "1"},
    "components": {"schemas": {"Item": {
        "type": "object", "required": ["id", "at"], "additionalProperties": False,
        "properties": {"id": {"type": "integer", "minimum": 1},
                       "at": {"type": "string", "format": "date-time"},
                       "note": {"type": ["string", "null"], "maxLength": 3}}}}},
    "paths": {
        "/items/{id}": {"get": {"parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {
            "200": {"description": "ok", "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Item"}}}},
            "4XX": {"description": "no", "content": {"application/json": {
                "schema": {"type": "object", "required": ["detail"]}}}},
            "default": {"description": "else"}}}},
        "/items/mine": {"get": {"responses": {"200": {
            "description": "ok", "headers": {"X-Count": {"required": True, "schema": {
                "type": "integer"}}},
            "content": {"application/json": {"schema": {"type": "array"}}}}}}},
        "/{a}/{b}": {"post": {"parameters": [
            {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
            for n in "ab"], "responses": {"200": {"description": "ok", "content": {
            "application/problem+json": {"schema": {"type": "object"}}}}}}},
    },
}


@pytest.mark.parametrize("spec_path", [None, *sorted(Path("tasks").glob("*/openapi.yaml"))],
                         ids=lambda p: str(p) if p else "edge-cases")
def test_the_fast_path_never_changes_a_check(spec_path: Path | None) -> None:
    """Every response is checked with and without the fast path: same violations, same
    route. The bundled contracts get a valid-looking and a broken body per operation."""
    document = EDGE_SPEC if spec_path is None else yaml.safe_load(spec_path.read_text())
    fast, slow = Contract(document, memo=0), Contract(document, memo=0, fast=False)
    item = {"id": 1, "at": "2026-11-30T10:00:00Z", "note": None}
    bodies: list[Any] = [item, {**item, "note": "long"}, {**item, "id": 0},
                         {**item, "at": "yesterday"}, {**item, "extra": 1}, {"id": 1},
                         [], [item], {"detail": "x"}, {}, "text", None, 3]
    calls = []
    for path, item_ in (document.get("paths") or {}).items():
        concrete = path.replace("{", "x").replace("}", "")
        for method, operation in item_.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status in [*operation["responses"], "200", "404", "418"]:
                code = int(status) if status.isdigit() else 400 if status == "4XX" else 500
                for body in bodies:
                    for mime in ("application/json", "application/problem+json",
                                 "application/json; charset=utf-8", "text/plain"):
                        calls.append(CallRecord(
                            method.upper(), concrete, (), (), None, code,
                            [("Content-Type", mime)], json.dumps(body).encode()))
    calls += [call("GET", "/x/items/5", 200, item), call("GET", "/items/mine", 200, []),
              call("POST", "/solo", 200, {}), call("GET", "/items/5", 200, b"{not json")]
    assert len(calls) > 100
    for record in calls:
        assert fast.inspect(record) == slow.inspect(record), record
    assert fast.fast_hits > 0 and slow.fast_hits == 0


def test_a_response_whose_body_is_unknown_is_not_checked(contract: Contract) -> None:
    cut = CallRecord("GET", "/messages", (), (), None, 200, JSON, None)  # past the keep limit
    assert contract.check(cut) == []


def test_an_unusable_document_means_no_check_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / "openapi.yaml").write_text("openapi: 3.0.3\npaths: [not, a, mapping]\n")
    assert Contract.load(tmp_path / "openapi.yaml") is None
    assert Contract.load(tmp_path / "missing.yaml") is None


# -- through the proxy: same bytes, violations as span events -----------------------------


@asynccontextmanager
async def _upstream(body: bytes) -> AsyncIterator[str]:
    async def messages(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json",
                            headers={"X-Seen": request.headers.get("X-Probe", "")})

    app = web.Application()
    app.router.add_get("/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _fetch(url: str) -> tuple[int, bytes, dict[str, str]]:
    async with aiohttp.ClientSession(auto_decompress=False) as session, session.get(
            f"{url}/messages", headers={"X-Probe": "p"}) as response:
        body = await response.read()
        headers = {k: v for k, v in response.headers.items() if k not in ("Date",)}
        return response.status, body, headers


async def test_the_check_changes_no_byte_and_records_what_is_wrong() -> None:
    body = json.dumps([{"text": "no date"}] * 3).encode()
    spans: list[SpanData] = []

    def sink(batch: Sequence[SpanData]) -> None:
        spans.extend(batch)

    tracing = Tracing(sink)
    seen = []
    async with _upstream(body) as upstream:
        direct = await _fetch(upstream)
        for contract in (None, Contract(SPEC)):
            async with serve_proxy(upstream, tracing, contract=contract) as proxy:
                seen.append(await _fetch(proxy.url))
                answered = time.time_ns()
                assert proxy.checked == 0  # not while calls go on: once they are done
            assert proxy.checked == (1 if contract else 0)
    await anyio.to_thread.run_sync(tracing.shutdown)
    assert seen == [direct, direct]  # with and without the check: what the service sent
    assert direct[1] == body
    plain, checked = spans
    assert [e.name for e in plain.events] == ["http.request", "http.response"]
    violations = [e.attributes for e in checked.events if e.name == VIOLATION_EVENT]
    assert violations == [{
        VIOLATION_KIND: "response",
        VIOLATION_MESSAGE: f"response to GET /messages: 'date' missing from item {i}"}
        for i in range(3)]
    assert checked.attributes["http.response.status_code"] == 200  # a violation is no error
    assert checked.status == "unset"
    assert checked.end_ns <= answered  # the call's own end, not when it was checked


# -- a real evaluation: the verdict stays, the waterfall shows the violations --------------

TIGHT = {
    "/items/{key}": {
        "parameters": [{"name": "key", "in": "path", "required": True,
                        "schema": {"type": "string"}}],
        "get": {"responses": {
            "200": {"description": "the value", "content": {"application/json": {"schema": {
                "type": "object", "required": ["key", "value", "date"],
                "properties": {"key": {"type": "string"}, "value": {"type": "string"},
                               "date": {"type": "string"}}}}}},
            "404": {"description": "unknown key"}}},
        "put": {"requestBody": {"content": {"application/json": {"schema": {
            "type": "object", "properties": {"value": {"type": "string"}}}}}},
            "responses": {"200": {"description": "stored", "content": {"application/json": {
                "schema": {"type": "object", "required": ["stored"],
                           "properties": {"stored": {"type": "boolean"}}}}}}}},
    },
}


@pytest.fixture
def strict_task(tmp_path: Path) -> Task:
    """The tiny task with a contract the tiny service breaks (no 'date', no 'stored')."""
    root = tmp_path / "strict-task"
    shutil.copytree(FIXTURES / "tiny_task", root)
    document = yaml.safe_load((root / "openapi.yaml").read_text())
    document["paths"].update(TIGHT)
    (root / "openapi.yaml").write_text(yaml.safe_dump(document))
    return load_task(root)


async def test_an_evaluation_keeps_its_verdict_and_shows_its_violations(
    strict_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    proxies: list[EvaluationTrace] = []
    async with TraceRecorder(store) as recorder:
        def attach(ev: Any) -> EvaluationTrace:
            proxies.append(recorder.attach(ev))
            return proxies[-1]

        (result,), store, _ = await run_engine([(strict_task, make_submission("ok"))],
                                               tmp_path, cache_dir, attachments=[attach])
    assert result.verdict is Verdict.PASS, result.reason  # violations change no verdict
    (attached,) = proxies
    proxy = attached.proxy
    assert proxy is not None and proxy.checked == proxy.calls == 5  # every call checked
    spans = store.spans(result.evaluation_id)
    found = {(s.attributes_dict()["http.request.method"], e["attributes"][VIOLATION_MESSAGE])
             for s in spans if s.kind == "client" for e in s.events_list()
             if e["name"] == VIOLATION_EVENT}
    # one PUT and one GET that answered 200 (the 404s have no schema to break)
    assert sorted((method, m.split(": ", 1)[1]) for method, m in found) == [
        ("GET", "'date' missing from the body"), ("PUT", "'stored' missing from the body")]
    assert all(m.startswith(f"response to {method} /items/") for method, m in found)
    routes = sorted(s.attributes_dict().get("http.route", "") for s in spans
                    if s.kind == "client" and "anvil.peer" not in s.attributes_dict()
                    )  # the contract's path each call through the proxy matched
    assert routes == ["/health", "/items/{key}", "/items/{key}", "/items/{key}", "/slow"]
    (root,) = [s for s in spans if s.parent_id is None]
    measured = root.attributes_dict()
    assert measured["anvil.contract.checked"] == 5
    per_call_us = measured["anvil.contract.check_us"] / measured["anvil.contract.checked"]
    print(f"contract check: {per_call_us:.0f} us per call")
    assert per_call_us < 20_000  # a generous bound on a loaded 2-core machine
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(waterfall(load_trace(store, store.evaluation(result.evaluation_id)
                                       or pytest.fail("no evaluation"))))
    lines = console.export_text().splitlines()
    put = next(i for i, line in enumerate(lines) if "PUT /items/" in line)
    assert "✗ contract: response: 'stored' missing from the body" in lines[put + 1]


def test_checks_past_the_teardown_budget_leave_their_spans_ended_but_unchecked() -> None:
    spans: list[SpanData] = []
    tracing = Tracing(spans.extend)
    checker = _Checker(Contract(SPEC))
    for _ in range(3):
        checker.submit(call("GET", "/messages", 200, [{"text": "a"}]),
                       tracing.tracer.start_span("GET"))
    checker.close(budget_s=0)
    tracing.shutdown()
    assert (checker.checked, checker.unchecked) == (0, 3)
    assert len(spans) == 3 and not any(e.name == VIOLATION_EVENT for s in spans
                                       for e in s.events)
