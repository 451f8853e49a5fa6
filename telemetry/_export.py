"""Spans as plain records, and an exporter that hands them to any sink.

A :class:`SpanData` is what a finished span is once it leaves OpenTelemetry: ids as
hex strings, times in unix nanoseconds, attributes and events as JSON-friendly
values. Storage is someone else's business: :class:`SinkExporter` calls a sink (a
plain callable) with each batch, so a database, a file or a test list all fit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

log = logging.getLogger("anvil.telemetry")

#: A JSON-friendly attribute value (OpenTelemetry's scalars and lists of them).
AttrValue = str | bool | int | float | list[str] | list[bool] | list[int] | list[float]

_KINDS = {kind.name.lower(): kind for kind in SpanKind}
_STATUSES = {code.name.lower(): code for code in StatusCode}


@dataclass(frozen=True)
class SpanEvent:
    """Something that happened during a span (a request body, an exception)."""

    name: str
    ts_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanData:
    """A finished span as a plain record.

    ``kind`` is ``internal``, ``server``, ``client``, ``producer`` or ``consumer``;
    ``status`` is ``unset``, ``ok`` or ``error`` (then ``status_message`` says why).
    """

    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_id: str | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status: str = "unset"
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()

    def under(self, parent_id: str) -> SpanData:
        """This span moved under another parent (same trace)."""
        return replace(self, parent_id=parent_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id, "span_id": self.span_id, "parent_id": self.parent_id,
            "name": self.name, "kind": self.kind, "start_ns": self.start_ns,
            "end_ns": self.end_ns, "status": self.status,
            "status_message": self.status_message, "attributes": self.attributes,
            "events": [{"name": e.name, "ts_ns": e.ts_ns, "attributes": e.attributes}
                       for e in self.events],
        }

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> SpanData:
        """The inverse of :meth:`to_dict` (also reads records other processes wrote).

        Raises:
            ValueError: the record lacks a field or has one of the wrong kind.
        """
        try:
            return cls(
                trace_id=_hex(record["trace_id"], 32), span_id=_hex(record["span_id"], 16),
                parent_id=_hex(record["parent_id"], 16) if record.get("parent_id") else None,
                name=str(record["name"]), kind=_known(record.get("kind", "internal"), _KINDS),
                start_ns=int(record["start_ns"]), end_ns=int(record["end_ns"]),
                status=_known(record.get("status", "unset"), _STATUSES),
                status_message=str(record.get("status_message") or ""),
                attributes=dict(record.get("attributes") or {}),
                events=tuple(SpanEvent(str(e["name"]), int(e["ts_ns"]),
                                       dict(e.get("attributes") or {}))
                             for e in record.get("events") or ()),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a span record: {exc!r}") from None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


def _hex(value: Any, digits: int) -> str:
    text = str(value).lower()
    if len(text) != digits or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"{value!r} is not {digits} hex digits")
    return text


def _known(value: Any, names: Mapping[str, Any]) -> str:
    text = str(value).lower()
    if text not in names:
        raise ValueError(f"{value!r} is not one of {', '.join(names)}")
    return text


def _plain(value: Any) -> Any:
    """OpenTelemetry's attribute values (tuples, bounded lists) as JSON values."""
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value]


def span_data(span: ReadableSpan) -> SpanData:
    """A finished OpenTelemetry span as a :class:`SpanData`."""
    context = span.context
    assert context is not None  # a span the SDK ended always has one
    return SpanData(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=f"{span.parent.span_id:016x}" if span.parent else None,
        name=span.name,
        kind=span.kind.name.lower(),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        status=span.status.status_code.name.lower(),
        status_message=span.status.description or "",
        attributes={k: _plain(v) for k, v in (span.attributes or {}).items()},
        events=tuple(SpanEvent(e.name, e.timestamp,
                               {k: _plain(v) for k, v in (e.attributes or {}).items()})
                     for e in span.events),
    )


def readable_span(
    data: SpanData, resource: Resource | None = None,
    scope: InstrumentationScope | None = None,
) -> ReadableSpan:
    """A :class:`SpanData` made elsewhere (another process) as an OpenTelemetry span, so
    it goes through the same processors and exporters as the spans made here."""
    sampled = TraceFlags(TraceFlags.SAMPLED)
    trace_id = int(data.trace_id, 16)
    return ReadableSpan(
        name=data.name,
        context=SpanContext(trace_id, int(data.span_id, 16), False, sampled),
        parent=(SpanContext(trace_id, int(data.parent_id, 16), False, sampled)
                if data.parent_id else None),
        resource=resource,
        attributes=data.attributes,
        events=[Event(e.name, e.attributes, e.ts_ns) for e in data.events],
        kind=_KINDS[data.kind],
        status=Status(_STATUSES[data.status], data.status_message or None),
        start_time=data.start_ns,
        end_time=data.end_ns,
        instrumentation_scope=scope,
    )


#: Where exported spans go: called on the exporter's own thread, so it may block.
SpanSink = Callable[[Sequence[SpanData]], None]


class SinkExporter(SpanExporter):
    """Hands every exported batch to ``sink`` as :class:`SpanData` records.

    A sink that raises fails that batch only (OpenTelemetry logs and drops it): the
    traced work goes on. ``exported`` counts the spans the sink accepted.
    """

    def __init__(self, sink: SpanSink) -> None:
        self._sink = sink
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        records = [span_data(span) for span in spans]
        try:
            self._sink(records)
        except Exception:  # noqa: BLE001 - a sink fault must not reach the traced code
            log.exception("span sink failed; %d spans lost", len(records))
            self.failed += len(records)
            return SpanExportResult.FAILURE
        self.exported += len(records)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
