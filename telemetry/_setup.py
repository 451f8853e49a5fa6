"""OpenTelemetry set-up: one tracer provider whose spans go, batched, to a sink.

Nothing here touches OpenTelemetry's global provider: a :class:`Tracing` is an
object its owner passes around, so two pipelines (a run and a test, a run and a
benchmark) never see each other's spans.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Tracer

from ._export import SinkExporter, SpanData, SpanSink, readable_span

SCOPE = "anvil"


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
    """

    def __init__(
        self,
        sink: SpanSink,
        *,
        service_name: str = "anvil",
        max_queue_size: int = 1 << 16,
        max_export_batch_size: int = 1024,
        schedule_delay_ms: float = 500,
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
        self.scope = InstrumentationScope(SCOPE)
        self.tracer: Tracer = self.provider.get_tracer(SCOPE)

    def replay(self, spans: Iterable[SpanData]) -> int:
        """Export spans another process made (e.g. oracle items) like spans made here;
        return how many."""
        count = 0
        for data in spans:
            self.processor.on_end(readable_span(data, self.resource, self.scope))
            count += 1
        return count

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export every span ended so far; blocks (call it from a worker thread).
        False when the deadline passed first."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Flush and stop the export thread; the provider makes no more spans."""
        self.provider.shutdown()
