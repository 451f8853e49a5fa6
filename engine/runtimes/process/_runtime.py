"""The process runtime: runs a submission's Dockerfile CMD as a local process.

Build emulates the Dockerfile subset into a private root folder (container
path ``/app`` becomes ``<root>/app``) and installs the ``RUN pip install``
lines into a virtualenv cached by their hash, shared by every submission with
the same requirements. Start runs CMD in its own process group with the venv
first on PATH and the port shim (``_shim/sitecustomize.py``) loaded, so
services that hard-code one port run side by side. Trusted code only: there
is no isolation.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc
from anyio.streams.file import FileWriteStream

from ..._errors import ServiceExited
from ...types import Artifact, BuildRequest, ExitInfo, Instance, StartRequest
from .._dockerfile import parse_dockerfile
from .._ports import explain_ports
from ._emulate import BASE_PATH, emulate
from ._venv import VenvCache

SHIM_DIR = Path(__file__).parent / "_shim"


@dataclass
class PreparedService:
    """A submission laid out in its root folder with its venv: what ``start`` runs."""

    root: Path
    workdir: Path
    venv: Path | None
    env: dict[str, str]
    argv: list[str]

    @property
    def description(self) -> str:
        return f"{' '.join(self.argv)} in {self.workdir}"


class ProcessRuntime:
    """Runtime running services as local processes (no isolation, no Docker)."""

    name = "process"
    priority = 0  # the fallback: runs anywhere Python does
    listen_host = "127.0.0.1"  # services are local processes

    @classmethod
    async def unavailable(cls) -> str | None:
        return None

    def reachable_url(self, url: str) -> str:
        return url

    def __init__(self, cache_dir: Path, python: str = sys.executable) -> None:
        self.cache_dir = cache_dir
        self.venvs = VenvCache(cache_dir, python)
        self._tg: anyio.abc.TaskGroup | None = None
        self._live: set[ProcessInstance] = set()

    async def __aenter__(self) -> ProcessRuntime:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        with anyio.CancelScope(shield=True):
            for instance in list(self._live):  # normally none: teardown stopped them
                await instance.terminate(grace=0.5)
        self._tg.cancel_scope.cancel()  # instance watchers end with their processes
        # The body's own exception propagates as itself, not inside an ExceptionGroup.
        await self._tg.__aexit__(None, None, None)
        return None

    # -- build ---------------------------------------------------------------

    async def build(self, request: BuildRequest) -> Artifact:
        dockerfile = parse_dockerfile(request.submission / "Dockerfile")
        root = request.workdir / "root"
        if root.exists():
            await anyio.to_thread.run_sync(shutil.rmtree, root)
        root.mkdir(parents=True)
        plan = await anyio.to_thread.run_sync(emulate, dockerfile, request.submission, root)
        venv = await self.venvs.get(plan.pip_steps, request.log_path, str(dockerfile.path))
        async with await anyio.open_file(request.log_path, "a") as log:
            await log.write(f"prepared: {' '.join(plan.argv)} (venv {venv.name})\n")
        return PreparedService(root, plan.workdir, venv, plan.env, plan.argv)

    # -- start / stop --------------------------------------------------------

    async def start(self, artifact: Artifact, request: StartRequest) -> Instance:
        assert isinstance(artifact, PreparedService)
        assert self._tg is not None, "use the runtime as an async context manager"
        report = request.workdir / "binds.txt"
        report.unlink(missing_ok=True)
        # The venv first, then the Dockerfile's PATH (container paths already mapped).
        path = [str(artifact.venv / "bin")] if artifact.venv else []
        path += artifact.env.get("PATH", BASE_PATH).split(os.pathsep)
        env = {
            "HOME": str(request.workdir),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PORT": str(request.port),
            **artifact.env,
            **request.env,
            "PATH": os.pathsep.join(dict.fromkeys(p for p in path if p)),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(SHIM_DIR), artifact.env.get("PYTHONPATH", "")) if p
            ),
            "ANVIL_SERVICE_PORT": str(request.port),
            "ANVIL_BIND_REPORT": str(report),
        }
        if artifact.venv:
            env["VIRTUAL_ENV"] = str(artifact.venv)
        argv = [_venv_program(a, artifact.venv) for a in artifact.argv]
        # Shielded: a process spawned while we are cancelled must still be known to stop.
        with anyio.CancelScope(shield=True):
            try:
                process = await anyio.open_process(
                    argv,
                    cwd=artifact.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServiceExited(f"cannot run CMD {argv[0]!r}: {exc.strerror or exc}") from exc
            instance = ProcessInstance(process, report, request.port, request.log_path)
            self._live.add(instance)
            await self._tg.start(instance.watch, request.log_cap)
        return instance

    async def stop(self, instance: Instance) -> None:
        assert isinstance(instance, ProcessInstance)
        await instance.terminate()
        self._live.discard(instance)


def _venv_program(arg: str, venv: Path | None) -> str:
    """``/usr/local/bin/uvicorn`` in CMD means the venv's uvicorn here."""
    if venv and arg.startswith(("/usr/local/bin/", "/usr/bin/")):
        candidate = venv / "bin" / os.path.basename(arg)
        if candidate.exists():
            return str(candidate)
    return arg


