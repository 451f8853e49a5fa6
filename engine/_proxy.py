"""The recording proxy: anvil's HTTP proxy in front of the service under test.

The oracle's ``BASE_URL`` points here. Every call is forwarded to the service as it
came (method, raw path and query string, headers in order and case, body bytes, the
request's framing: ``Content-Length`` or chunked) and answered as the service answered
(status and reason, headers, body streamed chunk by chunk as it arrives), and each
call is one span of the evaluation's trace, nested under the oracle item that made it.

What the proxy changes, on purpose:

* connection-management headers (``Connection``, ``Keep-Alive``, ``Transfer-Encoding``,
  ``TE``, ``Trailer``, ``Upgrade``, ``Proxy-Connection``, and what ``Connection``
  names) are hop-by-hop: each side of the proxy has its own connection. Every
  forwarded call has a fresh connection to the service, so a keep-alive connection
  the service closed while idle can never fail a call (uvicorn closes them after 5 s);
* the ``traceparent`` anvil's oracle plugin adds (it names the evaluation's trace) is
  removed again: the service sees what the oracle sent. A ``traceparent`` of another
  trace is the oracle's own and is forwarded;
* ``Expect: 100-continue`` is answered by the proxy, which then sends the whole body;
  protocol upgrades (WebSocket) are not relayed;
* three things aiohttp does that no oracle written with ``requests`` meets: a request
  that repeats a singleton header (``Content-Type``, ``Host``, ``User-Agent``...) is
  refused with 400 (aiohttp's guard against request smuggling; requests cannot send
  one), an empty query string (``/path?``) arrives as ``/path``, and a
  DELETE/POST/PUT/PATCH sent without any framing header arrives with
  ``Content-Length: 0`` (requests sends that).

Whose fault a failed call is:

* the service's (it refuses or resets the connection, answers malformed HTTP, cuts
  its answer short): the caller sees what it would have seen without the proxy, the
  connection closes, and the span records ``error.type``;
* anvil's (the proxy cannot open a socket: too many open files, no free port; a bug
  in the proxy): the call is answered ``502`` with ``X-Anvil-Proxy-Fault``, the fault
  is kept in :attr:`Proxy.faults` and :meth:`engine._tracing.EvaluationTrace.check` raises
  :class:`ProxyFault`, a transient :class:`HarnessError`: the verdict is ``error``
  (retried), never the candidate's ``fail``.
"""

from __future__ import annotations

import errno
import logging
import math
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import anyio
from aiohttp import web
from multidict import CIMultiDict
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.semconv.attributes.http_attributes import HTTP_ROUTE
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from yarl import URL

from telemetry import (
    DEFAULT_CONTRACT_BODY_LIMIT,
    REQUEST_EVENT,
    RESPONSE_EVENT,
    VIOLATION_EVENT,
    CallRecord,
    Capture,
    Contract,
    TraceParent,
    Tracing,
    client_attributes,
    client_span_name,
    error_type,
    set_error,
    set_response,
)

from ._errors import HarnessError

log = logging.getLogger("anvil.engine")

FAULT_HEADER = "X-Anvil-Proxy-Fault"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                        "transfer-encoding", "upgrade"})
# aiohttp adds these to requests and responses unless told not to; the proxy adds nothing.
_CLIENT_AUTO = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
_SERVER_AUTO = ("Content-Type", "Date", "Server")
# Socket errors that are this machine's, not the service's: no descriptor, no port, no memory.
_HARNESS_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM,
                             errno.EADDRNOTAVAIL})
_HEADER_LIMIT = 65536  # what Python's http.server accepts per line: the proxy refuses no less
#: At teardown, checks still queued get this long; calls past it stay unchecked.
CHECK_BUDGET_S = 5.0
_SHUTDOWN_S = 1.0  # calls still in flight at teardown (a killed oracle's) get this long


class ProxyFault(HarnessError):
    """The recording proxy failed a call through no fault of the service (it could not
    open a socket, or a bug of its own): the evaluation is anvil's ``error``."""


class _Relayed(web.StreamResponse):
    """The service's answer as it was: aiohttp's own defaults (``Content-Type:
    application/octet-stream``, ``Date``, ``Server``) are not added, and a
    ``Content-Length`` the service put on a bodiless answer (304) is kept."""

    def __init__(self, status: int, reason: str | None, headers: CIMultiDict[str]) -> None:
        super().__init__(status=status, reason=reason, headers=headers)
        self._absent = [name for name in _SERVER_AUTO if name not in headers]
        self._length = headers.get("Content-Length")

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        for name in self._absent:
            self._headers.popall(name, None)
        if self._length is not None and "Content-Length" not in self._headers:
            self._headers["Content-Length"] = self._length


