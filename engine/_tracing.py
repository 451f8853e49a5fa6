"""Each evaluation's trace, made while it runs and stored with the run.

One trace per evaluation attempt::

    evaluation
    ├─ build           Docker API calls (the docker runtime)
    ├─ startup         Docker API calls; mock calls the service makes as it boots
    ├─ health          each health probe
    ├─ wiring          the mock instances' checks
    ├─ oracle
    │  ├─ <item>       made by the oracle process (engine/_oracle_plugin.py)
    │  │  ├─ GET /x    the recording proxy's span of each call the item sent
    │  │  └─ POST /v1/charges   a call the service made to a mock while the item ran
    │  └─ ...
    └─ teardown        Docker API calls

:class:`EvaluationTrace` is the :class:`~engine._lifecycle.Attachment` that makes it:
its ``phase`` hook opens each phase's span and makes it current (anvil's own HTTP
calls made in the phase become spans under it: see :func:`telemetry.client_tracing`),
it puts the recording proxy in front of the service at wiring, and at the end of
teardown it exports the items' spans, ends the root and flushes: once an evaluation
has its verdict, its whole trace is in the store.

:class:`TraceRecorder` is the run's side: one OpenTelemetry pipeline, each span stored
under the evaluation its trace id belongs to.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv.attributes.url_attributes import URL_PATH, URL_QUERY
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags

from telemetry import (
    REQUEST_EVENT,
    RESPONSE_EVENT,
    Capture,
    Contract,
    SpanData,
    TraceParent,
    Tracing,
    derived_span_id,
    method_attributes,
    set_error,
    set_response,
    traced,
)

from ._lifecycle import AttachmentFactory, Evaluation
from ._proxy import Proxy, ProxyFault, serve_proxy
from ._store import Store
from .types import Phase, Runtime

if TYPE_CHECKING:
    from mocks import ProviderCall

    from ._mocks import MockFabric

log = logging.getLogger("anvil.engine")

#: Span attributes of a call the service made to a mock.
MOCK_INSTANCE = "anvil.mock.instance"
MOCK_KIND = "anvil.mock.kind"
MOCK_FAULT = "anvil.mock.fault"
PHASE = "anvil.phase"


class EvaluationTrace:
    """One evaluation attempt's trace and recording proxy (see the module docstring)."""

    provides: frozenset[str] = frozenset()

    def __init__(self, evaluation: Evaluation, recorder: TraceRecorder) -> None:
        self.evaluation = evaluation
        self.recorder = recorder
        self.proxy: Proxy | None = None
        self.trace_id = ""
        self.root_id = ""
        self.spans_path = evaluation.workdir / "oracle-spans.jsonl"
        self._root: Span | None = None
        self._phase: Span | None = None  # the phase running now
        self._oracle_id = ""  # the oracle phase's span: the items' parent

    @asynccontextmanager
    async def phase(self, phase: Phase) -> AsyncIterator[None]:
        """The phase's span, current while the phase runs; the trace ends with teardown."""
        tracer = self.recorder.tracing.tracer
        if self._root is None:
            self._start_root()
        assert self._root is not None
        span = tracer.start_span(phase.value, context=trace.set_span_in_context(self._root),
                                 attributes={PHASE: phase.value})
        self._phase = span
        if phase is Phase.ORACLE:
            self._oracle_id = f"{span.get_span_context().span_id:016x}"
            if self.proxy is not None:  # calls made outside any item go under the phase
                self.proxy.parent_id = self._oracle_id
        try:
            with traced(tracer, span):
                yield
        except BaseException as exc:
            set_error(span, type(exc).__name__, str(exc) or type(exc).__name__)
            raise
        finally:
            span.end()
            if phase is Phase.TEARDOWN:
                with anyio.CancelScope(shield=True):
                    await self._finish()

    def _start_root(self) -> None:
        ev = self.evaluation
        self._root = self.recorder.tracing.tracer.start_span("evaluation", attributes={
            "anvil.run.id": ev.run_id, "anvil.evaluation.id": ev.evaluation_id,
            "anvil.task": ev.task.id, "anvil.submission": str(ev.submission),
        })
        context = self._root.get_span_context()
        self.trace_id, self.root_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        self.recorder.register(self.trace_id, ev.evaluation_id)

    async def startup(self, stack: AsyncExitStack, runtime: Runtime) -> Mapping[str, str]:
        return {}

    async def wiring(self, stack: AsyncExitStack, base_url: str) -> tuple[str, dict[str, str]]:
        self.spans_path.unlink(missing_ok=True)  # an earlier attempt's
        contract = await self.recorder.contract(self.evaluation.task.root / "openapi.yaml")
        self.proxy = await stack.enter_async_context(serve_proxy(
            base_url, self.recorder.tracing, self.recorder.capture,
            trace_id=self.trace_id or None, parent_id=self.root_id or None, contract=contract,
        ))
        env = {"ANVIL_SPANS": str(self.spans_path)}
        if self.trace_id:
            # The oracle parents its items under the root; they move under the oracle
            # phase when they are exported (its span does not exist yet).
            env["ANVIL_TRACEPARENT"] = TraceParent(self.trace_id, self.root_id).header()
        return self.proxy.url, env

    async def item_started(self, nodeid: str) -> None:
        if self.proxy is not None and self.trace_id:
            self.proxy.parent_id = derived_span_id(self.trace_id, nodeid)

    def mock_call(self, kind: str, call: ProviderCall) -> None:
        """A call the service made to mock ``kind``: a server span under the item that was
        running (else under the phase), with its bodies and headers as events."""
        if self._root is None:
            return
        if call.item is not None:
            parent = _remote(self.trace_id, derived_span_id(self.trace_id, call.item))
        else:
            parent = trace.set_span_in_context(self._phase or self._root)
        attributes: dict[str, Any] = {
            **method_attributes(call.method), URL_PATH: call.path,
            MOCK_INSTANCE: call.instance, MOCK_KIND: kind,
        }
        if call.query:
            attributes[URL_QUERY] = call.query
        if call.fault:
            attributes[MOCK_FAULT] = call.fault
        span = self.recorder.tracing.tracer.start_span(
            call.method, context=parent, kind=SpanKind.SERVER, attributes=attributes,
            start_time=call.start_ns)
        capture = self.recorder.capture
        span.add_event(REQUEST_EVENT, capture.request_event(
            call.headers, call.body[: capture.body_limit], len(call.body)),
            timestamp=call.start_ns)
        if call.status is None or call.response is None:
            set_error(span, "dropped", f"the mock dropped the connection (fault: {call.fault})")
        else:
            set_response(span, call.status, server=True)
            span.add_event(RESPONSE_EVENT, capture.response_event(
                call.response_headers, call.response[: capture.body_limit],
                len(call.response)), timestamp=call.end_ns)
        span.end(end_time=call.end_ns)

    def check(self) -> None:
        """Raise :class:`ProxyFault` when the proxy failed a call through its own fault.

        Raises:
            ProxyFault: the calls it failed (the verdict is anvil's ``error``).
        """
        if self.proxy is not None and self.proxy.faults:
            more = len(self.proxy.faults) - 1
            raise ProxyFault(f"recording proxy fault: {self.proxy.faults[0]}"
                             + (f" (and {more} more)" if more else ""))

    async def oracle_finished(self) -> None:
        """The oracle ended: its calls are checked against the contract from now on (while
        teardown goes on); a proxy fault during it makes the verdict ``error``."""
        if self.proxy is not None and self.proxy.checker is not None:
            self.proxy.checker.start()  # the proxy's close waits for it (teardown)
        self.check()

    async def _finish(self) -> None:
        """Export the items' spans and the root, then flush."""
        if self._root is None:
            return
        items = await anyio.to_thread.run_sync(_read_spans, self.spans_path, self.trace_id)
        if self._oracle_id:
            items = [s.under(self._oracle_id) if s.parent_id == self.root_id else s
                     for s in items]
        self.recorder.tracing.replay(items)
        if self.proxy is not None:
            self._root.set_attribute("anvil.proxy.calls", self.proxy.calls)
            checker = self.proxy.checker
            if checker is not None:
                self._root.set_attributes({
                    "anvil.contract.checked": checker.checked,
                    "anvil.contract.violations": checker.violations,
                    "anvil.contract.check_us": checker.check_ns // 1000,
                    "anvil.contract.unchecked": checker.unchecked,
                })
            if self.proxy.faults:
                self._root.set_attribute("anvil.proxy.faults", self.proxy.faults[:20])
        self._root.end()
        await anyio.to_thread.run_sync(self.recorder.flush)
        self.recorder.forget(self.trace_id)


