"""The oracle runner: the task's pytest items against ``BASE_URL``, in a subprocess.

Items stream back through a JSON-lines file written by ``engine._oracle_plugin``
as each item ends. The subprocess has its own process group so a deadline or
a cancellation kills it whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio

from ._errors import OracleBroken
from .types import Outcome

PLUGIN = "engine._oracle_plugin"


@dataclass(frozen=True)
class ItemResult:
    nodeid: str
    outcome: Outcome
    category: str | None
    duration: float
    message: str = ""
    traceback: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome in (Outcome.PASSED, Outcome.SKIPPED)


OnItem = Callable[[ItemResult], Awaitable[None]]


def oracle_command(oracle_dir: Path, workdir: Path, extra: list[str] | None = None) -> list[str]:
    """The pytest command line: no user config, no plugin autoload, our plugin only."""
    ini = workdir / "oracle-pytest.ini"
    ini.write_text("[pytest]\n", encoding="utf-8")
    return [
        sys.executable, "-m", "pytest", str(oracle_dir),
        "-c", str(ini), "--rootdir", str(oracle_dir), "--confcutdir", str(oracle_dir),
        "-p", PLUGIN, "-p", "no:cacheprovider",
        "-q", "--strict-markers", "-o", "console_output_style=classic",
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


async def run_oracle(
    oracle_dir: Path,
    base_url: str,
    workdir: Path,
    *,
    item_timeout: float,
    on_item: OnItem | None = None,
    owner_env: Mapping[str, str] | None = None,
) -> list[ItemResult]:
    """Run every oracle item against ``base_url`` and return their results.

    The overall deadline is the caller's (``anyio.fail_after`` around this call);
    on cancellation the pytest process group is killed.

    Raises:
        OracleBroken: the oracle did not collect (import error, no items) or
            pytest itself failed: the task's fault, not the candidate's.
    """
    results_path = workdir / "oracle-results.jsonl"
    results_path.unlink(missing_ok=True)
    log_path = workdir / "oracle.log"
    argv = oracle_command(oracle_dir, workdir)
    items: list[ItemResult] = []
    collect_errors: list[str] = []
    offset = 0

    async def drain() -> None:
        nonlocal offset
        try:
            data = (await anyio.Path(results_path).read_bytes())[offset:]
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        offset += len(complete)
        for line in complete.decode("utf-8", "replace").splitlines():
            record = json.loads(line)
            if "collect_error" in record:
                collect_errors.append(f"{record['collect_error']}: {_last_line(record['message'])}")
                continue
            item = ItemResult(
                nodeid=record["nodeid"],
                outcome=Outcome(record["outcome"]),
                category=record.get("category"),
                duration=float(record.get("duration", 0.0)),
                message=record.get("message", ""),
                traceback=record.get("traceback", ""),
            )
            items.append(item)
            if on_item is not None:
                await on_item(item)

    log = await anyio.to_thread.run_sync(open, log_path, "ab")
    with log:
        process = await anyio.open_process(
            argv,
            cwd=workdir,
            env=oracle_env(base_url, results_path, item_timeout, owner_env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                while True:
                    await drain()
                    await anyio.sleep(0.1)

            tg.start_soon(follow)
            code = await process.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await process.wait()
            await drain()  # even when cancelled: the items that ran are kept
    if collect_errors:
        raise OracleBroken(f"oracle does not collect: {'; '.join(collect_errors)}")
    if code == 5 or (code == 0 and not items):
        raise OracleBroken(f"{oracle_dir}: the oracle has no items")
    if code not in (0, 1):
        raise OracleBroken(f"pytest exited {code} running the oracle; see {log_path}")
    return items


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E ")]
    return (errors[-1][1:].strip() if errors else lines[-1] if lines else "error")[:500]


async def collect_items(oracle_dir: Path, workdir: Path) -> list[str]:
    """Node ids of the oracle's items, without running them."""
    workdir.mkdir(parents=True, exist_ok=True)
    argv = oracle_command(oracle_dir, workdir, ["--collect-only"])
    result = await anyio.run_process(
        argv, cwd=workdir, check=False,
        env=oracle_env("http://127.0.0.1:9", workdir / "collect.jsonl", 0),
    )
    out = result.stdout.decode("utf-8", "replace")
    if result.returncode != 0:
        raise OracleBroken(f"{oracle_dir}: oracle does not collect: {_last_line(out)}")
    items = [line.strip() for line in out.splitlines() if "::" in line]
    if not items:
        raise OracleBroken(f"{oracle_dir}: the oracle has no items")
    return items
