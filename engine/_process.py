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

import fcntl
import glob
import hashlib
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

from ._dockerfile import Instruction, parse_dockerfile, split_shell
from ._errors import BuildFailed, HarnessError, ServiceExited
from .types import Artifact, BuildRequest, ExitInfo, Instance, StartRequest

SHIM_DIR = Path(__file__).parent / "_shim"
_PIP_DROP = {"--no-cache-dir", "--user", "--break-system-packages", "-q", "--quiet", "-U"}
_PIP_DROP_WITH_VALUE = {"--root-user-action", "--progress-bar"}
_IGNORED = {"FROM", "EXPOSE", "USER", "LABEL", "ARG", "CMD", "ENTRYPOINT", "HEALTHCHECK",
            "STOPSIGNAL", "SHELL", "VOLUME", "MAINTAINER"}


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


def _venv_bin(venv: Path | None) -> Path | None:
    return venv / "bin" if venv else None


class _Layout:
    """Maps container paths of the Dockerfile onto the evaluation's root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workdir = "/"

    def host(self, container_path: str) -> Path:
        joined = os.path.normpath(os.path.join(self.workdir, container_path))
        return self.root / joined.lstrip("/")


class ProcessRuntime:
    """Runtime running services as local processes (no isolation, no Docker)."""

    name = "process"

    def __init__(self, cache_dir: Path, python: str = sys.executable) -> None:
        self.cache_dir = cache_dir
        self.python = python
        self._locks: dict[str, anyio.Lock] = {}
        self._tg: anyio.abc.TaskGroup | None = None

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
        self._tg.cancel_scope.cancel()  # instance watchers end with their processes
        return await self._tg.__aexit__(exc_type, exc, tb)

    # -- build ---------------------------------------------------------------

    async def build(self, request: BuildRequest) -> Artifact:
        dockerfile = parse_dockerfile(request.submission / "Dockerfile")
        root = request.workdir / "root"
        if root.exists():
            await anyio.to_thread.run_sync(shutil.rmtree, root)
        root.mkdir(parents=True)
        layout = _Layout(root)
        env: dict[str, str] = {}
        venv: Path | None = None
        log = request.log_path
        for ins in dockerfile.instructions:
            where = f"{dockerfile.path}:{ins.line}"
            if ins.keyword == "WORKDIR":
                layout.workdir = os.path.normpath(os.path.join(layout.workdir, ins.args.strip()))
                layout.host(".").mkdir(parents=True, exist_ok=True)
            elif ins.keyword in ("COPY", "ADD"):
                await anyio.to_thread.run_sync(_copy, request.submission, layout, ins, where)
            elif ins.keyword == "ENV":
                env.update(_parse_env(ins, where))
            elif ins.keyword == "RUN":
                venv = await self._run(ins, layout, where, log) or venv
            elif ins.keyword not in _IGNORED:
                raise HarnessError(
                    f"{where}: the process runtime cannot emulate {ins.keyword}; "
                    "use --runtime docker"
                )
        argv = dockerfile.command()
        if venv is None:
            venv = await self._venv([], layout, log, where=str(dockerfile.path))
        _append(log, f"prepared: {' '.join(argv)} (venv {venv.name})\n")
        return PreparedService(root, layout.host("."), venv, env, argv)

    async def _run(self, ins: Instruction, layout: _Layout, where: str, log: Path) -> Path | None:
        """Emulate one RUN line: ``pip install`` and ``mkdir`` parts, nothing else."""
        argv = ins.exec_form()
        command = " ".join(argv) if argv else ins.args
        venv = None
        for part in command.split("&&"):
            words = split_shell(part, where)
            if not words:
                continue
            pip_args = _pip_install_args(words)
            if pip_args is not None:
                if pip_args == ["pip"] or pip_args == ["--upgrade", "pip"]:
                    continue  # upgrading pip itself changes nothing we run
                venv = await self._venv(pip_args, layout, log, where)
            elif words[0] == "mkdir":
                for target in (w for w in words[1:] if not w.startswith("-")):
                    layout.host(target).mkdir(parents=True, exist_ok=True)
            else:
                raise HarnessError(
                    f"{where}: the process runtime only emulates `RUN pip install` and "
                    f"`RUN mkdir`, not `{part.strip()}`; use --runtime docker"
                )
        return venv

    async def _venv(self, pip_args: list[str], layout: _Layout, log: Path, where: str) -> Path:
        """The venv for ``pip_args``, built once per distinct hash, shared by all."""
        digest = hashlib.sha256(f"{self.python}\0{sys.version}".encode())
        for i, arg in enumerate(pip_args):
            digest.update(arg.encode() + b"\0")
            if i > 0 and pip_args[i - 1] in ("-r", "--requirement", "-c", "--constraint"):
                req = layout.host(arg)
                if not req.is_file():
                    raise BuildFailed(f"{where}: requirements file {arg} not found in the image")
                digest.update(req.read_bytes())
        key = digest.hexdigest()[:16]
        venv = self.cache_dir / "venvs" / key
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:  # one build per hash in this process; flock below across processes
            if (venv / ".anvil-complete").exists():
                _append(log, f"venv {key}: cache hit\n")
                return venv
            await anyio.to_thread.run_sync(
                _build_venv, self.python, venv, pip_args, layout.host("."), log, where,
                abandon_on_cancel=False,
            )
        return venv

    # -- start / stop --------------------------------------------------------

    async def start(self, artifact: Artifact, request: StartRequest) -> Instance:
        assert isinstance(artifact, PreparedService)
        assert self._tg is not None, "use the runtime as an async context manager"
        report = request.workdir / "binds.txt"
        report.unlink(missing_ok=True)
        bin_dir = _venv_bin(artifact.venv)
        path = os.pathsep.join(
            p for p in (str(bin_dir) if bin_dir else "", "/usr/local/bin", "/usr/bin", "/bin") if p
        )
        env = {
            "PATH": path,
            "HOME": str(request.workdir),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PORT": str(request.port),
            **artifact.env,
            **request.env,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(SHIM_DIR), artifact.env.get("PYTHONPATH", "")) if p
            ),
            "ANVIL_SERVICE_PORT": str(request.port),
            "ANVIL_BIND_REPORT": str(report),
        }
        if artifact.venv:
            env["VIRTUAL_ENV"] = str(artifact.venv)
        argv = [_map_arg(a, artifact) for a in artifact.argv]
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
        await self._tg.start(instance.watch, request.log_cap)
        return instance

    async def stop(self, instance: Instance) -> None:
        assert isinstance(instance, ProcessInstance)
        await instance.terminate()


def _pip_install_args(words: list[str]) -> list[str] | None:
    """The arguments after ``pip install`` (any spelling), or None if not pip install."""
    i = 0
    if words[0] in ("python", "python3") or words[0].startswith(("python3.", "/usr/")):
        if words[1:3] == ["-m", "pip"]:
            i = 3
        elif os.path.basename(words[0]) in ("pip", "pip3"):
            i = 1
        else:
            return None
    elif os.path.basename(words[0]) in ("pip", "pip3"):
        i = 1
    else:
        return None
    if words[i : i + 1] != ["install"]:
        return None
    args: list[str] = []
    skip = False
    for word in words[i + 1 :]:
        if skip:
            skip = False
        elif word in _PIP_DROP_WITH_VALUE:
            skip = True
        elif word not in _PIP_DROP and not word.startswith("--root-user-action="):
            args.append(word)
    return args


def _build_venv(
    python: str, venv: Path, pip_args: list[str], cwd: Path, log: Path, where: str
) -> None:
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # another anvil process may build it
        try:
            if (venv / ".anvil-complete").exists():
                _append(log, f"venv {venv.name}: cache hit\n")
                return
            shutil.rmtree(venv, ignore_errors=True)
            _append(log, f"venv {venv.name}: creating, pip install {' '.join(pip_args)}\n")
            # A venv without pip, filled by our own pip: much faster than ensurepip.
            _check(log, where, "python -m venv", [python, "-m", "venv", "--without-pip", str(venv)],
                   cwd)
            if pip_args:
                _check(
                    log, where, "pip install",
                    [python, "-m", "pip", "--python", str(venv / "bin" / "python"),
                     "install", "--disable-pip-version-check", *pip_args],
                    cwd,
                )
            (venv / ".anvil-complete").touch()
        except BaseException:
            shutil.rmtree(venv, ignore_errors=True)
            raise
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _check(log: Path, where: str, label: str, argv: list[str], cwd: Path) -> None:
    with open(log, "ab") as out:
        done = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = _tail(log, 6)
        raise BuildFailed(f"{where}: `{label}` failed ({done.returncode}): {tail}")


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def _parse_env(ins: Instruction, where: str) -> dict[str, str]:
    words = split_shell(ins.args, where)
    if words and all("=" in w for w in words):
        return dict(w.split("=", 1) for w in words)
    if len(words) >= 2:  # legacy form: ENV KEY value with spaces
        key, _, value = ins.args.strip().partition(" ")
        return {key: value.strip()}
    raise BuildFailed(f"{where}: ENV needs KEY=value")


def _copy(context: Path, layout: _Layout, ins: Instruction, where: str) -> None:
    words = ins.exec_form() or split_shell(ins.args, where)
    words = [w for w in words if not w.startswith("--")]  # --chown, --chmod: no meaning here
    if len(words) < 2:
        raise BuildFailed(f"{where}: {ins.keyword} needs a source and a destination")
    *sources, dest = words
    if any(s.startswith(("http://", "https://")) for s in sources):
        raise HarnessError(f"{where}: the process runtime cannot fetch URLs in {ins.keyword}")
    context = context.resolve()
    matches: list[Path] = []
    for source in sources:
        found = sorted(glob.glob(str(context / source)))
        if not found:
            raise BuildFailed(f"{where}: COPY failed: {source} not found in the build context")
        for item in map(Path, found):
            if not item.resolve().is_relative_to(context):
                raise BuildFailed(f"{where}: COPY failed: {source} is outside the build context")
            matches.append(item)
    target = layout.host(dest)
    into_dir = dest.endswith("/") or dest in (".", "./") or len(matches) > 1 or target.is_dir()
    for item in matches:
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True, ignore=_ignore_junk)
        else:
            out = target / item.name if into_dir else target
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(item, out)


def _ignore_junk(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in ("__pycache__", ".git", ".venv", "node_modules")}


def _map_arg(arg: str, artifact: PreparedService) -> str:
    """Map absolute container paths in CMD onto the root folder or the venv."""
    if not arg.startswith("/") or arg.startswith("/bin/sh"):
        return arg
    inside = artifact.root / arg.lstrip("/")
    if inside.exists():
        return str(inside)
    bin_dir = _venv_bin(artifact.venv)
    if bin_dir and (bin_dir / os.path.basename(arg)).exists():
        return str(bin_dir / os.path.basename(arg))
    return arg


@dataclass
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
        finally:
            drained.set()  # after the file is closed: its content is on disk

    async def wait_listening(self) -> str:
        while True:
            url = self._url()
            if url:
                return url
            await anyio.sleep(0.05)

    def _url(self) -> str | None:
        binds = self._binds()
        for asked, real, family in binds:
            if asked == self.port and family == "4":
                return f"http://127.0.0.1:{real}"
        for asked, real, _family in binds:
            if asked == self.port:
                return f"http://[::1]:{real}"
        return None

    def _binds(self) -> list[tuple[int, int, str]]:
        try:
            text = self.bind_report.read_text(encoding="ascii")
        except OSError:
            return []
        result = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                result.append((int(parts[0]), int(parts[1]), parts[2]))
        return result

    async def wait_exit(self) -> ExitInfo:
        await self._exited.wait()
        assert self._exit is not None
        return self._exit

    def diagnose(self) -> str:
        other = sorted({asked for asked, _real, _fam in self._binds() if asked != self.port})
        if other and not self._url():
            ports = ", ".join(map(str, other))
            return f"the service listens on port {ports}, the task expects port {self.port}"
        if not self._binds():
            return f"the service never listened on port {self.port}"
        return ""

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


def tail_lines(path: Path, lines: int = 5) -> str:
    """The last lines of a log, joined on one line, for failure reasons."""
    return _tail(path, lines)