class _Tee:
    """Counts a body going through and keeps its first ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.head = bytearray()

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]


def _text(raw: bytes) -> str:
    """A raw header as a str that aiohttp writes back as the same bytes (it encodes UTF-8)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # Not UTF-8 (latin-1 bytes): relayed as the same characters, UTF-8 encoded.
        return raw.decode("latin-1")


def _end_to_end(raw: Iterable[tuple[bytes, bytes]], drop: Iterable[str] = ()) -> list[
        tuple[str, str]]:
    """Headers without the hop-by-hop ones (and those ``Connection`` names)."""
    pairs = [(_text(k), _text(v)) for k, v in raw]
    named = {token.strip().lower() for name, value in pairs if name.lower() == "connection"
             for token in value.split(",")}
    skip = HOP_BY_HOP | named | {d.lower() for d in drop}
    return [(name, value) for name, value in pairs if name.lower() not in skip]


def _harness_fault(exc: BaseException) -> str | None:
    """Why a failed upstream call is anvil's fault, or None when it is the service's."""
    os_error = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if isinstance(os_error, OSError) and os_error.errno in _HARNESS_ERRNOS:
        return f"cannot open a connection to the service: {os_error.strerror or os_error}"
    if isinstance(exc, aiohttp.ClientError | OSError | TimeoutError):
        return None  # refused, reset, malformed or cut short by the service
    return f"proxy bug: {error_type(exc)}: {exc}"


