"""The oracle runner: the task's pytest items against ``BASE_URL``, in a subprocess.

Items stream back through a JSON-lines file written by ``engine._oracle_plugin``
as each item ends. The subprocess has its own process group so a deadline or
a cancellation kills it whole.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, SocketAttribute, SocketStream

from ._errors import HarnessError, OracleBroken
from ._logs import AsyncCappedLog
from ._oracle_worker import ForkedOracle, OracleWorker, WorkerGone
from .types import Outcome

log = logging.getLogger("anvil.engine")

PLUGIN = "engine._oracle_plugin"
MOCK_FIXTURES = "mocks._fixtures"  # fixtures over the evaluation's mock instances


@dataclass(frozen=True)
class ItemResult:
    nodeid: str
    outcome: Outcome
    category: str | None
    duration: float
    message: str = ""
    traceback: str = ""
    # Scoring markers (tier, visibility, requirement, level), defaults filled in by the plugin.
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    @property
    def failed(self) -> bool:
        """Failed or errored: what makes a verdict ``fail`` (a skip is neither)."""
        return self.outcome in (Outcome.FAILED, Outcome.ERROR)


OnItem = Callable[[ItemResult], Awaitable[None]]


def oracle_command(oracle_dir: Path, workdir: Path, extra: list[str] | None = None) -> list[str]:
    """The pytest command line: no user config, no plugin autoload, our plugins only."""
    ini = workdir / "oracle-pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    return [
        sys.executable, "-m", "pytest", str(oracle_dir),
        "-c", str(ini), "--rootdir", str(oracle_dir), "--confcutdir", str(oracle_dir),
        "-p", PLUGIN, "-p", MOCK_FIXTURES, "-p", "no:cacheprovider",
        "-q", "--strict-markers", "-o", "console_output_style=classic", "--tb=short",
        *(extra or []),
    ]


def oracle_env(
    base_url: str, results: Path, item_timeout: float, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    return {
        **os.environ,
        **(extra or {}),
        "BASE_URL": base_url,
        "ANVIL_RESULTS": str(results),
        "ANVIL_ITEM_TIMEOUT": str(item_timeout),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


OnStart = Callable[[str, float], Awaitable[None]]


@dataclass
class _Progress:
    """What the oracle process has reported so far, read line by line from its results file."""

    path: Path
    on_item: OnItem | None
    on_start: OnStart | None
    offset: int = 0
    items: list[ItemResult] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)
    collected: int | None = None
    finished: int | None = None
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def drain(self) -> None:
        """Handle every complete line written since the last call.

        The offset moves past a line only once that line is fully handled, and handling
        (publishing the item) is shielded: a cancel between lines loses nothing, and the
        final drain after a cancel picks up exactly where this one stopped.
        """
        async with self._lock:  # the poller and the mark listener both drain
            # Read on the loop: what one item adds is a line of a few KiB in the page cache
            # (microseconds), and a worker-thread round trip per item cost ~100x that.
            data = _read_from(self.path, self.offset)
            start = 0
            while (end := data.find(b"\n", start)) >= 0:
                line = data[start : end + 1]
                with anyio.CancelScope(shield=True):
                    await self._handle(json.loads(line))
                    self.offset += len(line)
                start = end + 1

    async def handle_mark(self, conn: SocketStream) -> None:
        """One item-start mark from the oracle process, acknowledged once handled."""
        async with conn:
            with anyio.move_on_after(5):
                data = b""
                while not data.endswith(b"\n"):
                    data += await conn.receive()
                await self.drain()  # the previous item's result first: events stay in order
                with anyio.CancelScope(shield=True):
                    await self._handle(json.loads(data))
                await conn.send(b"ok\n")

    async def _handle(self, record: dict[str, Any]) -> None:
        if "collect_error" in record:
            self.collect_errors.append(
                f"{record['collect_error']}: {_last_line(record['message'])}")
        elif "collected" in record:
            self.collected = int(record["collected"])
        elif "finished" in record:
            self.finished = int(record["finished"])
        elif "start" in record:
            if self.on_start is not None:
                await self.on_start(str(record["start"]), float(record.get("ts", 0.0)))
        else:
            item = ItemResult(
                nodeid=record["nodeid"],
                outcome=Outcome(record["outcome"]),
                category=record.get("category"),
                duration=float(record.get("duration", 0.0)),
                message=record.get("message", ""),
                traceback=record.get("traceback", ""),
                markers={str(k): str(v) for k, v in (record.get("markers") or {}).items()},
            )
            self.items.append(item)
            if self.on_item is not None:
                await self.on_item(item)


async def _pump(process: Process | ForkedOracle, log: AsyncCappedLog, done: anyio.Event) -> None:
    assert process.stdout is not None
    try:
        async for chunk in process.stdout:
            await log.write(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        done.set()


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except FileNotFoundError:
        return b""


async def run_oracle(
    oracle_dir: Path,
    base_url: str,
    workdir: Path,
    *,
    item_timeout: float,
    on_item: OnItem | None = None,
    on_start: OnStart | None = None,
    extra_env: Mapping[str, str] | None = None,
    poll_interval: float = 0.1,
    log_cap: int = 2 * 1024 * 1024,
    worker: OracleWorker | None = None,
) -> list[ItemResult]:
    """Run every oracle item against ``base_url`` and return their results.

    ``on_item`` is awaited once per finished item, ``on_start`` once per item
    start, in order, as they happen. The overall deadline is the caller's
    (``anyio.fail_after`` around this call); on cancellation the pytest process
    group is killed and the items that finished are still handed to ``on_item``.
    pytest's own output goes to ``oracle.log``, capped at ``log_cap`` bytes (head and
    tail kept): a service answering 20 MB error bodies cannot fill the disk. With a
    ``worker``, the oracle process is forked from it warm instead of started cold
    (the same arguments, environment and directory; see :mod:`engine._oracle_worker`).

    Raises:
        OracleBroken: the oracle did not collect (import error, no items), the
            process ended before pytest finished (``os._exit`` in a conftest, a
            signal), or fewer item results arrived than items were collected: the
            verdict would count only part of the oracle, so there is none.
    """
    results_path = workdir / "oracle-results.jsonl"
    results_path.unlink(missing_ok=True)
    log_path = workdir / "oracle.log"
    argv = oracle_command(oracle_dir, workdir)
    progress = _Progress(results_path, on_item, on_start)
    env = oracle_env(base_url, results_path, item_timeout, extra_env)
    marks = None
    log: AsyncCappedLog | None = None
    try:
        if on_start is not None:
            marks = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            env["ANVIL_MARKS"] = f"127.0.0.1:{marks.extra(SocketAttribute.local_port)}"
        log = await AsyncCappedLog.open(log_path, log_cap)
        process = await _start(argv, env, workdir, worker)
    except BaseException:  # cancelled or refused before the oracle ran: close what is open
        # (a cancel can land while the log opens, too: CI saw the listener left open)
        with anyio.CancelScope(shield=True):
            try:
                if log is not None:
                    await log.aclose()
            finally:
                if marks is not None:
                    await marks.aclose()
        raise
    try:
        async with anyio.create_task_group() as tg:
            pumped = anyio.Event()
            tg.start_soon(_pump, process, log, pumped)

            async def follow() -> None:
                while True:
                    await progress.drain()
                    await anyio.sleep(poll_interval)

            tg.start_soon(follow)
            if marks is not None:
                tg.start_soon(marks.serve, progress.handle_mark)
            code = await process.wait()
            with anyio.move_on_after(2):  # its last words (a stray child may hold the pipe)
                await pumped.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            try:
                if process.returncode is None:
                    try:
                        os.killpg(process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    await process.wait()
            finally:
                try:
                    await progress.drain()  # even when cancelled: the items that ran are kept
                finally:
                    if marks is not None:
                        await marks.aclose()
                    await log.aclose()
                    await process.aclose()
    if isinstance(process, ForkedOracle) and process.lost:
        raise HarnessError(f"oracle process lost: {process.lost}")
    _check_complete(progress, code, oracle_dir, log_path)
    return progress.items


async def _start(argv: list[str], env: dict[str, str], workdir: Path,
                 worker: OracleWorker | None) -> Process | ForkedOracle:
    """The oracle process: forked warm from ``worker``, else started cold (also when the
    worker is gone: a run never fails for want of it)."""
    if worker is not None:
        try:
            return await worker.spawn(argv[3:], env, workdir)  # after `python -m pytest`
        except WorkerGone as exc:
            log.warning("oracle worker: %s; starting the oracle cold", exc)
    return await anyio.open_process(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _check_complete(progress: _Progress, code: int, oracle_dir: Path, log_path: Path) -> None:
    """Raise OracleBroken unless every collected item reported a result."""
    if progress.collect_errors:
        raise OracleBroken(f"oracle does not collect: {'; '.join(progress.collect_errors)}")
    how = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    if progress.collected is None:
        raise OracleBroken(f"the oracle process ended ({how}) before it collected any item "
                           f"(a conftest or import ended it?); see {log_path}")
    if progress.collected == 0:
        raise OracleBroken(f"{oracle_dir}: the oracle has no items")
    received = len(progress.items)
    if progress.finished is None or received != progress.collected:
        raise OracleBroken(f"the oracle process ended ({how}) after {received} of "
                           f"{progress.collected} items; the verdict would be partial; "
                           f"see {log_path}")
    if code not in (0, 1):
        raise OracleBroken(f"pytest exited {code} running the oracle; see {log_path}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[-1][1:].strip() if errors else lines[-1] if lines else "error")[:500]
