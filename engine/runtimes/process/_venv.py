"""Virtualenvs for the process runtime, cached by what is installed into them.

The key hashes the interpreter and every ``pip install`` step of the
Dockerfile (its arguments and the content of each file or folder they name),
so submissions with the same requirements share one venv, built once.

Each venv has a lock file beside it (``<key>.lock``), and the venv's users
agree through ``flock`` on it, across anvil processes too:

- whoever builds holds it exclusively; whoever uses a built venv (from build
  until the service is released) holds it shared, through a :class:`Lease`;
- :func:`gc_venvs` removes a venv only when it gets the lock exclusively
  without waiting: a venv in use or being built is never removed.

Each use touches the venv's ``.anvil-complete`` marker (its mtime is the last
use, set atomically), so :func:`gc_venvs` removes the least recently used first.
pip runs in its own process group and is killed when the build is cancelled or
times out; its output reaches the build log through a capped writer.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from ..._logs import AsyncCappedLog, read_tail
from ..._reaper import alive
from ._emulate import PipStep
from ._faults import classify, network_evidence

COMPLETE = ".anvil-complete"
STEP_LOG_CAP = 1024 * 1024  # per pip step, head and tail kept
_POLL = 0.1


@dataclass(eq=False)
class Lease:
    """A venv held in use: a shared ``flock`` on its lock file until :meth:`release`."""

    path: Path
    _fd: int | None = field(default=None, repr=False)

    def release(self) -> None:
        """Let the venv go (idempotent): :func:`gc_venvs` may remove it once nobody holds it."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # drops the lock

    @property
    def held(self) -> bool:
        return self._fd is not None


class VenvCache:
    def __init__(self, cache_dir: Path, python: str = sys.executable) -> None:
        self.root = cache_dir / "venvs"
        self.python = python
        self._locks: dict[str, anyio.Lock] = {}

    def key(self, steps: list[PipStep]) -> str:
        digest = hashlib.sha256(f"{self.python}\0{sys.version}".encode())
        for step in steps:
            digest.update(step.digest.encode())
        return digest.hexdigest()[:16]

    async def acquire(self, steps: list[PipStep], log: Path, where: str) -> Lease:
        """The venv with every step installed (built now unless cached), held in use.

        Raises:
            BuildFailed: a pip step failed by the candidate's requirements.
            HarnessError: the index could not be reached, the disk is full, the venv
                could not be created (see ``_faults.classify``).
        """
        key = self.key(steps)
        venv = self.root / key
        async with self._locks.setdefault(key, anyio.Lock()):
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise classify(where, "create the venv", error=exc, ours=True) from exc
            try:
                await self._hold(fd, venv, steps, log, where)
            except BaseException:
                os.close(fd)
                raise
            return Lease(venv, fd)

    async def _hold(self, fd: int, venv: Path, steps: list[PipStep], log: Path,
                    where: str) -> None:
        """Return holding ``fd`` shared on a complete venv, building it first if needed."""
        built = False
        while True:
            await _flock(fd, fcntl.LOCK_SH)  # waits only while someone builds it
            if (venv / COMPLETE).exists():
                os.utime(venv / COMPLETE)  # the last use, for the LRU
                if not built:
                    await _append(log, f"venv {venv.name}: cache hit\n")
                return
            # Not built: become its builder (a failed try leaves us holding nothing,
            # as flock converts by unlocking first), or wait for whoever is.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                await anyio.sleep(_POLL)
                continue
            try:
                if not (venv / COMPLETE).exists():
                    await self._build(venv, steps, log, where)
                    built = True
            except BaseException:
                fcntl.flock(fd, fcntl.LOCK_UN)
                raise
            # Back to shared; not atomic, so a gc may slip in: the loop checks again.
            fcntl.flock(fd, fcntl.LOCK_SH)

    async def _build(self, venv: Path, steps: list[PipStep], log: Path, where: str) -> None:
        await anyio.to_thread.run_sync(shutil.rmtree, venv, True)
        await _append(log, f"venv {venv.name}: creating ({len(steps)} pip steps)\n")
        pip_log = venv.parent / f"{venv.name}.pip.log"
        try:
            # A venv without pip, filled by our own pip: much faster than ensurepip.
            await _step(log, where, "python -m venv",
                        [self.python, "-m", "venv", "--without-pip", str(venv)], venv.parent,
                        ours=True)
            for step in steps:
                await _step(log, step.where, "pip install",
                            [self.python, "-m", "pip", "--python", str(venv / "bin" / "python"),
                             "--log", str(pip_log), "install", "--disable-pip-version-check",
                             *step.args], step.cwd, pip_log=pip_log)
            (venv / COMPLETE).touch()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, venv, True)
            raise
        finally:
            pip_log.unlink(missing_ok=True)


