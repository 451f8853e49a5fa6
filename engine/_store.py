"""The result store: runs, evaluations, phase records and item results (sqlmodel).

SQLite in WAL mode by default (``.anvil/anvil.db``); any synchronous
SQLAlchemy URL works. PostgreSQL (``postgresql+psycopg://...``, the ``postgres``
extra) is the store many drivers share: runs from several machines write into
one database at once. Every evaluation of a run is written as ``pending``
before the first starts, so an interrupted run can be resumed without losing
or duplicating one: ``(run_id, task_path, submission)`` is unique.

An evaluation is *claimed* before it starts (owner ``host:pid`` and a lease
until a unix time, set in one conditional UPDATE), so two ``anvil run
--resume`` of one run never both take the same evaluation; a claim whose
owner died on this host or whose lease ran out can be taken over.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    UniqueConstraint,
    event,
    insert,
    inspect,
    or_,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
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
    items_skipped: int = 0
    owner: str | None = None  # host:pid of the anvil that claimed it
    lease_until: float | None = None  # unix time; past it, another anvil may take over


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
    # JSON object of the item's scoring markers (tier, visibility, requirement, level). Rows
    # an older anvil wrote get "{}" when the column is added (or NULL, written by hand):
    # `markers_dict` gives them the defaults.
    markers: str | None = "{}"

    def markers_dict(self) -> dict[str, str]:
        """The item's markers, defaults filled in: tier ``base``, visibility ``public``."""
        stored = json.loads(self.markers) if self.markers else {}
        return {**ITEM_MARKER_DEFAULTS, **{str(k): str(v) for k, v in stored.items()}}


ITEM_MARKER_DEFAULTS = {"tier": "base", "visibility": "public"}


class SpanRecord(SQLModel, table=True):
    """One finished span of an evaluation's trace (an oracle item, a proxied HTTP call).

    ``attributes`` and ``events`` are JSON; times are unix nanoseconds. Every attempt of
    an evaluation is its own trace (``trace_id``): readers pick the one they show.
    """

    __tablename__ = "spans"

    evaluation_id: str = Field(primary_key=True)
    span_id: str = Field(primary_key=True)
    trace_id: str = Field(index=True)
    parent_id: str | None = None
    name: str
    kind: str = "internal"
    start_ns: int = Field(sa_column=Column(BigInteger, nullable=False))
    end_ns: int = Field(sa_column=Column(BigInteger, nullable=False))
    status: str = "unset"  # unset | ok | error
    status_message: str = ""
    attributes: str = "{}"  # JSON object
    events: str = "[]"  # JSON list of {name, ts_ns, attributes}

    def attributes_dict(self) -> dict[str, Any]:
        return dict(json.loads(self.attributes))

    def events_list(self) -> list[dict[str, Any]]:
        return list(json.loads(self.events))


def default_url(home: Path) -> str:
    return f"sqlite:///{home / 'anvil.db'}"


# Any number that no other user of a shared PostgreSQL database takes for its own lock.
_SCHEMA_LOCK = 0x616E76696C  # "anvil"


