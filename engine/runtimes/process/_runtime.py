"""The process runtime: runs a submission's Dockerfile CMD as a local process.

Build emulates the Dockerfile subset into a private root folder (container
path ``/app`` becomes ``<root>/app``) and installs the ``RUN pip install``
lines into a virtualenv cached by their hash, shared by every submission with
the same requirements. Start runs CMD in its own process group with the venv
first on PATH and the port shim (``_shim/sitecustomize.py``) loaded, so
services that hard-code one port run side by side. Trusted code only: there
is no isolation.

Teardown ends every process of the service: its process group, its
descendants, and whatever carries its ``ANVIL_INSTANCE`` mark (a grandchild
that made its own session and was reparented). It then releases the build:
the venv lease (so the venv cache's GC may take it) and the evaluation's root
folder (its private copy of the submission); the logs stay.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc
import psutil

from ..._errors import BuildFailed, ServiceExited
from ..._logs import AsyncCappedLog
from ..._reaper import INSTANCE_VAR, kill_processes, service_processes
from ...types import Artifact, BuildRequest, ExitInfo, Instance, StartRequest
from .._dockerfile import parse_dockerfile
from .._ports import explain_ports
from ._context import LinkError, scoped
from ._emulate import BASE_PATH, emulate
from ._faults import classify
from ._venv import Lease, VenvCache

SHIM_DIR = Path(__file__).parent / "_shim"


@dataclass
class PreparedService:
    """A submission laid out in its root folder with its venv: what ``start`` runs."""

    root: Path
    workdir: Path
    venv: Path | None
    env: dict[str, str]
    argv: list[str]
    lease: Lease | None = field(default=None, repr=False, compare=False)

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
        self._built: dict[int, PreparedService] = {}  # id -> artifact not yet released
        self._marks = (f"{os.getpid()}.{secrets.token_hex(4)}.{n}" for n in itertools.count())

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
            for artifact in list(self._built.values()):  # never started, or never stopped
                await self.release(artifact)
        self._tg.cancel_scope.cancel()  # instance watchers end with their processes
        # The body's own exception propagates as itself, not inside an ExceptionGroup.
        await self._tg.__aexit__(None, None, None)
        return None

    # -- build ---------------------------------------------------------------

    async def build(self, request: BuildRequest) -> Artifact:
        """Lay the submission out in ``<workdir>/root`` and get its venv.

        Raises:
            BuildFailed: the candidate's fault (bad Dockerfile, missing COPY source,
                a dangling link it copies, a requirement that does not exist).
            Unsupported: an instruction this runtime cannot emulate (not retried).
            HarnessError: the machine's fault (disk full, index unreachable, no venv).
        """
        context = request.submission
        try:  # a Dockerfile that is a link is read inside the submission too
            path = scoped(context.resolve(), "Dockerfile")
        except LinkError as exc:
            raise BuildFailed(f"{context}/Dockerfile: {exc}") from None
        if path == context.resolve() / "Dockerfile":
            path = context / "Dockerfile"  # messages name it as the user does
        dockerfile = parse_dockerfile(path)
        root = request.workdir / "root"
        lease: Lease | None = None
        try:
            try:
                if root.exists():
                    await anyio.to_thread.run_sync(shutil.rmtree, root)
                root.mkdir(parents=True)
                plan = await anyio.to_thread.run_sync(emulate, dockerfile, context, root)
                lease = await self.venvs.acquire(plan.pip_steps, request.log_path,
                                                 str(dockerfile.path))
                async with await anyio.open_file(request.log_path, "a") as log:
                    await log.write(f"prepared: {' '.join(plan.argv)} "
                                    f"(venv {lease.path.name})\n")
            except OSError as exc:
                raise classify(str(dockerfile.path), "lay out the submission", error=exc,
                               ours=True) from exc
        except BaseException:
            # A failed build leaves its logs, not its copy of the submission or a lease.
            if lease is not None:
                lease.release()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(shutil.rmtree, root, True)
            raise
        artifact = PreparedService(root, plan.workdir, lease.path, plan.env, plan.argv, lease)
        self._built[id(artifact)] = artifact
        return artifact

    async def release(self, artifact: Artifact) -> None:
        """Let go of what ``build`` made: the venv lease and the root folder (logs stay).

        Idempotent; ``stop`` calls it for the artifact its instance runs.
        """
        assert isinstance(artifact, PreparedService)
        self._built.pop(id(artifact), None)
        if artifact.lease is not None:
            artifact.lease.release()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, artifact.root, True)

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
            "ANVIL_MEMORY_MB": str(request.memory_mb),  # enforced by the shim, per process
            INSTANCE_VAR: next(self._marks),  # inherited by every process it starts
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
                raise classify("CMD", argv[0], error=exc, candidate=ServiceExited) from exc
            instance = ProcessInstance(process, report, request.port, request.log_path,
                                       (INSTANCE_VAR, env[INSTANCE_VAR]), artifact)
            self._live.add(instance)
            await self._tg.start(instance.watch, request.log_cap)
        return instance

    async def stop(self, instance: Instance) -> None:
        """End every process of the service, then release its build (idempotent)."""
        assert isinstance(instance, ProcessInstance)
        await instance.terminate()
        self._live.discard(instance)
        if instance.artifact is not None:
            await self.release(instance.artifact)


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
    mark: tuple[str, str] | None = None  # the env mark every process of the service carries
    artifact: PreparedService | None = None
    _exited: anyio.Event = field(default_factory=anyio.Event)
    _exit: ExitInfo | None = None

    async def watch(
        self, log_cap: int, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Pump output into the capped log and record the exit; owned by the runtime."""
        drained = anyio.Event()
        async with anyio.create_task_group() as tg:
            pump = anyio.CancelScope()
            tg.start_soon(self._pump, log_cap, drained, pump)
            task_status.started()
            code = await self.process.wait()
            # Its last words are what a user needs to read: let the log catch up, and
            # if a stray child holds the pipe open, stop reading so the tail is written.
            with anyio.move_on_after(0.5):
                await drained.wait()
            pump.cancel()
            await drained.wait()
            self._exit = ExitInfo(code, _describe_exit(code))
            self._exited.set()

    async def _pump(self, log_cap: int, drained: anyio.Event, scope: anyio.CancelScope) -> None:
        stream = self.process.stdout
        assert stream is not None
        out: AsyncCappedLog | None = None
        try:
            with scope:
                with contextlib.suppress(OSError):
                    # times: the web UI shows an item the lines of its time window.
                    out = await AsyncCappedLog.open(self.log_path, log_cap, times=True)
                async for chunk in stream:
                    if out is None:
                        continue  # keep draining so the service never blocks on its output
                    try:
                        await out.write(chunk)
                    except OSError:
                        # The log cannot be written (disk full): drain on; one broken log
                        # must not take the run down.
                        await _close_quietly(out)
                        out = None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                if out is not None:
                    await _close_quietly(out)
            drained.set()  # after the file is closed: its tail is on disk

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
        """SIGTERM every process of the service; SIGKILL them once the leader is gone
        or after ``grace``, and wait (up to ``grace``) until none is left.

        Every process: the leader's group, its descendants, and the processes that
        carry the service's env mark (a grandchild in its own session, reparented).
        """
        leader = self.process.pid  # leader of its own session: its pid is the group id
        others = await anyio.to_thread.run_sync(service_processes, leader, self.mark)
        self._signal_group(signal.SIGTERM, others)
        kill_processes(others, signal.SIGTERM)
        try:
            with anyio.move_on_after(grace):
                await self._exited.wait()
        finally:
            # Like a container's end: once the main process is gone, the rest goes at once.
            # Also when the teardown deadline (or a cancel) cut the grace short: SIGKILL
            # is never skipped, or a service ignoring SIGTERM would outlive its slot.
            # (No await here: a pending cancel cannot interrupt it.)
            others = service_processes(leader, self.mark) + others
            self._signal_group(signal.SIGKILL, others)
            kill_processes(others, signal.SIGKILL)
        with anyio.move_on_after(grace):
            await self._exited.wait()
            await _wait_gone(others)

    def _signal_group(self, sig: signal.Signals, others: list[psutil.Process]) -> None:
        """Signal the leader's process group, unless its id may belong to another by now."""
        leader = self.process.pid
        if self.process.returncode is not None and not any(
            _pgid(p) == leader for p in others
        ):
            return  # the leader is reaped and nobody is left in its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, sig)


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except OSError:
        return None


async def _wait_gone(processes: list[psutil.Process]) -> None:
    """Until each process has ended (a zombie has): they are not our children, so we
    wait on a pidfd, which becomes readable when its process exits."""
    for process in processes:
        try:
            fd = os.pidfd_open(process.pid)
        except OSError:
            continue  # gone already
        try:
            await anyio.wait_readable(fd)
        finally:
            os.close(fd)


async def _close_quietly(out: AsyncCappedLog) -> None:
    with contextlib.suppress(OSError):
        await out.aclose()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited {code}"


