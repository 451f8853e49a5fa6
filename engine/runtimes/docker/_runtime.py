"""The Docker runtime (aiodocker): isolated containers, many at once.

* build: the context tar is made deterministically from the submission and
  streamed from a temporary file; its hash with the FROM images' ids is the
  image tag (``anvil-build:<hash>``), so an unchanged submission is never
  rebuilt; concurrent builds of one hash are built once. Each tag used is
  recorded in the home's image record (what ``anvil gc --images`` may remove).
* start: memory/CPU/pid limits, ``no-new-privileges``, every capability
  dropped, the service port published on 127.0.0.1 only (random host port),
  labels ``anvil.run``, ``anvil.evaluation``, ``anvil.owner``, ``anvil.lease``
  and, with ``ANVIL_SCOPE`` set, ``anvil.scope`` (the reaper then sees only that scope).
* logs: the service log keeps its head and its tail past the cap, so the last
  lines of a service that flooded its output are still its exit reason.
* stop: a removal cut short by a deadline or a cancel finishes in the
  background; whatever is still running when the runtime closes is removed.
* events: one Docker events subscription per runtime; ``die``/``oom`` of a
  container ends its instance at once, with the reason (``exited 1``, ``oom``).
* every API call has a deadline and is retried once; a daemon that keeps
  failing is the harness's fault (``error``), never the candidate's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiodocker
import aiohttp
import anyio
import anyio.abc
from aiodocker.events import DockerEvents
from aiodocker.exceptions import DockerError
from anyio.streams.file import FileWriteStream

from ..._errors import BuildFailed, HarnessError, RuntimeUnavailable, ServiceExited
from ..._logs import AsyncCappedLog
from ...types import Artifact, BuildRequest, ExitInfo, Instance, StartRequest
from .._dockerfile import parse_dockerfile
from .._ports import explain_ports
from ._bootstrap import PRIMARY, has_base_image
from ._client import (
    BUILD_REPO,
    CONTEXT_LABEL,
    OWNER_LABEL,
    SCOPE_LABEL,
    bridge_gateway,
    call,
    current_scope,
    docker_client,
    owner_id,
)
from ._context import write_context
from ._images import touch_image
from ._reaper import reap_docker

T = TypeVar("T")

HOST_ALIAS = "host.docker.internal"


@dataclass(frozen=True)
class DockerImage:
    tag: str
    cached: bool

    @property
    def description(self) -> str:
        return f"{self.tag}{' (cache hit)' if self.cached else ''}"


# -- instances -----------------------------------------------------------------


@dataclass
class DockerInstance:
    """A running container; its exit is set by the runtime's events watcher."""

    container_id: str
    name: str
    port: int
    host_port: int | None = None
    pid: int | None = None
    log_path: Path | None = None
    _exited: anyio.Event = field(default_factory=anyio.Event)
    _exit: ExitInfo | None = None
    logs_done: anyio.Event = field(default_factory=anyio.Event)
    oom: bool = False
    stopped: bool = False
    #: Says why the daemon, not the service, ended the container (None: the service did).
    daemon_check: Callable[[DockerInstance], Awaitable[str | None]] | None = None
    epoch: int = 0  # the runtime's events-stream epoch when the container started
    killed: str = ""  # set when something but anvil killed the container through Docker

    def mark_exited(self, info: ExitInfo) -> None:
        if self._exit is None:
            self._exit = info
            self._exited.set()

    async def wait_listening(self) -> str:
        if self.host_port is None:
            # No published port: the container is already gone. Its exit, seen by the
            # caller's watcher, is the answer.
            await anyio.sleep_forever()
        return f"http://127.0.0.1:{self.host_port}"

    async def wait_exit(self) -> ExitInfo:
        await self._exited.wait()
        # Its last words are the reason a user reads: let the log catch up (a flood
        # of output can take a moment to drain), but never wait long for it.
        with anyio.move_on_after(2.0):
            await self.logs_done.wait()
        assert self._exit is not None
        if self.daemon_check is not None and not self.stopped and not self._exit.harness:
            why = await self.daemon_check(self)
            if why is not None:
                self._exit = ExitInfo(self._exit.returncode, why, harness=True)
        return self._exit

    def diagnose(self) -> str:
        """Which ports the service listens on, read from its network namespace."""
        if not self.pid:
            return ""
        listening = _listening(self.pid)
        return "" if listening is None else explain_ports(listening, self.port)


