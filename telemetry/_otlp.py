"""Spans as an OTLP/JSON bundle: what ``anvil traces EVAL --export otlp-json FILE`` writes.

The bundle is an ``ExportTraceServiceRequest`` in the OTLP JSON encoding (the one an
OTLP/HTTP collector accepts with ``Content-Type: application/json``, and trace viewers
such as Jaeger's load from a file): OpenTelemetry's own protobuf encoder builds the
message, and the JSON differs from protobuf's canonical mapping where OTLP says so
(trace and span ids are hex strings, enums are integers).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ._export import SpanData, readable_span
from ._setup import SCOPE

_IDS = frozenset({"traceId", "spanId", "parentSpanId"})


def otlp_json(spans: Iterable[SpanData], service_name: str = "anvil") -> dict[str, Any]:
    """``spans`` as one OTLP/JSON ``ExportTraceServiceRequest`` (a dict ready for json)."""
    resource = Resource.create({"service.name": service_name})
    scope = InstrumentationScope(SCOPE)
    message = encode_spans([readable_span(s, resource, scope) for s in spans])
    bundle = MessageToDict(message, use_integers_for_enums=True,
                           preserving_proto_field_name=False)
    return dict(_hex_ids(bundle))


def _hex_ids(value: Any) -> Any:
    """Protobuf's JSON has bytes as base64; OTLP/JSON has ids as lower-case hex."""
    if isinstance(value, dict):
        return {k: (base64.b64decode(v).hex() if k in _IDS and isinstance(v, str)
                    else _hex_ids(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value
