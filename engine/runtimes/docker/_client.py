"""The Docker API client: connecting, one call under a deadline, labels anvil puts on objects.

Every aiodocker/aiohttp error is translated here or by the caller at the boundary;
none reaches the CLI raw.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiodocker
import aiohttp
import anyio
from aiodocker.exceptions import DockerError

from telemetry import PEER, client_tracing

from ..._errors import HarnessError, RuntimeUnavailable

T = TypeVar("T")

BUILD_REPO = "anvil-build"
OWNER_LABEL = "anvil.owner"
LEASE_LABEL = "anvil.lease"
RUN_LABEL = "anvil.run"
CONTEXT_LABEL = "anvil.context"
SCOPE_LABEL = "anvil.scope"
SCOPE_ENV = "ANVIL_SCOPE"
UNIX_PREFIX = "unix://"


def current_scope() -> str | None:
    """The scope this anvil works in (``ANVIL_SCOPE``), or None: every anvil object.

    With a scope, containers carry ``anvil.scope=<scope>`` and the reaper looks at
    nothing else, so runs that share a daemon (a test session beside a user's runs)
    never touch each other's objects.
    """
    return os.environ.get(SCOPE_ENV) or None


def scope_filter(scope: str | None) -> list[str]:
    """Label filters selecting anvil's objects, narrowed to ``scope`` when there is one."""
    return [OWNER_LABEL, *([f"{SCOPE_LABEL}={scope}"] if scope else [])]


def owner_id() -> str:
    """Who owns a container: this host and process, checked by reapers."""
    return f"{socket.gethostname()}:{os.getpid()}"


SOCKET_PATHS = (Path("/run/docker.sock"), Path("/var/run/docker.sock"),
                Path.home() / ".docker/run/docker.sock")  # where aiodocker looks too


def docker_host() -> str | None:
    """Where the Docker daemon should be: ``DOCKER_HOST``, else the first socket found."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    for path in SOCKET_PATHS:
        if path.is_socket():
            return f"unix://{path}"
    return None


async def docker_client(answer_within: float = 3.0) -> aiodocker.Docker:
    """A client whose daemon answered a version call within ``answer_within`` seconds.

    Raises:
        RuntimeUnavailable: no daemon answers (or none is installed: no socket).
    """
    host = docker_host()
    if host is None:
        paths = ", ".join(str(p) for p in SOCKET_PATHS)
        raise RuntimeUnavailable(f"no Docker here (DOCKER_HOST unset, no socket at {paths})")
    try:
        client = _open(host)
    except (ValueError, OSError, DockerError, AssertionError) as exc:
        raise RuntimeUnavailable(f"no Docker daemon at {host}: {exc}") from exc
    try:
        with anyio.fail_after(answer_within):
            await client.version()
    except (TimeoutError, OSError, aiohttp.ClientError, DockerError) as exc:
        await client.close()
        raise RuntimeUnavailable(
            f"no Docker daemon answers at {host} (start dockerd; .ci/start-dockerd does)"
        ) from exc
    return client


class _TracedDocker(aiodocker.Docker):
    """aiodocker over a session of anvil's, whose requests become spans of the
    evaluation they are made for (see :func:`telemetry.client_tracing`); closing the
    client closes that session too."""

    async def close(self) -> None:
        await super().close()
        await self.session.close()


def _open(host: str) -> aiodocker.Docker:
    """A client for ``host``; over a Unix socket (the usual daemon), its API calls are
    traced. TCP, TLS and SSH hosts are set up by aiodocker itself, untraced."""
    if not host.startswith(UNIX_PREFIX):
        return aiodocker.Docker(url=host)
    connector = aiohttp.UnixConnector(host.removeprefix(UNIX_PREFIX))
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(),
                                    trace_configs=[client_tracing(**{PEER: "docker"})])
    client = _TracedDocker(url=host, connector=connector, session=session)
    client.docker_host = "unix://localhost"  # what aiodocker composes its URLs with
    return client


async def call(
    what: str, fn: Callable[[], Awaitable[T]], *, per_attempt: float = 30.0, attempts: int = 2
) -> T:
    """One Docker API call under a deadline, retried on transport faults and 5xx.

    Raises:
        HarnessError: the daemon did not answer or failed every attempt.
        DockerError: a 4xx answer (the caller decides what it means).
    """
    last = ""
    for _ in range(attempts):
        try:
            with anyio.fail_after(per_attempt):
                return await fn()
        except TimeoutError:
            last = f"no answer within {per_attempt:g}s"
        except (OSError, aiohttp.ClientError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        except DockerError as exc:
            if exc.status < 500:
                raise
            last = f"{exc.status}: {exc.message}"
    raise HarnessError(f"Docker API {what} failed {attempts} times: {last}")


async def bridge_gateway(docker: aiodocker.Docker) -> str | None:
    """The default bridge's gateway: where containers reach a server on the host."""
    try:
        network = await call("inspect bridge", lambda: docker.networks.get("bridge"))
        info = await call("inspect bridge", network.show)
    except (HarnessError, DockerError):
        return None
    for config in (info.get("IPAM") or {}).get("Config") or []:
        if config.get("Gateway"):
            return str(config["Gateway"])
    return None
