"""pytest plugin loaded into the oracle subprocess (``-p engine._oracle_plugin``).

It registers the ``category`` marker and the scoring markers (``tier``,
``visibility``, ``requirement``, ``level``), bounds every item by a deadline
(``ANVIL_ITEM_TIMEOUT`` seconds, enforced with SIGALRM so a request blocked
in ``recv`` is interrupted), and appends JSON lines to ``ANVIL_RESULTS`` as
things happen, so the engine can stream them:

* ``{"collected": N}`` once collection is done (the engine then requires N items);
* ``{"start": nodeid, "ts": unix}`` when an item starts (to attribute calls to it);
* one record per finished item (nodeid, outcome, category, markers, duration, message);
  ``markers`` holds the item's scoring markers with their defaults filled in
  (``tier`` "base", ``visibility`` "public"; ``requirement`` and ``level`` only
  when the item carries them);
* ``{"collect_error": nodeid, "message": ...}`` for a file that does not collect;
* ``{"finished": exitstatus}`` when the session ends normally.

With ``ANVIL_TRACEPARENT`` set (the evaluation's trace, from the recording proxy), each
item is a span: its record goes to ``ANVIL_SPANS`` when the item ends, and every
``requests`` call the item makes carries a W3C ``traceparent`` naming the item's span,
so the proxy nests the call under it.

It imports nothing but pytest, the standard library and (when tracing) requests: it runs
in every oracle process, whose start-up cost is paid per evaluation.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest

MESSAGE_LIMIT = 2000
TRACEBACK_LIMIT = 6000


# Registered here so every oracle may use them under --strict-markers; `anvil report` scores
# by them (engine._metrics).
SCORING_MARKERS = {
    "tier(name)": "the oracle round that added the item: base, evolved-r1, evolved-r2, ...",
    "visibility(name)": "public (shown item by item to candidates) or private",
    "requirement(id)": "the requirement the item checks (e.g. R3)",
    "level(name)": "leaf (one endpoint), mid (a chain) or root (a user journey)",
}
MARKER_DEFAULTS = {"tier": "base", "visibility": "public"}


class ItemTimeout(Exception):
    """Raised inside an oracle item that ran past its deadline."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "category(name): the oracle item's category")
    for name, text in SCORING_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    _start_tracing()


# -- items as spans ----------------------------------------------------------------------

_trace: dict[str, str] = {}  # trace_id, parent_id, spans (file), current (traceparent)
_item_start_ns: dict[str, int] = {}


def _item_span_id(trace_id: str, nodeid: str) -> str:
    """The item's span id, derived so the engine computes the same one (it is
    ``telemetry.derived_span_id``; a test keeps the two equal)."""
    digest = hashlib.sha256(f"{trace_id}/{nodeid}".encode()).hexdigest()[:16]
    return digest if digest != "0" * 16 else "1" * 16


def _start_tracing() -> None:
    version, _, rest = os.environ.get("ANVIL_TRACEPARENT", "").partition("-")
    trace_id, _, rest = rest.partition("-")
    parent_id = rest.partition("-")[0]
    if version != "00" or len(trace_id) != 32 or len(parent_id) != 16:
        return
    _trace.update(trace_id=trace_id, parent_id=parent_id,
                  spans=os.environ.get("ANVIL_SPANS", ""))
    try:
        import requests
    except ImportError:  # an oracle that does not use requests: its calls are not linked
        return
    send = requests.Session.send
    if getattr(send, "_anvil_traced", False):
        return

    def traced_send(self: requests.Session, request: requests.PreparedRequest,
                    **kwargs: Any) -> requests.Response:
        current = _trace.get("current")
        if current and "traceparent" not in request.headers:
            request.headers["traceparent"] = current  # the proxy strips it again
        return send(self, request, **kwargs)

    traced_send._anvil_traced = True  # type: ignore[attr-defined]
    requests.Session.send = traced_send  # type: ignore[method-assign]


def _item_started(nodeid: str) -> None:
    if "trace_id" not in _trace:
        return
    _item_start_ns[nodeid] = time.time_ns()
    span_id = _item_span_id(_trace["trace_id"], nodeid)
    _trace["current"] = f"00-{_trace['trace_id']}-{span_id}-01"


