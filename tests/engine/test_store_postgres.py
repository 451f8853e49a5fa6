"""The store on a real PostgreSQL server: the one many drivers share (``--db postgresql+psycopg``).

The server is Debian's package, started for the session in a temporary folder (tests/pg.py).
CI installs it and requires these tests (ANVIL_REQUIRE_DOCKER=1); elsewhere they skip without
it. The tests about bad URLs need no server.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from engine import (
    EvaluationFinished,
    EvaluationStarted,
    ItemFinished,
    ItemResult,
    Outcome,
    Phase,
    PhaseFinished,
    RunFinished,
    Store,
    Verdict,
)
from engine._store import PhaseRecord
from tests.conftest import FIXTURES, MakeSubmission
from tests.pg import Postgres, find_bindir, postgres_server

TINY = FIXTURES / "tiny_task"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server for the session; ``.url`` is a database made for it."""
    bindir = find_bindir()
    if bindir is None:
        problem = "no PostgreSQL (/usr/lib/postgresql/*/bin/initdb): apt-get install postgresql"
        if os.environ.get("ANVIL_REQUIRE_DOCKER"):
            pytest.fail(f"PostgreSQL is required here (ANVIL_REQUIRE_DOCKER): {problem}")
        pytest.skip(problem)
    with postgres_server(bindir) as server:
        yield server


@pytest.fixture
def pg_url(postgres: Postgres) -> str:
    """An empty database of its own for one test."""
    return postgres.fresh_database()


OpenStore = Callable[[str], Store]


@pytest.fixture
def open_store() -> Iterator[OpenStore]:
    """``Store(url)``, closed at the end of the test (a pooled psycopg connection left open
    warns when it is collected)."""
    opened: list[Store] = []

    def make(url: str) -> Store:
        opened.append(Store(url))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "ANVIL_DB")}
    return {**env, "ANVIL_CACHE": str(cache)}


def anvil(*args: str, cache: Path, env: dict[str, str] | None = None,
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, timeout=120, env={**_env(cache), **(env or {})})


def at_once(work: Callable[[int, threading.Barrier], None], n: int) -> list[BaseException]:
    """Run ``work(i, barrier)`` in ``n`` threads (the barrier lines them up); what they
    raised."""
    barrier = threading.Barrier(n)
    problems: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            work(i, barrier)
        except BaseException as exc:  # noqa: BLE001 - returned, asserted by the caller
            barrier.abort()  # the others stop waiting for this one
            problems.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    return problems


# -- the store API ---------------------------------------------------------------------------


def _feed(store: Store) -> None:
    """One run's worth of writes, with fixed times so that two stores can be compared."""
    store.create_run("r1", "process", {"concurrency": 2, "tasks": ["/t/é"]},
                     [(f"r1.{i}", "tiny", "/t", f"/s{i}") for i in range(3)])
    ts = 1_800_000_000.25
    for i, verdict in enumerate([Verdict.PASS, Verdict.FAIL]):
        eid = f"r1.{i}"
        store.apply(EvaluationStarted(run_id="r1", evaluation_id=eid, task="tiny",
                                      submission=f"/s{i}", attempt=1, ts=ts))
        store.apply(PhaseFinished(evaluation_id=eid, phase=Phase.BUILD, ok=True,
                                  duration_s=0.5, message="built ✓", ts=ts + 1))
        items = (
            ItemResult("t.py::a", Outcome.PASSED, "crud", 0.01, markers={"tier": "R1"}),
            ItemResult("t.py::b", Outcome.FAILED if verdict is Verdict.FAIL else Outcome.SKIPPED,
                       "state", 0.02, message="expected 200\ngot 500", traceback="tb ' \" ;",
                       markers={"requirement": "REQ-1", "level": "leaf"}),
        )
        for item in items:
            store.apply(ItemFinished(evaluation_id=eid, item=item, ts=ts + 2))
        store.apply(EvaluationFinished(
            run_id="r1", evaluation_id=eid, task="tiny", submission=f"/s{i}", verdict=verdict,
            phase=Phase.ORACLE if verdict is Verdict.FAIL else None, reason="because",
            items=items, duration_s=3.5, attempt=1, ts=ts + 3))
    # the third: claimed, then a retryable error, still pending
    assert store.claim("r1.2", "hostx:1", 600)
    store.apply(EvaluationFinished(
        run_id="r1", evaluation_id="r1.2", task="tiny", submission="/s2", verdict=Verdict.ERROR,
        phase=Phase.STARTUP, reason="daemon gone", items=(), duration_s=0.1, attempt=1,
        final=False, ts=ts + 4))
    spans: list[dict[str, Any]] = [
        {"evaluation_id": "r1.0", "span_id": f"{n:016x}", "trace_id": "ab" * 16,
         "parent_id": None if n == 0 else f"{0:016x}", "name": f"GET /items/{n}",
         "kind": "client", "start_ns": 1_800_000_000_000_000_000 + n,
         "end_ns": 1_800_000_000_500_000_000 + n, "status": "ok", "status_message": "",
         "attributes": json.dumps({"http.status_code": 200, "note": "naïve"}),
         "events": json.dumps([{"name": "retry", "ts_ns": 1, "attributes": {}}])}
        for n in range(3)
    ]
    store.write_spans(spans)
    store.write_spans(spans[1:])  # an exporter retrying a batch: nothing is duplicated
    store.apply(RunFinished(run_id="r1", interrupted=False, duration_s=9.0, ts=ts + 5))


