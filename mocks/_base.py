"""One mock instance: a deterministic Starlette app around a :class:`~mocks.types.MockService`.

:class:`MockApp` is an ASGI app. It gives the mock it wraps a :class:`Context` (ids from
(seed, instance, counter), a virtual clock), records every provider request and its
response in a bounded :class:`Journal`, applies the faults the admin surface set, and
serves that admin surface under ``/__mock__/``::

    POST /__mock__/reset            back to the state the instance was created in
    POST /__mock__/seed             {"scenario": "...", "data": {...}}: a fresh state
    GET  /__mock__/journal          ?method=POST&path=/v1/*&item=NODEID&since=SEQ
    GET  /__mock__/faults           the faults still armed
    POST /__mock__/faults           {"method", "path", "status", "latency", "drop",
                                     "malformed", "body", "times", "fraction"}
    DELETE /__mock__/faults         disarm every fault
    GET  /__mock__/clock            {"now": unix seconds}
    POST /__mock__/clock/advance    {"seconds": N}
    POST /__mock__/item             {"nodeid": "..."}: the oracle item now running
    GET  /__mock__/openapi.json     the mock's own contract (public, like a provider's docs)

Every admin route but ``openapi.json`` needs the instance's token, as
``Authorization: Bearer <token>`` or ``X-Mock-Token: <token>``.

Nothing here reads the wall clock or a random source: the same requests in the same
order give the same bytes (responses carry no ``date``/``server`` header either).
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import Message, Receive, Scope, Send

from .types import MockAdmin, MockService, MockTask, ProviderCall

log = logging.getLogger("anvil.mocks")

#: The virtual clock's start: 2026-01-01T00:00:00Z, whatever the wall clock says.
EPOCH = 1_767_225_600
ADMIN = "/__mock__"
ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ID_LENGTH = 24
#: Request headers never journaled as sent: credentials, and the transport's own address.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie",
                            "x-mock-token", "x-api-key", "api-key"})
#: Never journaled: they differ between two identical runs (the port, anvil's trace ids).
DROPPED_HEADERS = frozenset({"host", "traceparent", "tracestate"})

MockFactory = Callable[["Context"], MockService]


def json_response(content: Any, status_code: int = 200,
                  headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response whose bytes depend only on ``content``.

    Keys keep their insertion order (deterministic code builds them in a fixed order;
    providers such as Stripe put ``id`` and ``object`` first), compact separators,
    UTF-8 without escapes, no NaN.
    """
    body = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return Response(body.encode(), status_code, dict(headers or {}),
                    media_type="application/json")


def stable_token(*parts: str) -> str:
    """``ID_LENGTH`` alphanumeric characters from sha256 of ``parts`` (a pure function)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(ID_LENGTH):
        number, index = divmod(number, len(ID_ALPHABET))
        chars.append(ID_ALPHABET[index])
    return "".join(chars)


def stable_fraction(*parts: str) -> float:
    """A number in [0, 1) from sha256 of ``parts``: a seeded, reproducible choice."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Context:
    """The :class:`~mocks.types.MockContext` of one instance: ids, clock, side events.

    A fresh context (counter 0, clock at :data:`EPOCH`) comes with every reset.
    """

    def __init__(self, seed: str, instance: str, journal: Journal | None = None) -> None:
        self._seed = seed
        self._instance = instance
        self._counter = 0
        self._now = EPOCH
        self._journal = journal

    @property
    def seed(self) -> str:
        return self._seed

    @property
    def instance(self) -> str:
        return self._instance

    def new_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{stable_token(self._seed, self._instance, str(self._counter))}"

    def now(self) -> int:
        return self._now

    def advance(self, seconds: int) -> int:
        """Move the virtual clock forward; return the new time.

        Raises:
            ValueError: ``seconds`` is negative (time never goes back).
        """
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._now += seconds
        return self._now

    def emit(self, event: Mapping[str, Any]) -> None:
        if self._journal is not None:
            self._journal.record({"kind": "event", "time": self._now, "event": dict(event)})


