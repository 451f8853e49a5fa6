"""The recording proxy forwards faithfully, records one span per call under the right oracle
item, tells the service's faults from its own, and changes no verdict.

The servers are real: an HTTP/1.1 server written on raw sockets with h11 (so a test
controls every byte of its answers and sees every byte of the requests), aiohttp
servers, the tiny stdlib service and the bundled taskboard examples.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import h11
import pytest
import requests
from anyio.abc import SocketAttribute, SocketStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Phase, Store, Task, Verdict, load_task
from engine._proxy import FAULT_HEADER, HOP_BY_HOP, Proxy, serve_proxy
from engine._tracing import EvaluationTrace, TraceRecorder, default_attachments
from telemetry import REDACTED, SpanData, TraceParent, Tracing, derived_span_id
from tests.conftest import FIXTURES, ROOT, MakeSubmission, run_engine

Headers = list[tuple[str, str]]


# -- a server that shows every byte ------------------------------------------------------


@dataclass
class Seen:
    method: str
    target: str
    headers: Headers
    body: bytes


@dataclass
class RawUpstream:
    """HTTP/1.1 on raw sockets: records each request as parsed from the wire and answers
    exactly what its ``X-Reply`` header asks for (status, reason, headers, body, framing:
    ``length``, ``chunked`` in ``chunks`` pieces, or ``close``-delimited)."""

    seen: dict[str, Seen] = field(default_factory=dict)

    async def handle(self, conn: SocketStream) -> None:
        async with conn:
            parser = h11.Connection(h11.SERVER, max_incomplete_event_size=1 << 20)
            request: h11.Request | None = None
            body = bytearray()
            while True:
                event = parser.next_event()
                if event is h11.NEED_DATA:
                    try:
                        parser.receive_data(await conn.receive(1 << 16))
                    except anyio.EndOfStream:
                        parser.receive_data(b"")
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            if request is None:
                return
            headers = [(k.decode(), v.decode()) for k, v in request.headers.raw_items()]
            values = {k.lower(): v for k, v in headers}
            self.seen[values.get("x-call-id", "")] = Seen(
                request.method.decode(), request.target.decode(), headers, bytes(body))
            reply = json.loads(values.get("x-reply", "{}"))
            await conn.send(answer_bytes(request.method.decode(), reply))


def answer_bytes(method: str, reply: dict[str, Any]) -> bytes:
    status, reason = reply.get("status", 200), reply.get("reason", "OK")
    body = random.Random(reply.get("seed", 0)).randbytes(reply.get("size", 0))
    framing = reply.get("framing", "length")
    bodiless = method == "HEAD" or status in (204, 304)
    lines = [f"HTTP/1.1 {status} {reason}".encode()]
    lines += [f"{k}: {v}".encode() for k, v in reply.get("headers", [])]
    if framing == "length" and status not in (204, 304):
        lines.append(f"Content-Length: {len(body)}".encode())
    elif framing == "chunked" and not bodiless:
        lines.append(b"Transfer-Encoding: chunked")
    if framing == "close":
        lines.append(b"Connection: close")
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    if bodiless:
        return head
    if framing != "chunked":
        return head + body
    pieces, out = max(1, reply.get("chunks", 1)), [head]
    step = max(1, -(-len(body) // pieces))
    for i in range(0, len(body), step):
        part = body[i : i + step]
        out.append(b"%x\r\n%s\r\n" % (len(part), part))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


@dataclass
class Answer:
    status: int
    reason: str
    headers: Headers
    body: bytes


def call(port: int, method: str, target: str, headers: Headers, body: bytes = b"",
         chunked: bool = False, pieces: int = 1) -> Answer:
    """One request over a fresh socket, every byte of it chosen here (h11 keeps case)."""
    client = h11.Connection(h11.CLIENT, max_incomplete_event_size=1 << 20)
    framing: Headers = []
    if chunked:
        framing = [("Transfer-Encoding", "chunked")]
    elif body or method not in ("GET", "HEAD", "OPTIONS"):
        framing = [("Content-Length", str(len(body)))]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(client.send(h11.Request(method=method, target=target,
                                             headers=[("Host", "anvil.test"), *headers,
                                                      *framing])))
        step = max(1, -(-len(body) // pieces))
        for i in range(0, len(body), step):
            sock.sendall(client.send(h11.Data(data=body[i : i + step])))
        sock.sendall(client.send(h11.EndOfMessage()))
        answer: Answer | None = None
        received = bytearray()
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(sock.recv(1 << 16))
                continue
            if isinstance(event, h11.Response):
                answer = Answer(event.status_code, event.reason.decode(),
                                [(k.decode(), v.decode()) for k, v in event.headers.raw_items()],
                                b"")
            elif isinstance(event, h11.Data):
                received += event.data
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    assert answer is not None
    answer.body = bytes(received)
    return answer


def end_to_end(headers: Headers) -> Headers:
    return [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]


@dataclass
class Rig:
    portal: anyio.from_thread.BlockingPortal
    upstream: RawUpstream
    upstream_port: int
    proxy: Proxy
    spans: list[SpanData]
    tracing: Tracing

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"Rig(upstream={self.upstream_port}, proxy={self.proxy.url})"

    @property
    def proxy_port(self) -> int:
        return int(self.proxy.url.rsplit(":", 1)[1])


def spans_of(rig: Rig, call_id: str, timeout: float = 10.0) -> list[SpanData]:
    """The spans of the call(s) with ``X-Call-Id: call_id``, once ended and exported: the
    proxy ends a span after the answer's last byte, so the caller can be first."""
    deadline = time.monotonic() + timeout
    while True:
        rig.tracing.flush()
        found = [s for s in rig.spans if s.events and s.events[0].attributes.get(
            "http.request.header.x-call-id") == [call_id]]
        if found or time.monotonic() > deadline:
            return found


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    """The raw upstream and a proxy in front of it, on an event loop in another thread."""
    spans: list[SpanData] = []
    tracing = Tracing(spans.extend, schedule_delay_ms=20)
    upstream = RawUpstream()
    with anyio.from_thread.start_blocking_portal() as portal:
        listener = portal.call(lambda: anyio.create_tcp_listener(local_host="127.0.0.1"))
        serving = portal.start_task_soon(listener.serve, upstream.handle)
        port = listener.extra(SocketAttribute.local_port)
        with portal.wrap_async_context_manager(
                serve_proxy(f"http://127.0.0.1:{port}", tracing)) as proxy:
            yield Rig(portal, upstream, port, proxy, spans, tracing)
        serving.cancel()
        portal.call(listener.aclose)
    tracing.shutdown()