def _contents(store: Store) -> dict[str, Any]:
    """Everything stored, as plain values; the times a row takes from the clock left out."""
    run = store.run("latest")
    assert run is not None
    evaluations = store.evaluations(run.id)
    with Session(store.engine) as session:
        phases = session.exec(select(PhaseRecord).order_by(col(PhaseRecord.id))).all()
        phase_rows = [p.model_dump(exclude={"finished_at"}) for p in phases]
    return {
        "run": run.model_dump(exclude={"created_at"}),
        "options": run.options_dict(),
        # a lease is the clock's: compared apart
        "evaluations": [e.model_dump(exclude={"lease_until"}) for e in evaluations],
        "leases": [e.lease_until is not None for e in evaluations],
        "items": [(i.model_dump(), i.markers_dict())
                  for i in store.items([e.id for e in evaluations])],
        "phases": phase_rows,
        "spans": [(s.model_dump(), s.attributes_dict(), s.events_list())
                  for s in store.spans("r1.0")],
        "one": store.evaluation("r1.1").model_dump(),  # type: ignore[union-attr]
    }


def test_the_store_reads_back_on_postgres_exactly_what_sqlite_does(
    pg_url: str, tmp_path: Path, open_store: OpenStore
) -> None:
    on_sqlite, on_postgres = open_store(f"sqlite:///{tmp_path / 'a.db'}"), open_store(pg_url)
    assert on_postgres.engine.dialect.name == "postgresql"
    for store in (on_sqlite, on_postgres):
        _feed(store)
    lite, pg = _contents(on_sqlite), _contents(on_postgres)
    assert pg == lite
    # and what was fed is what is there (not two equally wrong stores)
    assert [(e["verdict"], e["status"]) for e in pg["evaluations"]] == [
        ("pass", "done"), ("fail", "done"), ("error", "pending")]
    assert pg["evaluations"][2]["owner"] == "hostx:1"  # a non-final verdict keeps the claim
    assert pg["evaluations"][0]["started_at"].isoformat() == "2027-01-15T08:00:00.250000+00:00"
    assert len(pg["spans"]) == 3 and pg["spans"][0][0]["start_ns"] > 2**60
    assert pg["items"][1][1] == {"tier": "base", "visibility": "public",
                                 "requirement": "REQ-1", "level": "leaf"}


def test_drivers_opening_one_fresh_database_at_once_all_work(
    postgres: Postgres, open_store: OpenStore
) -> None:
    """Without the schema lock, PostgreSQL's CREATE TABLE race fails all but one driver."""
    for _round in range(3):
        url = postgres.fresh_database()

        def open_and_write(n: int, start: threading.Barrier, url: str = url) -> None:
            start.wait(timeout=30)
            open_store(url).create_run(f"run{n}", "process", {},
                                       [(f"run{n}.0", "t", "/t", "/s")])

        assert at_once(open_and_write, 5) == []
        reader = open_store(url)
        assert [len(reader.evaluations(f"run{n}")) for n in range(5)] == [1] * 5


def test_an_older_postgres_store_gains_new_columns_and_keeps_its_rows(
    postgres: Postgres, pg_url: str, open_store: OpenStore
) -> None:
    open_store(pg_url).create_run("r", "process", {}, [("r.0", "t", "/t", "/s")])
    with postgres.connect(pg_url) as conn:
        conn.execute("ALTER TABLE evaluations DROP COLUMN items_skipped")
        conn.execute("ALTER TABLE evaluations DROP COLUMN lease_until")
        conn.execute("ALTER TABLE items DROP COLUMN markers")
    store = open_store(pg_url)
    (row,) = store.evaluations("r")
    assert (row.id, row.items_skipped, row.lease_until) == ("r.0", 0, None)
    assert store.claim("r.0", "h:1", 600)  # the re-added lease column is usable


