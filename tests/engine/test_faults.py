"""The fault campaign: each fault is injected for real into a real run (real services, real
oracles, the real engine with the attachments `anvil run` uses) and each test asserts what
was kept: the verdict, the other items, the engine's memory and file descriptors.

Covered elsewhere, not repeated here: SIGINT, and one SIGKILL then --resume (test_cli), a hundred
evaluations leave nothing behind (test_hygiene), phase deadlines (test_promises), a flooding
service (test_process_runtime), the proxy's own faults (test_proxy), signals (test_signals).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from engine import (
    Evaluation,
    EvaluationFinished,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
    Verdict,
    load_task,
)
from engine._events import Event
from engine._mocks import MockAttachment, MockFabric
from engine._reaper import marked_processes
from engine._tracing import TraceRecorder
from engine.runtimes.docker import DockerRuntime
from engine.types import Outcome, Phase, Runtime
from tests.conftest import FIXTURES, MakeSubmission, run_engine
from tests.engine.examples import example_folders, run_examples
from tests.engine.test_cli import (
    TINY,
    anvil,
    events,
    in_oracle,
    kill_left_by,
    run_of,
    spawn,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]

DOCKERFILE = """FROM python:3.11-slim
WORKDIR /srv/app
COPY server.py .
EXPOSE 8000
CMD ["python", "server.py"]
"""

# -- helpers ---------------------------------------------------------------------------------


def make_task(tmp_path: Path, oracle: str, *, item_timeout: float = 2, oracle_timeout: float = 30,
              mocks: str = "", name: str = "faults", service: str = "") -> Task:
    """The tiny task with ``oracle`` as its only oracle file and short deadlines."""
    folder = tmp_path / f"{name}-task"
    shutil.copytree(FIXTURES / "tiny_task", folder)
    for item in (folder / "oracle").glob("test_*.py"):
        item.unlink()
    (folder / "oracle" / f"test_{name}.py").write_text(oracle)
    toml = (folder / "task.toml").read_text()
    toml = toml.replace('id = "tiny"', f'id = "{name}"').replace("[service]\n",
                                                                  f"[service]\n{service}")
    toml = toml.replace("timeout = 60", f"timeout = {oracle_timeout:g}")
    toml = toml.replace("item_timeout = 2", f"item_timeout = {item_timeout:g}")
    (folder / "task.toml").write_text(toml + ("\n" + mocks if mocks else ""))
    task = load_task(folder)
    assert task.config.oracle.item_timeout == item_timeout
    return task


def make_service(tmp_path: Path, name: str, server: str) -> Path:
    folder = tmp_path / "submissions" / name
    folder.mkdir(parents=True)
    (folder / "server.py").write_text(server)
    (folder / "Dockerfile").write_text(DOCKERFILE)
    return folder


async def run_as_anvil(pairs: Sequence[tuple[Task, Path]], home: Path, cache_dir: Path,
                       wrap: Callable[[MockFabric], Callable[[Evaluation], Any]] | None = None,
                       runtime: str = "process", **settings: Any,
                       ) -> tuple[list[EvaluationFinished], Store, list[EvaluationFinished]]:
    """The engine with what `anvil run` attaches: a mock fabric, then the trace and its
    recording proxy in front of the service (so a hostile answer goes through anvil).

    Returns the final verdicts in pair order, the store, and every attempt's verdict."""
    home.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    attempts: list[EvaluationFinished] = []

    async def every_attempt(stream: MemoryObjectReceiveStream[Event]) -> None:
        async with stream:
            attempts.extend([e async for e in stream if isinstance(e, EvaluationFinished)])

    chosen = ProcessRuntime(cache_dir) if runtime == "process" else DockerRuntime(cache_dir)
    async with AsyncExitStack() as stack:
        fabric = await stack.enter_async_context(MockFabric())
        recorder = await stack.enter_async_context(TraceRecorder(store))
        fabric.observer = recorder.observer
        attach = wrap(fabric) if wrap else fabric.attach
        runner = Runner(store, await stack.enter_async_context(chosen), RunSettings(
            home=home, attachments=[attach, recorder.attach], **settings))
        run_id = await runner.start([Planned(t.root, s, t) for t, s in pairs])
        results = await runner.execute(run_id, [every_attempt])
        assert fabric.host.running == 0, "every mock instance stops at its teardown"
    order = {str(s.resolve()): i for i, (_t, s) in enumerate(pairs)}
    results.sort(key=lambda r: order[r.submission])
    return results, store, attempts


def outcomes(result: EvaluationFinished) -> dict[str, Outcome]:
    return {i.nodeid.rsplit("::", 1)[1]: i.outcome for i in result.items}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@contextmanager
