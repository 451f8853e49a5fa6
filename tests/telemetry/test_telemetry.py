"""telemetry/: its public surface, capture (truncation, redaction), HTTP attributes in the
stable semantic-convention names, trace context, and the export pipeline to a sink."""

from __future__ import annotations

import base64
import importlib
import subprocess
import sys
from collections.abc import Sequence

import pytest
from opentelemetry.trace import SpanKind

from engine._oracle_plugin import _item_span_id
from telemetry import (
    REDACTED,
    Capture,
    SinkExporter,
    SpanData,
    SpanEvent,
    TraceParent,
    Tracing,
    client_attributes,
    derived_span_id,
    method_attributes,
    readable_span,
    span_data,
)


def test_all_is_complete() -> None:
    module = importlib.import_module("telemetry")
    for name in module.__all__:
        assert getattr(module, name) is not None
    public = {n for n in vars(module) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(module, n)).__name__ == "module"}
    assert public - modules <= set(module.__all__) | {"annotations"}


def test_telemetry_imports_nothing_of_ours() -> None:
    """DESIGN.md: the engine and the mocks build on telemetry, never the reverse."""
    code = ("import sys, telemetry; print(','.join(m for m in sys.modules "
            "if m.split('.')[0] in ('engine', 'mocks', 'plugins')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""


def test_bodies_are_truncated_at_the_limit_and_keep_their_size() -> None:
    capture = Capture(body_limit=10)
    kept = capture.body(b"0123456789abcdef", 16)
    assert kept == {"anvil.body": "0123456789", "anvil.body.size": 16,
                    "anvil.body.truncated": True, "anvil.body.encoding": "utf-8"}
    assert Capture().body_limit == 8 * 1024
    whole = Capture().body(b"x" * 8192, 8192)
    assert whole["anvil.body.truncated"] is False and len(whole["anvil.body"]) == 8192


def test_a_character_cut_by_the_limit_is_dropped_and_bytes_become_base64() -> None:
    text = "ab€".encode()  # € is three bytes: the limit cuts it
    assert Capture(body_limit=4).body(text, len(text))["anvil.body"] == "ab"
    binary = bytes([0xFF, 0x00, 0x81])
    kept = Capture().body(binary, 3)
    assert kept["anvil.body.encoding"] == "base64"
    assert base64.b64decode(kept["anvil.body"]) == binary


@pytest.mark.parametrize("name", ["Authorization", "cookie", "Set-Cookie", "X-Api-Key",
                                  "X-Mock-Token", "x-auth-token", "Proxy-Authorization"])
def test_secret_headers_are_redacted(name: str) -> None:
    assert Capture().headers([(name, "s3cret"), ("Accept", "*/*")]) == {
        name.lower(): [REDACTED], "accept": ["*/*"]}


def test_header_events_use_the_convention_names_and_keep_repeats() -> None:
    event = Capture().request_event([("X-Dup", "1"), ("x-dup", "2")], b"", 0)
    assert event["http.request.header.x-dup"] == ["1", "2"]
    response = Capture().response_event([("Content-Type", "text/plain")], b"hi", 2)
    assert response["http.response.header.content-type"] == ["text/plain"]


def test_client_attributes_follow_the_stable_http_conventions() -> None:
    a = client_attributes("GET", "http://user:pw@127.0.0.1:8123/a/b?x=1")
    assert a == {
        "http.request.method": "GET",
        "url.full": f"http://{REDACTED}:{REDACTED}@127.0.0.1:8123/a/b?x=1",
        "url.scheme": "http", "url.path": "/a/b", "url.query": "x=1",
        "server.address": "127.0.0.1", "server.port": 8123,
        "network.protocol.version": "1.1",
    }
    assert client_attributes("GET", "http://127.0.0.1/")["server.port"] == 80
    assert method_attributes("PURGE") == {"http.request.method": "_OTHER",
                                          "http.request.method_original": "PURGE"}


@pytest.mark.parametrize("header, parsed", [
    ("00-" + "a" * 32 + "-" + "b" * 16 + "-01", TraceParent("a" * 32, "b" * 16, True)),
    ("00-" + "a" * 32 + "-" + "b" * 16 + "-00", TraceParent("a" * 32, "b" * 16, False)),
    ("00-" + "0" * 32 + "-" + "b" * 16 + "-01", None),  # all-zero trace id
    ("ff-" + "a" * 32 + "-" + "b" * 16 + "-01", None),  # forbidden version
    ("00-" + "A" * 32 + "-" + "b" * 16 + "-01", None),  # upper case is invalid
    ("garbage", None), (None, None),
])
def test_traceparent_is_parsed_per_w3c(header: str | None, parsed: TraceParent | None) -> None:
    assert TraceParent.parse(header) == parsed
    if parsed is not None and parsed.sampled:
        assert parsed.header() == header


def test_the_oracle_plugin_derives_the_same_item_span_ids() -> None:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    for nodeid in ("test_a.py::test_x", "test_b.py::test_y[param-1]", "é::ü"):
        assert _item_span_id(trace_id, nodeid) == derived_span_id(trace_id, nodeid)
        assert len(derived_span_id(trace_id, nodeid)) == 16


def test_span_data_survives_a_trip_through_opentelemetry() -> None:
    data = SpanData(
        trace_id="1" * 32, span_id="2" * 16, parent_id="3" * 16, name="test_x", kind="internal",
        start_ns=10, end_ns=25, status="error", status_message="assert 1 == 2",
        attributes={"anvil.item.outcome": "failed", "n": 3, "tags": ["a", "b"]},
        events=(SpanEvent("exception", 20, {"exception.message": "assert 1 == 2"}),),
    )
    assert span_data(readable_span(data)) == data
    assert SpanData.from_dict(data.to_dict()) == data
    with pytest.raises(ValueError):
        SpanData.from_dict({**data.to_dict(), "span_id": "xyz"})
    with pytest.raises(ValueError):
        SpanData.from_dict({"name": "no ids"})


def test_tracing_exports_every_span_once_to_its_sink_after_flush() -> None:
    batches: list[list[SpanData]] = []

    def sink(spans: Sequence[SpanData]) -> None:
        batches.append(list(spans))

    tracing = Tracing(sink, schedule_delay_ms=60_000)  # only flush exports
    with tracing.tracer.start_as_current_span("root"):
        for i in range(300):
            tracing.tracer.start_span(f"call-{i}", kind=SpanKind.CLIENT).end()
    replayed = tracing.replay([SpanData(trace_id="4" * 32, span_id="5" * 16, parent_id=None,
                                        name="item", kind="internal", start_ns=1, end_ns=2)])
    assert replayed == 1
    assert batches == []  # ending a span queues it: the traced code never waits on the sink
    assert tracing.flush()
    names = [s.name for batch in batches for s in batch]
    assert sorted(names) == sorted(["root", "item", *(f"call-{i}" for i in range(300))])
    (root,) = [s for b in batches for s in b if s.name == "root"]
    calls = [s for b in batches for s in b if s.name.startswith("call-")]
    assert {s.parent_id for s in calls} == {root.span_id} and calls[0].kind == "client"
    tracing.shutdown()


def test_a_failing_sink_loses_its_batch_and_nothing_else() -> None:
    def broken(spans: Sequence[SpanData]) -> None:
        raise OSError("disk full")

    exporter = SinkExporter(broken)
    tracing = Tracing(broken)
    tracing.tracer.start_span("x").end()
    assert tracing.flush()  # no exception reaches the traced code
    tracing.shutdown()
    one = readable_span(SpanData(trace_id="6" * 32, span_id="7" * 16, parent_id=None,
                                 name="lost", kind="client", start_ns=1, end_ns=2))
    assert exporter.export([one]).name == "FAILURE"
    assert (exporter.failed, exporter.exported) == (1, 0)
