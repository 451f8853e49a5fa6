"""What the README promises and no other test held to: phase deadlines (with the process
gone after each), an omitted ``health_path``, ``--db``/``ANVIL_DB``, ``report RUN_ID -o``,
``tasks list``, ``gc`` of process orphans, and ``error`` kept out of the success rate."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import psutil
import pytest

from engine import (
    EvaluationFinished,
    Phase,
    PhaseFinished,
    Planned,
    ProcessRuntime,
    Runner,
    RunSettings,
    Store,
    Task,
    Verdict,
    load_task,
)
from engine._lifecycle import Evaluation
from engine._reaper import marked_processes
from engine.types import Runtime
from tests.conftest import FIXTURES, MakeSubmission
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


def task_with(tmp_path: Path, name: str = "tiny", drop: str = "", **service: float) -> Task:
    """A copy of the tiny task with ``[service]`` keys set (``oracle_timeout`` sets the
    whole oracle's) and the line containing ``drop`` (if any) removed."""
    folder = tmp_path / "tasks" / name
    shutil.copytree(FIXTURES / "tiny_task", folder)
    lines = (folder / "task.toml").read_text().splitlines()
    lines = [ln for ln in lines if not (drop and drop in ln)]
    oracle = service.pop("oracle_timeout", None)
    for key, value in service.items():
        lines = [ln for ln in lines if not ln.startswith(f"{key} =")]
        lines.insert(lines.index("[service]") + 1, f"{key} = {value}")
    if oracle is not None:
        lines = [ln for ln in lines if not ln.startswith("timeout =")]
        lines.insert(lines.index("[oracle]") + 1, f"timeout = {oracle}")
    (folder / "task.toml").write_text("\n".join(lines) + "\n")
    return load_task(folder)


class Watched:
    """One evaluation run through the real engine, with what was alive when it finished."""

    def __init__(self) -> None:
        self.phases: dict[Phase, PhaseFinished] = {}
        self.alive_after: dict[Phase, list[int]] = {}  # marked pids as each phase ended
        self.alive_at_finish: list[int] | None = None  # marked pids of this run
        self.result: EvaluationFinished | None = None


async def run_watched(task: Task, submission: Path, home: Path, cache: Path,
                      **settings: object) -> Watched:
    """Run one evaluation; note each phase's end and the run's marked processes still
    alive at the moment the verdict is published (the runtime is still open then, so
    nothing the runtime's own close would kill is hidden)."""
    watched = Watched()
    store = Store(f"sqlite:///{home / 'anvil.db'}")
    try:
        async with ProcessRuntime(cache) as runtime:
            runner = Runner(store, runtime, RunSettings(home=home, **settings))  # type: ignore[arg-type]
            run_id = await runner.start([Planned(task.root, submission, task)])

            async def watch(stream):  # type: ignore[no-untyped-def]
                async with stream:
                    async for event in stream:
                        if isinstance(event, PhaseFinished):
                            watched.phases[event.phase] = event
                            watched.alive_after[event.phase] = [
                                p.pid for p in marked_processes() if p.run_id == run_id]
                        elif isinstance(event, EvaluationFinished):
                            watched.alive_at_finish = [
                                p.pid for p in marked_processes() if p.run_id == run_id]

            with anyio.fail_after(60):
                (watched.result,) = await runner.execute(run_id, [watch])
    finally:
        store.close()
    return watched


# -- deadlines: each ends its phase with "timed out after Ns", and nothing is left ----


class HangingIndex:
    """A package index on 127.0.0.1 that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connected = threading.Event()
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            self.held.append(conn)
            self.connected.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def hanging_index() -> Iterator[HangingIndex]:
    index = HangingIndex()
    try:
        yield index
    finally:
        index.close()


def processes_naming(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if text in " ".join(proc.info["cmdline"] or ()) and proc.info["status"] != "zombie":
            found.append(proc)
    return found


async def test_build_deadline_fails_the_build_and_kills_pip(
    tmp_path: Path, make_submission: MakeSubmission, hanging_index: HangingIndex
) -> None:
    url = f"http://127.0.0.1:{hanging_index.port}/simple"
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text((sub / "Dockerfile").read_text().replace(
        "COPY server.py .", f"RUN pip install --index-url {url} anvil-never-answers\n"
                            "COPY server.py ."))
    task = task_with(tmp_path, build_timeout=4)
    # A cache of its own: a venv half built by a killed pip must not touch the session's.
    watched = await run_watched(task, sub, tmp_path, tmp_path / "cache")
    result = watched.result
    assert result is not None
    assert (result.verdict, result.phase, result.reason) == (
        Verdict.FAIL, Phase.BUILD, "build timed out after 4s")
    assert hanging_index.connected.is_set()  # pip was really waiting on the index
    assert watched.phases[Phase.BUILD].message == "timed out after 4s"
    assert processes_naming(url) == []  # pip went with the build
    assert Phase.STARTUP not in watched.phases


class HangingAttachment:
    """An attachment (what a mock fabric plugs in) that starts a helper process, registers
    it on the evaluation's exit stack, then never finishes its startup."""

    provides: frozenset[str] = frozenset()

    def __init__(self, evaluation: Evaluation) -> None:
        self.env = {**os.environ, **evaluation.owner_env}

    async def startup(self, stack: AsyncExitStack, runtime: Runtime) -> Mapping[str, str]:
        helper = await anyio.open_process(
            [sys.executable, "-c", "import time; time.sleep(120)"], env=self.env)

        async def stop() -> None:
            helper.kill()
            await helper.wait()

        stack.push_async_callback(stop)
        await anyio.sleep_forever()
        return {}

    async def wiring(self, stack: AsyncExitStack, base_url: str) -> tuple[str, dict[str, str]]:
        return base_url, {}

    async def item_started(self, nodeid: str) -> None:
        return None


async def test_startup_deadline_is_the_harness_error_and_closes_what_it_acquired(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    task = task_with(tmp_path, startup_timeout=2)
    watched = await run_watched(task, make_submission("ok"), tmp_path, cache_dir,
                                attachments=[HangingAttachment])
    result = watched.result
    assert result is not None
    # Starting the service is anvil's work (its own start-up counts in health): `error`,
    # retried once, never the candidate's `fail`.
    assert (result.verdict, result.phase, result.reason) == (
        Verdict.ERROR, Phase.STARTUP, "startup timed out after 2s")
    assert result.attempt == 2
    assert watched.phases[Phase.STARTUP].message == "timed out after 2s"
    assert watched.phases[Phase.TEARDOWN].ok
    assert watched.alive_after[Phase.STARTUP]  # the helper ran through the deadline
    assert watched.alive_at_finish == []  # and teardown stopped it
    assert not list(tmp_path.glob("runs/*/*/service.log"))  # the service never started


async def test_oracle_deadline_fails_the_oracle_and_kills_the_oracle_and_service(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    # Items may take 10 s each, the whole oracle only 3 s: the slow item hits the latter.
    task = task_with(tmp_path, oracle_timeout=3, drop="item_timeout")
    watched = await run_watched(task, make_submission("slow_item"), tmp_path, cache_dir)
    result = watched.result
    assert result is not None
    assert (result.verdict, result.phase, result.reason) == (
        Verdict.FAIL, Phase.ORACLE, "oracle timed out after 3s")
    assert watched.phases[Phase.ORACLE].message == "timed out after 3s"
    assert result.items_passed == 3  # the items that finished before the deadline are kept
    assert watched.alive_after[Phase.ORACLE]  # the service, until teardown
    assert watched.alive_at_finish == []  # pytest and the service are both gone


async def test_teardown_deadline_ends_teardown_and_leaves_no_process(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    """A service that ignores SIGTERM outlasts a 1 s teardown deadline (SIGKILL would
    come after 3 s): the teardown fault never replaces the verdict, and the service
    must still be gone when the evaluation ends."""
    task = task_with(tmp_path, teardown_timeout=1)
    watched = await run_watched(task, make_submission("stubborn"), tmp_path, cache_dir)
    result = watched.result
    assert result is not None
    assert result.verdict is Verdict.PASS, result.reason
    teardown = watched.phases[Phase.TEARDOWN]
    assert (teardown.ok, teardown.message) == (False, "timed out after 1s")
    assert watched.alive_after[Phase.ORACLE]
    assert watched.alive_at_finish == []


# -- health_path omitted: any HTTP answer on /health or / counts -------------------------


async def test_without_health_path_an_answer_on_root_is_healthy(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    task = task_with(tmp_path, drop="health_path")
    assert task.config.service.health_path is None
    watched = await run_watched(task, make_submission("no_health"), tmp_path, cache_dir)
    result = watched.result
    assert result is not None
    health = watched.phases[Phase.HEALTH]
    assert health.ok and health.message.startswith("answered at http://127.0.0.1:")
    # Healthy, so judged by the oracle: only the item that needs /health fails.
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.ORACLE)
    assert [i.nodeid for i in result.items if i.failed] == ["test_tiny.py::test_health"]


async def test_with_health_path_the_same_service_fails_health(
    tmp_path: Path, make_submission: MakeSubmission, cache_dir: Path
) -> None:
    task = task_with(tmp_path, health_timeout=2)
    watched = await run_watched(task, make_submission("no_health"), tmp_path, cache_dir)
    result = watched.result
    assert result is not None
    assert (result.verdict, result.phase) == (Verdict.FAIL, Phase.HEALTH)
    assert result.reason == ("no HTTP answer within 2s: "
                             "GET /health failed: ServerDisconnectedError")


# -- the CLI: --db / ANVIL_DB, report RUN_ID -o, tasks list, gc, the success rate ------


def _env_with(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "ANVIL_DB")}
    return {**env, "ANVIL_CACHE": str(cache), **extra}


def test_db_puts_the_store_elsewhere_and_report_reads_it_there(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    home = tmp_path / "home"
    db = tmp_path / "elsewhere" / "results.db"  # its folder does not exist yet
    url = f"sqlite:///{db}"
    done = anvil("run", str(TINY), "--submissions", str(make_submission("ok")), "--json",
                 "--runtime", "process", "--db", url, home=home, cache=cache_dir)
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert db.is_file() and not (home / "anvil.db").exists()
    assert (home / "runs" / row["run_id"] / "events.jsonl").is_file()  # logs stay in home
    store = Store(url)
    try:
        (record,) = store.evaluations(row["run_id"])
        assert (record.status, record.verdict, record.items_passed) == ("done", "pass", 4)
    finally:
        store.close()

    # `report --db` reads that store; without it, the home's store knows no such run.
    report = anvil("report", row["run_id"], "-f", "json", "--db", url, home=home,
                   cache=cache_dir)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["run"]["id"] == row["run_id"]
    missing = anvil("report", row["run_id"], home=home, cache=cache_dir)
    assert missing.returncode == 2 and f"no run '{row['run_id']}'" in missing.stderr

    # ANVIL_DB does what --db does; `report RUN_ID -o FILE` writes that run into FILE.
    out = tmp_path / "reports" / "deep" / "run.json"
    by_env = subprocess.run(
        [sys.executable, "-m", "engine", "report", row["run_id"], "-f", "json", "-o", str(out),
         "--home", str(home)],
        capture_output=True, text=True, timeout=60, env=_env_with(cache_dir, ANVIL_DB=url))
    assert by_env.returncode == 0, by_env.stderr
    assert by_env.stdout == "" and f"wrote {out}" in by_env.stderr
    written = json.loads(out.read_text())
    assert written == json.loads(report.stdout)
    (evaluation,) = written["evaluations"]
    assert (evaluation["evaluation_id"], evaluation["verdict"]) == (row["evaluation_id"], "pass")


def test_report_of_one_run_among_several_into_a_file(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    home = tmp_path / "home"
    ids = []
    for mode in ("ok", "crash"):
        done = anvil("run", str(TINY), "--submissions", str(make_submission(mode)), "--json",
                     "--runtime", "process", home=home, cache=cache_dir)
        ids.append(json.loads(done.stdout)["run_id"])
    first = tmp_path / "out" / "first.xml"
    written = anvil("report", ids[0], "-f", "junit", "-o", str(first), home=home,
                    cache=cache_dir)
    assert written.returncode == 0, written.stderr
    text = first.read_text()
    assert f'name="anvil run {ids[0]}"' in text and ids[1] not in text  # not `latest`
    assert '<property name="verdict" value="pass" />' in text and "<failure" not in text


def test_an_error_is_kept_out_of_the_success_rate(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    make_submission("ok", name="a-pass")
    make_submission("fail_item", name="b-fail")
    harness = make_submission("ok", name="c-error")  # a line the process runtime refuses
    (harness / "Dockerfile").write_text("FROM python:3.11-slim\nRUN apt-get install -y curl\n"
                                        "CMD [\"python\", \"server.py\"]\n")
    home = tmp_path / "home"
    done = anvil("run", str(TINY), "--submissions", str(tmp_path / "submissions"), "--json",
                 "--runtime", "process", home=home, cache=cache_dir)
    assert done.returncode == 3, done.stderr  # an evaluation ended in error
    verdicts = {Path(r["submission"]).name: r["verdict"]
                for r in map(json.loads, done.stdout.splitlines())}
    assert verdicts == {"a-pass": "pass", "b-fail": "fail", "c-error": "error"}

    report = json.loads(anvil("report", "-f", "json", home=home, cache=cache_dir).stdout)
    (task,) = report["tasks"]
    assert (task["passed"], task["failed"], task["errors"]) == (1, 1, 1)
    assert task["success_rate"] == 0.5  # 1 of the 2 judged; 1/3 if the error counted
    assert report["summary"]["success_rate"] == 0.5
    assert (task["items_passed"], task["items_total"]) == (7, 8)  # the error has no items
    table = anvil("report", home=home, cache=cache_dir).stdout
    (row,) = [line for line in table.splitlines() if line.split("│")[1:2] == [" tiny "]
              and "%" in line]
    assert [cell.strip() for cell in row.split("│")[1:6]] == ["tiny", "1/2", "50%", "88%", "1"]


def test_tasks_list_shows_each_task_and_what_is_wrong_with_a_broken_one(
    tmp_path: Path, cache_dir: Path
) -> None:
    bundled = subprocess.run([sys.executable, "-m", "engine", "tasks", "list"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60,
                             env=_env_with(cache_dir, COLUMNS="200"))
    assert bundled.returncode == 0, bundled.stderr
    (line,) = [ln for ln in bundled.stdout.splitlines() if "taskboard" in ln]
    taskboard = load_task(ROOT / "tasks" / "taskboard").config
    assert [c.strip() for c in line.split("│")[1:5]] == [
        "taskboard", taskboard.title, taskboard.domain, "-"]

    root = tmp_path / "tasks"
    task_with(tmp_path, name="tiny")
    task_with(tmp_path, name="broken")
    (root / "broken" / "task.toml").write_text('id = "broken"\n[service]\nport = "8000"\n')
    (root / "notes").mkdir()  # no task.toml, no tests/: not a task
    listed = subprocess.run([sys.executable, "-m", "engine", "tasks", "list", str(root)],
                            capture_output=True, text=True, timeout=60,
                            env=_env_with(cache_dir, COLUMNS="300"))
    assert listed.returncode == 0, listed.stderr
    rows = {c[0]: c for c in ([x.strip() for x in ln.split("│")[1:-1]]
                              for ln in listed.stdout.splitlines() if "│" in ln)}
    assert set(rows) == {"tiny", "broken"}
    assert rows["tiny"] == ["tiny", "Tiny key-value service", "test", "-", str(root / "tiny")]
    assert "service.port" in rows["broken"][1]

    empty = subprocess.run([sys.executable, "-m", "engine", "tasks", "list",
                            str(tmp_path / "none")], capture_output=True, text=True,
                           timeout=60, env=_env_with(cache_dir))
    assert empty.returncode == 2 and "no task folders" in empty.stderr


def _environ_of(pid: int) -> dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def test_gc_reaps_the_processes_a_killed_run_left(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    for _ in range(2):
        make_submission("slow_item")
    home = tmp_path / "home"
    proc = spawn("run", str(TINY), "--submissions", str(tmp_path / "submissions"),
                 "--runtime", "process", home=home, cache=cache_dir)
    try:
        wait_for(lambda: len(in_oracle(events(home))) == 2)
        proc.kill()  # kill -9 mid-oracle: no teardown at all
        proc.communicate(timeout=30)
        run_id = run_of(home)
        left = [p for p in marked_processes() if p.owner == proc.pid]
        assert {p.run_id for p in left} == {run_id}
        # Both services outlived their anvil (an oracle run may die on its own of the
        # broken pipe to the dead anvil, so only the services are counted exactly).
        services = {p.pgid for p in left if "ANVIL_INSTANCE" in _environ_of(p.pid)}
        assert len(services) == 2

        reaped = anvil("gc", "--home", str(home), home=home, cache=cache_dir)
        assert reaped.returncode == 0, reaped.stderr
        for pgid in services:
            assert f"killed process group {pgid} (run {run_id}, owner {proc.pid})" in (
                reaped.stderr.splitlines())
        assert [p for p in marked_processes() if p.owner == proc.pid] == []
        assert [p.pid for p in left if psutil.pid_exists(p.pid)
                and psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE] == []
    finally:
        proc.kill()
        proc.communicate()
        kill_left_by(proc.pid)
