"""pytest plugin loaded into the oracle subprocess (``-p engine._oracle_plugin``).

It registers the ``category`` marker, bounds every item by a deadline
(``ANVIL_ITEM_TIMEOUT`` seconds, enforced with SIGALRM so a request blocked
in ``recv`` is interrupted), and appends one JSON line per finished item to
``ANVIL_RESULTS`` as soon as the item ends, so the engine can stream them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
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
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()


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
