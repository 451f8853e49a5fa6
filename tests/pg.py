"""A real PostgreSQL server for tests: Debian's package, started in a temporary folder.

The server listens on 127.0.0.1 at a free port and keeps its socket in its own folder;
``-A trust`` lets the ``postgres`` role in without a password. Run as root (CI), initdb
and pg_ctl run as the ``postgres`` user, which PostgreSQL requires.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                   else 0)
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Postgres:
    """A running server; ``url`` is a database made for the session."""

    port: int
    url: str

    def fresh_database(self) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        name = f"anvil_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def connect(self, url: str) -> psycopg.Connection[tuple[object, ...]]:
        """A plain psycopg connection to the database of ``url`` (autocommit)."""
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname=url.rsplit("/", 1)[1], autocommit=True)


@contextmanager
def postgres_server(bindir: Path) -> Iterator[Postgres]:
    """Start PostgreSQL from ``bindir`` in a temporary folder; stop it and remove the folder
    on exit, whatever happened."""
    # Not under pytest's tmp_path: its parents are 0700, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="anvil-pg-"))
    as_postgres = os.geteuid() == 0
    user = "postgres" if as_postgres else None
    if as_postgres:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data, log = root / "data", root / "log"
    ctl = [str(bindir / "pg_ctl"), "-D", str(data)]
    started = False
    try:
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            user=user, check=True, capture_output=True, text=True, timeout=120, cwd=root,
        )
        for _attempt in range(5):  # a free port may be taken between the check and the bind
            port = _free_port()
            # fsync off: nothing here has to survive a crash of the machine
            options = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off")
            done = subprocess.run([*ctl, "-o", options, "-l", str(log), "-w", "-t", "60",
                                   "start"], user=user, capture_output=True, text=True,
                                  timeout=90, cwd=root)
            if done.returncode == 0:
                started = True
                break
        if not started:
            text = log.read_text() if log.exists() else done.stderr
            raise RuntimeError(f"PostgreSQL did not start: {text[-2000:]}")
        server = Postgres(port=port, url="")
        server.url = server.fresh_database()
        yield server
    finally:
        if started:
            subprocess.run([*ctl, "-m", "immediate", "-w", "stop"], user=user,
                           capture_output=True, timeout=60, cwd=root)
        shutil.rmtree(root, ignore_errors=True)
