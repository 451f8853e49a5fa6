"""Reaping what a killed anvil left behind (process runtime).

Every process anvil starts (services, oracle runs) carries ``ANVIL_OWNER_PID``
and ``ANVIL_RUN`` in its environment, the process-runtime counterpart of the
Docker labels. When the owner is gone (``kill -9`` of ``anvil run``), the
next ``anvil run`` or ``anvil gc`` finds those processes through /proc and
kills their process groups.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

OWNER_VAR = "ANVIL_OWNER_PID"
RUN_VAR = "ANVIL_RUN"


def owner_env(run_id: str) -> dict[str, str]:
    """The environment marks of a process started by this anvil for ``run_id``."""
    return {OWNER_VAR: str(os.getpid()), RUN_VAR: run_id}


@dataclass(frozen=True)
class Orphan:
    pid: int
    pgid: int
    run_id: str
    owner: int


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key in (OWNER_VAR.encode(), RUN_VAR.encode()):
            env[key.decode()] = value.decode(errors="replace")
    return env


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purpose.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def marked_processes() -> list[Orphan]:
    """Every live process carrying anvil's marks, whoever its owner."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        env = _environ(pid)
        if OWNER_VAR not in env or not alive(pid):
            continue
        try:
            owner = int(env[OWNER_VAR])
            pgid = os.getpgid(pid)
        except (ValueError, ProcessLookupError):
            continue
        found.append(Orphan(pid, pgid, env.get(RUN_VAR, "?"), owner))
    return found


def find_orphans() -> list[Orphan]:
    """Processes started by an anvil that no longer runs."""
    me = os.getpid()
    return [p for p in marked_processes() if p.owner != me and not alive(p.owner)]


def reap_orphans() -> list[Orphan]:
    """Kill the process groups of every orphan; return what was reaped."""
    orphans = find_orphans()
    for pgid in {o.pgid for o in orphans}:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return orphans