class Proxy:
    """One proxy server in front of ``upstream``; see the module docstring.

    ``trace_id`` is the evaluation's trace (a ``traceparent`` of it is anvil's and is
    removed); calls that name no span of it are parented under ``parent_id`` (the
    running oracle item, else the evaluation's root span).
    """

    def __init__(self, upstream: str, tracing: Tracing, capture: Capture,
                 trace_id: str | None = None, parent_id: str | None = None,
                 contract: Contract | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.tracing = tracing
        self.capture = capture
        self.contract = contract
        # Checking a body needs all of it: the tee keeps up to this much.
        self._keep = (max(capture.body_limit, DEFAULT_CONTRACT_BODY_LIMIT) if contract
                      else capture.body_limit)
        self.checker = _Checker(contract) if contract is not None else None
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.url = ""
        self.calls = 0
        self.faults: list[str] = []
        self._session: aiohttp.ClientSession | None = None

    def _parent(self, header: str | None) -> tuple[Context | None, bool]:
        """The context to parent a call under, and whether its traceparent is anvil's."""
        given = TraceParent.parse(header)
        ours = given is not None and given.trace_id == self.trace_id
        span_id = given.span_id if given is not None and ours else self.parent_id
        if self.trace_id is None or span_id is None:
            return None, False
        context = SpanContext(int(self.trace_id, 16), int(span_id, 16), is_remote=True,
                              trace_flags=TraceFlags(TraceFlags.SAMPLED))
        return trace.set_span_in_context(NonRecordingSpan(context)), ours

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Forward one call and record its span (aiohttp's request handler)."""
        started = time.time_ns()
        self.calls += 1
        parent, ours = self._parent(request.headers.get("traceparent"))
        headers = _end_to_end(request.raw_headers,
                              ["expect", *(["traceparent"] if ours else [])])
        url = self.upstream + request.raw_path
        protocol = f"{request.version.major}.{request.version.minor}"
        call = _Call(self.tracing.tracer.start_span(
            client_span_name(request.method), context=parent, kind=SpanKind.CLIENT,
            attributes=client_attributes(request.method, url, protocol), start_time=started,
        ), self._keep)
        try:
            return await self._forward(request, url, headers, call)
        except Exception as exc:  # a bug of the proxy's: anvil's fault, never the service's
            fault = f"proxy bug: {error_type(exc)}: {exc}"
            self.faults.append(f"{request.method} {request.raw_path}: {fault}")
            set_error(call.span, error_type(exc), fault)
            raise
        except BaseException:  # cancelled: the caller went away, or the proxy is closing
            set_error(call.span, "cancelled", "the caller went away (or the proxy closed) "
                                              "before the answer was relayed")
            raise
        finally:
            call.span.add_event(REQUEST_EVENT, self.capture.request_event(
                headers, bytes(call.sent.head), call.sent.size), timestamp=started)
            if call.answer is not None:
                call.span.add_event(RESPONSE_EVENT, self.capture.response_event(
                    call.answer, bytes(call.received.head), call.received.size),
                    timestamp=call.answered)
            if self.checker is not None:
                self.checker.submit(self._record(request, headers, call), call.span)
            else:
                call.span.end()

    @staticmethod
    def _record(request: web.BaseRequest, headers: list[tuple[str, str]],
                call: _Call) -> CallRecord:
        """What the contract check needs of a call (a body past the keep limit: None)."""
        sent, received = call.sent, call.received
        return CallRecord(
            method=request.method, path=request.path, query=list(request.query.items()),
            request_headers=headers,
            request_body=bytes(sent.head) if len(sent.head) >= sent.size else None,
            status=call.status if call.complete else None,
            response_headers=call.answer or (),
            response_body=bytes(received.head) if len(received.head) >= received.size
            else None,
        )

    @property
    def checked(self) -> int:
        return self.checker.checked if self.checker is not None else 0

    @property
    def violations(self) -> int:
        return self.checker.violations if self.checker is not None else 0

    async def _forward(self, request: web.BaseRequest, url: str,
                       headers: list[tuple[str, str]], call: _Call) -> web.StreamResponse:
        try:
            upstream = await self._send(request, url, headers, call.sent)
        except Exception as exc:  # noqa: BLE001 - classified: the service's or anvil's
            return self._failed(request, call.span, exc, None)
        async with upstream:
            call.answered = time.time_ns()
            call.status = upstream.status
            set_response(call.span, upstream.status)
            call.answer = _end_to_end(upstream.raw_headers)
            relayed = _Relayed(upstream.status, upstream.reason, CIMultiDict(call.answer))
            try:
                await relayed.prepare(request)
            except ConnectionError as exc:
                return _caller_gone(call.span, relayed, exc)
            while True:
                try:
                    chunk = await upstream.content.readany()
                except Exception as exc:  # noqa: BLE001 - cut short by the service, mostly
                    return self._failed(request, call.span, exc, relayed)
                if not chunk:
                    break
                call.received.add(chunk)
                try:
                    await relayed.write(chunk)
                except ConnectionError as exc:
                    return _caller_gone(call.span, relayed, exc)
            try:
                await relayed.write_eof()
            except ConnectionError as exc:
                return _caller_gone(call.span, relayed, exc)
            call.complete = True
            return relayed

    async def _send(self, request: web.BaseRequest, url: str, headers: list[tuple[str, str]],
                    sent: _Tee) -> aiohttp.ClientResponse:
        """The call to the service, with the request's own framing; its answer's headers."""
        assert self._session is not None
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        body = None
        if chunked or request.content_length:
            body = _stream(request, sent)
            if request.headers.get("Expect", "").lower() == "100-continue":
                await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return await self._session.request(
            request.method, URL(url, encoded=True), headers=headers, data=body,
            chunked=True if chunked else None, allow_redirects=False,
            skip_auto_headers=_CLIENT_AUTO,
        )

    def _failed(self, request: web.BaseRequest, span: Span, exc: BaseException,
                relayed: web.StreamResponse | None) -> web.StreamResponse:
        """A call that failed in the proxy or at the service: say whose fault, answer."""
        fault = _harness_fault(exc)
        set_error(span, error_type(exc), fault or f"the service failed the call: {exc}")
        if fault is not None:
            self.faults.append(f"{request.method} {request.raw_path}: {fault}")
            span.set_attribute("anvil.proxy.fault", fault)
            log.error("recording proxy: %s %s: %s", request.method, request.raw_path, fault)
            if relayed is None:
                return web.Response(status=502, text=f"anvil proxy fault: {fault}\n",
                                    headers={FAULT_HEADER: fault[:200]})
        # The caller sees what it would have seen without the proxy: the connection ends.
        if request.transport is not None:
            request.transport.close()
        return relayed or web.Response(status=502)  # never sent: the connection is closed


class _Checker:
    """Checks calls against the contract on a thread of its own, once the oracle is done.

    A check costs about a millisecond of CPU: run while the oracle runs, it would take
    the GIL from the proxy's event loop and add to every call's latency. So calls
    queue up (their spans open) until :meth:`drain` (the oracle finished) or
    :meth:`close`; only past ``max_queued`` bytes of queued bodies does checking start
    early. Each call's span gets its violations as events, then ends at the time the
    call ended, not when it was checked. Nothing here touches what the caller saw.
    """

    def __init__(self, contract: Contract, max_queued: int = 64 << 20) -> None:
        self.contract = contract
        self.max_queued = max_queued
        self.checked = 0
        self.violations = 0
        self.check_ns = 0  # time spent checking, in total
        self._queued = 0  # body bytes waiting
        self.unchecked = 0  # calls left unchecked: the budget at close ran out
        self._stop_by = math.inf
        self._go = threading.Event()
        self._queue: queue.Queue[tuple[CallRecord, Span, int] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="anvil-contract", daemon=True)
        self._thread.start()

    def submit(self, record: CallRecord, span: Span) -> None:
        self._queued += len(record.request_body or b"") + len(record.response_body or b"")
        self._queue.put((record, span, time.time_ns()))
        if self._queued > self.max_queued:
            self._go.set()

    def start(self) -> None:
        """Start checking what is queued (the oracle is done); returns at once."""
        self._go.set()

    def drain(self) -> None:
        """Check every call queued so far (blocks: call it from a worker thread)."""
        self._go.set()
        self._queue.join()

    def close(self, budget_s: float = CHECK_BUDGET_S) -> None:
        """Check what is queued within ``budget_s``, end the rest of the spans unchecked,
        then stop (blocks: call it from a worker thread; teardown has a deadline)."""
        self._stop_by = time.monotonic() + budget_s
        self._go.set()
        self._queue.put(None)
        self._thread.join()

    def _work(self) -> None:
        self._go.wait()
        while (job := self._queue.get()) is not None:
            record, span, ended = job
            began = time.perf_counter_ns()
            try:
                if time.monotonic() > self._stop_by:
                    self.unchecked += 1
                    continue
                violations, route = self.contract.inspect(record)
                if route is not None:
                    span.set_attribute(HTTP_ROUTE, route)
                for violation in violations:
                    span.add_event(VIOLATION_EVENT, violation.attributes(), timestamp=ended)
                self.checked += 1
                self.violations += len(violations)
            finally:
                span.end(end_time=ended)
                self.check_ns += time.perf_counter_ns() - began
                self._queue.task_done()
        self._queue.task_done()


class _Call:
    """One call in flight: its span, what went each way, the service's answer."""

    def __init__(self, span: Span, limit: int) -> None:
        self.span = span
        self.sent = _Tee(limit)
        self.received = _Tee(limit)
        self.answer: list[tuple[str, str]] | None = None
        self.answered = 0
        self.status = 0
        self.complete = False  # the whole answer was relayed


async def _stream(request: web.BaseRequest, sent: _Tee) -> AsyncIterator[bytes]:
    while chunk := await request.content.readany():
        sent.add(chunk)
        yield chunk


def _caller_gone(span: Span, relayed: web.StreamResponse,
                 exc: BaseException) -> web.StreamResponse:
    set_error(span, error_type(exc), "the caller closed the connection before the answer "
                                     "was relayed")
    return relayed


@asynccontextmanager
async def serve_proxy(
    upstream: str,
    tracing: Tracing,
    capture: Capture | None = None,
    *,
    trace_id: str | None = None,
    parent_id: str | None = None,
    host: str = "127.0.0.1",
    contract: Contract | None = None,
) -> AsyncIterator[Proxy]:
    """A :class:`Proxy` in front of ``upstream``, listening on ``host`` at a free port.

    Leaving the context stops it: calls still in flight get a second to finish, then
    are cancelled (their spans end, marked ``cancelled``).

    Raises:
        ProxyFault: it cannot listen (no free port, no file descriptor).
    """
    proxy = Proxy(upstream, tracing, capture or Capture(), trace_id, parent_id, contract)
    async with AsyncExitStack() as stack:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            max_line_size=_HEADER_LIMIT, max_field_size=_HEADER_LIMIT,
        )
        stack.push_async_callback(_shielded, session.close)
        proxy._session = session
        if proxy.checker is not None:  # closed last: the calls cancelled at close are checked
            checker = proxy.checker
            stack.push_async_callback(_shielded, lambda: anyio.to_thread.run_sync(checker.close))
        server = web.Server(proxy.handle, handler_cancellation=True, access_log=None,
                            max_line_size=_HEADER_LIMIT, max_field_size=_HEADER_LIMIT)
        runner = web.ServerRunner(server, shutdown_timeout=_SHUTDOWN_S)
        try:
            await runner.setup()
            stack.push_async_callback(_shielded, runner.cleanup)
            await web.TCPSite(runner, host, 0).start()
        except OSError as exc:
            raise ProxyFault(f"the recording proxy cannot listen on {host}: {exc}") from exc
        proxy.url = f"http://{host}:{runner.addresses[0][1]}"
        yield proxy


async def _shielded(close: Callable[[], Any]) -> None:
    with anyio.CancelScope(shield=True):
        await close()