def _remote(trace_id: str, span_id: str) -> Context:
    """A context whose parent is span ``span_id`` of ``trace_id``, made elsewhere."""
    return trace.set_span_in_context(NonRecordingSpan(SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED))))


def _read_spans(path: Path, trace_id: str) -> list[SpanData]:
    """The item spans the oracle process wrote (this attempt's only)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    spans = []
    for line in lines:
        try:
            span = SpanData.from_dict(json.loads(line))
        except ValueError:  # a line cut short by a killed oracle (JSONDecodeError too)
            continue
        if span.trace_id == trace_id:
            spans.append(span)
    return spans


class TraceRecorder:
    """Traces evaluations into the store: :meth:`attach` is the attachment factory.

    One OpenTelemetry pipeline for the whole run; each span goes to its evaluation's
    rows (the trace id says which evaluation, attempt by attempt).
    """

    def __init__(self, store: Store, capture: Capture | None = None, *,
                 check_requests: bool = False, **tracing: Any) -> None:
        self.store = store
        self.capture = capture or Capture()
        self.check_requests = check_requests  # the oracle's requests against the contract too
        self._evaluations: dict[str, str] = {}  # trace id -> evaluation id
        self._live: dict[str, EvaluationTrace] = {}  # evaluation id -> its attempt's trace
        self.unattributed = 0
        self.tracing = Tracing(self._sink, **tracing)
        self._contracts: dict[Path, Contract | None] = {}
        self._contract_lock = anyio.Lock()

    async def contract(self, path: Path) -> Contract | None:
        """The contract in ``path``, built once per run (building one takes tens of ms;
        checking a call with it, well under one)."""
        async with self._contract_lock:
            if path not in self._contracts:
                self._contracts[path] = await anyio.to_thread.run_sync(functools.partial(
                    Contract.load, path, requests=self.check_requests))
            return self._contracts[path]

    def attach(self, evaluation: Evaluation) -> EvaluationTrace:
        made = EvaluationTrace(evaluation, self)
        self._live[evaluation.evaluation_id] = made
        return made

    def observer(self, evaluation: Evaluation) -> Callable[[str, ProviderCall], None]:
        """What a mock fabric calls with each call the evaluation's service makes to a
        mock: it becomes a span of the evaluation's current attempt."""
        evaluation_id = evaluation.evaluation_id

        def observe(kind: str, call: ProviderCall) -> None:
            current = self._live.get(evaluation_id)
            if current is not None:
                current.mock_call(kind, call)

        return observe

    def register(self, trace_id: str, evaluation_id: str) -> None:
        self._evaluations[trace_id] = evaluation_id

    def forget(self, trace_id: str) -> None:
        evaluation_id = self._evaluations.pop(trace_id, None)
        if evaluation_id is not None:
            self._live.pop(evaluation_id, None)

    def flush(self) -> None:
        """Export every span ended so far (blocks: call it from a worker thread)."""
        if not self.tracing.flush(timeout_s=10):
            log.warning("spans not all exported within 10s")

    def _sink(self, spans: Sequence[SpanData]) -> None:
        rows = []
        for span in spans:
            evaluation_id = self._evaluations.get(span.trace_id)
            if evaluation_id is None:
                self.unattributed += 1
                continue
            rows.append(span_row(evaluation_id, span))
        self.store.write_spans(rows)

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.tracing.shutdown)

    async def __aenter__(self) -> TraceRecorder:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()


