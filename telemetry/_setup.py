"""OpenTelemetry set-up: one tracer provider whose spans go, batched, to a sink, and to an
OTLP endpoint too when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` names one.

Nothing here touches OpenTelemetry's global provider: a :class:`Tracing` is an
object its owner passes around, so two pipelines (a run and a test, a run and a
benchmark) never see each other's spans.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Tracer

from ._export import SinkExporter, SpanData, SpanSink, readable_span

log = logging.getLogger("anvil.telemetry")

SCOPE = "anvil"
REMOTE_FLUSH_S = 5.0
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otlp_endpoint() -> str | None:
    """The OTLP endpoint the standard environment variables name, or None (then spans
    stay with the run only). A protocol other than http/protobuf is warned about: that
    is the one anvil speaks."""
    endpoint = next((os.environ[n] for n in _ENDPOINTS if os.environ.get(n)), None)
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if endpoint and protocol != "http/protobuf":
        log.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: anvil exports http/protobuf only",
                    protocol)
    return endpoint


class Tracing:
    """A tracer provider exporting to ``sink`` through a batch processor.

    Spans are queued when they end and exported on the processor's thread: ending a
    span costs the traced code microseconds, not a database write. :meth:`flush`
    before reading what the sink holds.

    Args:
        sink: receives every finished span (see :data:`SpanSink`).
        service_name: the ``service.name`` resource attribute.
        max_queue_size: spans waiting for export; past it OpenTelemetry drops spans,
            so it is sized for bursts of a whole run, not the SDK's default 2048.
        schedule_delay_ms: how long a span may wait before its batch is exported.
        otlp: also export over OTLP http/protobuf (a second batch processor); by
            default when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or its ``_TRACES_`` form) is set.
    """

    def __init__(
        self,
        sink: SpanSink,
        *,
        service_name: str = "anvil",
        max_queue_size: int = 1 << 16,
        max_export_batch_size: int = 1024,
        schedule_delay_ms: float = 500,
        otlp: bool | None = None,
    ) -> None:
        self.resource = Resource.create({"service.name": service_name})
        self.provider = TracerProvider(
            sampler=ALWAYS_ON, resource=self.resource, shutdown_on_exit=False,
            span_limits=SpanLimits(max_events=1024),
        )
        self.exporter = SinkExporter(sink)
        self.processor = BatchSpanProcessor(
            self.exporter, max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size, schedule_delay_millis=schedule_delay_ms,
        )
        self.provider.add_span_processor(self.processor)
        self.processors: list[BatchSpanProcessor] = [self.processor]
        if otlp is None:
            otlp = otlp_endpoint() is not None
        if otlp:
            # The exporter reads the standard OTEL_EXPORTER_OTLP_* variables itself
            # (endpoint, headers, timeout, compression, certificates).
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            remote = BatchSpanProcessor(
                OTLPSpanExporter(), max_queue_size=max_queue_size,
                max_export_batch_size=min(max_export_batch_size, 512),
                schedule_delay_millis=schedule_delay_ms,
            )
            self.provider.add_span_processor(remote)
            self.processors.append(remote)
        self.scope = InstrumentationScope(SCOPE)
        self.tracer: Tracer = self.provider.get_tracer(SCOPE)

    def replay(self, spans: Iterable[SpanData]) -> int:
        """Export spans another process made (e.g. oracle items) like spans made here;
        return how many."""
        count = 0
        for data in spans:
            span = readable_span(data, self.resource, self.scope)
            for processor in self.processors:
                processor.on_end(span)
            count += 1
        return count

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export every span ended so far; blocks (call it from a worker thread).
        False when the deadline passed first."""
        stored = self.processor.force_flush(int(timeout_s * 1000))
        for remote in self.processors[1:]:
            # An OTLP collector that is down must not hold each evaluation up for long.
            if not remote.force_flush(int(min(timeout_s, REMOTE_FLUSH_S) * 1000)):
                log.warning("OTLP export: spans not all sent within %ss", REMOTE_FLUSH_S)
        return stored

    def shutdown(self) -> None:
        """Flush and stop the export thread; the provider makes no more spans."""
        self.provider.shutdown()