class Store:
    """Synchronous store; the engine calls it from worker threads, one at a time.

    ``url`` is the URL as shown to people: its password, if any, is hidden.
    """

    def __init__(self, url: str, busy_timeout: float = 10.0,
                 connect_timeout: float = 10.0) -> None:
        self.url = _redacted(url)
        try:
            if url.startswith("sqlite:///"):
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = _make_engine(url, connect_timeout)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", partial(_sqlite_pragmas,
                                                             int(busy_timeout * 1000)))
                with _creating(url), self.engine.begin() as conn:
                    _create_schema(conn)
            elif self.engine.dialect.name == "postgresql":
                # Times read back in UTC, as from SQLite, whatever the server's zone.
                event.listen(self.engine, "connect", _postgres_session)
                with self.engine.begin() as conn:
                    # Two drivers creating the tables at once would otherwise collide
                    # (CREATE TABLE checks, then inserts into the catalogue); the lock is
                    # held to the end of this transaction, DDL included.
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                                 {"key": _SCHEMA_LOCK})
                    _create_schema(conn)
            else:
                with self.engine.begin() as conn:
                    _create_schema(conn)
        except ImportError as exc:
            raise HarnessError(f"cannot open the store {self.url}: {_missing_driver(url, exc)}"
                               ) from exc
        except (SQLAlchemyError, OSError) as exc:
            raise HarnessError(f"cannot open the store {self.url}: {_one_line(exc)}") from exc

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
            raise HarnessError(f"store {self.url}: {_one_line(exc)}") from exc

    def apply(self, ev: Event) -> None:
        """Write what one event changes.

        Raises:
            HarnessError: the database refused it.
        """
        self.apply_many([ev])

    def apply_many(self, events: Sequence[Event]) -> None:
        """Write what ``events`` change, in their order, as one transaction (all or none,
        so a batch that failed can be written again whole).

        Raises:
            HarnessError: the database refused it.
        """
        try:
            with Session(self.engine) as session:
                if any([self._stage(session, ev) for ev in events]):
                    session.commit()
        except SQLAlchemyError as exc:
            raise HarnessError(f"store {self.url}: {_one_line(exc)}") from exc

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

    def _stage(self, session: Session, ev: Event) -> bool:
        """Add what one event changes to ``session``; True when it changes anything."""
        if isinstance(ev, EvaluationStarted):
            row = session.get(EvaluationRecord, ev.evaluation_id)
            if row is None:
                return False
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
                markers=json.dumps(item.markers, sort_keys=True),
            ))
        elif isinstance(ev, EvaluationFinished):
            row = session.get(EvaluationRecord, ev.evaluation_id)
            if row is None:
                return False
            row.status = "done" if ev.final else "pending"
            row.verdict = ev.verdict.value
            row.phase = ev.phase.value if ev.phase else None
            row.reason = ev.reason
            row.attempt = ev.attempt
            row.finished_at = datetime.fromtimestamp(ev.ts, UTC)
            row.duration_s = ev.duration_s
            row.items_passed, row.items_failed = ev.items_passed, ev.items_failed
            row.items_skipped = ev.items_skipped
            if ev.final:
                row.owner, row.lease_until = None, None
            session.add(row)
        elif isinstance(ev, RunFinishedEvent):
            run = session.get(RunRecord, ev.run_id)
            if run is None:
                return False
            run.status = "interrupted" if ev.interrupted else "finished"
            run.finished_at = datetime.fromtimestamp(ev.ts, UTC)
            session.add(run)
        else:
            return False
        return True

    def claim(self, evaluation_id: str, owner: str, lease_seconds: float) -> bool:
        """Take ``evaluation_id`` for ``owner`` unless another live anvil holds it.

        One conditional UPDATE, atomic in every database: it succeeds when the
        evaluation is not done and is unclaimed, claimed by ``owner`` already, claimed
        by a process of this host that is gone, or out of lease. On PostgreSQL (read
        committed) a second driver's UPDATE waits for the first to commit, then checks its
        WHERE again on the new row: it matches nothing, and the claim is refused.

        Raises:
            HarnessError: the database refused it.
        """
        now = time.time()
        host = owner.rpartition(":")[0]
        try:
            with Session(self.engine) as session:
                current = session.get(EvaluationRecord, evaluation_id)
                if current is None or current.status == "done":
                    return False
                holder = current.owner
                dead = bool(holder and holder.rpartition(":")[0] == host
                            and not _pid_alive(holder.rpartition(":")[2]))
                stmt = (update(EvaluationRecord)
                        .where(col(EvaluationRecord.id) == evaluation_id)
                        .where(col(EvaluationRecord.status) != "done"))
                if not dead:
                    stmt = stmt.where(or_(col(EvaluationRecord.owner).is_(None),
                                          col(EvaluationRecord.owner) == owner,
                                          col(EvaluationRecord.lease_until) < now))
                else:  # taken over only if still held by the dead owner
                    stmt = stmt.where(col(EvaluationRecord.owner) == holder)
                result = session.exec(stmt.values(owner=owner,
                                                   lease_until=now + lease_seconds))
                session.commit()
                return bool(result.rowcount)
        except SQLAlchemyError as exc:
            raise HarnessError(f"store {self.url}: {_one_line(exc)}") from exc

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

    def evaluation(self, evaluation_id: str) -> EvaluationRecord | None:
        with Session(self.engine) as session:
            return session.get(EvaluationRecord, evaluation_id)

    def write_spans(self, spans: Sequence[SpanRecord | Mapping[str, Any]]) -> None:
        """Add finished spans in one transaction; a span already stored stays as it is
        (an exporter that retries a batch duplicates nothing). Rows may come as plain
        mappings of the columns: building model objects costs more than the insert.

        Raises:
            HarnessError: the database refused it.
        """
        if not spans:
            return
        rows = [span if isinstance(span, Mapping) else span.model_dump() for span in spans]
        dialect = self.engine.dialect.name
        stmt: Any
        if dialect == "sqlite":
            stmt = sqlite.insert(SpanRecord).on_conflict_do_nothing()
        elif dialect == "postgresql":
            stmt = postgresql.insert(SpanRecord).on_conflict_do_nothing()
        else:
            stmt = insert(SpanRecord)
        try:
            with self.engine.begin() as conn:
                conn.execute(stmt, rows)
        except SQLAlchemyError as exc:
            raise HarnessError(f"store {self.url}: {_one_line(exc)}") from exc

    def spans(self, evaluation_id: str) -> Sequence[SpanRecord]:
        """Every stored span of an evaluation (all its attempts), earliest first."""
        with Session(self.engine) as session:
            stmt = (select(SpanRecord).where(col(SpanRecord.evaluation_id) == evaluation_id)
                    .order_by(col(SpanRecord.start_ns), col(SpanRecord.span_id)))
            return session.exec(stmt).all()