def _item_finished(nodeid: str, entry: dict[str, Any] | None) -> None:
    """Append the item's span record (``telemetry.SpanData`` as a dict) to ANVIL_SPANS."""
    _trace.pop("current", None)
    start = _item_start_ns.pop(nodeid, None)
    if start is None or not _trace.get("spans"):
        return
    end = time.time_ns()
    entry = entry or {}
    outcome = entry.get("outcome", "error")
    message = entry.get("message", "")
    failed = outcome in ("failed", "error")
    events = []
    if failed:
        first = message.partition("\n")[0]
        kind = first.partition(":")[0].strip()
        events.append({"name": "exception", "ts_ns": end, "attributes": {
            "exception.type": kind if kind.isidentifier() else "Failed",
            "exception.message": message,
            "exception.stacktrace": entry.get("traceback", ""),
        }})
    attributes = {"anvil.item.nodeid": nodeid, "anvil.item.outcome": outcome}
    if entry.get("category"):
        attributes["anvil.item.category"] = entry["category"]
    _write({
        "trace_id": _trace["trace_id"], "span_id": _item_span_id(_trace["trace_id"], nodeid),
        "parent_id": _trace["parent_id"], "name": nodeid, "kind": "internal",
        "start_ns": start, "end_ns": end, "status": "error" if failed else "unset",
        "status_message": message if failed else "", "attributes": attributes,
        "events": events,
    }, _trace["spans"])


def _write(record: dict[str, Any], path: str | None = None) -> None:
    path = path or os.environ.get("ANVIL_RESULTS")
    if not path:
        return
    # One write() of one whole line on an O_APPEND file: the reader never sees half a record
    # unless the process dies inside write(), and then the line has no newline yet.
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


#: Markers whose value is one of a few words: a typo would score an item in no group.
MARKER_VALUES = {"visibility": ("public", "private"), "level": ("leaf", "mid", "root")}


def pytest_collection_finish(session: pytest.Session) -> None:
    wrong = [f"{item.nodeid}: {name}({value!r}) is not one of {', '.join(allowed)}"
             for item in session.items for name, allowed in MARKER_VALUES.items()
             if (value := _markers(item).get(name, allowed[0])) not in allowed]
    if wrong:  # the oracle does not collect: no verdict rests on a misfiled item
        for problem in wrong:
            _write({"collect_error": problem.split(":", 1)[0], "message": problem})
        raise pytest.UsageError("; ".join(wrong[:5]))
    _write({"collected": len(session.items)})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write({"finished": int(exitstatus)})


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _item_started(nodeid)
    mark = {"start": nodeid, "ts": time.time()}
    marks = os.environ.get("ANVIL_MARKS")  # host:port of the engine's mark listener
    if not marks:
        _write(mark)
        return
    # Synchronous: the item runs only once the engine knows it started, so every call the
    # service makes from now on is attributed to it, however fast the item is.
    host, _, port = marks.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall((json.dumps(mark) + "\n").encode())
            conn.recv(16)
    except OSError:
        _write(mark)  # the engine will still see it, later


@contextlib.contextmanager
def _deadline() -> Iterator[None]:
    timeout = float(os.environ.get("ANVIL_ITEM_TIMEOUT") or 0)
    if timeout <= 0:
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise ItemTimeout(f"oracle item timed out after {timeout:g}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _deadline():
        return (yield)


def _category(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("category")
    if marker and marker.args:
        return str(marker.args[0])
    return None


def _markers(item: pytest.Item) -> dict[str, str]:
    """The item's scoring markers (the closest of each), defaults filled in."""
    found = dict(MARKER_DEFAULTS)
    for name in ("tier", "visibility", "requirement", "level"):
        marker = item.get_closest_marker(name)
        if marker and marker.args:
            found[name] = str(marker.args[0])
    return found


_state: dict[str, dict[str, Any]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    entry = _state.setdefault(
        item.nodeid,
        {"nodeid": item.nodeid, "category": _category(item), "markers": _markers(item),
         "outcome": "passed", "duration": 0.0, "message": "", "traceback": "",
         "started": time.time()},
    )
    entry["duration"] += report.duration
    if report.failed and entry["outcome"] == "passed":
        entry["outcome"] = "failed" if report.when == "call" else "error"
        if call.excinfo is not None:
            entry["message"] = call.excinfo.exconly()[:MESSAGE_LIMIT]
        text = report.longreprtext
        entry["traceback"] = text[-TRACEBACK_LIMIT:]
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        entry["message"] = str(report.longrepr)[:MESSAGE_LIMIT]
    return report


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    entry = _state.pop(nodeid, None)
    _item_finished(nodeid, entry)
    if entry is not None:
        entry.pop("started", None)
        _write(entry)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"collect_error": report.nodeid or ".", "message": report.longreprtext[-4000:]})
