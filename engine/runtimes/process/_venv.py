"""Virtualenvs for the process runtime, cached by what is installed into them.

The key hashes the interpreter and every ``pip install`` step of the
Dockerfile (its arguments and the content of each file or folder they name),
so submissions with the same requirements share one venv, built once: an
in-process lock per key, and an flock across anvil processes. pip runs in its
own process group and is killed when the build is cancelled or times out.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio

from ..._errors import BuildFailed
from ..._logs import tail_lines
from ._emulate import PipStep

COMPLETE = ".anvil-complete"


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

    async def get(self, steps: list[PipStep], log: Path, where: str) -> Path:
        """The venv with every step installed, built now unless cached.

        Raises:
            BuildFailed: a pip step failed (its last output lines are the reason).
        """
        key = self.key(steps)
        venv = self.root / key
        async with self._locks.setdefault(key, anyio.Lock()):
            if (venv / COMPLETE).exists():
                await _append(log, f"venv {key}: cache hit\n")
                return venv
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / f"{key}.lock", "w") as lock_file:  # noqa: ASYNC230
                await _flock(lock_file.fileno())  # another anvil may be building it
                try:
                    if (venv / COMPLETE).exists():
                        await _append(log, f"venv {key}: cache hit\n")
                        return venv
                    await self._build(venv, steps, log, where)
                finally:
                    fcntl.flock(lock_file, fcntl.LOCK_UN)
        return venv

    async def _build(self, venv: Path, steps: list[PipStep], log: Path, where: str) -> None:
        await anyio.to_thread.run_sync(shutil.rmtree, venv, True)
        await _append(log, f"venv {venv.name}: creating ({len(steps)} pip steps)\n")
        try:
            # A venv without pip, filled by our own pip: much faster than ensurepip.
            await _step(log, where, "python -m venv",
                        [self.python, "-m", "venv", "--without-pip", str(venv)], venv.parent)
            for step in steps:
                await _step(log, step.where, "pip install",
                            [self.python, "-m", "pip", "--python", str(venv / "bin" / "python"),
                             "install", "--disable-pip-version-check", *step.args], step.cwd)
            (venv / COMPLETE).touch()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, venv, True)
            raise


async def _flock(fd: int) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await anyio.sleep(0.2)


async def _step(log: Path, where: str, label: str, argv: list[str], cwd: Path) -> None:
    with open(log, "ab") as out:  # noqa: ASYNC230 - handed to the child as its stdout
        process = await anyio.open_process(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                           stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)
    try:
        code = await process.wait()
    finally:
        if process.returncode is None:  # cancelled or timed out: pip goes with us
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            with anyio.CancelScope(shield=True):
                await process.wait()
    if code != 0:
        raise BuildFailed(f"{where}: `{label}` failed ({code}): {tail_lines(log, 6)}")


async def _append(path: Path, text: str) -> None:
    async with await anyio.open_file(path, "a", encoding="utf-8") as fh:
        await fh.write(text)