@dataclass(frozen=True)
class Bind:
    """One TCP bind a service made, as the shim reported it."""

    asked: int
    real: int
    family: str
    loopback: bool


@dataclass(eq=False)
class ProcessInstance:
    """A service process (the leader of its own process group)."""

    process: anyio.abc.Process
    bind_report: Path
    port: int
    log_path: Path
    _exited: anyio.Event = field(default_factory=anyio.Event)
    _exit: ExitInfo | None = None

    async def watch(
        self, log_cap: int, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Pump output into the capped log and record the exit; owned by the runtime."""
        drained = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump, log_cap, drained)
            task_status.started()
            code = await self.process.wait()
            # Its last words are what a user needs to read: let the log catch up,
            # unless a stray child holds the pipe open.
            with anyio.move_on_after(0.5):
                await drained.wait()
            self._exit = ExitInfo(code, _describe_exit(code))
            self._exited.set()

    async def _pump(self, log_cap: int, drained: anyio.Event) -> None:
        stream = self.process.stdout
        assert stream is not None
        written = 0
        try:
            async with await FileWriteStream.from_path(self.log_path, append=True) as out:
                async for chunk in stream:
                    if written >= log_cap:
                        continue  # keep draining so a flooding service never blocks
                    piece = chunk[: log_cap - written]
                    written += len(piece)
                    await out.send(piece)
                    if written >= log_cap:
                        await out.send(f"\n[anvil: log capped at {log_cap} bytes]\n".encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        except OSError:
            # The log cannot be written (disk full): keep draining so the service runs on;
            # one broken log must not take the run down.
            async for _chunk in stream:
                pass
        finally:
            drained.set()  # after the file is closed: its content is on disk

    async def wait_listening(self) -> str:
        while True:
            url = self._url()
            if url:
                return url
            await anyio.sleep(0.05)

    def _url(self) -> str | None:
        reachable = [b for b in self._binds() if b.asked == self.port and not b.loopback]
        for bind in sorted(reachable, key=lambda b: b.family):  # IPv4 first
            host = "127.0.0.1" if bind.family == "4" else "[::1]"
            return f"http://{host}:{bind.real}"
        return None

    def _binds(self) -> list[Bind]:
        try:
            text = self.bind_report.read_text(encoding="ascii")
        except OSError:
            return []
        result = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[0].isdigit() and parts[1].isdigit():
                result.append(Bind(int(parts[0]), int(parts[1]), parts[2], parts[3] == "lo"))
        return result

    async def wait_exit(self) -> ExitInfo:
        await self._exited.wait()
        assert self._exit is not None
        return self._exit

    def diagnose(self) -> str:
        if self._url():
            return ""
        return explain_ports({(b.asked, b.loopback) for b in self._binds()}, self.port)

    async def terminate(self, grace: float = 3.0) -> None:
        """SIGTERM the whole process group, SIGKILL what is left after ``grace``."""
        pgid = self.process.pid  # leader of its own session, so its pid is the group id
        _killpg(pgid, signal.SIGTERM)
        with anyio.move_on_after(grace):
            await self._exited.wait()
        _killpg(pgid, signal.SIGKILL)  # also reaps children the leader left behind
        with anyio.move_on_after(grace):
            await self._exited.wait()


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited {code}"