# -- byte-exact forwarding, as a property ------------------------------------------------

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]
WITH_BODY = {"POST", "PUT", "PATCH", "DELETE"}
token = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9-]{0,15}\Z")
value = st.from_regex(r"\A[!-~]([ -~]{0,40}[!-~])?\Z")
header_name = st.one_of(
    token.map(lambda t: "X-" + t),
    st.sampled_from(["Authorization", "Cookie", "Accept", "Content-Type", "If-None-Match",
                     "User-Agent", "Accept-Encoding", "Cache-Control", "x-lower-case"]))
segment = st.from_regex(r"\A([A-Za-z0-9._~-]|%[0-9A-F]{2}){0,12}\Z")
query = st.from_regex(r"\A([A-Za-z0-9=&+,;:@]|%[0-9A-F]{2}){1,30}\Z")  # `/p?` arrives as `/p`


# aiohttp refuses a request that repeats one of these (RFC 9110 singletons); `requests`
# cannot send one. Answers may repeat them: the proxy relays those as they came.
SINGLETONS = {"content-type", "user-agent", "host", "etag", "server", "content-length"}


def _once_each_singleton(headers: Headers) -> Headers:
    seen: set[str] = set()
    kept = []
    for name, value_ in headers:
        if name.lower() in SINGLETONS and name.lower() in seen:
            continue
        seen.add(name.lower())
        kept.append((name, value_))
    return kept