def span_row(evaluation_id: str, span: SpanData) -> dict[str, Any]:
    """A span as the columns of its :class:`SpanRecord` row."""
    return {
        "evaluation_id": evaluation_id, "span_id": span.span_id, "trace_id": span.trace_id,
        "parent_id": span.parent_id, "name": span.name, "kind": span.kind,
        "start_ns": span.start_ns, "end_ns": span.end_ns, "status": span.status,
        "status_message": span.status_message, "attributes": json.dumps(span.attributes),
        "events": json.dumps([{"name": e.name, "ts_ns": e.ts_ns, "attributes": e.attributes}
                              for e in span.events]),
    }


def default_attachments(store: Store, fabric: MockFabric | None = None,
                        capture: Capture | None = None, *,
                        check_requests: bool = False) -> list[AttachmentFactory]:
    """What every evaluation gets: its trace and recording proxy, spans to ``store``; with
    ``fabric``, its mock instances too, their calls traced; ``capture`` says how much of
    each body and header is kept (default: 8 KiB bodies, secrets redacted).

    The trace goes last among a run's attachments: the oracle's BASE_URL is the last
    one wiring returns, and the proxy belongs right in front of the service.
    """
    recorder = TraceRecorder(store, capture, check_requests=check_requests)
    if fabric is None:
        return [recorder.attach]
    fabric.observer = recorder.observer
    return [fabric.attach, recorder.attach]
