"""HTTP spans: attributes in the stable OpenTelemetry HTTP semantic conventions, headers
and bodies as span events (truncated, secrets redacted), W3C ``traceparent`` handling.

The attribute names are the stable ones (``http.request.method``, ``url.full``,
``http.response.status_code``, ``error.type``...), taken from
``opentelemetry-semantic-conventions`` so a renamed convention is a failing import,
not a silent mismatch.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
)
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_HEADER_TEMPLATE,
    HTTP_REQUEST_METHOD,
    HTTP_REQUEST_METHOD_ORIGINAL,
    HTTP_RESPONSE_HEADER_TEMPLATE,
    HTTP_RESPONSE_STATUS_CODE,
)
from opentelemetry.semconv.attributes.network_attributes import NETWORK_PROTOCOL_VERSION
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.semconv.attributes.url_attributes import (
    URL_FULL,
    URL_PATH,
    URL_QUERY,
    URL_SCHEME,
)
from opentelemetry.trace import Span, Status, StatusCode

DEFAULT_BODY_LIMIT = 8 * 1024
REDACTED = "REDACTED"
#: Header names whose values never leave the process (compared lower-cased).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie",
                            "x-api-key"})
#: A header whose lower-cased name contains one of these is a secret too (``X-Auth-Token``).
SECRET_NAME_PARTS = ("token",)

#: The span events that carry what went over the wire.
REQUEST_EVENT = "http.request"
RESPONSE_EVENT = "http.response"
#: Body capture, in those events (no stable convention names a body's content).
BODY = "anvil.body"
BODY_SIZE = "anvil.body.size"  # the whole body's size in bytes, however much was kept
BODY_TRUNCATED = "anvil.body.truncated"
BODY_ENCODING = "anvil.body.encoding"  # utf-8, or base64 for bytes that are not text

_KNOWN_METHODS = frozenset({"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST",
                            "PUT", "TRACE", "QUERY"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Capture:
    """What of a request or response is kept: bodies up to ``body_limit`` bytes, every
    header but the secret ones (their values become ``REDACTED``).

    Args:
        body_limit: bytes of each body kept (the size of the whole is kept too).
        secret_headers: header names (lower case) whose values are redacted.
        secret_name_parts: a header whose name contains one of these is redacted too.
    """

    body_limit: int = DEFAULT_BODY_LIMIT
    secret_headers: frozenset[str] = SECRET_HEADERS
    secret_name_parts: tuple[str, ...] = SECRET_NAME_PARTS

    def is_secret(self, name: str) -> bool:
        lowered = name.lower()
        return lowered in self.secret_headers or any(p in lowered for p in self.secret_name_parts)

    def headers(self, pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
        """Header values by lower-cased name, in order, secrets redacted."""
        kept: dict[str, list[str]] = {}
        for name, value in pairs:
            kept.setdefault(name.lower(), []).append(REDACTED if self.is_secret(name) else value)
        return kept

    def body(self, head: bytes, size: int) -> dict[str, Any]:
        """Attributes that keep the first ``body_limit`` bytes of a body of ``size`` bytes.

        Text stays text (a multi-byte character cut at the limit is dropped whole);
        anything that is not UTF-8 is kept as base64.
        """
        kept = head[: self.body_limit]
        truncated = size > len(kept)
        text = _utf8(kept, truncated)
        encoding = "utf-8"
        if text is None:
            text, encoding = base64.b64encode(kept).decode("ascii"), "base64"
        return {BODY: text, BODY_SIZE: size, BODY_TRUNCATED: truncated, BODY_ENCODING: encoding}

    def event(
        self, template: str, headers: Iterable[tuple[str, str]], head: bytes, size: int
    ) -> dict[str, Any]:
        attributes: dict[str, Any] = {f"{template}.{name}": values
                                      for name, values in self.headers(headers).items()}
        attributes.update(self.body(head, size))
        return attributes

    def request_event(
        self, headers: Iterable[tuple[str, str]], head: bytes, size: int
    ) -> dict[str, Any]:
        """Attributes of the :data:`REQUEST_EVENT`: ``http.request.header.<name>`` and body."""
        return self.event(HTTP_REQUEST_HEADER_TEMPLATE, headers, head, size)

    def response_event(
        self, headers: Iterable[tuple[str, str]], head: bytes, size: int
    ) -> dict[str, Any]:
        """Attributes of the :data:`RESPONSE_EVENT`: ``http.response.header.<name>`` and body."""
        return self.event(HTTP_RESPONSE_HEADER_TEMPLATE, headers, head, size)


def _utf8(data: bytes, truncated: bool) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Cut inside a character by the limit: keep what precedes it.
        if truncated and exc.start >= len(data) - 3 and exc.reason == "unexpected end of data":
            return data[: exc.start].decode("utf-8")
        return None


def client_attributes(method: str, url: str, protocol: str = "1.1") -> dict[str, Any]:
    """Attributes of a client span for ``method url`` (user and password in the URL
    are redacted, as the conventions require)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}:{REDACTED}@{netloc.rpartition('@')[2]}"
    attributes: dict[str, Any] = {
        URL_FULL: urlunsplit(parts._replace(netloc=netloc)),
        URL_SCHEME: parts.scheme,
        URL_PATH: parts.path or "/",
        NETWORK_PROTOCOL_VERSION: protocol,
    }
    attributes.update(method_attributes(method))
    if parts.query:
        attributes[URL_QUERY] = parts.query
    if parts.hostname:
        attributes[SERVER_ADDRESS] = parts.hostname
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    if port:
        attributes[SERVER_PORT] = port
    return attributes