@st.composite
def exchanges(draw: st.DrawFn) -> dict[str, Any]:
    method = draw(st.sampled_from(METHODS))
    path = "/" + "/".join(draw(st.lists(segment, max_size=4)))
    q = draw(st.none() | query)
    status = draw(st.sampled_from([200, 201, 202, 204, 299, 301, 304, 400, 403, 404, 418,
                                   422, 500, 503]))
    bodiless = status in (204, 304)
    return {
        "method": method,
        "target": path + (f"?{q}" if q is not None else ""),
        "headers": _once_each_singleton(draw(st.lists(st.tuples(header_name, value),
                                                      max_size=8))),
        "size": draw(st.integers(0, 70_000)) if method in WITH_BODY else 0,
        "chunked": method in WITH_BODY and draw(st.booleans()),
        "pieces": draw(st.integers(1, 5)),
        "reply": {
            "status": status,
            "reason": draw(st.sampled_from(["OK", "Whatever It Says", "I'm a teapot", ""])),
            "headers": draw(st.lists(st.tuples(header_name.filter(
                lambda n: n.lower() not in ("content-length",)), value), max_size=6))
                + draw(st.sampled_from([[], [["Content-Encoding", "gzip"]],
                                        [["Content-Type", "image/png"], ["Date", "x"]]])),
            "size": 0 if bodiless else draw(st.integers(0, 100_000)),
            "seed": draw(st.integers(0, 1000)),
            "framing": draw(st.sampled_from(["length", "chunked", "close"])),
            "chunks": draw(st.integers(1, 6)),
        },
    }


def exchange(rig: Rig, spec: dict[str, Any], port: int, call_id: str) -> Answer:
    body = random.Random(call_id).randbytes(spec["size"])
    headers = [*spec["headers"], ("X-Call-Id", call_id),
               ("X-Reply", json.dumps(spec["reply"], separators=(",", ":")))]
    return call(port, spec["method"], spec["target"], headers, body, spec["chunked"],
                spec["pieces"])


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=exchanges())
def test_forwarding_is_byte_exact_both_ways(rig: Rig, spec: dict[str, Any]) -> None:
    """What the service sees through the proxy is what it sees directly (method, raw target,
    headers in order and case, body, chunked or not), and so is what the caller gets back
    (status, reason, headers, body); only hop-by-hop headers belong to each connection."""
    call_id = os.urandom(6).hex()
    direct = exchange(rig, spec, rig.upstream_port, "d" + call_id)
    proxied = exchange(rig, spec, rig.proxy_port, "p" + call_id)
    saw_direct, saw_proxied = rig.upstream.seen["d" + call_id], rig.upstream.seen["p" + call_id]

    assert (saw_proxied.method, saw_proxied.target) == (saw_direct.method, saw_direct.target)
    relabel = [("X-Call-Id", "p" + call_id) if k == "X-Call-Id" else (k, v)
               for k, v in end_to_end(saw_direct.headers)]
    assert end_to_end(saw_proxied.headers) == relabel
    chunked = [("Transfer-Encoding", "chunked")]
    assert (chunked[0] in saw_proxied.headers) == (chunked[0] in saw_direct.headers)
    assert saw_proxied.body == random.Random("p" + call_id).randbytes(spec["size"])

    assert (proxied.status, proxied.reason) == (direct.status, direct.reason)
    assert end_to_end(proxied.headers) == end_to_end(direct.headers)
    assert proxied.body == direct.body


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_bodies_of_several_mib_go_through_whole(rig: Rig, chunked: bool) -> None:
    size = 6 * 2**20 + 17
    spec = {"method": "PUT", "target": "/big?x=1", "headers": [], "size": size,
            "chunked": chunked, "pieces": 40,
            "reply": {"status": 200, "size": size, "seed": 7,
                      "framing": "chunked" if chunked else "length", "chunks": 50}}
    direct = exchange(rig, spec, rig.upstream_port, "d-big")
    proxied = exchange(rig, spec, rig.proxy_port, f"p-big-{chunked}")
    assert len(proxied.body) == size and proxied.body == direct.body
    assert rig.upstream.seen[f"p-big-{chunked}"].body == random.Random(
        f"p-big-{chunked}").randbytes(size)
    (span,) = spans_of(rig, f"p-big-{chunked}")
    request_event, response_event = span.events
    assert request_event.attributes["anvil.body.size"] == size
    assert response_event.attributes["anvil.body.size"] == size
    assert response_event.attributes["anvil.body.truncated"] is True
    assert len(response_event.attributes["anvil.body"]) > 8 * 1024  # base64 of 8 KiB