def _make_engine(url: str, connect_timeout: float) -> Engine:
    parsed = make_url(url)
    connect_args: dict[str, Any] = {}
    if parsed.get_dialect().driver in ("psycopg", "psycopg2") and (
            "connect_timeout" not in parsed.query):
        # libpq waits forever by default on a host that drops packets
        connect_args["connect_timeout"] = max(1, round(connect_timeout))
    # pre-ping: a driver's pooled connection may have been closed by a restarted server
    return create_engine(url, connect_args=connect_args,
                         pool_pre_ping=parsed.get_backend_name() != "sqlite")


def _create_schema(conn: Connection) -> None:
    SQLModel.metadata.create_all(conn)
    _add_missing_columns(conn)


def _add_missing_columns(conn: Connection) -> None:
    """Bring a store written by an older anvil up to date: new columns are nullable or
    have defaults, so adding them keeps every row (no data is lost on upgrade)."""
    inspector = inspect(conn)
    for table in SQLModel.metadata.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            kind = column.type.compile(dialect=conn.dialect)
            default = getattr(column.default, "arg", None)
            tail = f" DEFAULT {default!r}" if isinstance(default, int | float | str) else ""
            conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" '
                              f"{kind}{tail}"))


def _redacted(url: str) -> str:
    """``url`` with its password hidden (as ``***``), fit to print."""
    try:
        parsed = make_url(url)
        # rendered only when there is something to hide: rendering quotes a path's ``@``
        return url if parsed.password is None else parsed.render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError):
        # Not parsed: hide whatever sits between ``user:`` and ``@``.
        head, sep, tail = url.partition("://")
        if sep and "@" in tail:
            creds, _at, rest = tail.rpartition("@")
            user = creds.partition(":")[0]
            return f"{head}://{user}:***@{rest}" if ":" in creds else url
        return url


def _one_line(exc: BaseException) -> str:
    """What went wrong, on one line: the driver's own message when there is one, without
    SQLAlchemy's SQL echo and link."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        message = str(exc.orig)
    else:
        message = str(exc).split("\n(Background on this error", 1)[0]
    lines = [line.strip() for line in message.splitlines()]
    return "; ".join(line for line in lines if line and not line.startswith("[SQL"))


def _missing_driver(url: str, exc: ImportError) -> str:
    module = exc.name or str(exc)
    hint = ""
    if url.startswith("postgresql"):
        hint = ("; `pip install 'anvil-harness[postgres]'` installs psycopg, "
                "for postgresql+psycopg:// URLs")
    return f"its database driver {module} is not installed{hint}"


def _postgres_session(dbapi_connection: Any, _record: Any) -> None:
    # SET in autocommit: inside a transaction, the pool's rollback on return would undo it
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    cursor = dbapi_connection.cursor()
    cursor.execute("SET TIME ZONE 'UTC'")
    cursor.close()
    dbapi_connection.autocommit = autocommit


def _pid_alive(pid: str) -> bool:
    if not pid.isdigit():
        return True  # not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _creating(url: str) -> Iterator[None]:
    """Serialise schema creation between anvils starting on one fresh SQLite file
    (two at once otherwise fail with 'database is locked' or 'table already exists')."""
    if not url.startswith("sqlite:///"):
        yield
        return
    with open(url.removeprefix("sqlite:///") + ".init-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _sqlite_pragmas(busy_ms: int, dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={busy_ms}")  # first: WAL switch may wait on a lock
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
