"""OTLP export: with the standard OTEL_EXPORTER_OTLP_ENDPOINT set, a real evaluation's spans
reach an independent OTLP/HTTP receiver (decoded here with opentelemetry-proto, not with
anvil's code) by the end of the evaluation; `anvil traces --export otlp-json` writes the
same spans as a bundle a viewer loads."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # type: ignore[import-untyped]
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue  # type: ignore[import-untyped]

from engine import Phase, Store, Task, Verdict
from engine._tracing import TraceRecorder
from tests.conftest import MakeSubmission, run_engine
from tests.engine.test_cli import anvil


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """A minimal OTLP/HTTP trace receiver on 127.0.0.1: (its endpoint, what it received)."""
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        received.append(ExportTraceServiceRequest.FromString(body))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", received
    finally:
        await runner.cleanup()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind)


def _spans(requests: list[ExportTraceServiceRequest]) -> dict[str, dict[str, Any]]:
    """Every span received, by hex span id: its trace, parent, name, kind and attributes."""
    found: dict[str, dict[str, Any]] = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    assert span.span_id.hex() not in found  # each span once
                    found[span.span_id.hex()] = {
                        "trace_id": span.trace_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "name": span.name, "kind": span.kind,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "events": [e.name for e in span.events],
                        "service": service.get("service.name"),
                    }
    return found


async def test_a_real_evaluations_spans_reach_an_otlp_receiver_and_the_export_file(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    async with otlp_receiver() as (endpoint, received):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        async with TraceRecorder(store) as recorder:
            (result,), store, _ = await run_engine(
                [(tiny_task, make_submission("fail_item"))], tmp_path, cache_dir,
                attachments=[recorder.attach])
            # flushed at the end of the evaluation, not only when the run closes
            got = _spans(received)
    assert result.verdict is Verdict.FAIL
    stored = {s.span_id: s for s in store.spans(result.evaluation_id)}
    assert set(got) == set(stored)
    for span_id, span in got.items():
        assert span["trace_id"] == stored[span_id].trace_id
        assert span["parent_id"] == stored[span_id].parent_id
        assert span["name"] == stored[span_id].name and span["service"] == "anvil"
    (root,) = [i for i, s in got.items() if s["parent_id"] is None]
    phases = {s["name"]: i for i, s in got.items() if s["parent_id"] == root}
    assert sorted(phases) == sorted(p.value for p in Phase)
    items = {i: s for i, s in got.items() if s["parent_id"] == phases["oracle"]}
    assert sorted(s["attributes"]["anvil.item.nodeid"].split("::")[1] for s in items.values()) \
        == ["test_health", "test_put_then_get", "test_slow_answers", "test_unknown_is_404"]
    clients = [s for s in got.values() if s["kind"] == 3]  # SPAN_KIND_CLIENT
    probes = [s for s in clients if s["attributes"].get("anvil.probe") == "health"]
    assert probes and all(p["parent_id"] == phases["health"] for p in probes)
    calls = [s for s in clients if s not in probes]
    assert len(calls) == 5 and all(c["parent_id"] in items for c in calls)
    assert len(stored) == 1 + len(phases) + len(items) + len(calls) + len(probes)
    for call in calls:  # the stable HTTP semantic conventions
        attributes = call["attributes"]
        assert attributes["http.request.method"] in ("GET", "PUT")
        assert attributes["url.full"].startswith("http://") and attributes["url.path"]
        assert attributes["server.address"] and isinstance(attributes["server.port"], int)
        assert attributes["http.response.status_code"] in (200, 404)
        assert call["events"][:2] == ["http.request", "http.response"]

    bundle_file = tmp_path / "out" / "trace.json"
    done = anvil("traces", result.evaluation_id, "--export", "otlp-json", str(bundle_file),
                 home=tmp_path, cache=cache_dir)
    assert done.returncode == 0, done.stderr
    assert f"wrote {len(stored)} spans (otlp-json)" in done.stderr
    bundle = json.loads(bundle_file.read_text())
    first = bundle["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first["traceId"]) == 32 and len(first["spanId"]) == 16  # OTLP/JSON: hex ids
    assert isinstance(first["kind"], int)
    # a reader of OTLP/JSON: hex ids back to bytes, then protobuf's own JSON parser
    loaded = ParseDict(_ids_as_base64(bundle), ExportTraceServiceRequest())
    exported = _spans([loaded])
    assert {k: {**v, "events": v["events"][:2]} for k, v in exported.items()} == {
        k: {**v, "events": v["events"][:2]} for k, v in got.items()}


def _ids_as_base64(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode()
                    if k in ("traceId", "spanId", "parentSpanId") else _ids_as_base64(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_ids_as_base64(v) for v in value]
    return value