def peak_rss() -> Iterator[list[float]]:
    """Sample this process's RSS every 20 ms while the block runs: yields [start, peak] MiB."""
    found = [rss_mb(), rss_mb()]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            found[1] = max(found[1], rss_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield found
    finally:
        stop.set()
        sampler.join()
        found[1] = max(found[1], rss_mb())


# -- 1. hostile services ---------------------------------------------------------------------

HOSTILE = r'''
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sent = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _ok(self):
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        global sent
        if self.path == "/hangs":  # headers and part of the body, then nothing, forever
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b'{"items": [1, 2, ')
            self.wfile.flush()
            print("hung mid-response", flush=True)
            time.sleep(600)
            return
        if self.path == "/closes":  # the connection is closed without a byte of answer
            print("closed without answering", flush=True)
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if self.path == "/endless":  # chunked, and the chunks never end
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"%x\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
            reported = 0
            while True:
                self.wfile.write(chunk)
                sent += 1 << 20
                if sent - reported >= 32 << 20:
                    reported = sent
                    print(f"sent {sent}", flush=True)
        return self._ok()


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

HOSTILE_ORACLE = '''
import os

import pytest
import requests

BASE = os.environ["BASE_URL"]


@pytest.mark.category("api_surface")
def test_before():
    assert requests.get(BASE + "/health", timeout=5).status_code == 200


@pytest.mark.category("workflow")
def test_hostile():
    # no timeout on purpose: only the item deadline bounds a hung or endless answer
    with requests.get(BASE + "/{path}", stream=True) as answer:
        for _ in answer.iter_content(1 << 16):
            pass
    assert answer.status_code == 200


@pytest.mark.category("state")
def test_after():
    assert requests.get(BASE + "/ok", timeout=5).json() == {{"ok": True}}
'''


def sent_bytes(log: Path) -> int:
    """The last count of bytes the endless service reported sending."""
    counts = re.findall(r"^sent (\d+)$", log.read_text(errors="replace"), re.M)
    return int(counts[-1]) if counts else 0


@pytest.mark.parametrize("path", ["hangs", "closes", "endless"])
async def test_a_hostile_answer_fails_its_item_and_the_rest_of_the_evaluation_goes_on(
    path: str, tmp_path: Path, cache_dir: Path
) -> None:
    """Through the recording proxy, as `anvil run` does: the hostile item fails (by its
    deadline, or the connection error), the items after it run, the verdict is the
    candidate's `fail` at the oracle (never `error`), and anvil's memory stays bounded
    however much the service sends."""
    item_timeout = 4 if path == "endless" else 2
    task = make_task(tmp_path, HOSTILE_ORACLE.format(path=path), item_timeout=item_timeout)
    submission = make_service(tmp_path, path, HOSTILE)
    started = time.monotonic()
    with peak_rss() as rss:
        (result,), store, attempts = await run_as_anvil([(task, submission)],
                                                        tmp_path / "home", cache_dir)
    took = time.monotonic() - started
    grown = rss[1] - rss[0]
    log = next((tmp_path / "home" / "runs").glob("*/*/service.log"))
    sent = sent_bytes(log)
    print(f"\n{path}: {result.verdict.value} in {took:.1f}s, anvil RSS {rss[0]:.0f} -> peak "
          f"{rss[1]:.0f} MiB (+{grown:.0f}), service sent {sent / 2**20:.0f} MiB")

    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.ORACLE), result.reason
    assert [a.attempt for a in attempts] == [1]  # no `error` was retried on the way
    assert outcomes(result) == {"test_before": Outcome.PASSED, "test_hostile": Outcome.FAILED,
                                "test_after": Outcome.PASSED}
    (hostile,) = [i for i in result.items if i.failed]
    if path == "closes":  # the service's own fault, as the caller would see it without anvil
        assert "ConnectionError" in hostile.message or "RemoteDisconnected" in hostile.message, \
            hostile.message
        assert hostile.duration < item_timeout
        assert "closed without answering" in log.read_text()
    else:
        assert f"timed out after {item_timeout:g}s" in hostile.message, hostile.message
    if path == "hangs":
        assert "hung mid-response" in log.read_text()
    # the call is in the trace (kept), and marked as failed
    spans = [s for s in store.spans(result.evaluation_id)
             if s.attributes_dict().get("url.path") == f"/{path}"]
    assert spans and spans[0].status == "error"
    store.close()
    assert took < 30
    assert grown < 200, f"anvil grew by {grown:.0f} MiB"
    if path == "endless":
        assert sent > 2 * 200 * 2**20, f"the service sent only {sent / 2**20:.0f} MiB"


# -- 2. a mock instance that crashes mid-oracle -----------------------------------------------

MOCK_SERVICE = '''
import json
import os
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ECHO = os.environ["ECHO_URL"]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _echo(self, path, token=None):
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["X-Mock-Token"] = token
        try:
            with urllib.request.urlopen(urllib.request.Request(
                    ECHO + path, headers=headers), timeout=5) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        if self.path == "/snoop":  # what a nosy service gets from the mock's admin surface
            return self._send(200, {
                "journal_without_token": self._echo("/__mock__/journal"),
                "journal_with_made_up_token": self._echo("/__mock__/journal", "made-up"),
                "clock_with_made_up_token": self._echo("/__mock__/clock", "made-up"),
            })
        if self.path == "/limits":  # what the service may do to the machine it runs on
            status = dict(line.split(":", 1) for line in open("/proc/self/status")
                          if ":" in line)
            found = {"uid": os.getuid(), "cap_eff": status["CapEff"].strip(),
                     "no_new_privs": status["NoNewPrivs"].strip()}

            def read(*paths):  # cgroup v2 first, then v1
                for path in paths:
                    try:
                        return open("/sys/fs/cgroup/" + path).read().split()
                    except OSError:
                        pass
                return None

            found["pids"] = read("pids.max", "pids/pids.max")
            found["memory"] = read("memory.max", "memory/memory.limit_in_bytes")
            found["cpu"] = read("cpu.max") or (read("cpu/cpu.cfs_quota_us")
                                               + read("cpu/cpu.cfs_period_us"))
            return self._send(200, found)
        return self._send(404, {"detail": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        request = urllib.request.Request(ECHO + "/v1/echoes", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                echo = json.loads(answer.read())
        except OSError as exc:
            return self._send(502, {"detail": f"payment provider unreachable: {exc}"})
        return self._send(201, {"note": echo["id"]})


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

MOCK_ORACLE = '''
import os
import socket
import time
from urllib.parse import urlsplit

import pytest
import requests

BASE = os.environ["BASE_URL"]


def _post():
    answer = requests.post(BASE + "/notes", json={"text": "hi"}, timeout=10)
    assert answer.status_code == 201, answer.text


@pytest.mark.category("side_effects")
def test_1_note_before():
    _post()


@pytest.mark.category("side_effects")
def test_2_note_during():
    if os.environ.get("CRASH_MARK") and os.path.exists(os.environ["CRASH_MARK"]):
        # Wait for the fault the test injects when this item starts (the engine learns of
        # the item's start asynchronously): the mock instance's port stops answering.
        where = urlsplit(os.environ["ECHO_URL"])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex((where.hostname, where.port)) != 0:
                    break
            time.sleep(0.02)
    _post()


@pytest.mark.category("state")
def test_3_after():
    assert requests.get(BASE + "/health", timeout=5).status_code == 200
'''


class CrashingMock:
    """The real MockAttachment, whose instances stop (their port closes, their
    connections drop) when the oracle starts ``crash_at``: what a crashed mock looks like
    from the service."""

    def __init__(self, real: MockAttachment, crash_at: str | None) -> None:
        self.real = real
        self.provides = real.provides
        self.crash_at = crash_at
        self.crashed = False

    async def startup(self, stack: AsyncExitStack, runtime: Runtime) -> Any:
        if self.crash_at is None:  # tell the oracle not to wait for a crash this attempt
            Path(os.environ["CRASH_MARK"]).unlink(missing_ok=True)
        return await self.real.startup(stack, runtime)

    async def wiring(self, stack: AsyncExitStack, base_url: str) -> Any:
        return await self.real.wiring(stack, base_url)

    async def item_started(self, nodeid: str) -> None:
        await self.real.item_started(nodeid)
        if self.crash_at and nodeid.endswith(self.crash_at):
            for _config, _name, hosted in self.real.hosted:
                await self.real.host.stop(hosted)
            self.crashed = True

    async def oracle_finished(self) -> None:
        await self.real.oracle_finished()


async def test_a_mock_that_crashes_mid_oracle_is_the_harness_fault_and_is_retried(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = tmp_path / "crash-mark"
    mark.touch()
    monkeypatch.setenv("CRASH_MARK", str(mark))  # the oracle inherits it
    task = make_task(tmp_path, MOCK_ORACLE, mocks='[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n')
    made: list[CrashingMock] = []

    def wrap(fabric: MockFabric) -> Callable[[Evaluation], CrashingMock | None]:
        def attach(evaluation: Evaluation) -> CrashingMock | None:
            real = fabric.attach(evaluation)
            assert real is not None
            # only the first attempt meets the crash: a retry must then pass
            made.append(CrashingMock(real, "test_2_note_during" if not made else None))
            return made[-1]

        return attach

    (result,), store, attempts = await run_as_anvil(
        [(task, make_service(tmp_path, "notes", MOCK_SERVICE))], tmp_path / "home", cache_dir,
        wrap=wrap, retry_delay=0.1)
    store.close()
    assert made and made[0].crashed, "the fault was injected"
    verdicts = [(e.attempt, e.verdict.value) for e in attempts]
    print(f"\nattempts: {verdicts}")
    assert ("fail" not in {v for _, v in verdicts}), f"the candidate got `fail`: {verdicts}"
    assert verdicts == [(1, "error"), (2, "pass")]
    assert result.verdict is Verdict.PASS and result.attempt == 2


# -- 3. many queued evaluations ---------------------------------------------------------------

QUEUED = 200


async def test_two_hundred_queued_evaluations_leave_fds_and_memory_where_they_were(
    tiny_task: Task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """Every evaluation queued at once at the default concurrency; afterwards this
    process's open files and RSS are back near where they started."""
    await run_engine([(tiny_task, make_submission("ok")) for _ in range(4)],
                     tmp_path / "warm", cache_dir)  # caches, pools, imports at steady size
    pairs = [(tiny_task, make_submission("ok")) for _ in range(QUEUED)]
    fds, rss = open_fds(), rss_mb()
    started = time.monotonic()
    with peak_rss() as peak:
        results, store, run_id = await run_engine(pairs, tmp_path / "home", cache_dir)
    store.close()
    took = time.monotonic() - started
    print(f"\n{QUEUED} queued evaluations in {took:.1f}s: open files {fds} -> {open_fds()}, "
          f"RSS {rss:.0f} -> {rss_mb():.0f} MiB (peak {peak[1]:.0f})")
    assert len(results) == QUEUED
    assert {r.verdict for r in results} == {Verdict.PASS}, {r.reason for r in results}
    assert open_fds() <= fds + 2, "file descriptors leaked"
    assert rss_mb() - rss < 40, f"memory grew by {rss_mb() - rss:.0f} MiB"
    assert [p for p in marked_processes() if p.run_id == run_id] == [], "processes leaked"


# -- 4. repeatability -------------------------------------------------------------------------


async def test_the_taskboard_workload_scored_three_times_gets_the_same_verdicts_and_items(
    tmp_path: Path, cache_dir: Path
) -> None:
    examples = ROOT / "examples" / "taskboard"
    folders = example_folders(examples)
    scored, took = [], []
    for sitting in range(3):
        started = time.monotonic()
        results = await run_examples(ROOT / "tasks" / "taskboard", folders,
                                     tmp_path / f"sitting-{sitting}", cache_dir, concurrency=4)
        took.append(round(time.monotonic() - started, 1))
        scored.append([(f.name, r.verdict.value, r.phase.value if r.phase else None,
                        sorted((i.nodeid, i.outcome.value) for i in r.items))
                       for f, r in zip(folders, results, strict=True)])
    print(f"\n{len(folders)} examples scored three times: {took} s")
    assert all(verdict != "error" for _, verdict, _, _ in scored[0]), scored[0]
    assert any(items for *_, items in scored[0])  # the oracle ran
    assert scored[1] == scored[0]
    assert scored[2] == scored[0]


# -- 5. security ------------------------------------------------------------------------------

SNOOP_ORACLE = '''
import os

import pytest
import requests

BASE = os.environ["BASE_URL"]


@pytest.mark.category("authorization")
def test_the_service_cannot_read_or_drive_its_mock():
    seen = requests.get(BASE + "/snoop", timeout=10).json()
    assert seen == {"journal_without_token": 401, "journal_with_made_up_token": 401,
                    "clock_with_made_up_token": 401}, seen
    # and what it tried is not in its own journal as a call of its own
    echo_token = os.environ["ECHO_URL_TOKEN"]
    journal = requests.get(os.environ["ECHO_URL"] + "/__mock__/journal",
                           headers={"X-Mock-Token": echo_token}, timeout=5)
    assert journal.status_code == 200
'''


async def test_a_service_gets_nothing_from_its_mocks_admin_surface_without_the_token(
    tmp_path: Path, cache_dir: Path
) -> None:
    task = make_task(tmp_path, SNOOP_ORACLE, mocks='[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n')
    (result,), store, _ = await run_as_anvil(
        [(task, make_service(tmp_path, "snoop", MOCK_SERVICE))], tmp_path / "home", cache_dir)
    store.close()
    assert result.verdict is Verdict.PASS, [(i.nodeid, i.message) for i in result.items]


LIMITS_ORACLE = '''
import json
import os

import pytest
import requests


@pytest.mark.category("authorization")
def test_report():
    seen = requests.get(os.environ["BASE_URL"] + "/limits", timeout=10).json()
    with open(os.environ["LIMITS_OUT"], "w") as out:
        json.dump(seen, out)
'''


async def test_in_docker_the_service_is_unprivileged_with_bounded_pids_memory_and_cpu(
    docker_ready: None, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "limits.json"
    monkeypatch.setenv("LIMITS_OUT", str(out))
    task = make_task(tmp_path, LIMITS_ORACLE, item_timeout=10, oracle_timeout=60,
                     mocks='[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n',
                     service="memory_mb = 96\ncpus = 0.5\npids_limit = 48\n")
    (result,), store, _ = await run_as_anvil(
        [(task, make_service(tmp_path, "limits", MOCK_SERVICE))], tmp_path / "home", cache_dir,
        runtime="docker")
    store.close()
    assert result.verdict is Verdict.PASS, (result.reason, [i.message for i in result.items])
    seen = json.loads(out.read_text())
    print(f"\nin the container: {seen}")
    assert int(seen["cap_eff"], 16) == 0, f"effective capabilities {seen['cap_eff']}"
    assert seen["no_new_privs"] == "1"
    assert seen["pids"] == ["48"]
    assert seen["memory"] == [str(96 * 2**20)]
    quota, period = seen["cpu"]
    assert int(quota) / int(period) == pytest.approx(0.5)


# -- 6. SIGKILL of `anvil run` at seeded moments, then --resume -------------------------------

KILL_MODES = ["ok", "fail_item", "crash", "ok", "fail_item"]  # x4: 20 evaluations
MODE_VERDICTS = {"ok": ("pass", None, 4), "fail_item": ("fail", "oracle", 3),
                 "crash": ("fail", "startup", 0)}


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _still_running(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still alive (the same process: psutil checks its start time)."""
    return [p for p in processes
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _final_rows(home: Path, run_id: str) -> tuple[dict[str, tuple[Any, ...]], list[Any]]:
    """Per evaluation its stored verdict, and the item rows counted by (evaluation, nodeid)."""
    with sqlite3.connect(home / "anvil.db") as db:
        rows = {name: rest for name, *rest in db.execute(
            "SELECT submission, status, verdict, phase, items_passed, items_failed, id "
            "FROM evaluations WHERE run_id = ?", (run_id,))}
        items = db.execute(
            "SELECT evaluation_id, nodeid, count(*) FROM items WHERE evaluation_id IN "
            "(SELECT id FROM evaluations WHERE run_id = ?) GROUP BY evaluation_id, nodeid",
            (run_id,)).fetchall()
    return {Path(k).name: tuple(v) for k, v in rows.items()}, items


def _kill_at(proc: subprocess.Popen[str], home: Path, target: int,
             extra: float) -> list[psutil.Process]:
    """SIGKILL ``proc`` once ``target`` more events are in the run's log, ``extra`` s later;
    return the processes it had then."""
    base = len(events(home))
    wait_for(lambda: len(events(home)) - base >= target or proc.poll() is not None, 30)
    if proc.poll() is None:
        time.sleep(extra)  # the seeded part of the moment, past a seeded event count
    running = _descendants(proc.pid)
    proc.kill()
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"anvil ended by itself: {err[-2000:]}"
    return running


def test_sigkill_at_seeded_moments_then_resume_keeps_one_verdict_each_and_leaves_nothing(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """``kill -9`` of `anvil run` three times, at moments drawn from a seeded generator (a
    number of events into the run's event log, then a fraction of a second more, so it
    lands in any phase), the second and third during a `--resume`; a last `--resume`
    finishes. Every evaluation ends with exactly one verdict (and one set of items) in the
    store, the same as an uninterrupted run's, and once `anvil gc` ran nothing anvil
    started is left: no marked process, and none of the processes the killed anvils had."""
    rng = random.Random(7)
    names = {}
    for i in range(20):
        mode = KILL_MODES[i % len(KILL_MODES)]
        names[f"s{i:02d}-{mode}"] = mode
        make_submission(mode, name=f"s{i:02d}-{mode}")
    subs = tmp_path / "submissions"
    started = time.monotonic()
    # the same work uninterrupted, for the verdicts to compare with
    clean = anvil("run", str(TINY), "--submissions", str(subs), "--runtime", "process",
                  home=tmp_path / "clean", cache=cache_dir)
    assert clean.returncode == 0, clean.stderr
    reference, _ = _final_rows(tmp_path / "clean", run_of(tmp_path / "clean"))
    clean_took = time.monotonic() - started

    home = tmp_path / "home"
    kills: list[str] = []
    left_by: list[psutil.Process] = []
    owners: list[int] = []
    run_id = ""
    try:
        for attempt, (low, high) in enumerate([(30, 150), (30, 120), (10, 60)]):
            if attempt == 0:
                proc = spawn("run", str(TINY), "--submissions", str(subs), "--runtime",
                             "process", home=home, cache=cache_dir)
            else:
                proc = spawn("run", "--resume", run_id, home=home, cache=cache_dir)
            owners.append(proc.pid)
            target, extra = rng.randint(low, high), rng.uniform(0, 0.4)
            running = _kill_at(proc, home, target, extra)
            run_id = run_id or run_of(home)
            left_by += running
            seen = events(home)
            done = sum(r[0] == "done" for r in _final_rows(home, run_id)[0].values())
            kills.append(f"{target} events+{extra:.2f}s: {done} done, "
                         f"{len(in_oracle(seen))} in oracle, "
                         f"{len(_still_running(running))} processes left")
        resumed = anvil("run", "--resume", run_id, "--json", home=home, cache=cache_dir)
        assert resumed.returncode == 0, resumed.stderr
        assert "pass=8 fail=12 error=0 (20 evaluations" in resumed.stderr, resumed.stderr
        gc = anvil("gc", "--home", str(home), home=home, cache=cache_dir)
        assert gc.returncode == 0, gc.stderr
    finally:
        for owner in owners:
            kill_left_by(owner)
    took = time.monotonic() - started
    print(f"\nuninterrupted {clean_took:.1f}s; kills at {kills}; all in {took:.1f}s")

    rows, items = _final_rows(home, run_id)
    assert set(rows) == set(names)
    for name, (status, verdict, phase, passed, _failed, _id) in rows.items():
        assert status == "done", name
        assert (verdict, phase, passed) == MODE_VERDICTS[names[name]], name
        assert rows[name][:5] == reference[name][:5], name
    # one set of items per evaluation: a killed attempt's items were replaced, not added to
    assert {count for *_, count in items} == {1}
    per_evaluation = {}
    for evaluation_id, _nodeid, _count in items:
        per_evaluation[evaluation_id] = per_evaluation.get(evaluation_id, 0) + 1
    for _status, _verdict, _phase, passed, failed, evaluation_id in rows.values():
        assert per_evaluation.get(evaluation_id, 0) == passed + failed
    assert [p for p in marked_processes() if p.run_id == run_id] == []
    assert _still_running(left_by) == [], "processes of a killed anvil outlived `anvil gc`"
    assert took < 90


# -- 7. isolation: the host's loopback and files in Docker, another evaluation's mock ---------

ISOLATION_SERVICE = '''
import json
import os
import socket
import struct
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOPBACK_PORT = @LOOPBACK_PORT@  # a server on the host's 127.0.0.1 only
CONTROL_PORT = @CONTROL_PORT@  # a server on the host's bridge address: reachable
STORE = @STORE@


def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    return None


def reach(host, port):
    try:
        with socket.create_connection((host, port), timeout=2) as conn:
            conn.sendall(b"GET /secret HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
            return "answered: " + conn.recv(200).decode(errors="replace")[:40]
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        if self.path == "/isolation":
            route = gateway()
            return self._send(200, {
                "gateway_ip": route,
                "host_alias": reach("host.docker.internal", LOOPBACK_PORT),
                "gateway": reach(route, LOOPBACK_PORT),
                "control": reach(route, CONTROL_PORT),
                "store_exists": os.path.exists(STORE),
                "store_folder_exists": os.path.exists(os.path.dirname(STORE)),
            })
        return self._send(404, {"detail": "not found"})


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

ISOLATION_ORACLE = '''
import json
import os

import pytest
import requests


@pytest.mark.category("authorization")
def test_the_service_cannot_reach_the_hosts_loopback_or_files():
    seen = requests.get(os.environ["BASE_URL"] + "/isolation", timeout=20).json()
    with open(os.environ["ISOLATION_OUT"], "w") as out:
        json.dump(seen, out)
    assert seen["control"].startswith("answered: HTTP"), seen  # the probe itself works
    assert seen["host_alias"] in ("refused", "timeout"), seen
    assert seen["gateway"] in ("refused", "timeout"), seen
    assert seen["store_exists"] is False and seen["store_folder_exists"] is False, seen
'''


@contextmanager
def http_server(host: str) -> Iterator[tuple[int, list[str]]]:
    """A tiny HTTP server on ``host`` (a free port) in a thread: yields its port and the
    paths it was asked for."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"secret")

    server = ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def bridge_address() -> str:
    done = subprocess.run(["docker", "network", "inspect", "bridge", "-f",
                           "{{(index .IPAM.Config 0).Gateway}}"],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


async def test_in_docker_the_service_cannot_reach_the_hosts_loopback_or_read_its_files(
    docker_ready: None, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server on the host's 127.0.0.1 (as `anvil serve` binds by default) is out of reach
    through host.docker.internal and through the bridge gateway on its port, while a server
    on the gateway address is reachable (so the probe works); the store's path on the host
    does not exist in the container."""
    out = tmp_path / "isolation.json"
    monkeypatch.setenv("ISOLATION_OUT", str(out))
    home = tmp_path / "home"
    store_path = home / "anvil.db"
    with http_server("127.0.0.1") as (loopback, asked), \
            http_server(bridge_address()) as (control, control_asked):
        server = (ISOLATION_SERVICE.replace("@LOOPBACK_PORT@", str(loopback))
                  .replace("@CONTROL_PORT@", str(control))
                  .replace("@STORE@", repr(str(store_path))))
        task = make_task(tmp_path, ISOLATION_ORACLE, item_timeout=20, oracle_timeout=60)
        (result,), store, _ = await run_as_anvil(
            [(task, make_service(tmp_path, "isolation", server))], home, cache_dir,
            runtime="docker")
        store.close()
    seen = json.loads(out.read_text()) if out.exists() else None
    print(f"\nin the container: {seen}")
    assert store_path.exists()  # on the host it does
    assert result.verdict is Verdict.PASS, (result.reason, [i.message for i in result.items])
    assert asked == [], "the host's loopback server was reached"
    assert control_asked == ["/secret"]


SNOOPER_SERVICE = '''
import json
import os
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLE = @ROLE@
SHARED = @SHARED@

if ROLE == "victim":  # tell the other evaluation where this one's mock is (a leak, on purpose)
    with open(SHARED + "/victim_url.tmp", "w") as out:
        out.write(os.environ["ECHO_URL"])
    os.replace(SHARED + "/victim_url.tmp", SHARED + "/victim_url")


def call(url, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Mock-Token"] = token
    request = urllib.request.Request(url, headers=headers, data=body,
                                     method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        if self.path == "/role":
            return self._send(200, {"role": ROLE})
        if self.path == "/snoop":
            other = open(SHARED + "/victim_url").read()
            return self._send(200, {
                "other_is_not_mine": other != os.environ["ECHO_URL"],
                "journal_without_token": call(other + "/__mock__/journal"),
                "journal_with_made_up_token": call(other + "/__mock__/journal", "made-up"),
                "clock_without_token": call(other + "/__mock__/clock"),
                "business_route": call(other + "/v1/echoes", body=b'{"from": "snooper"}'),
            })
        return self._send(404, {"detail": "not found"})


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

SNOOPER_ORACLE = '''
import json
import os
import time

import pytest
import requests

BASE = os.environ["BASE_URL"]
SHARED = @SHARED@


def wait_for(path):
    deadline = time.monotonic() + 20
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never came"
        time.sleep(0.05)


@pytest.mark.category("authorization")
def test_one_evaluation_cannot_read_anothers_mock_journal():
    role = requests.get(BASE + "/role", timeout=5).json()["role"]
    if role == "victim":  # its mock instance stays up until the snooper has tried it
        wait_for(SHARED + "/snooped.json")
        journal = requests.get(os.environ["ECHO_URL"] + "/__mock__/journal",
                               headers={"X-Mock-Token": os.environ["ECHO_URL_TOKEN"]}, timeout=5)
        assert journal.status_code == 200
        with open(SHARED + "/victim_journal.json", "w") as out:
            json.dump(journal.json(), out)
        return
    wait_for(SHARED + "/victim_url")
    seen = requests.get(BASE + "/snoop", timeout=20).json()
    with open(SHARED + "/snooped.tmp", "w") as out:
        json.dump(seen, out)
    os.replace(SHARED + "/snooped.tmp", SHARED + "/snooped.json")
    assert seen["other_is_not_mine"], seen
    assert seen["journal_without_token"] == 401, seen
    assert seen["journal_with_made_up_token"] == 401, seen
    assert seen["clock_without_token"] == 401, seen
'''


async def test_an_evaluation_gets_401_from_another_running_evaluations_mock_admin_surface(
    tmp_path: Path, cache_dir: Path
) -> None:
    """Two evaluations at once on the process runtime, each with its own echo mock instance.
    The snooper learns the other's instance URL (through a file: on one host a port is easy
    to find) and calls its admin surface without the token: 401. Isolation between
    evaluations' mocks rests on the token there, not on the network."""
    shared = tmp_path / "shared"
    shared.mkdir()
    task = make_task(tmp_path, SNOOPER_ORACLE.replace("@SHARED@", repr(str(shared))),
                     item_timeout=25, oracle_timeout=60,
                     mocks='[[mocks]]\nkind = "echo"\nenv = "ECHO_URL"\n')
    pairs = [(task, make_service(tmp_path, role, SNOOPER_SERVICE.replace(
        "@ROLE@", repr(role)).replace("@SHARED@", repr(str(shared)))))
        for role in ("victim", "snooper")]
    results, store, _ = await run_as_anvil(pairs, tmp_path / "home", cache_dir, concurrency=2)
    store.close()
    seen = json.loads((shared / "snooped.json").read_text())
    journal = json.loads((shared / "victim_journal.json").read_text())
    print(f"\nthe snooper saw {seen}; the victim's journal then: {journal}")
    for result in results:
        assert result.verdict is Verdict.PASS, (result.submission, result.reason,
                                                [i.message for i in result.items])
    assert seen["journal_without_token"] == 401


# -- 8. the Docker daemon restarted mid-oracle ------------------------------------------------

RESTART_ORACLE = '''
import os
import time

import pytest
import requests

BASE = os.environ["BASE_URL"]
MARK = os.environ["RESTART_MARK"]


@pytest.mark.category("api_surface")
def test_1_health():
    assert requests.get(BASE + "/health", timeout=5).status_code == 200


@pytest.mark.category("workflow")
def test_2_while_the_daemon_restarts():
    # the window: the service is asked, again and again, until the test restarted dockerd
    open(MARK + ".in-oracle", "w").close()
    deadline = time.monotonic() + 90
    while not os.path.exists(MARK + ".restarted") and time.monotonic() < deadline:
        assert requests.get(BASE + "/health", timeout=5).status_code == 200
        time.sleep(0.1)


@pytest.mark.category("state")
def test_3_after():
    assert requests.get(BASE + "/health", timeout=5).status_code == 200
'''

DOCKER_SOCKET = Path("/var/run/docker.sock")


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True,
                              timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def live_restore_enabled() -> bool:
    return subprocess.run(["docker", "info", "-f", "{{.LiveRestoreEnabled}}"],
                          capture_output=True, text=True, timeout=30).stdout.strip() == "true"


def socket_refuses() -> bool:
    import socket

    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(DOCKER_SOCKET))
        except OSError:
            return True
    return False


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(0.1)


class Dockerd:
    """The running dockerd as it was started (command line, environment, folder, log), to
    stop it and start it again the same way, detached (it outlives this test)."""

    def __init__(self) -> None:
        pids = [int(p) for p in subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True,
                                               text=True).stdout.split()]
        if len(pids) != 1:
            pytest.skip(f"cannot restart dockerd here: {len(pids)} dockerd processes")
        self.pid = pids[0]
        proc = Path(f"/proc/{self.pid}")
        self.argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
        self.env = dict(e.decode().split("=", 1) for e in
                        (proc / "environ").read_bytes().split(b"\0") if b"=" in e)
        self.cwd = os.readlink(proc / "cwd")
        out = os.readlink(proc / "fd" / "1")
        self.log = Path(out if out.startswith("/") and Path(out).is_file()
                        else "/tmp/anvil-dockerd-restarted.log")
        self.restarts: list[float] = []

    def why_not(self, scope: str) -> str | None:
        """Why restarting it would be unsafe here (None: it is not)."""
        if Path("/run/systemd/system").exists():
            return "a service manager runs here: dockerd is its to restart"
        if "--live-restore" in self.argv:
            return None
        others = subprocess.run(
            ["docker", "ps", "-q", "--filter", "status=running"], capture_output=True,
            text=True, timeout=30).stdout.split()
        ours = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"label=anvil.scope={scope}"],
            capture_output=True, text=True, timeout=30).stdout.split()
        strangers = set(others) - set(ours)
        if strangers:
            return f"{len(strangers)} containers of others run: a restart would kill them"
        return None

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGTERM)
        try:
            psutil.Process(self.pid).wait(timeout=60)
        except psutil.NoSuchProcess:
            pass
        wait_until(socket_refuses, 30, "the Docker socket refuses connections")

    def start(self) -> None:
        started = time.monotonic()
        with self.log.open("ab") as out:
            # setsid -f: detached, in a session of its own, not this process's child
            subprocess.run(["setsid", "-f", *self.argv], env=self.env, cwd=self.cwd,
                           stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                           check=True, timeout=30)
        wait_until(docker_answers, 60, "`docker info` answers after the restart")
        self.restarts.append(time.monotonic() - started)

    def ensure_answers(self) -> None:
        """Whatever happened, leave a daemon that answers and starts containers again
        (other tests need it; a daemon just back may refuse to start one for a moment)."""
        if not docker_answers():
            if not subprocess.run(["pgrep", "-x", "dockerd"], capture_output=True).stdout:
                self.start()
            wait_until(docker_answers, 60, "`docker info` answers")
        wait_until(runs_a_container, 60, "`docker run` starts a container")


def runs_a_container() -> bool:
    try:
        return subprocess.run(["docker", "run", "--rm", "--network", "bridge",
                               "python:3.11-slim", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


async def test_the_docker_daemon_restarted_mid_oracle_is_the_harness_fault_and_is_retried(
    docker_ready: None, anvil_scope: str, tmp_path: Path, cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """While an evaluation's oracle asks the service, dockerd is stopped (SIGTERM, until
    its socket refuses) and started again with the same command line. Without live-restore
    the container dies with the daemon: the evaluation must get `error` (the harness's
    fault) and be retried, never `fail`. With live-restore it must get its own verdict."""
    daemon = Dockerd()
    if problem := daemon.why_not(anvil_scope):
        pytest.skip(f"restarting dockerd is unsafe here: {problem}")
    live_restore = live_restore_enabled()
    mark = tmp_path / "restart"
    monkeypatch.setenv("RESTART_MARK", str(mark))  # the oracle inherits it
    task = make_task(tmp_path, RESTART_ORACLE, item_timeout=120, oracle_timeout=180)
    fault: list[BaseException] = []

    def restart_when_in_oracle() -> None:
        try:
            wait_until(Path(f"{mark}.in-oracle").exists, 120, "the oracle's window")
            daemon.stop()
            daemon.start()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            fault.append(exc)
        finally:
            Path(f"{mark}.restarted").touch()

    restarter = threading.Thread(target=restart_when_in_oracle, daemon=True)
    restarter.start()
    started = time.monotonic()
    try:
        (result,), store, attempts = await run_as_anvil(
            [(task, make_service(tmp_path, "steady", MOCK_SERVICE.replace(
                'ECHO = os.environ["ECHO_URL"]', "")))],
            # a daemon that just came back needs a moment before its networking starts
            # containers again (500: failed to update store for libnetwork.endpoint)
            tmp_path / "home", cache_dir, runtime="docker", retry_delay=3.0)
        store.close()
    finally:
        restarter.join(timeout=180)
        daemon.ensure_answers()
    took = time.monotonic() - started
    verdicts = [(a.attempt, a.verdict.value, a.phase.value if a.phase else None, a.reason)
                for a in attempts]
    print(f"\nlive-restore {live_restore}; dockerd back in {daemon.restarts} s; "
          f"attempts {verdicts}; {took:.1f}s")
    if fault or not docker_answers():  # not the engine's doing: not the expected failure
        pytest.fail(f"the restart itself went wrong: {fault or 'docker does not answer'}")
    assert "fail" not in {v for _, v, _, _ in verdicts}, f"the candidate got `fail`: {verdicts}"
    if live_restore:
        assert [(a, v) for a, v, _, _ in verdicts] == [(1, "pass")]
    else:
        assert [(a, v) for a, v, _, _ in verdicts] == [(1, "error"), (2, "pass")]
    assert result.verdict is Verdict.PASS
