"""Hosting mock instances on real uvicorn servers: one port per instance.

Measured against one server multiplexing instances under a path prefix
(``python -m bench.mock_hosting``, 200 echo instances, 2 cores): both serve the
same load (the server spends 340-440 us of CPU per request either way, 2,300 to
2,900 requests/s on one core, noise larger than the difference); a port costs
0.35-0.5 ms to start instead of 0.1 ms and 30-36 KiB of heap instead of 13 KiB
(plus one file descriptor). A path prefix, though, breaks clients that want a
bare origin as their base URL (aiohttp's ``base_url``, ``urljoin(url, "/v1/...")``)
and so would fail a correct candidate. So each instance gets its own port and its
URL is a bare origin, like a real provider's.

Every server runs as a task of the :class:`MockHost`'s task group, which the
caller owns (``async with MockHost() as host``); readiness is signalled once
uvicorn listens (``task_status.started``), and stopping an instance closes its
socket and its connections at once.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
from collections.abc import Generator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import uvicorn
from anyio.abc import TaskGroup, TaskStatus

from ._base import MockApp, MockFactory

log = logging.getLogger("anvil.mocks")


class MockHostError(OSError):
    """A mock instance could not be hosted (its address cannot be bound, the host is closed)."""


class _Server(uvicorn.Server):
    """uvicorn without its process-wide habits: no signal handlers (the caller owns
    signals), no 10 Hz tick (it waits for ``stop``), no grace period on shutdown (the
    clients of an instance being stopped are gone)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop = anyio.Event()
        self.ready = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    async def main_loop(self) -> None:
        await self.stop.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        for task in list(self.server_state.tasks):
            task.cancel()
        for server in self.servers:
            await server.wait_closed()


def bind(host: str, port: int = 0) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port).

    Raises:
        MockHostError: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
    # and without it a response's two writes wait out a delayed ACK (24 req/s, measured).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(256)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise MockHostError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(app: Any, sock: socket.socket, server: _Server | None = None, *,
                task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on ``sock`` until cancelled or ``server.stop`` is set; the socket is
    closed on the way out. Signals ``started(url)`` once uvicorn accepts."""
    server = server or _Server(config(app))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server._serve, [sock])  # noqa: SLF001 - serve() would own signals
            await server.ready.wait()
            task_status.started(url_of(sock))
    finally:
        # Cancelled, uvicorn never ran its shutdown: close its asyncio servers here, or
        # they stay registered on the socket's file descriptor number and swallow the
        # connections of the next socket that gets that number (seen: a second serve in
        # one event loop accepted and never answered).
        for listener in server.servers:
            listener.close()
        for connection in list(server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        sock.close()


def config(app: Any) -> uvicorn.Config:
    """uvicorn settings for a mock: no logging set-up of its own, no access log, no
    ``date``/``server`` headers (answers are byte-identical), no proxy header rewrite."""
    return uvicorn.Config(
        app, lifespan="off", log_config=None, access_log=False, server_header=False,
        date_header=False, proxy_headers=False, ws="none", http="h11", loop="none",
        timeout_keep_alive=30,
    )


@dataclass(eq=False)
class Hosted:
    """One running instance: where it answers and how to administer it."""

    app: MockApp
    url: str  # a bare origin, http://host:port
    _server: _Server = field(repr=False)
    _done: anyio.Event = field(default_factory=anyio.Event, repr=False)

    @property
    def token(self) -> str:
        return self.app.token

    @property
    def stopped(self) -> bool:
        """True once the instance no longer serves (stopped, or its server ended)."""
        return self._done.is_set()


class MockHost:
    """Runs mock instances, each on its own port, in a task group the caller owns.

    ``async with MockHost() as host:`` then :meth:`start` and :meth:`stop` instances
    from any task; leaving the block stops whatever is still running.
    """

    def __init__(self) -> None:
        self._tg: TaskGroup | None = None
        self._running: set[Hosted] = set()

    async def __aenter__(self) -> MockHost:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        assert self._tg is not None
        for hosted in list(self._running):
            hosted._server.stop.set()  # noqa: SLF001
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The servers never raise: an error here is the caller's own, let it leave as
            # itself rather than wrapped in a group.
            if exc is not None and group.exceptions == (exc,):
                return False
            raise
        finally:
            self._tg = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def start(self, factory: MockFactory, *, instance: str, seed: str,
                    scenario: str = "default", host: str = "127.0.0.1", port: int = 0,
                    token: str | None = None, **options: Any) -> Hosted:
        """Create an instance of ``factory`` and serve it on ``host:port`` (0: any free port).

        Args:
            options: passed to :class:`~mocks.MockApp` (journal bounds, body limit).

        Raises:
            MockHostError: the host is closed or the address cannot be bound.
            KeyError: ``scenario`` is unknown to the mock.
        """
        if self._tg is None:
            raise MockHostError("the mock host is not running (use `async with MockHost()`)")
        app = MockApp(factory, seed=seed, instance=instance, scenario=scenario,
                      token=token or secrets.token_urlsafe(24), **options)
        sock = bind(host, port)
        server = _Server(config(app))
        hosted = Hosted(app, url_of(sock), server)

        async def run(*, task_status: TaskStatus[str]) -> None:
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(app.run)  # the mock's own task, if it has one
                    await serve(app, sock, server, task_status=task_status)
                    tg.cancel_scope.cancel()
            finally:
                self._running.discard(hosted)
                hosted._done.set()

        self._running.add(hosted)
        try:
            await self._tg.start(run)
        except BaseException:
            sock.close()
            self._running.discard(hosted)
            raise
        return hosted

    async def stop(self, hosted: Hosted) -> None:
        """Stop one instance: its port closes and its connections drop. Idempotent."""
        hosted._server.stop.set()
        await hosted._done.wait()


__all__ = ["Hosted", "MockHost", "MockHostError", "bind", "config", "serve", "url_of"]
