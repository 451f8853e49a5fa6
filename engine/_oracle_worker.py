"""A warm oracle worker: each oracle run forks from a process that has pytest loaded.

A cold ``python -m pytest`` pays for the interpreter, ``import pytest, requests``,
anvil's plugins and pytest's own built-in plugins before its first item: about a
quarter of a CPU-second per evaluation (``bench/oracle_startup.py``). The worker pays
that once per run. Each oracle run is a fork of it that becomes what a cold process
would have been: its own session and process group (killed whole on a deadline), the
evaluation's environment, working directory and ``sys.path[0]``, stdout and stderr on
a socket the caller reads, a fresh random seed, and ``pytest.main`` with the same
arguments. Its exit code comes back over the control connection.

Protocol (one Unix-socket connection per oracle run): the caller sends one JSON line
``{"args": [...], "env": {...}, "cwd": "..."}`` with its output socket attached
(``SCM_RIGHTS``); the worker answers ``{"pid": N}`` once forked, then ``{"exit": code}``
(``-signal`` when killed) when the fork ends. The worker ends when its stdin closes
(the anvil that started it is gone) or it is terminated; forks it leaves are ordinary
oracle processes, marked like any other for the reaper.

The worker side imports what an oracle needs (pytest, requests, anvil's oracle plugins)
and anyio; :class:`OracleWorker` is the anvil side.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import UNIXSocketStream

#: Modules a fork finds already imported (pytest's built-in plugins are loaded by name
#: at start-up; importing them here saves each oracle run the work).
WARM = ("pytest", "requests", "engine._oracle_plugin", "mocks._fixtures", "json", "uuid",
        "datetime", "concurrent.futures")
READY = b"ready\n"
_MAX_REQUEST = 4 << 20


# -- the worker process ------------------------------------------------------------------


def _warm() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    from _pytest.config import builtin_plugins

    for plugin in builtin_plugins:
        with contextlib.suppress(ImportError):
            importlib.import_module(f"_pytest.{plugin}" if "." not in plugin else plugin)


def _serve(path: str) -> None:
    import selectors

    sys.dont_write_bytecode = True
    _warm()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the pipe
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    callers: dict[int, socket.socket] = {}  # pid -> its caller's connection
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    return  # the anvil that started the worker is gone
            elif key.data == "accept":
                conn, _ = listener.accept()
                pid = _fork_one(conn, [listener.fileno(), wake_r, wake_w, conn.fileno(),
                                       *(c.fileno() for c in callers.values())])
                if pid is None:
                    conn.close()
                else:
                    callers[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(callers)


def _reap(callers: dict[int, socket.socket]) -> None:
    while callers:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = callers.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode()
                             + b"\n")
            conn.close()


def _fork_one(conn: socket.socket, inherited: list[int]) -> int | None:
    """Read one request from ``conn`` and fork its oracle run; None if the request is bad."""
    conn.settimeout(5)
    data, fds = b"", []
    try:
        while not data.endswith(b"\n") and len(data) < _MAX_REQUEST:
            chunk, got, _, _ = socket.recv_fds(conn, 65536, 4)
            if not chunk:
                break
            data += chunk
            fds += got
        request = json.loads(data)
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return None
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the oracle run
        code = 70
        try:
            for fd in inherited:
                with contextlib.suppress(OSError):
                    os.close(fd)
            code = _oracle_run(request, fds[0])
        finally:
            os._exit(code)
    os.close(fds[0])
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:  # the caller went away already: the run is not wanted
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    return pid


def _oracle_run(request: dict[str, Any], out: int) -> int:
    """In the fork: become the oracle process a cold start would have made, run pytest."""
    import random

    import pytest

    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.close(devnull)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # what `python -m pytest` run there puts first
    random.seed()  # each run its own randomness, as a fresh interpreter has
    code = pytest.main(list(request["args"]))
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code)


# -- anvil's side --------------------------------------------------------------------------


class WorkerGone(OSError):
    """The oracle worker is not there (it could not start, or it died)."""


@dataclass
class ForkedOracle:
    """An oracle run forked by the worker: what ``run_oracle`` needs of a process."""

    pid: int
    stdout: Any  # an anyio byte stream: the run's stdout and stderr
    _control: Any
    returncode: int | None = None
    _buffer: bytes = field(default=b"")
    lost: str = ""  # why the exit code is unknown (the worker died), or ""

    async def wait(self) -> int:
        """The run's exit code (``-signal`` when killed), once it ended. If the worker
        died first, its fork is killed, ``lost`` says so and the code is ``-SIGKILL``."""
        if self.returncode is not None:
            return self.returncode
        while b"\n" not in self._buffer:
            try:
                chunk = await self._control.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.lost = "the oracle worker died while the oracle ran"
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.returncode = -signal.SIGKILL
                return self.returncode
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        self.returncode = int(json.loads(line)["exit"])
        return self.returncode

    async def aclose(self) -> None:
        await self._control.aclose()
        await self.stdout.aclose()


class OracleWorker:
    """The run's warm oracle worker (see the module docstring): ``async with`` it, then
    :meth:`spawn` oracle runs. :meth:`start` returns None where forking cannot work."""

    def __init__(self, process: Any, path: Path) -> None:
        self.process = process
        self.path = path
        self.spawned = 0

    @classmethod
    async def start(cls) -> OracleWorker | None:
        """Start a worker; None if it does not come up (within 30 s)."""
        if not hasattr(os, "fork") or not hasattr(socket, "send_fds"):
            return None
        # A socket path has a ~100-byte limit: a short private folder, not the run's.
        path = Path(tempfile.mkdtemp(prefix="anvil-oracle-")) / "worker.sock"
        process = await anyio.open_process(
            [sys.executable, "-m", "engine._oracle_worker", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            # A Ctrl-C at the terminal is anvil's to handle, not the worker's (it would die
            # under the oracles it serves): it lives as long as anvil holds its stdin.
            start_new_session=True,
        )
        ready = b""
        with anyio.move_on_after(30):
            assert process.stdout is not None
            while not ready.endswith(READY):
                try:
                    ready += await process.stdout.receive()
                except anyio.EndOfStream:
                    break
        if not ready.endswith(READY):
            await _stop(process)
            shutil.rmtree(path.parent, ignore_errors=True)
            return None
        return cls(process, path)

    async def spawn(self, args: list[str], env: dict[str, str], cwd: Path) -> ForkedOracle:
        """Fork one oracle run: ``pytest.main(args)`` in ``cwd`` with exactly ``env``.

        Raises:
            WorkerGone: the worker does not answer.
        """
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        control: Any = None
        request = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode() + b"\n"
        try:
            try:
                control = await anyio.connect_unix(self.path)
                await control.send_fds(request, [theirs.fileno()])
            except (OSError, anyio.BrokenResourceError) as exc:
                raise WorkerGone(f"the oracle worker does not answer: {exc}") from exc
            finally:
                theirs.close()
            buffer = b""
            try:
                while b"\n" not in buffer:
                    buffer += await control.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                raise WorkerGone("the oracle worker refused the run") from exc
            line, _, rest = buffer.partition(b"\n")
            stdout = await UNIXSocketStream.from_socket(mine)
        except BaseException:  # refused, or cancelled midway: nothing is left open
            mine.close()
            if control is not None:
                with anyio.CancelScope(shield=True):
                    await control.aclose()
            raise
        self.spawned += 1
        return ForkedOracle(int(json.loads(line)["pid"]), stdout, control, _buffer=rest)

    async def aclose(self) -> None:
        await _stop(self.process)
        shutil.rmtree(self.path.parent, ignore_errors=True)

    async def __aenter__(self) -> OracleWorker:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()


async def _stop(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    with anyio.move_on_after(5):
        await process.wait()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
    await process.aclose()


@contextlib.asynccontextmanager
async def oracle_worker(enabled: bool = True) -> AsyncIterator[OracleWorker | None]:
    """The run's worker, or None (disabled, or it cannot start: oracles start cold)."""
    worker = await OracleWorker.start() if enabled else None
    if worker is None:
        yield None
        return
    async with worker:
        yield worker


if __name__ == "__main__":
    _serve(sys.argv[1])