def test_concurrent_claims_on_postgres_have_exactly_one_winner(
    pg_url: str, open_store: OpenStore
) -> None:
    """Eight drivers race for each evaluation, fresh and with an expired lease."""
    drivers, evaluations = 8, 15
    setup = open_store(pg_url)
    setup.create_run("r", "process", {},
                     [(f"r.{i}", "t", "/t", f"/s{i}") for i in range(evaluations)])
    stores = [open_store(pg_url) for _ in range(drivers)]

    def race(lease: float) -> dict[str, list[str]]:
        winners: dict[str, list[str]] = {f"r.{i}": [] for i in range(evaluations)}

        def driver(n: int, together: threading.Barrier) -> None:
            for eid in winners:
                together.wait(timeout=30)  # all at the same evaluation at once
                if stores[n].claim(eid, f"driver{n}:{n}", lease):
                    winners[eid].append(f"driver{n}:{n}")

        assert at_once(driver, drivers) == []
        return winners

    first = race(lease=600)  # unclaimed evaluations
    assert all(len(w) == 1 for w in first.values()), first
    for eid, (winner,) in first.items():  # each winner lets its lease run out
        assert setup.claim(eid, winner, -1)
    second = race(lease=600)  # expired leases, taken over
    assert all(len(w) == 1 for w in second.values()), second
    owners = {row.id: row.owner for row in setup.evaluations("r")}
    assert owners == {eid: w[0] for eid, w in second.items()}
    # and a live claim keeps everyone else out
    assert not any(s.claim("r.0", "late:1", 600) for s in stores)


# -- two drivers through the CLI ------------------------------------------------------------


def _submissions(make_submission: MakeSubmission, folder: Path, modes: list[str]) -> Path:
    folder.mkdir()
    for mode in modes:
        shutil.move(make_submission(mode, name=f"{folder.name}-{mode}"), folder)
    return folder


def test_two_drivers_write_two_runs_into_one_postgres_store_at_once(
    pg_url: str, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path,
    open_store: OpenStore,
) -> None:
    plans = {"a": ["ok", "fail_item"], "b": ["crash", "ok"]}
    expected = {"ok": ("pass", None), "fail_item": ("fail", "oracle"),
                "crash": ("fail", "startup")}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "engine", "run", str(TINY), "--submissions",
             str(_submissions(make_submission, tmp_path / name, modes)), "--runtime", "process",
             "--json", "--home", str(tmp_path / f"home-{name}"), "--db", pg_url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cache_dir))
        for name, modes in plans.items()
    }
    try:
        done = {name: proc.communicate(timeout=120) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.communicate()
    run_ids = {}
    for name, (out, err) in done.items():
        assert procs[name].returncode == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        (run_ids[name],) = {r["run_id"] for r in rows}
    assert run_ids["a"] != run_ids["b"]

    for name, run_id in run_ids.items():  # read back from a third home: only the db is shared
        shown = anvil("report", run_id, "--format", "json", "--db", pg_url,
                      "--home", str(tmp_path / "reader"), cache=cache_dir)
        assert shown.returncode == 0, shown.stderr
        report = json.loads(shown.stdout)
        assert (report["run"]["id"], report["run"]["status"]) == (run_id, "finished")
        got = {Path(e["submission"]).name: (e["verdict"], e["phase"])
               for e in report["evaluations"]}
        assert got == {f"{name}-{mode}": expected[mode] for mode in plans[name]}
    lossy = json.loads(anvil("report", run_ids["a"], "--format", "json", "--db", pg_url,
                             "--home", str(tmp_path / "reader"), cache=cache_dir).stdout)
    failed = [i["nodeid"] for e in lossy["evaluations"] for i in e["failed_items"]]
    assert failed == ["test_tiny.py::test_put_then_get"]
    store = open_store(pg_url)
    assert Counter(store.run(r).status for r in run_ids.values()) == {  # type: ignore[union-attr]
        "finished": 2}


# -- clear errors ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_does_not_answer_is_one_line_naming_the_url_without_password(
    tmp_path: Path, cache_dir: Path
) -> None:
    url = f"postgresql+psycopg://anvil:s3cret@127.0.0.1:{_free_port()}/lab"
    done = anvil("run", str(TINY), "--submissions", str(tmp_path), "--runtime", "process",
                 "--home", str(tmp_path / "home"), "--db", url, cache=cache_dir)
    assert done.returncode == 3, done.stderr  # anvil could not judge: no store
    (line,) = done.stderr.splitlines()
    shown = url.replace("s3cret", "***")
    assert line.startswith(f"error: cannot open the store {shown}: ")
    assert "Connection refused" in line and "s3cret" not in done.stderr + done.stdout


def test_a_missing_postgres_driver_is_one_line_naming_the_extra(
    tmp_path: Path, cache_dir: Path
) -> None:
    # psycopg as it is where the extra was not installed: importing it fails
    shadow = tmp_path / "shadow" / "psycopg"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'psycopg'\", name='psycopg')\n")
    url = "postgresql+psycopg://anvil:s3cret@127.0.0.1:5432/lab"
    done = anvil("report", "latest", "--db", url, "--home", str(tmp_path / "home"),
                 cache=cache_dir, env={"PYTHONPATH": str(shadow.parent)})
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines() == [
        "error: cannot open the store postgresql+psycopg://anvil:***@127.0.0.1:5432/lab: its "
        "database driver psycopg is not installed; `pip install 'anvil-harness[postgres]'` "
        "installs psycopg, for postgresql+psycopg:// URLs"]
