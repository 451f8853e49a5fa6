"""Failure explanations: for each failed oracle item, one line that says what its trace
shows.

A pure function of what a run stored: the evaluation's spans (the item's span and the
HTTP calls under it, with their contract violations) and the item's result (its
assertion message and traceback). The first rule that fits wins:

1. a harness-side fault: the proxy failed a call through its own fault, or the
   oracle could not reach the proxy at all (connection refused): anvil's, not the
   candidate's;
2. a wrong status: the assertion compares a status code (``assert 404 == 200``,
   ``expected 403, got 200``), checked against the item's last call;
3. a mock call: the failing line reads a mock's journal (``service_calls``,
   ``.journal(``, ``.requests(``) and finds none (a required call is missing: the line
   says what the mock did receive during the item), counts the calls and finds too few
   or too many (``assert len(...) >= 3`` failing as ``assert 1 >= 3``), or it inspects
   a journaled call's
   body (``call["body"]``, ``body_of(``) and the assertion rejects it (the payload is
   wrong: the line quotes the body the service sent). What the mocks received is in
   the trace: each call the service made to a mock is a span under the item;
4. a response shape violation: a call of the item broke the task's contract;
5. the service dropped a call (no answer at all);
6. otherwise the assertion itself, with the item's last call for context.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from telemetry import VIOLATION_EVENT, VIOLATION_KIND, VIOLATION_MESSAGE

from ._store import SpanRecord

LINE_LIMIT = 220

_STATUS_ASSERT = re.compile(r"assert (\d{3}) (==|!=|in|not in) (.+?)\s*$", re.M)
_STATUS_WHERE = re.compile(r"where (\d{3}) = <Response \[\d{3}\]>\.status_code")
_EXPECTED_GOT = re.compile(r"expected (?:status )?(\d{3})\D{1,12}?got (\d{3})", re.I)
_MOCK_READ = re.compile(r"(service_calls|\.journal|\.requests)\(([^)]*)\)")
_MOCK_ROUTE = re.compile(r"""["'](GET|POST|PUT|PATCH|DELETE)["']\s*,\s*["']([^"']+)["']""")
_MOCK_METHOD = re.compile(r"""method\s*=\s*["'](GET|POST|PUT|PATCH|DELETE)["']""")
_MOCK_PATH = re.compile(r"""path\s*=\s*["']([^"']+)["']""")
#: An assertion on how many calls a mock received: ``assert 1 >= 3``.
_COUNT = re.compile(r"assert (\d+) (>=|==|>|<=|<|!=) (\d+)\s*$", re.M)
#: A failing line that inspects what a mock journaled of a call (its body).
_MOCK_BODY = re.compile(r"""\[["']body["']\]|body_of\(|\.json_body\b""")
_NONE_FOUND = re.compile(r"expected \d+, got 0\)|assert 0 ==|== \[\]|assert \[\] ==|"
                         r"StopIteration|IndexError: list index out of range")
_REFUSED = re.compile(r"Connection refused|ConnectionRefusedError|\[Errno 111\]")


class FailedItem(Protocol):
    """What an explanation needs of a failed item (an ``ItemResult`` or ``ItemRecord``)."""

    @property
    def nodeid(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def traceback(self) -> str: ...


@dataclass(frozen=True)
class Explanation:
    """Why one item failed, as its trace shows it.

    ``kind`` is ``harness``, ``status``, ``mock_missing``, ``mock_count``, ``mock_payload``,
    ``contract``, ``dropped`` or ``assertion``; ``line`` is the sentence shown to the user.
    """

    nodeid: str
    kind: str
    line: str


def explain(spans: Sequence[SpanRecord], items: Iterable[FailedItem]) -> list[Explanation]:
    """One :class:`Explanation` per item of ``items`` (pass the failed ones), in order.

    ``spans`` are the evaluation's stored spans; only its latest attempt's are read.
    """
    latest = _latest(spans)
    calls = _calls_by_item(latest, lambda s: s.kind == "client")
    mocked = _calls_by_item(latest, lambda s: "anvil.mock.instance" in s.attributes_dict())
    return [_explain(item, calls.get(item.nodeid, []), mocked.get(item.nodeid, []))
            for item in items]


@dataclass(frozen=True)
class _ItemSpan:
    nodeid: str
    message: str
    traceback: str


def explain_trace(spans: Sequence[SpanRecord]) -> list[Explanation]:
    """An explanation for each failed item of the latest attempt, from its spans alone (an
    item's span keeps its assertion message and traceback), earliest item first."""
    latest = _latest(spans)
    failed = []
    for span in sorted(latest, key=lambda s: s.start_ns):
        attributes = span.attributes_dict()
        if "anvil.item.nodeid" not in attributes or span.status != "error":
            continue
        stack = next((str(e["attributes"].get("exception.stacktrace", ""))
                      for e in span.events_list() if e["name"] == "exception"), "")
        failed.append(_ItemSpan(str(attributes["anvil.item.nodeid"]), span.status_message,
                                stack))
    return explain(latest, failed)


def _latest(spans: Sequence[SpanRecord]) -> list[SpanRecord]:
    roots = [s for s in spans if s.parent_id is None]
    if not roots:
        return []
    trace_id = max(roots, key=lambda s: s.start_ns).trace_id
    return [s for s in spans if s.trace_id == trace_id]


def _calls_by_item(spans: Sequence[SpanRecord],
                   pick: Callable[[SpanRecord], bool]) -> dict[str, list[SpanRecord]]:
    """Each item's spans that ``pick`` chooses, anywhere under its span, earliest first."""
    items = {s.span_id: str(s.attributes_dict()["anvil.item.nodeid"]) for s in spans
             if "anvil.item.nodeid" in s.attributes_dict()}
    parents = {s.span_id: s.parent_id for s in spans}
    found: dict[str, list[SpanRecord]] = {}
    for span in spans:
        if not pick(span):
            continue
        at: str | None = span.parent_id
        while at is not None and at not in items:
            at = parents.get(at)
        if at is not None:
            found.setdefault(items[at], []).append(span)
    for calls in found.values():
        calls.sort(key=lambda s: s.start_ns)
    return found


def _explain(item: FailedItem, calls: list[SpanRecord],
             mocked: list[SpanRecord]) -> Explanation:
    text = f"{item.message}\n{item.traceback}"
    last = calls[-1] if calls else None

    def said(kind: str, line: str) -> Explanation:
        return Explanation(item.nodeid, kind, _clip(line))

    faults = [s for s in calls if s.attributes_dict().get("anvil.proxy.fault")]
    if faults:
        fault = faults[0]
        return said("harness", f"harness-side fault: the proxy failed {_call(fault)}: "
                               f"{fault.attributes_dict()['anvil.proxy.fault']}")
    if _REFUSED.search(text):
        where = f" (after {_call(last)})" if last is not None else ""
        return said("harness", "harness-side fault: connection refused reaching the service's "
                               f"proxy{where}")
    status = _wrong_status(item.message, last)
    if status is not None:
        return said("status", status)
    mock = _mock(item, text, mocked)
    if mock is not None:
        return mock
    shapes = [(s, v) for s in calls for v in _violations(s, "response")]
    if shapes:
        span, violation = shapes[-1]  # the latest: nearest to the failing assertion
        more = f" (+{len(shapes) - 1} more)" if len(shapes) > 1 else ""
        return said("contract", f"response shape violation: {violation}{more}")
    dropped = [s for s in calls if s.status == "error"
               and "http.response.status_code" not in s.attributes_dict()]
    if dropped:
        return said("dropped", f"the service answered nothing to {_call(dropped[-1])}: "
                               f"{_first(dropped[-1].status_message)}")
    context = f" (last call: {_call(last)} → {_status(last)})" if last is not None else (
        " (the item made no call to the service)")
    return said("assertion", f"assertion failed: {_first(item.message) or 'no message'}"
                             f"{context}")


def _wrong_status(message: str, last: SpanRecord | None) -> str | None:
    """``wrong status: expected 403, got 200 from POST /x`` when the assertion is about one."""
    got: str | None = None
    expected: str | None = None
    found = _EXPECTED_GOT.search(message)
    if found:
        expected, got = found.group(1), found.group(2)
    else:
        compared = _STATUS_ASSERT.search(message)
        where = _STATUS_WHERE.search(message)
        if compared and (where or (last is not None and _status(last) == compared.group(1))):
            got, op, rest = compared.groups()
            if where and where.group(1) != got:  # the ``assert 200 == r.status_code`` form
                got, rest = where.group(1), compared.group(1)
            expected = {"==": "", "in": "one of ", "!=": "anything but ",
                        "not in": "none of "}[op] + rest.strip()
    if got is None or expected is None:
        return None
    call = ""
    if last is not None and _status(last) == got:
        call = f" from {_call(last)}"
    return f"wrong status: expected {expected}, got {got}{call}"


def _mock(item: FailedItem, text: str, mocked: list[SpanRecord]) -> Explanation | None:
    """A failure at a line that reads a mock's journal (none found: a call is missing), or
    that inspects a journaled call's body (its payload is wrong). ``mocked``: the calls
    the mocks received during the item."""
    source = [ln for ln in item.traceback.splitlines()
              if ln.strip() and not ln.startswith("E ") and not ln.lstrip().startswith("^")]
    failing = source[-1] if source else ""
    read = _MOCK_READ.search(failing)
    call = _mock_route(read.group(2)) if read is not None else None
    counted = _COUNT.search(item.message) if read is not None and "len(" in failing else None
    if counted is not None and counted.group(1) != "0":
        got, op, want = counted.groups()
        what = call or "calls"
        times = "once" if got == "1" else f"{got} times"
        return Explanation(item.nodeid, "mock_count", _clip(
            f"mock calls: {what} reached the mock {times} during this item, the oracle "
            f"expects {op} {want}"))
    if read is not None and (_NONE_FOUND.search(text) or counted is not None):
        what = call or "the expected call"
        got = ", ".join(f"{_mock_call(s)} → {_status(s)}" for s in mocked[:3])
        more = f" (+{len(mocked) - 3} more)" if len(mocked) > 3 else ""
        received = f"it received {got}{more}" if got else "the mocks received no call"
        return Explanation(item.nodeid, "mock_missing", _clip(
            f"required mock call missing: no {what} during this item; {received}"))
    if read is not None or _MOCK_BODY.search(failing):
        sent = ""
        if call is not None:
            matching = [s for s in mocked if _call(s) == call]
        else:
            matching = [s for s in mocked if s.attributes_dict().get(
                "http.request.method") != "GET"] or mocked
        if matching:
            body = _body(matching[-1], "http.request")
            sent = f"{_mock_call(matching[-1])} sent {body or 'no body'}: "
        return Explanation(item.nodeid, "mock_payload", _clip(
            f"mock call with the wrong payload: {sent}{_first(_assertion(item.message))}"))
    return None


def _mock_route(arguments: str) -> str | None:
    """``POST /v1/x`` from a journal read's arguments (positional or by keyword)."""
    positional = _MOCK_ROUTE.search(arguments)
    if positional is not None:
        return f"{positional.group(1)} {positional.group(2)}"
    method, path = _MOCK_METHOD.search(arguments), _MOCK_PATH.search(arguments)
    if method is not None and path is not None:
        return f"{method.group(1)} {path.group(1)}"
    return None


def _mock_call(span: SpanRecord) -> str:
    return f"{span.attributes_dict().get('anvil.mock.instance', 'mock')} ← {_call(span)}"


def _body(span: SpanRecord, event: str) -> str:
    return next((" ".join(str(e["attributes"].get("anvil.body", "")).split())[:120]
                 for e in span.events_list() if e["name"] == event), "")


def _assertion(message: str) -> str:
    return message.removeprefix("AssertionError: ")


def _violations(span: SpanRecord, kind: str) -> list[str]:
    return [str(e["attributes"].get(VIOLATION_MESSAGE, "")) for e in span.events_list()
            if e["name"] == VIOLATION_EVENT and e["attributes"].get(VIOLATION_KIND) == kind]


def _call(span: SpanRecord) -> str:
    attributes: dict[str, Any] = span.attributes_dict()
    method = attributes.get("http.request.method_original") or attributes.get(
        "http.request.method", span.name)
    return f"{method} {attributes.get('url.path', '')}"


def _status(span: SpanRecord) -> str:
    code = span.attributes_dict().get("http.response.status_code")
    return str(code) if code is not None else "no answer"


def _first(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _clip(line: str) -> str:
    flat = " ".join(line.split())
    return flat if len(flat) <= LINE_LIMIT else flat[: LINE_LIMIT - 1] + "…"
