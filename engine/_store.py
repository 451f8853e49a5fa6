"""The result store: runs, evaluations, phase records and item results (sqlmodel).

SQLite in WAL mode by default (``.anvil/anvil.db``); any synchronous
SQLAlchemy URL works. Every evaluation of a run is written as ``pending``
before the first starts, so an interrupted run can be resumed without losing
or duplicating one: ``(run_id, task_path, submission)`` is unique.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, UniqueConstraint, event
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Field, Session, SQLModel, col, create_engine, delete, select

from ._errors import HarnessError
from ._events import EvaluationFinished, EvaluationStarted, Event, ItemFinished, PhaseFinished
from ._events import RunFinished as RunFinishedEvent


def _now() -> datetime:
    return datetime.now(UTC)


class RunRecord(SQLModel, table=True):
    __tablename__ = "runs"

    id: str = Field(primary_key=True)
    created_at: datetime = Field(default_factory=_now)
    finished_at: datetime | None = None
    status: str = "running"  # running | finished | interrupted
    runtime: str = ""
    options: str = "{}"  # JSON: what `anvil run --resume` needs to go on

    def options_dict(self) -> dict[str, Any]:
        return dict(json.loads(self.options))


class EvaluationRecord(SQLModel, table=True):
    __tablename__ = "evaluations"
    __table_args__ = (UniqueConstraint("run_id", "task_path", "submission"),)

    id: str = Field(primary_key=True)
    run_id: str = Field(index=True, foreign_key="runs.id")
    position: int = 0
    task_id: str
    task_path: str
    submission: str
    status: str = "pending"  # pending | running | done
    verdict: str | None = None
    phase: str | None = None
    reason: str = ""
    attempt: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    items_passed: int = 0
    items_failed: int = 0


class PhaseRecord(SQLModel, table=True):
    __tablename__ = "phases"

    id: int | None = Field(default=None, primary_key=True)
    evaluation_id: str = Field(index=True, foreign_key="evaluations.id")
    phase: str
    ok: bool
    duration_s: float
    message: str = ""
    finished_at: datetime = Field(default_factory=_now)


class ItemRecord(SQLModel, table=True):
    __tablename__ = "items"

    id: int | None = Field(default=None, primary_key=True)
    evaluation_id: str = Field(index=True, foreign_key="evaluations.id")
    nodeid: str
    category: str | None = None
    outcome: str
    duration_s: float
    message: str = ""
    traceback: str = ""


def default_url(home: Path) -> str:
    return f"sqlite:///{home / 'anvil.db'}"


class Store:
    """Synchronous store; the engine calls it from worker threads, one at a time."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            if url.startswith("sqlite:///"):
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(url)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
            SQLModel.metadata.create_all(self.engine)
        except (SQLAlchemyError, OSError) as exc:
            raise HarnessError(f"cannot open the store {url}: {exc}") from exc

    def close(self) -> None:
        self.engine.dispose()

    # -- writing -------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        runtime: str,
        options: dict[str, Any],
        evaluations: Iterable[tuple[str, str, str, str]],
    ) -> None:
        """Record a run and all its evaluations (id, task id, task path, submission).

        Raises:
            HarnessError: the database refused it.
        """
        try:
            self._create_run(run_id, runtime, options, evaluations)
        except SQLAlchemyError as exc:
            raise HarnessError(f"store {self.url}: {exc}") from exc

    def apply(self, ev: Event) -> None:
        """Write what one event changes.

        Raises:
            HarnessError: the database refused it.
        """
        try:
            self._apply(ev)
        except SQLAlchemyError as exc:
            raise HarnessError(f"store {self.url}: {exc}") from exc

    def _create_run(
        self,
        run_id: str,
        runtime: str,
        options: dict[str, Any],
        evaluations: Iterable[tuple[str, str, str, str]],
    ) -> None:
        with Session(self.engine) as session:
            session.add(RunRecord(id=run_id, runtime=runtime, options=json.dumps(options)))
            session.flush()  # the run row first: evaluations reference it
            for position, (eid, task_id, task_path, submission) in enumerate(evaluations):
                session.add(EvaluationRecord(
                    id=eid, run_id=run_id, position=position, task_id=task_id,
                    task_path=task_path, submission=submission,
                ))
            session.commit()

    def _apply(self, ev: Event) -> None:
        with Session(self.engine) as session:
            if isinstance(ev, EvaluationStarted):
                row = session.get(EvaluationRecord, ev.evaluation_id)
                if row is None:
                    return
                # A new attempt replaces what an earlier, unfinished one wrote.
                session.exec(delete(PhaseRecord).where(
                    col(PhaseRecord.evaluation_id) == ev.evaluation_id))
                session.exec(delete(ItemRecord).where(
                    col(ItemRecord.evaluation_id) == ev.evaluation_id))
                row.status, row.attempt = "running", ev.attempt
                row.started_at = datetime.fromtimestamp(ev.ts, UTC)
                session.add(row)
            elif isinstance(ev, PhaseFinished):
                session.add(PhaseRecord(
                    evaluation_id=ev.evaluation_id, phase=ev.phase.value, ok=ev.ok,
                    duration_s=ev.duration_s, message=ev.message,
                ))
            elif isinstance(ev, ItemFinished):
                item = ev.item
                session.add(ItemRecord(
                    evaluation_id=ev.evaluation_id, nodeid=item.nodeid, category=item.category,
                    outcome=item.outcome.value, duration_s=item.duration,
                    message=item.message, traceback=item.traceback,
                ))
            elif isinstance(ev, EvaluationFinished):
                row = session.get(EvaluationRecord, ev.evaluation_id)
                if row is None:
                    return
                row.status = "done" if ev.final else "pending"
                row.verdict = ev.verdict.value
                row.phase = ev.phase.value if ev.phase else None
                row.reason = ev.reason
                row.attempt = ev.attempt
                row.finished_at = datetime.fromtimestamp(ev.ts, UTC)
                row.duration_s = ev.duration_s
                row.items_passed, row.items_failed = ev.items_passed, ev.items_failed
                session.add(row)
            elif isinstance(ev, RunFinishedEvent):
                run = session.get(RunRecord, ev.run_id)
                if run is None:
                    return
                run.status = "interrupted" if ev.interrupted else "finished"
                run.finished_at = datetime.fromtimestamp(ev.ts, UTC)
                session.add(run)
            else:
                return
            session.commit()

    # -- reading -------------------------------------------------------------

    def run(self, run_id: str) -> RunRecord | None:
        with Session(self.engine) as session:
            if run_id == "latest":
                stmt = select(RunRecord).order_by(col(RunRecord.created_at).desc()).limit(1)
                return session.exec(stmt).first()
            return session.get(RunRecord, run_id)

    def evaluations(self, run_id: str) -> Sequence[EvaluationRecord]:
        with Session(self.engine) as session:
            stmt = (select(EvaluationRecord).where(EvaluationRecord.run_id == run_id)
                    .order_by(col(EvaluationRecord.position)))
            return session.exec(stmt).all()

    def items(self, evaluation_ids: Sequence[str]) -> Sequence[ItemRecord]:
        with Session(self.engine) as session:
            stmt = (select(ItemRecord).where(col(ItemRecord.evaluation_id).in_(evaluation_ids))
                    .order_by(col(ItemRecord.id)))
            return session.exec(stmt).all()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
