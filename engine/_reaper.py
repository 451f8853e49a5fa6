"""Finding anvil's processes by their environment marks, and ending them.

Every process anvil starts (services, oracle runs) carries ``ANVIL_OWNER_PID``
and ``ANVIL_RUN`` in its environment, the process-runtime counterpart of the
Docker labels; a service also carries ``ANVIL_EVALUATION`` and
``ANVIL_INSTANCE``. Children inherit the marks whatever session or process
group they make, and keep them when they are reparented, so a grandchild that
called ``setsid()`` and outlived its parent is still found through /proc.

Two uses: teardown ends every process of one service (:func:`service_processes`,
:func:`kill_processes`), and when the owner is gone (``kill -9`` of
``anvil run``), the next ``anvil run`` or ``anvil gc`` finds what it left
(:func:`find_orphans`) and kills it (:func:`reap_orphans`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

OWNER_VAR = "ANVIL_OWNER_PID"
RUN_VAR = "ANVIL_RUN"
EVALUATION_VAR = "ANVIL_EVALUATION"
INSTANCE_VAR = "ANVIL_INSTANCE"


def owner_env(run_id: str) -> dict[str, str]:
    """The environment marks of a process started by this anvil for ``run_id``."""
    return {OWNER_VAR: str(os.getpid()), RUN_VAR: run_id}


@dataclass(frozen=True)
class Orphan:
    pid: int
    pgid: int
    run_id: str
    owner: int


def _environ(pid: int, names: Iterable[str] = (OWNER_VAR, RUN_VAR)) -> dict[str, str]:
    """The marks among ``names`` in the environment ``pid`` started with ({} if unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    wanted = {n.encode() for n in names}
    env = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key in wanted:
            env[key.decode()] = value.decode(errors="replace")
    return env


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


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
    for pid in _pids():
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


def pids_marked(name: str, value: str) -> list[int]:
    """Live processes whose environment has ``name=value`` (this process excluded)."""
    me = os.getpid()
    needle = f"{name}={value}".encode()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in raw.split(b"\0") and alive(pid):
            found.append(pid)
    return found


def service_processes(leader: int, mark: tuple[str, str] | None = None) -> list[psutil.Process]:
    """Every process of a service: the leader's descendants and every process with ``mark``.

    The mark finds what left the tree (a double fork, ``setsid()``, a daemon
    reparented to init); the tree finds what cleared its environment. The leader
    itself is not in the list: its parent (anvil) waits for it.
    """
    found: dict[int, psutil.Process] = {}
    try:
        for child in psutil.Process(leader).children(recursive=True):
            found[child.pid] = child
    except psutil.Error:
        pass  # the leader is gone: its orphans still carry the mark
    if mark is not None:
        for pid in pids_marked(*mark):
            if pid != leader and pid not in found:
                try:
                    found[pid] = psutil.Process(pid)
                except psutil.Error:
                    pass
    return list(found.values())


def kill_processes(processes: Iterable[psutil.Process], sig: int = signal.SIGKILL) -> None:
    """Signal each process; psutil checks it is still the same process (no pid reuse)."""
    for process in processes:
        try:
            process.send_signal(sig)
        except psutil.Error:
            pass


def find_orphans() -> list[Orphan]:
    """Processes started by an anvil that no longer runs."""
    me = os.getpid()
    return [p for p in marked_processes() if p.owner != me and not alive(p.owner)]


def reap_orphans() -> list[Orphan]:
    """Kill every orphan and its process group; return what was reaped."""
    orphans = find_orphans()
    for pgid in {o.pgid for o in orphans}:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for orphan in orphans:  # one that made its own session is not in those groups
        try:
            os.kill(orphan.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return orphans