async def _flock(fd: int, operation: int) -> None:
    """Take the lock, polling: a blocking flock could not be cancelled."""
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await anyio.sleep(_POLL)


async def _step(log: Path, where: str, label: str, argv: list[str], cwd: Path, *,
                ours: bool = False, pip_log: Path | None = None) -> None:
    """Run one build step, its output into the build log (capped); classify a failure."""
    try:
        out = await AsyncCappedLog.open(log, STEP_LOG_CAP)
    except OSError as exc:
        raise classify(where, label, error=exc, ours=True) from exc
    log_error: OSError | None = None
    try:
        try:
            process = await anyio.open_process(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise classify(where, label, error=exc, ours=True) from exc
        try:
            assert process.stdout is not None
            async for chunk in process.stdout:
                if log_error is None:
                    try:
                        await out.write(chunk)
                    except OSError as exc:  # keep draining: pip must not block on a full pipe
                        log_error = exc
            code = await process.wait()
        finally:
            if process.returncode is None:  # cancelled or timed out: pip goes with us
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                with anyio.CancelScope(shield=True):
                    await process.wait()
    finally:
        try:
            await out.aclose()
        except OSError as exc:
            log_error = log_error or exc
    if log_error is not None:
        raise classify(where, f"{label} (writing the build log)", error=log_error, ours=True)
    if code != 0:
        evidence = ""
        if pip_log is not None:
            evidence = await anyio.to_thread.run_sync(network_evidence, pip_log)
        raise classify(where, label, returncode=code, output=await read_tail(log, 6),
                       evidence=evidence, ours=ours)


async def _append(path: Path, text: str) -> None:
    async with await anyio.open_file(path, "a", encoding="utf-8") as fh:
        await fh.write(text)


@dataclass(frozen=True)
class _Entry:
    path: Path
    size: int
    last_use: float  # 0 for a venv never completed (a build that died)


def _disk_usage(path: Path) -> int:
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def venv_entries(cache_dir: Path) -> list[Path]:
    """The venv folders of a cache (complete or not), oldest use first."""
    root = cache_dir / "venvs"
    if not root.is_dir():
        return []
    return [p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def gc_venvs(cache_dir: Path, budget_bytes: int) -> list[Path]:
    """Remove the least recently used venvs until the cache fits ``budget_bytes``.

    A venv in use (a lease held) or being built (by this anvil or another) is
    skipped, whatever its age; a venv whose build died is removed first. Safe
    against other anvils: each removal holds the venv's lock exclusively, drops
    the completion mark first, then renames the folder away before deleting it.
    Blocking (it walks folders): call it in a worker thread from async code.

    Returns:
        The venv folders removed, oldest first.
    """
    root = cache_dir / "venvs"
    if not root.is_dir():
        return []
    for trash in root.glob(".trash-*"):  # a gc that died midway
        owner = trash.name.rsplit("-", 1)[-1]
        if not owner.isdigit() or not alive(int(owner)):
            shutil.rmtree(trash, ignore_errors=True)
    entries = []
    for path in venv_entries(cache_dir):
        try:
            last_use = os.stat(path / COMPLETE).st_mtime
        except OSError:
            last_use = 0.0
        entries.append(_Entry(path, _disk_usage(path), last_use))
    total = sum(e.size for e in entries)
    removed: list[Path] = []
    for entry in sorted(entries, key=lambda e: e.last_use):
        if total <= budget_bytes:
            break
        if _remove_unused(entry.path):
            total -= entry.size
            removed.append(entry.path)
    return removed


def _remove_unused(venv: Path) -> bool:
    try:
        fd = os.open(venv.parent / f"{venv.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # in use, or being built
        if not venv.is_dir():
            return False  # another gc was first
        (venv / COMPLETE).unlink(missing_ok=True)  # nobody may take it as built from now
        trash = venv.parent / f".trash-{venv.name}-{os.getpid()}"
        try:
            os.rename(venv, trash)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return False
        shutil.rmtree(trash, ignore_errors=True)
        return True
    finally:
        os.close(fd)  # the lock file stays: another anvil may hold it open already