def test_keep_alive_serves_many_calls_on_one_connection(rig: Rig) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", rig.proxy_port, timeout=10)
    sockets = set()
    for i in range(5):
        conn.request("GET", f"/k/{i}", headers={"X-Call-Id": f"k{i}"})
        answer = conn.getresponse()
        assert answer.status == 200 and answer.read() == b""
        sockets.add(id(conn.sock))
    conn.close()
    assert len(sockets) == 1  # one connection from the caller, never reopened
    assert all(rig.upstream.seen[f"k{i}"].target == f"/k/{i}" for i in range(5))


def test_anvils_traceparent_is_removed_and_a_foreign_one_forwarded(rig: Rig) -> None:
    trace_id = "ab" * 16
    rig.proxy.trace_id = trace_id
    try:
        ours = TraceParent(trace_id, "cd" * 8).header()
        call(rig.proxy_port, "GET", "/tp", [("traceparent", ours), ("X-Call-Id", "tp-ours")])
        foreign = TraceParent("ef" * 16, "12" * 8).header()
        call(rig.proxy_port, "GET", "/tp", [("traceparent", foreign),
                                             ("X-Call-Id", "tp-foreign")])
    finally:
        rig.proxy.trace_id = None
    assert "traceparent" not in {k.lower() for k, _ in rig.upstream.seen["tp-ours"].headers}
    assert ("traceparent", foreign) in rig.upstream.seen["tp-foreign"].headers
    (span,) = spans_of(rig, "tp-ours")
    assert (span.trace_id, span.parent_id) == (trace_id, "cd" * 8)
    (foreign_span,) = spans_of(rig, "tp-foreign")
    assert foreign_span.trace_id != "ef" * 16  # a foreign trace is not adopted


def test_spans_follow_the_http_conventions_and_redact_secrets(rig: Rig) -> None:
    call(rig.proxy_port, "POST", "/users/7?active=1",
         [("Authorization", "Bearer s3cret"), ("X-Auth-Token", "t0k"), ("Cookie", "a=b"),
          ("X-Call-Id", "conv"),
          ("X-Reply", json.dumps({"status": 403, "headers": [["Set-Cookie", "s=1"]],
                                  "size": 3}))], b'{"name": "\xc3\xa9"}')
    (span,) = spans_of(rig, "conv")
    a = span.attributes
    assert span.kind == "client" and span.name == "POST"
    assert a["http.request.method"] == "POST"
    assert a["url.full"] == f"http://127.0.0.1:{rig.upstream_port}/users/7?active=1"
    assert (a["url.query"], a["server.address"], a["server.port"]) == (
        "active=1", "127.0.0.1", rig.upstream_port)
    assert a["http.response.status_code"] == 403 and a["error.type"] == "403"
    request_event, response_event = span.events
    r = request_event.attributes
    for secret in ("authorization", "x-auth-token", "cookie"):
        assert r[f"http.request.header.{secret}"] == [REDACTED]
    assert r["anvil.body"] == '{"name": "é"}' and r["anvil.body.encoding"] == "utf-8"
    assert response_event.attributes["http.response.header.set-cookie"] == [REDACTED]


# -- faults: the service's, and the proxy's own ------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_refusing_service_looks_the_same_through_the_proxy() -> None:
    """The service's fault reaches the caller as it would directly (a connection error),
    is recorded on the span, and is not a proxy fault."""
    spans: list[SpanData] = []
    tracing = Tracing(spans.extend)
    port = _closed_port()
    async with serve_proxy(f"http://127.0.0.1:{port}", tracing) as proxy:
        def both() -> tuple[type[BaseException], type[BaseException]]:
            kinds = []
            for url in (f"http://127.0.0.1:{port}/x", proxy.url + "/x"):
                with pytest.raises(requests.RequestException) as caught:
                    requests.get(url, timeout=10)
                kinds.append(caught.type)
            return kinds[0], kinds[1]

        direct, proxied = await anyio.to_thread.run_sync(both)
    assert issubclass(direct, requests.ConnectionError)
    assert issubclass(proxied, requests.ConnectionError)
    assert proxy.faults == []
    await anyio.to_thread.run_sync(tracing.shutdown)
    (span,) = spans
    assert span.status == "error" and "ClientConnectorError" in span.attributes["error.type"]