def _listening(pid: int) -> set[tuple[int, bool]] | None:
    """(port, loopback only) of every listening TCP socket in ``pid``'s network namespace."""
    found: set[tuple[int, bool]] = set()
    readable = False
    loopback = {"tcp": ("0100007F",), "tcp6": ("00000000000000000000000001000000",)}
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A":  # LISTEN
                address, port = parts[1].rsplit(":", 1)
                found.add((int(port, 16), address.upper().startswith(loopback[table])))
    return found if readable else None


# -- the runtime ---------------------------------------------------------------


class DockerRuntime:
    """Runtime running each service in its own locked-down container."""

    name = "docker"
    priority = 10  # --runtime auto prefers isolation when a daemon answers

    @classmethod
    async def unavailable(cls) -> str | None:
        """None when a daemon answers and has the base image; else why not."""
        try:
            client = await docker_client()
        except RuntimeUnavailable as exc:
            return str(exc)
        try:
            if not await has_base_image(client):
                return (f"Docker answers but has no {PRIMARY} base image: "
                        "run `anvil docker bootstrap`")
        finally:
            await client.close()
        return None

    def __init__(
        self, cache_dir: Path, api_timeout: float = 30.0, layer_cache: bool = True,
        scope: str | None = None,
    ) -> None:
        """A runtime that connects to the daemon when entered.

        Args:
            cache_dir: the home's cache (the image record lives there).
            api_timeout: the deadline of one Docker API call.
            layer_cache: False: Docker reuses no layer (cold-build timing).
            scope: the ``anvil.scope`` label of every container, and the only scope
                the reaper looks at (default: ``ANVIL_SCOPE``; unset, no scope).
        """
        self.cache_dir = cache_dir
        self.api_timeout = api_timeout
        self.layer_cache = layer_cache
        self.scope = scope or current_scope()
        self.owner = owner_id()
        self.docker: aiodocker.Docker | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._instances: dict[str, DockerInstance] = {}
        self._build_locks: dict[str, anyio.Lock] = {}
        self._events_ready = anyio.Event()
        self._gateway = "172.17.0.1"  # Docker's default bridge; read from the daemon on entry
        self._epoch = 0  # events-stream breaks so far

    @property
    def listen_host(self) -> str:
        return self._gateway

    def reachable_url(self, url: str) -> str:
        """Containers reach the host as ``host.docker.internal`` (the bridge gateway)."""
        parts = urlsplit(url)
        netloc = HOST_ALIAS + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))

    async def __aenter__(self) -> DockerRuntime:
        self.docker = await docker_client()
        try:
            await reap_docker(self.docker, scope=self.scope)
            self._gateway = await bridge_gateway(self.docker) or self._gateway
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.docker.close()
            raise
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            await self._tg.start(self._watch_events)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None and self.docker is not None
        self._tg.cancel_scope.cancel()
        try:
            # The body's own exception propagates as itself, not inside an ExceptionGroup.
            await self._tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    # A stop cut short (or never called) must not leave a container behind.
                    for instance in list(self._instances.values()):
                        with anyio.move_on_after(self.api_timeout):
                            with contextlib.suppress(HarnessError):
                                await self._remove(instance)
                finally:
                    await self.docker.close()
        return None

    async def _api(self, what: str, fn: Callable[[], Awaitable[T]], **kw: Any) -> T:
        return await call(what, fn, per_attempt=self.api_timeout, **kw)

    # -- events --------------------------------------------------------------

    async def _watch_events(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow die/oom events of our containers; resubscribe if the stream breaks."""
        assert self.docker is not None
        filters = json.dumps({"type": ["container"], "event": ["die", "oom", "kill"],
                              "label": [f"{OWNER_LABEL}={self.owner}"]})
        started = False
        since: str | None = None
        while True:
            events = DockerEvents(self.docker)  # type: ignore[no-untyped-call]
            subscriber = events.subscribe(create_task=False)  # type: ignore[no-untyped-call]
            async with anyio.create_task_group() as tg:

                # After a reconnect, replay what happened while we were away.
                params = {"filters": filters, **({"since": since} if since else {})}

                async def pump(events: Any = events, params: dict[str, str] = params) -> None:
                    with contextlib.suppress(OSError, aiohttp.ClientError, DockerError):
                        await events.run(**params)

                tg.start_soon(pump)
                if not started:
                    # The stream is open once the daemon sent its headers; a short
                    # grace avoids missing the first die of a container started now.
                    await anyio.sleep(0.2)
                    task_status.started()
                    started = True
                while True:
                    event = await subscriber.get()
                    if event is None:
                        self._epoch += 1  # the daemon may be going away, or restarted
                        break  # stream ended: reconnect
                    if event.get("timeNano"):
                        since = f"{int(event['timeNano']) / 1e9:.9f}"
                    self._on_event(event)
                tg.cancel_scope.cancel()
            await anyio.sleep(0.5)

    async def _daemon_ended(self, instance: DockerInstance) -> str | None:
        """Why a container that died was ended by Docker rather than by its service, or
        None: it was killed through the API by someone but anvil (a daemon shutting down
        stops every container), its die came over an events stream that broke meanwhile
        (replayed after a reconnect), or the daemon does not answer now."""
        if instance.killed:
            return instance.killed
        if self._epoch != instance.epoch:
            return "ended while the Docker daemon's event stream was broken"
        assert self.docker is not None
        docker = self.docker
        try:
            await call("ping", docker.version, per_attempt=2.0, attempts=1)
        except (HarnessError, DockerError):
            return "ended while the Docker daemon did not answer"
        return None

    def _on_event(self, event: dict[str, Any]) -> None:
        actor = event.get("Actor") or {}
        instance = self._instances.get(actor.get("ID") or event.get("id", ""))
        if instance is None:
            return
        action = event.get("Action") or event.get("status")
        if action == "oom":
            instance.oom = True
        elif action == "kill" and not instance.stopped:
            # Only the Docker API kills a container (a process signalling itself makes no
            # event): the daemon shutting down, or an operator, not the service.
            signal_ = (actor.get("Attributes") or {}).get("signal", "?")
            instance.killed = f"was killed through the Docker API (signal {signal_})"
        elif action == "die":
            code = int((actor.get("Attributes") or {}).get("exitCode", -1))
            reason = "oom" if instance.oom else (
                "stopped" if instance.stopped else f"exited {code}")
            instance.mark_exited(ExitInfo(code, reason))

    # -- build ---------------------------------------------------------------

    async def build(self, request: BuildRequest) -> Artifact:
        if not (request.submission / "Dockerfile").is_file():
            raise BuildFailed(f"{request.submission / 'Dockerfile'}: no Dockerfile in the "
                              "submission")
        # The context goes to a file, not to memory: a submission may be large.
        context = await anyio.to_thread.run_sync(_scratch_file, request.workdir)
        try:
            digest, size = await anyio.to_thread.run_sync(write_context, request.submission,
                                                          context)
            # The base image is part of what is built: a re-bootstrapped base is a new build.
            digest = hashlib.sha256(
                (digest + await self._base_ids(request.submission)).encode()).hexdigest()
            tag = f"{BUILD_REPO}:{digest[:20]}"
            lock = self._build_locks.setdefault(digest, anyio.Lock())
            async with lock:
                if await self._image_exists(tag):
                    await _append(request.log_path, f"{tag}: cache hit, no build step ran\n")
                    await self._touch(tag)
                    return DockerImage(tag, cached=True)
                await _append(request.log_path, f"{tag}: building ({size} bytes)\n")
                context.seek(0)
                await self._build(context, tag, digest, request.log_path)
        finally:
            context.close()
        await self._touch(tag)
        return DockerImage(tag, cached=False)

    async def _base_ids(self, submission: Path) -> str:
        """Image ids of the Dockerfile's FROM images that exist locally."""
        assert self.docker is not None
        docker = self.docker
        try:
            dockerfile = parse_dockerfile(submission / "Dockerfile")
        except BuildFailed:
            return ""  # docker build will say what is wrong, in its words
        ids = []
        for ins in dockerfile.instructions:
            if ins.keyword == "FROM" and ins.args.split():
                image = [w for w in ins.args.split() if not w.startswith("--")][0]
                try:
                    info = await self._api(f"inspect {image}",
                                           partial(docker.images.inspect, image))
                    ids.append(str(info.get("Id", "")))
                except DockerError:
                    ids.append(image)  # a build stage name or a missing image
        return ",".join(ids)

    async def _image_exists(self, tag: str) -> bool:
        assert self.docker is not None
        docker = self.docker
        try:
            await self._api(f"inspect image {tag}", lambda: docker.images.inspect(tag))
        except DockerError as exc:
            if exc.status == 404:
                return False
            raise HarnessError(f"Docker API inspect image {tag}: {exc.message}") from exc
        return True

    async def _build(self, context: IO[bytes], tag: str, digest: str, log_path: Path) -> None:
        assert self.docker is not None
        lines: list[str] = []
        error = ""
        try:
            async with await FileWriteStream.from_path(log_path, append=True) as out:
                # aiodocker streams the file in 64 KiB reads of a local file.
                stream = self.docker.images.build(
                    fileobj=context, tag=tag, rm=True, forcerm=True,
                    nocache=not self.layer_cache,
                    labels={CONTEXT_LABEL: digest}, stream=True, encoding="identity",
                )
                async for chunk in stream:
                    text = chunk.get("stream") or ""
                    if chunk.get("error"):
                        error = str(chunk.get("error")).strip()
                        text += f"ERROR: {error}\n"
                    if text:
                        await out.send(text.encode())
                        lines.extend(ln for ln in text.splitlines() if _telling(ln))
        except DockerError as exc:
            if exc.status >= 500:
                raise HarnessError(f"Docker build of {tag}: {exc.status} {exc.message}") from exc
            error = exc.message
        except (OSError, aiohttp.ClientError) as exc:
            raise HarnessError(f"Docker build of {tag}: {exc}") from exc
        if not error:
            return
        if _is_missing_base(error):
            raise HarnessError(
                f"the base image is missing ({error.strip()}); run `anvil docker bootstrap`")
        if "no space left on device" in error.lower():
            raise HarnessError(f"Docker build of {tag}: the machine is out of disk: {error}")
        tail = " | ".join(ln.strip() for ln in lines[-5:])
        raise BuildFailed(f"docker build failed: {error}" + (f" (last lines: {tail})"
                                                              if tail else ""))

    async def _touch(self, tag: str) -> None:
        """Record the image as this home's, used now: for `anvil gc --images` (LRU)."""
        await anyio.to_thread.run_sync(touch_image, self.cache_dir, tag)

    # -- start / stop --------------------------------------------------------

    async def start(self, artifact: Artifact, request: StartRequest) -> Instance:
        assert isinstance(artifact, DockerImage) and self.docker is not None
        docker = self.docker
        evaluation = request.labels.get("anvil.evaluation", "x")
        name = "anvil-" + "".join(c if c.isalnum() or c in "_.-" else "-" for c in evaluation)
        name += f"-{int(time.time() * 1000) % 10**8}"
        port_key = f"{request.port}/tcp"
        memory = request.memory_mb * 1024 * 1024
        config: dict[str, Any] = {
            "Image": artifact.tag,
            "Env": [f"{k}={v}" for k, v in {**request.env, "PORT": str(request.port)}.items()],
            "Labels": {**request.labels, OWNER_LABEL: self.owner,
                       **({SCOPE_LABEL: self.scope} if self.scope else {})},
            "ExposedPorts": {port_key: {}},
            "HostConfig": {
                "PortBindings": {port_key: [{"HostIp": "127.0.0.1", "HostPort": ""}]},
                "Memory": memory,
                "MemorySwap": memory,  # no swap: exceeding the limit is an OOM kill
                "NanoCpus": int(request.cpus * 1e9),
                "PidsLimit": request.pids_limit,
                "SecurityOpt": ["no-new-privileges"],
                "CapDrop": ["ALL"],
                "ExtraHosts": [f"{HOST_ALIAS}:host-gateway"],
                "LogConfig": {"Type": "json-file",
                              "Config": {"max-size": "20m", "max-file": "1"}},
            },
        }
        # Shielded: a container the daemon created while we were being cancelled would
        # otherwise exist without anyone knowing its id, and leak.
        with anyio.CancelScope(shield=True):
            try:
                # One attempt: a retry after a timeout could orphan the first container.
                container = await self._api(
                    f"create {name}", lambda: docker.containers.create(config, name=name),
                    attempts=1)
            except DockerError as exc:
                raise HarnessError(f"Docker API create {name}: {exc.message}") from exc
            instance = DockerInstance(container.id, name, request.port,
                                      log_path=request.log_path,
                                      daemon_check=self._daemon_ended, epoch=self._epoch)
            self._instances[container.id] = instance  # before start: a die may follow at once
        try:
            try:
                await self._api(f"start {name}", container.start)
            except DockerError as exc:
                # 4xx at start is the image's fault, e.g. a CMD that is not executable.
                raise ServiceExited(f"cannot start: {exc.message}") from exc
            try:
                info = await self._api(f"inspect {name}", container.show)
            except DockerError as exc:
                raise HarnessError(f"Docker API inspect {name}: {exc.message}") from exc
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.stop(instance)
            raise
        bindings = (info.get("NetworkSettings", {}).get("Ports") or {}).get(port_key) or []
        if bindings:
            instance.host_port = int(bindings[0]["HostPort"])
        instance.pid = info.get("State", {}).get("Pid") or None
        state = info.get("State", {})
        if not state.get("Running") and state.get("Status") in ("exited", "dead"):
            code = int(state.get("ExitCode", -1))
            instance.mark_exited(ExitInfo(code, "oom" if state.get("OOMKilled")
                                          else f"exited {code}"))
        assert self._tg is not None
        self._tg.start_soon(self._follow_logs, container, instance, request.log_cap)
        return instance

    async def _follow_logs(self, container: Any, instance: DockerInstance, cap: int) -> None:
        assert instance.log_path is not None
        with contextlib.suppress(OSError, aiohttp.ClientError, DockerError), \
                _setting(instance.logs_done):
            # times: the web UI shows an item the lines of its time window.
            async with await AsyncCappedLog.open(instance.log_path, cap, times=True) as log:
                async for line in container.log(stdout=True, stderr=True, follow=True):
                    await log.write(line.encode("utf-8", "replace"))

    async def release(self, artifact: Artifact) -> None:
        """Nothing per evaluation: the image is the content-addressed cache (LRU by gc)."""

    async def stop(self, instance: Instance) -> None:
        assert isinstance(instance, DockerInstance) and self.docker is not None
        instance.stopped = True
        try:
            await self._remove(instance)
        except BaseException:
            # Cut short by the teardown deadline or a cancel: the runtime finishes the
            # removal itself, so the container does not live on until the lease runs out.
            if instance.container_id in self._instances and self._tg is not None:
                # RuntimeError: the runtime is closed already; its exit removed leftovers.
                with contextlib.suppress(RuntimeError):
                    self._tg.start_soon(self._remove_later, instance)
            raise

    async def _remove(self, instance: DockerInstance) -> None:
        """Remove the container until the daemon says it is gone (404).

        A DELETE cut short by a deadline can leave the daemon's removal aborted or still
        in progress (409): asking again, a moment later, is what finishes it.
        """
        assert self.docker is not None
        container = self.docker.containers.container(instance.container_id)
        delay = 0.1
        while True:
            try:
                await self._api(f"remove {instance.name}",
                                lambda: container.delete(force=True, v=True))
            except DockerError as exc:
                if exc.status == 409:  # a removal in progress: wait for its outcome
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                if exc.status != 404:  # already gone is what we wanted
                    raise HarnessError(
                        f"Docker API remove {instance.name}: {exc.message}") from exc
            break
        instance.mark_exited(ExitInfo(None, "stopped"))
        self._instances.pop(instance.container_id, None)

    async def _remove_later(self, instance: DockerInstance) -> None:
        # Shielded: closing the runtime cancels its task group, and waits for this.
        with anyio.move_on_after(self.api_timeout, shield=True):
            with contextlib.suppress(HarnessError):
                await self._remove(instance)


@contextlib.contextmanager
def _setting(event: anyio.Event) -> Iterator[None]:
    try:
        yield
    finally:
        event.set()


def _telling(line: str) -> bool:
    """Build output lines worth quoting in a failure reason."""
    noise = ("Running in", "Removing intermediate", "--->", "Sending build context")
    return bool(line.strip()) and not line.strip().startswith(noise)


def _is_missing_base(error: str) -> bool:
    lowered = error.lower()
    return any(s in lowered for s in ("pull access denied", "manifest unknown",
                                      "failed to resolve", "no such host",
                                      "repository does not exist", "dial tcp"))


def _scratch_file(folder: Path) -> IO[bytes]:
    """An unnamed file in ``folder``, gone when closed (or when anvil dies)."""
    return tempfile.TemporaryFile(prefix="anvil-context-", dir=folder)


async def _append(path: Path, text: str) -> None:
    async with await FileWriteStream.from_path(path, append=True) as out:
        await out.send(text.encode())