def method_attributes(method: str) -> dict[str, Any]:
    """``http.request.method``: a method the conventions do not know becomes ``_OTHER``,
    with the method as sent in ``http.request.method_original``."""
    if method in _KNOWN_METHODS:
        return {HTTP_REQUEST_METHOD: method}
    upper = method.upper()
    return {HTTP_REQUEST_METHOD: upper if upper in _KNOWN_METHODS else "_OTHER",
            HTTP_REQUEST_METHOD_ORIGINAL: method}


def client_span_name(method: str) -> str:
    """The conventions' low-cardinality name of a client span without a route template."""
    return method if method in _KNOWN_METHODS else "HTTP"


def set_response(span: Span, status: int, *, server: bool = False) -> None:
    """Record the response status; 4xx is an error on a client span, 5xx on both."""
    span.set_attribute(HTTP_RESPONSE_STATUS_CODE, status)
    if status >= 500 or (status >= 400 and not server):
        span.set_attribute(ERROR_TYPE, str(status))
        span.set_status(Status(StatusCode.ERROR))


def set_error(span: Span, error_type: str, message: str = "") -> None:
    """The call failed without a response (connection refused, reset, proxy fault)."""
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, message or error_type))


def exception_event(exc_type: str, message: str, stacktrace: str = "") -> dict[str, Any]:
    """Attributes of an ``exception`` span event, in the conventions' names."""
    attributes = {EXCEPTION_TYPE: exc_type, EXCEPTION_MESSAGE: message}
    if stacktrace:
        attributes[EXCEPTION_STACKTRACE] = stacktrace
    return attributes


def error_type(exc: BaseException) -> str:
    """``error.type`` of an exception: its fully qualified class name."""
    kind = type(exc)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


# -- W3C trace context -------------------------------------------------------------------

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True)
class TraceParent:
    """A W3C ``traceparent`` header: which trace, and the span that made the call."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @classmethod
    def parse(cls, value: str | None) -> TraceParent | None:
        """The header's trace and span, or None when it is absent or malformed."""
        match = _TRACEPARENT.match((value or "").strip())
        if not match:
            return None
        version, trace_id, span_id, flags, rest = match.groups()
        if version == "ff" or (version == "00" and rest):
            return None
        if trace_id == "0" * 32 or span_id == "0" * 16:
            return None
        return cls(trace_id, span_id, bool(int(flags, 16) & 1))

    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


def derived_span_id(trace_id: str, key: str) -> str:
    """A span id both ends can compute from the trace and a name (an oracle item's node
    id): the oracle process makes the item's span, the proxy parents calls under it.

    ``engine/_oracle_plugin.py`` computes the same (it may import only the standard
    library); a test keeps the two equal.
    """
    digest = hashlib.sha256(f"{trace_id}/{key}".encode()).hexdigest()[:16]
    return digest if digest != "0" * 16 else "1" * 16