async def test_an_answer_cut_short_by_the_service_is_cut_short_for_the_caller(
        rig: Rig) -> None:
    async def cut(conn: SocketStream) -> None:
        async with conn:
            await conn.receive()
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    spans: list[SpanData] = []
    tracing = Tracing(spans.extend)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, cut)
        async with serve_proxy(f"http://127.0.0.1:{port}", tracing) as proxy:
            def both() -> list[type[BaseException]]:
                kinds = []
                for url in (f"http://127.0.0.1:{port}/", proxy.url + "/"):
                    with pytest.raises(requests.RequestException) as caught:
                        requests.get(url, timeout=10)
                    kinds.append(caught.type)
                return kinds

            direct, proxied = await anyio.to_thread.run_sync(both)
        tg.cancel_scope.cancel()
    assert proxied is direct  # ChunkedEncodingError (IncompleteRead) both ways
    assert proxy.faults == []
    await anyio.to_thread.run_sync(tracing.shutdown)
    assert spans[0].status == "error" and spans[0].attributes["http.response.status_code"] == 200


PROXY_OUT_OF_FILES = '''
import asyncio, json, os, resource, sys
from aiohttp import web
from engine._proxy import serve_proxy
from telemetry import Tracing

async def main():
    async def ok(request):
        return web.Response(text="fine")
    runner = web.ServerRunner(web.Server(ok))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    upstream = f"http://127.0.0.1:{runner.addresses[0][1]}"
    async with serve_proxy(upstream, Tracing(lambda spans: None)) as proxy:
        print(proxy.url, flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # the caller's connection is in use
        # Run out of descriptors: the lowest free one is already past the limit.
        lowest_free = os.open(os.devnull, os.O_RDONLY)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        print("limited", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        print(json.dumps(proxy.faults), flush=True)
    await runner.cleanup()

asyncio.run(main())
'''


