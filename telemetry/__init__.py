"""anvil's telemetry: OpenTelemetry set-up, HTTP span helpers, span exporters.

It imports nothing of anvil's: the engine and the mocks build on it, never the
reverse. Spans leave through :class:`SinkExporter` as plain :class:`SpanData`
records to a sink the caller chooses (the engine's store, a test's list).
"""

from __future__ import annotations

from ._client import PEER as PEER
from ._client import client_tracing as client_tracing
from ._client import current_tracer as current_tracer
from ._client import traced as traced
from ._contract import DEFAULT_CONTRACT_BODY_LIMIT as DEFAULT_CONTRACT_BODY_LIMIT
from ._contract import VIOLATION_EVENT as VIOLATION_EVENT
from ._contract import VIOLATION_KIND as VIOLATION_KIND
from ._contract import VIOLATION_MESSAGE as VIOLATION_MESSAGE
from ._contract import CallRecord as CallRecord
from ._contract import Contract as Contract
from ._contract import Violation as Violation
from ._export import AttrValue as AttrValue
from ._export import SinkExporter as SinkExporter
from ._export import SpanData as SpanData
from ._export import SpanEvent as SpanEvent
from ._export import SpanSink as SpanSink
from ._export import readable_span as readable_span
from ._export import span_data as span_data
from ._http import BODY as BODY
from ._http import BODY_ENCODING as BODY_ENCODING
from ._http import BODY_SIZE as BODY_SIZE
from ._http import BODY_TRUNCATED as BODY_TRUNCATED
from ._http import DEFAULT_BODY_LIMIT as DEFAULT_BODY_LIMIT
from ._http import REDACTED as REDACTED
from ._http import REQUEST_EVENT as REQUEST_EVENT
from ._http import RESPONSE_EVENT as RESPONSE_EVENT
from ._http import SECRET_HEADERS as SECRET_HEADERS
from ._http import Capture as Capture
from ._http import TraceParent as TraceParent
from ._http import client_attributes as client_attributes
from ._http import client_span_name as client_span_name
from ._http import derived_span_id as derived_span_id
from ._http import error_type as error_type
from ._http import exception_event as exception_event
from ._http import method_attributes as method_attributes
from ._http import set_error as set_error
from ._http import set_response as set_response
from ._otlp import otlp_json as otlp_json
from ._setup import Tracing as Tracing
from ._setup import otlp_endpoint as otlp_endpoint

__all__ = [
    "PEER",
    "BODY",
    "BODY_ENCODING",
    "BODY_SIZE",
    "BODY_TRUNCATED",
    "DEFAULT_CONTRACT_BODY_LIMIT",
    "DEFAULT_BODY_LIMIT",
    "REDACTED",
    "REQUEST_EVENT",
    "RESPONSE_EVENT",
    "SECRET_HEADERS",
    "VIOLATION_EVENT",
    "VIOLATION_KIND",
    "VIOLATION_MESSAGE",
    "AttrValue",
    "CallRecord",
    "Capture",
    "Contract",
    "SinkExporter",
    "SpanData",
    "SpanEvent",
    "SpanSink",
    "TraceParent",
    "Tracing",
    "Violation",
    "client_attributes",
    "client_span_name",
    "client_tracing",
    "current_tracer",
    "derived_span_id",
    "error_type",
    "exception_event",
    "method_attributes",
    "otlp_endpoint",
    "otlp_json",
    "readable_span",
    "set_error",
    "set_response",
    "span_data",
    "traced",
]
