"""Reaping what a killed anvil left behind (process runtime).

Every process anvil starts (services, oracle runs) carries ``ANVIL_OWNER_PID``
and ``ANVIL_RUN`` in its environment, the process-runtime counterpart of the
Docker labels. When the owner is gone (``kill -9`` of ``anvil run``), the
next ``anvil run`` or ``anvil gc`` finds those processes through /proc and
kills their process groups.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aiodocker.exceptions import DockerError

from ._errors import HarnessError

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


def _alive(pid: int) -> bool:
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
        if OWNER_VAR not in env or not _alive(pid):
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
    return [p for p in marked_processes() if p.owner != me and not _alive(p.owner)]


def reap_orphans() -> list[Orphan]:
    """Kill the process groups of every orphan; return what was reaped."""
    orphans = find_orphans()
    for pgid in {o.pgid for o in orphans}:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return orphans


# -- Docker ----------------------------------------------------------------------


async def reap_docker(docker: Any, *, everything: bool = False) -> list[str]:
    """Remove containers and networks labelled by an anvil that is gone or out of lease.

    A container's owner is ``host:pid``; it is reaped when that process no longer
    runs on this host or its ``anvil.lease`` (unix time) has passed. With
    ``everything``, every anvil-labelled container and network goes.
    Returns the names removed.
    """
    from ._docker import LEASE_LABEL, OWNER_LABEL, call

    host = socket.gethostname()
    now = time.time()
    removed: list[str] = []

    def expired(labels: dict[str, str]) -> bool:
        if everything:
            return True
        owner_host, _, pid = labels.get(OWNER_LABEL, ":").rpartition(":")
        try:
            lease = float(labels.get(LEASE_LABEL, "inf"))
        except ValueError:
            lease = 0.0
        gone = owner_host == host and pid.isdigit() and not _alive(int(pid))
        return gone or lease < now

    label_filter = json.dumps({"label": [OWNER_LABEL]})
    try:
        containers = await call("list containers",
                                lambda: docker.containers.list(all="true", filters=label_filter))
        networks = await call("list networks",
                              lambda: docker.networks.list(filters={"label": [OWNER_LABEL]}))
    except DockerError as exc:
        raise HarnessError(f"Docker API list: {exc.message}") from exc
    for container in containers:
        labels = container["Labels"] or {}
        if expired(labels):
            with contextlib.suppress(DockerError):
                await call("remove container", partial(container.delete, force=True, v=True))
            removed.append((container["Names"] or [container.id])[0].lstrip("/"))
    for net in networks:
        if expired(net.get("Labels") or {}):
            with contextlib.suppress(DockerError):
                network = await call("get network", partial(docker.networks.get, net["Id"]))
                await call("remove network", network.delete)
            removed.append(net["Name"])
    return removed