def test_a_proxy_that_cannot_open_a_socket_says_it_is_its_own_fault() -> None:
    """Out of file descriptors in the proxy: the call is answered 502 with the fault
    header (not a connection error the candidate would be blamed for) and recorded."""
    proc = subprocess.Popen([sys.executable, "-c", PROXY_OUT_OF_FILES], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None
    url = proc.stdout.readline().strip()
    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("GET", "/warm-up")  # this keep-alive connection is accepted and works
        assert conn.getresponse().read() == b"fine"
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "limited"
        conn.request("GET", "/anything")
        answer = conn.getresponse()
        body = answer.read()
        proc.stdin.write("\n")
        proc.stdin.flush()
        faults = json.loads(proc.stdout.readline())
    finally:
        conn.close()
        proc.kill()
        proc.communicate()
    assert answer.status == 502, body
    assert "Too many open files" in (answer.getheader(FAULT_HEADER) or "")
    assert len(faults) == 1 and "GET /anything" in faults[0]


async def test_check_turns_a_recorded_proxy_fault_into_a_transient_harness_error(
        tiny_task: Task, tmp_path: Path) -> None:
    from engine import Evaluation, HarnessError

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    async with TraceRecorder(store) as recorder:
        attached = recorder.attach(Evaluation("r", "r.0", tiny_task, tmp_path, tmp_path))
        attached.check()  # nothing yet
        async with serve_proxy("http://127.0.0.1:1", recorder.tracing) as proxy:
            attached.proxy = proxy
            proxy.faults.append("GET /x: cannot open a connection to the service: EMFILE")
            with pytest.raises(HarnessError) as raised:
                await attached.oracle_finished()
    assert raised.value.transient and "EMFILE" in str(raised.value)


# -- a real evaluation: every call once, under its item, in the store ---------------------

TRACED_ITEMS = '''
import os

import pytest
import requests

BASE = os.environ["BASE_URL"]


@pytest.mark.category("state")
def test_three_calls():
    key = "k3"
    requests.put(f"{BASE}/items/{key}", json={"value": "v"}, timeout=5)
    assert requests.get(f"{BASE}/items/{key}", timeout=5).status_code == 200
    assert requests.get(f"{BASE}/items/nope", timeout=5).status_code == 404


@pytest.mark.category("api_surface")
def test_one_call_in_a_session():
    with requests.Session() as s:
        assert s.get(f"{BASE}/health", timeout=5).json() == {"status": "ok"}


@pytest.mark.category("validation")
def test_fails_after_two_calls():
    requests.get(f"{BASE}/", timeout=5)
    r = requests.get(f"{BASE}/items/missing", timeout=5)
    assert r.status_code == 200, "expected the missing item"


@pytest.mark.category("workflow")
def test_no_calls():
    assert True
'''
EXPECTED_CALLS = {"test_three_calls": 3, "test_one_call_in_a_session": 1,
                  "test_fails_after_two_calls": 2, "test_no_calls": 0}


@pytest.fixture
def traced_task(tmp_path: Path) -> Task:
    root = tmp_path / "traced-task"
    shutil.copytree(FIXTURES / "tiny_task", root)
    for old in (root / "oracle").glob("test_*.py"):
        old.unlink()
    (root / "oracle" / "test_traced.py").write_text(TRACED_ITEMS)
    return load_task(root)


async def test_every_call_of_an_evaluation_is_one_span_under_its_item(
    traced_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    proxies: list[EvaluationTrace] = []
    async with TraceRecorder(store) as recorder:
        def attach(ev: Any) -> EvaluationTrace:
            proxies.append(recorder.attach(ev))
            return proxies[-1]

        (result,), store, _ = await run_engine([(traced_task, make_submission("ok"))],
                                               tmp_path, cache_dir, attachments=[attach])
    assert result.verdict is Verdict.FAIL and result.items_failed == 1, result.reason
    (proxy,) = proxies
    assert proxy.proxy is not None and proxy.proxy.calls == 6 and not proxy.proxy.faults
    spans = store.spans(result.evaluation_id)
    (root,) = [s for s in spans if s.parent_id is None]
    assert root.name == "evaluation" and {s.trace_id for s in spans} == {root.trace_id}
    # evaluation -> its phases, one after the other, within it
    phases = sorted((s for s in spans if s.parent_id == root.span_id), key=lambda s: s.start_ns)
    assert [p.name for p in phases] == [p.value for p in Phase]
    assert root.start_ns <= phases[0].start_ns and phases[-1].end_ns <= root.end_ns
    assert all(a.end_ns <= b.start_ns for a, b in zip(phases, phases[1:], strict=False))
    by_phase = {p.name: p for p in phases}
    # health -> the probes anvil sent until the service answered
    probes = [s for s in spans if s.attributes_dict().get("anvil.probe") == "health"]
    assert probes and all(p.parent_id == by_phase["health"].span_id for p in probes)
    assert probes[-1].attributes_dict()["http.response.status_code"] == 200
    # oracle -> items -> the calls each item sent through the proxy
    items = {s.name.rsplit("::", 1)[1]: s for s in spans if s.kind == "internal"
             and s.parent_id == by_phase["oracle"].span_id}
    assert set(items) == set(EXPECTED_CALLS)
    http_spans = [s for s in spans if s.kind == "client"
                  and "anvil.peer" not in s.attributes_dict()]
    assert len(http_spans) == sum(EXPECTED_CALLS.values())  # each call exactly once
    for name, item in items.items():
        assert item.span_id == derived_span_id(root.trace_id, item.name)
        under = [s for s in http_spans if s.parent_id == item.span_id]
        assert len(under) == EXPECTED_CALLS[name], name
        # (its end may trail the item's by microseconds: the proxy ends a span after the
        # last byte went out, while the item may already have finished)
        assert all(item.start_ns <= s.start_ns <= item.end_ns for s in under)
    failed = items["test_fails_after_two_calls"]
    assert failed.status == "error" and "expected the missing item" in failed.status_message
    assert json.loads(failed.events)[0]["name"] == "exception"
    statuses = sorted(s.attributes_dict()["http.response.status_code"] for s in http_spans)
    assert statuses == [200, 200, 200, 200, 404, 404]
    for span in http_spans:  # the service never saw anvil's traceparent
        headers = {k for e in span.events_list() for k in e["attributes"]}
        assert "http.request.header.traceparent" not in headers


def test_default_attachments_make_a_recording_proxy(tiny_task: Task, tmp_path: Path) -> None:
    from engine import Evaluation

    store = Store(f"sqlite:///{tmp_path / 'a.db'}")
    (factory,) = default_attachments(store)
    attached = factory(Evaluation("r", "r.0", tiny_task, tmp_path, tmp_path))
    assert isinstance(attached, EvaluationTrace) and attached.provides == frozenset()


async def test_examples_keep_their_expected_verdicts_through_the_proxy(
        tmp_path: Path, cache_dir: Path) -> None:
    """The proxy changes no verdict: every bundled example gets the verdict (and the failed
    categories) written in EXPECTED.toml while every oracle call goes through it."""
    examples = ROOT / "examples" / "taskboard"
    expected = tomllib.loads((examples / "EXPECTED.toml").read_text())
    folders = sorted(p for p in examples.iterdir() if p.is_dir())
    task = load_task(ROOT / "tasks" / "taskboard")
    store = Store(f"sqlite:///{tmp_path / 'traces.db'}")
    async with TraceRecorder(store) as recorder:
        results, _, _ = await run_engine([(task, f) for f in folders], tmp_path, cache_dir,
                                         attachments=[recorder.attach])
    for folder, result in zip(folders, results, strict=True):
        want = expected[folder.name]
        got = {"verdict": result.verdict.value,
               "phase": result.phase.value if result.phase else None}
        assert got == {"verdict": want["verdict"], "phase": want.get("phase")}, (
            f"{folder.name}: {result.reason}")
        if got["phase"] == "oracle":
            categories = sorted({i.category for i in result.items if not i.passed})
            assert categories == want["categories"], folder.name
        if result.items:  # it reached the oracle: its calls are in the store
            spans = store.spans(result.evaluation_id)
            assert sum(1 for s in spans if s.kind == "client") > len(result.items)


async def test_a_call_the_item_deadline_cut_is_recorded_and_the_proxy_lets_go(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
) -> None:
    """An item that times out (the service sleeps on /slow) fails as it would without the
    proxy; the proxied call's span ends as cancelled, and teardown does not wait on it."""
    store = Store(f"sqlite:///{tmp_path / 'anvil.db'}")
    async with TraceRecorder(store) as recorder:
        (result,), store, _ = await run_engine([(tiny_task, make_submission("slow_item"))],
                                               tmp_path, cache_dir,
                                               attachments=[recorder.attach])
    assert result.verdict is Verdict.FAIL and result.phase is not None
    assert [i.category for i in result.items if i.failed] == ["workflow"]
    assert result.duration_s < 20
    spans = store.spans(result.evaluation_id)
    (slow,) = [s for s in spans if s.attributes_dict().get("url.path") == "/slow"]
    assert slow.status == "error" and slow.attributes_dict()["error.type"] == "cancelled"
    (item,) = [s for s in spans if s.name.endswith("::test_slow_answers")]
    assert slow.parent_id == item.span_id and "timed out" in item.status_message


def test_expect_100_continue_is_answered_and_the_body_forwarded(rig: Rig) -> None:
    body = b"b" * 5000
    with socket.create_connection(("127.0.0.1", rig.proxy_port), timeout=10) as sock:
        sock.sendall(b"POST /expect HTTP/1.1\r\nHost: anvil.test\r\nX-Call-Id: expect\r\n"
                     b"Expect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
        interim = sock.recv(1024)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n")  # before any body was sent
        sock.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(1024)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    seen = rig.upstream.seen["expect"]
    assert seen.body == body and "expect" not in {k.lower() for k, _ in seen.headers}
