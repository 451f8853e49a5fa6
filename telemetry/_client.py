"""Spans for the HTTP calls anvil itself makes while an evaluation runs: health probes,
Docker API calls, mock wiring checks.

Which trace such a call belongs to is decided by where it is made, not by who made
the session: the Docker client is one session per run, shared by every evaluation.
So the tracer and the parent span travel in context variables (:func:`traced`, set
by whoever owns the evaluation's trace, phase by phase), and :func:`client_tracing`
is an aiohttp ``TraceConfig`` that opens a client span under them for each request.
A call made outside any traced context (the reaper at start-up) makes no span.

OpenTelemetry's contrib aiohttp instrumentation binds one tracer provider to a
session when the session is made; that is why anvil has this small one instead.
A span ends when the response's headers arrive: a streamed body (a build's output,
``logs --follow``) is not waited for.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any

import aiohttp
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

from ._http import client_attributes, client_span_name, error_type, set_error, set_response

#: Who a call of anvil's own goes to (``docker``, ``service``, ``mock``): an attribute.
PEER = "anvil.peer"

_TRACER: ContextVar[Tracer | None] = ContextVar("anvil_tracer", default=None)


@contextmanager
def traced(tracer: Tracer, span: Span) -> Iterator[None]:
    """Within this block (and the tasks started in it), calls through a session made
    with :func:`client_tracing` are spans of ``tracer`` under ``span``."""
    tracer_token = _TRACER.set(tracer)
    context_token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(context_token)
        _TRACER.reset(tracer_token)


def current_tracer() -> Tracer | None:
    """The tracer :func:`traced` set here, or None outside any traced block."""
    return _TRACER.get()


def client_tracing(**attributes: Any) -> aiohttp.TraceConfig:
    """An aiohttp ``TraceConfig``: each request made in a :func:`traced` block is a
    client span (stable HTTP conventions, plus ``attributes``, e.g. ``anvil.peer``)."""
    config = aiohttp.TraceConfig()

    async def start(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                    params: aiohttp.TraceRequestStartParams) -> None:
        tracer = _TRACER.get()
        parent = trace.get_current_span()
        ctx.span = None
        if tracer is None or not parent.get_span_context().is_valid:
            return
        method = params.method
        ctx.span = tracer.start_span(
            client_span_name(method), kind=SpanKind.CLIENT,
            attributes={**client_attributes(method, str(params.url)), **attributes})

    async def end(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                  params: aiohttp.TraceRequestEndParams) -> None:
        span: Span | None = getattr(ctx, "span", None)
        if span is not None:
            set_response(span, params.response.status)
            span.end()

    async def failed(_session: aiohttp.ClientSession, ctx: SimpleNamespace,
                     params: aiohttp.TraceRequestExceptionParams) -> None:
        span: Span | None = getattr(ctx, "span", None)
        if span is not None:
            set_error(span, error_type(params.exception), str(params.exception)
                      or type(params.exception).__name__)
            span.end()

    config.on_request_start.append(start)
    config.on_request_end.append(end)
    config.on_request_exception.append(failed)
    config.freeze()
    return config