class _Now:
    """The default of :meth:`Journal.record`'s ``item``: whatever item runs now."""


NOW = _Now()


class Journal:
    """Every provider request and response in order, bounded in entries and bytes.

    Beyond either bound the oldest entries go, and ``dropped`` counts them. Each entry
    gets a sequence number (``seq``, from 1) and the oracle item running when it came.
    """

    def __init__(self, max_entries: int = 5000, max_bytes: int = 8 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries: deque[tuple[int, dict[str, Any]]] = deque()  # (size, entry)
        self.size = 0
        self.dropped = 0
        self.seq = 0
        self.item: str | None = None

    def record(self, entry: Mapping[str, Any], item: str | None | _Now = NOW) -> dict[str, Any]:
        """Append ``entry`` under ``item`` (default: the item running now)."""
        self.seq += 1
        if not self.max_entries:  # journal off (a bench, a mock served for load)
            self.dropped += 1
            return {}
        full = {"seq": self.seq, **entry, "item": self.item if isinstance(item, _Now) else item}
        size = len(json.dumps(full, ensure_ascii=False))
        self.entries.append((size, full))
        self.size += size
        while self.entries and (len(self.entries) > self.max_entries or self.size > self.max_bytes):
            old, _ = self.entries.popleft()
            self.size -= old
            self.dropped += 1
        return full

    def select(self, method: str | None = None, path: str | None = None,
               item: str | None = None, since: int = 0) -> list[dict[str, Any]]:
        """Entries after ``since`` whose method and path (a glob) and item match."""
        found = []
        for _, entry in self.entries:
            if entry["seq"] <= since:
                continue
            if item is not None and entry["item"] != item:
                continue
            if method is not None or path is not None:
                if entry["kind"] != "request":
                    continue
                if method is not None and entry["method"] != method.upper():
                    continue
                if path is not None and not fnmatch.fnmatchcase(entry["path"], path):
                    continue
            found.append(entry)
        return found


class FaultError(ValueError):
    """A fault specification the admin surface refuses (the message says why)."""


@dataclass
class Fault:
    """One armed fault: which calls it hits and what it does to them.

    ``status``: answer that status without running the mock (no effect committed);
    ``latency``: wait that many (real) seconds first; ``drop``: run the mock (its effect
    is committed), then close the connection without an answer; ``malformed``: run the
    mock, then send a body cut in half (not valid JSON). ``times``: the next N matching
    calls (None: every one); ``fraction``: the share of matching calls hit, chosen by a
    seeded hash of (seed, instance, fault number, call number).
    """

    number: int
    method: str | None = None
    path: str = "*"
    status: int | None = None
    latency: float = 0.0
    drop: bool = False
    malformed: bool = False
    body: Any = None
    times: int | None = None
    fraction: float = 1.0
    seen: int = 0  # matching calls so far
    hits: int = 0
    item: str | None = None  # the oracle item that armed it; it ends with that item

    @classmethod
    def parse(cls, number: int, spec: Mapping[str, Any]) -> Fault:
        known = {"method", "path", "status", "latency", "drop", "malformed", "body", "times",
                 "fraction"}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise FaultError(f"unknown fault fields: {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        for flag in ("drop", "malformed"):
            if not isinstance(spec.get(flag, False), bool):
                raise FaultError(f"{flag} must be true or false")
        try:
            fault = cls(
                number=number,
                method=str(spec["method"]).upper() if spec.get("method") else None,
                path=str(spec.get("path") or "*"),
                status=int(spec["status"]) if spec.get("status") is not None else None,
                latency=float(spec.get("latency") or 0.0),
                drop=bool(spec.get("drop", False)),
                malformed=bool(spec.get("malformed", False)),
                body=spec.get("body"),
                times=int(spec["times"]) if spec.get("times") is not None else None,
                fraction=float(spec.get("fraction", 1.0)),
            )
        except (TypeError, ValueError) as exc:
            raise FaultError(f"bad fault field: {exc}") from None
        if fault.status is not None and not 100 <= fault.status <= 599:
            raise FaultError(f"status {fault.status} is not an HTTP status")
        if not 0.0 <= fault.fraction <= 1.0:
            raise FaultError("fraction must be within [0, 1]")
        if fault.latency < 0 or (fault.times is not None and fault.times < 1):
            raise FaultError("latency must be >= 0 and times >= 1")
        if fault.status is None and not (fault.latency or fault.drop or fault.malformed):
            raise FaultError("a fault needs one of status, latency, drop, malformed")
        return fault

    def describe(self) -> dict[str, Any]:
        return {"number": self.number, "method": self.method, "path": self.path,
                "status": self.status, "latency": self.latency, "drop": self.drop,
                "malformed": self.malformed, "times": self.times, "fraction": self.fraction,
                "hits": self.hits}

    def matches(self, method: str, path: str) -> bool:
        return ((self.method is None or self.method == method)
                and fnmatch.fnmatchcase(path, self.path))

    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times


@dataclass
class _Captured:
    """A provider response held back until complete (faults may rewrite or drop it)."""

    status: int = 500
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


class MockApp:
    """One isolated mock instance as an ASGI app (mount it anywhere: paths are its own).

    Args:
        factory: the mock class (or any callable taking a :class:`Context`).
        seed: the evaluation's seed; with the instance name it fixes every id.
        instance: this instance's name (e.g. the kind, ``payment``).
        token: the admin token (``Authorization: Bearer`` or ``X-Mock-Token``).
        scenario: the named scenario the instance starts in (and resets to).
        journal_entries, journal_bytes: the journal's bounds (``journal_entries=0``: no
            journal at all, for load tests).
        body_limit: request and response bodies are journaled up to this many bytes.

    Raises:
        KeyError: ``scenario`` is not one the mock knows.
    """

    def __init__(self, factory: MockFactory, *, seed: str, instance: str, token: str,
                 scenario: str = "default", journal_entries: int = 5000,
                 journal_bytes: int = 8 * 2**20, body_limit: int = 16 * 1024) -> None:
        self.factory = factory
        self.seed = seed
        self.instance = instance
        self.token = token
        self.scenario = scenario
        self.body_limit = body_limit
        #: Called with each provider call once answered (anvil's tracing sets it).
        self.on_call: Callable[[ProviderCall], None] | None = None
        self.journal = Journal(journal_entries, journal_bytes)
        self.faults: list[Fault] = []
        self._fault_numbers = 0
        self._fabric_admin: list[BaseRoute] = [
            Route(f"{ADMIN}/reset", self._reset, methods=["POST"]),
            Route(f"{ADMIN}/seed", self._seed, methods=["POST"]),
            Route(f"{ADMIN}/journal", self._journal, methods=["GET"]),
            Route(f"{ADMIN}/faults", self._faults, methods=["GET", "POST", "DELETE"]),
            Route(f"{ADMIN}/clock", self._clock, methods=["GET"]),
            Route(f"{ADMIN}/clock/advance", self._advance, methods=["POST"]),
            Route(f"{ADMIN}/item", self._item, methods=["POST"]),
            Route(f"{ADMIN}/openapi.json", self._openapi, methods=["GET"]),
        ]
        self.ctx: Context
        self.service: MockService
        self._router: Router
        self._admin: Router
        self._task_scope: anyio.CancelScope | None = None
        self.reset(scenario)

    # -- state ---------------------------------------------------------------------------

    def reset(self, scenario: str | None = None, data: Mapping[str, Any] | None = None) -> None:
        """A fresh mock (new context, empty journal, no faults) seeded with ``scenario``
        (default: the one the instance was created with).

        Raises:
            KeyError: an unknown scenario (the instance is left as it was).
            ValueError: ``data`` the mock refuses (the instance is left as it was).
        """
        scenario = scenario or self.scenario
        journal = Journal(self.journal.max_entries, self.journal.max_bytes)
        ctx = Context(self.seed, self.instance, journal)
        service = self.factory(ctx)
        known = list(getattr(service, "scenarios", ["default"]))
        if scenario not in known:
            raise KeyError(f"unknown scenario {scenario!r} (known: {', '.join(known)})")
        service.seed(scenario, data)
        journal.item = self.journal.item
        self.ctx, self.service, self.journal = ctx, service, journal
        self._router = Router(list(service.routes()), redirect_slashes=False)
        extra = list(service.admin_routes()) if isinstance(service, MockAdmin) else []
        self._admin = Router([*self._fabric_admin, *extra], redirect_slashes=False)
        self.faults.clear()
        if self._task_scope is not None:
            self._task_scope.cancel()  # the old mock's task goes; run() starts the new one's

    async def run(self) -> None:
        """Run the mock's own task (:class:`~mocks.types.MockTask`, when it has one) until
        cancelled, restarting it with every reset: a fresh mock, a fresh task.

        A task that fails is logged and not restarted until the next reset: a bug in one
        mock never takes its host down.
        """
        while True:
            with anyio.CancelScope() as scope:
                self._task_scope = scope
                service = self.service
                if isinstance(service, MockTask):
                    try:
                        await service.run()
                    except Exception:  # noqa: BLE001 - logged; the instance still answers
                        log.exception("the task of mock %s failed", self.instance)
                await anyio.sleep_forever()

    def mark_item(self, nodeid: str | None) -> None:
        """Calls from now on belong to oracle item ``nodeid``.

        Faults an earlier item armed end with it: a ``times=1`` fault on a route that
        item's service never called must not hit the next item's calls. Faults armed
        outside any item (by a scenario, or before the oracle) stay.
        """
        previous = self.journal.item
        if previous is not None and previous != nodeid:
            self.faults = [f for f in self.faults if f.item != previous]
        self.journal.item = nodeid

    def add_fault(self, spec: Mapping[str, Any]) -> Fault:
        """Arm a fault (see :class:`Fault`).

        Raises:
            FaultError: the specification is invalid.
        """
        self._fault_numbers += 1
        fault = Fault.parse(self._fault_numbers, spec)
        fault.item = self.journal.item
        self.faults.append(fault)
        return fault

    def _fault_for(self, method: str, path: str) -> Fault | None:
        """The first armed fault that hits this call (spent ones are disarmed)."""
        for fault in self.faults:
            if not fault.matches(method, path):
                continue
            fault.seen += 1
            chosen = fault.fraction >= 1.0 or stable_fraction(
                self.seed, self.instance, str(fault.number), str(fault.seen)) < fault.fraction
            if not chosen:
                continue
            fault.hits += 1
            if fault.spent():
                self.faults.remove(fault)
            return fault
        return None

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return
        path = _route_path(scope)
        if path == ADMIN or path.startswith(ADMIN + "/"):
            if path != f"{ADMIN}/openapi.json" and not self._authorized(scope):
                await json_response({"error": "missing or wrong mock token"}, 401)(
                    scope, receive, send)
                return
            await self._admin(_rooted(scope, path), receive, send)
            return
        await self._provider(scope, receive, send, path)

    def _authorized(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers", []))
        given = headers.get(b"x-mock-token", b"").decode("latin-1")
        auth = headers.get(b"authorization", b"").decode("latin-1")
        if not given and auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        return bool(given) and hmac.compare_digest(given, self.token)

    async def _provider(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        started = time.time_ns()
        body = await _read_body(receive)
        method = scope["method"]
        fault = self._fault_for(method, path)
        journal, item = self.journal, self.journal.item  # a reset mid-call starts a new one
        if fault is not None and fault.latency:
            await anyio.sleep(fault.latency)
        captured = _Captured()
        if fault is not None and fault.status is not None:
            error = fault.body if fault.body is not None else {"error": {
                "type": "mock_fault", "message": f"injected fault: status {fault.status}"}}
            await json_response(error, fault.status)(scope, receive, captured.send)
        else:
            try:
                await self._router(_rooted(scope, path), _replay(body), captured.send)
            except Exception as exc:  # noqa: BLE001 - a mock's bug is a 500, not a dead server
                log.exception("mock %s failed on %s %s", self.instance, method, path)
                captured = _Captured()
                await json_response({"error": {"type": "mock_error", "message": repr(exc)}},
                                    500)(scope, receive, captured.send)
        response = bytes(captured.body)
        if fault is not None and fault.malformed and not fault.drop:
            response = _malformed(response)
            captured.headers = [(k, str(len(response)).encode()) if k == b"content-length"
                                else (k, v) for k, v in captured.headers]
        if journal.max_entries:
            self._journal_call(journal, item, scope, path, body, captured, response, fault)
        else:
            journal.record({})  # counted, not kept
        if self.on_call is not None:
            self._observe(item, scope, path, body, captured, response, fault, started)
        if fault is not None and fault.drop:
            _abort(send)
            # connection_lost runs now, so the server knows not to answer in our stead
            await anyio.lowlevel.checkpoint()
            return
        await send({"type": "http.response.start", "status": captured.status,
                    "headers": captured.headers})
        await send({"type": "http.response.body", "body": response})

    def _journal_call(self, journal: Journal, item: str | None, scope: Scope, path: str,
                      body: bytes, captured: _Captured, response: bytes,
                      fault: Fault | None) -> None:
        dropped = fault is not None and fault.drop
        entry = {
            "kind": "request",
            "time": self.ctx.now(),
            "method": scope["method"],
            "path": path,
            "query": scope.get("query_string", b"").decode("latin-1"),
            "headers": _journal_headers(scope.get("headers", [])),
            "body": _clip(body, self.body_limit),
            "status": None if dropped else captured.status,
            "response": None if dropped else _clip(response, self.body_limit),
            "fault": _fault_name(fault),
        }
        journal.record(entry, item)  # the item running when the call came in

    def _observe(self, item: str | None, scope: Scope, path: str, body: bytes,
                 captured: _Captured, response: bytes, fault: Fault | None,
                 started: int) -> None:
        assert self.on_call is not None
        dropped = fault is not None and fault.drop
        call = ProviderCall(
            instance=self.instance, method=scope["method"], path=path,
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=_text_pairs(scope.get("headers", [])), body=body,
            status=None if dropped else captured.status,
            response_headers=[] if dropped else _text_pairs(captured.headers),
            response=None if dropped else response, fault=_fault_name(fault), item=item,
            start_ns=started, end_ns=time.time_ns(),
        )
        try:
            self.on_call(call)
        except Exception:  # an observer's bug must not fail the service's call
            log.exception("mock %s: the call observer failed", self.instance)

    # -- admin routes --------------------------------------------------------------------

    async def _reset(self, _request: Request) -> Response:
        self.reset()
        return json_response({"reset": True, "scenario": self.scenario})

    async def _seed(self, request: Request) -> Response:
        spec = await _json_object(request)
        if isinstance(spec, Response):
            return spec
        data = spec.get("data")
        if data is not None and not isinstance(data, dict):
            return json_response({"error": "data must be an object"}, 400)
        scenario = str(spec.get("scenario") or "default")
        try:
            self.reset(scenario, data)
        except (KeyError, ValueError) as exc:  # an unknown scenario, data the mock refuses
            return json_response({"error": str(exc.args[0]) if exc.args else repr(exc)}, 400)
        return json_response({"seeded": scenario})

    async def _journal(self, request: Request) -> Response:
        q = request.query_params
        try:
            since = int(q.get("since", "0"))
        except ValueError:
            return json_response({"error": "since must be an integer"}, 400)
        entries = self.journal.select(q.get("method"), q.get("path"), q.get("item"), since)
        return json_response({"dropped": self.journal.dropped, "entries": entries})

    async def _faults(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.faults.clear()
        elif request.method == "POST":
            spec = await _json_object(request)
            if isinstance(spec, Response):
                return spec
            try:
                self.add_fault(spec)
            except FaultError as exc:
                return json_response({"error": str(exc)}, 400)
        return json_response({"faults": [f.describe() for f in self.faults]})

    async def _clock(self, _request: Request) -> Response:
        return json_response({"now": self.ctx.now()})

    async def _advance(self, request: Request) -> Response:
        spec = await _json_object(request)
        if isinstance(spec, Response):
            return spec
        seconds = spec.get("seconds")
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
            return json_response({"error": "seconds must be a non-negative integer"}, 400)
        return json_response({"now": self.ctx.advance(seconds)})

    async def _item(self, request: Request) -> Response:
        spec = await _json_object(request)
        if isinstance(spec, Response):
            return spec
        nodeid = spec.get("nodeid")
        self.mark_item(str(nodeid) if nodeid else None)
        return json_response({"item": self.journal.item})

    async def _openapi(self, _request: Request) -> Response:
        return json_response(self.service.openapi())


# -- helpers -------------------------------------------------------------------------------


def _route_path(scope: Scope) -> str:
    """The path below where the app is mounted (Starlette's convention: ``root_path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root):] or "/" if root and path.startswith(root) else path


def _rooted(scope: Scope, path: str) -> Scope:
    """``scope`` as a router at the instance's root sees it."""
    return {**scope, "path": path, "root_path": "", "raw_path": path.encode()}


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await anyio.sleep_forever()  # a handler waiting for a disconnect waits
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _json_object(request: Request) -> dict[str, Any] | Response:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return json_response({"error": "the body is not JSON"}, 400)
    if not isinstance(value, dict):
        return json_response({"error": "the body must be a JSON object"}, 400)
    return value


def _text_pairs(raw: Sequence[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]


def _journal_headers(raw: Sequence[tuple[bytes, bytes]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for key, value in raw:
        name = key.decode("latin-1").lower()
        if name in DROPPED_HEADERS:
            continue
        text = value.decode("latin-1")
        headers[name] = _redact(text) if name in SECRET_HEADERS else text
    return headers


def _redact(value: str) -> str:
    """Keep a credential's scheme and non-secret prefix (``Bearer sk_test_***``)."""
    scheme, _, secret = value.rpartition(" ")
    prefix = secret[: secret.rfind("_") + 1] if "_" in secret[:12] else ""
    return f"{scheme} {prefix}***".strip()


def _clip(body: bytes, limit: int) -> str:
    text = body[:limit].decode("utf-8", "replace")
    return text + f"...[{len(body) - limit} more bytes]" if len(body) > limit else text


def _malformed(body: bytes) -> bytes:
    """``body`` cut in half, and surely not valid JSON."""
    cut = body[: len(body) // 2]
    try:
        json.loads(cut)
    except ValueError:
        return cut
    return cut + b'{"'


def _fault_name(fault: Fault | None) -> str | None:
    if fault is None:
        return None
    kinds = [name for name, on in (("status", fault.status is not None),
                                   ("latency", bool(fault.latency)), ("drop", fault.drop),
                                   ("malformed", fault.malformed)) if on]
    return "+".join(kinds)


def _abort(send: Send) -> None:
    """Close the connection without an answer (a provider that died after committing).

    ASGI has no message for this; uvicorn's ``send`` is a bound method of the request
    cycle that holds the transport, and aborting it writes nothing more.
    """
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise ConnectionAbortedError("the server gives no way to drop a connection")
    transport.abort()


__all__ = ["EPOCH", "Context", "Fault", "FaultError", "Journal", "MockApp", "MockFactory",
           "json_response", "stable_fraction", "stable_token"]
