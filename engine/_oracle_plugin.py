"""pytest plugin loaded into the oracle subprocess (``-p engine._oracle_plugin``).

It registers the ``category`` marker, bounds every item by a deadline
(``ANVIL_ITEM_TIMEOUT`` seconds, enforced with SIGALRM so a request blocked
in ``recv`` is interrupted), and appends JSON lines to ``ANVIL_RESULTS`` as
things happen, so the engine can stream them:

* ``{"collected": N}`` once collection is done (the engine then requires N items);
* ``{"start": nodeid, "ts": unix}`` when an item starts (to attribute calls to it);
* one record per finished item (nodeid, outcome, category, duration, message);
* ``{"collect_error": nodeid, "message": ...}`` for a file that does not collect;
* ``{"finished": exitstatus}`` when the session ends normally.

It imports nothing but pytest and the standard library: it runs in every oracle
process, whose start-up cost is paid per evaluation.
"""

from __future__ import annotations

import contextlib
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


class ItemTimeout(Exception):
    """Raised inside an oracle item that ran past its deadline."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "category(name): the oracle item's category")


def _write(record: dict[str, Any]) -> None:
    path = os.environ.get("ANVIL_RESULTS")
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


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"collected": len(session.items)})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write({"finished": int(exitstatus)})


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
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


_state: dict[str, dict[str, Any]] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    entry = _state.setdefault(
        item.nodeid,
        {"nodeid": item.nodeid, "category": _category(item), "outcome": "passed",
         "duration": 0.0, "message": "", "traceback": "", "started": time.time()},
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
    if entry is not None:
        entry.pop("started", None)
        _write(entry)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"collect_error": report.nodeid or ".", "message": report.longreprtext[-4000:]})
