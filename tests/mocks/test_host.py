"""Hosting: one real uvicorn server per instance, ready when started, gone when stopped."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

import anyio
import pytest
import requests
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mocks import MockHost, MockHostError
from mocks.echo import EchoMock
from tests.mocks.conftest import admin, call


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _refused(url: str) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", _port(url))) != 0


async def test_an_instance_answers_as_soon_as_start_returns() -> None:
    async with MockHost() as host:
        hosted = await host.start(EchoMock, instance="echo", seed="s")
        assert hosted.url.startswith("http://127.0.0.1:")  # a bare origin, no path prefix
        answer = await call("GET", hosted.url + "/v1/echoes", timeout=2)  # no retry, no wait
        assert answer.status_code == 200
        assert host.running == 1


async def test_instances_are_isolated_from_each_other() -> None:
    async with MockHost() as host:
        one = await host.start(EchoMock, instance="echo", seed="a")
        two = await host.start(EchoMock, instance="echo", seed="b")
        assert one.url != two.url and one.token != two.token
        await call("POST", one.url + "/v1/echoes", json={"only": "one"})
        assert (await call("GET", two.url + "/v1/echoes")).json()["data"] == []
        seen = (await admin(two, "GET", "journal")).json()["entries"]
        assert [(e["method"], e["path"]) for e in seen] == [("GET", "/v1/echoes")]
        await admin(one, "POST", "faults", json={"status": 500})
        assert (await call("GET", two.url + "/v1/echoes")).status_code == 200


async def test_stop_closes_the_port_and_is_idempotent() -> None:
    async with MockHost() as host:
        hosted = await host.start(EchoMock, instance="echo", seed="s")
        await host.stop(hosted)
        assert _refused(hosted.url)
        assert host.running == 0
        await host.stop(hosted)


class _Blocking(EchoMock):
    """An echo mock whose ``/block`` never answers; ``entered`` says a call is inside."""

    entered: anyio.Event

    def routes(self) -> Sequence[BaseRoute]:
        async def block(_request: Request) -> Response:
            _Blocking.entered.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        return [Route("/block", block)]


async def test_stop_cuts_a_call_in_flight_at_once() -> None:
    _Blocking.entered = anyio.Event()
    async with MockHost() as host:
        hosted = await host.start(_Blocking, instance="echo", seed="s")
        failed: list[BaseException] = []

        async def blocked_call() -> None:
            try:
                await call("GET", hosted.url + "/block", timeout=20)
            except requests.RequestException as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_call)
            with anyio.fail_after(5):
                await _Blocking.entered.wait()
            started = time.monotonic()
            await host.stop(hosted)
            assert time.monotonic() - started < 2
        assert failed and isinstance(failed[0], requests.ConnectionError)


async def test_leaving_the_host_stops_every_instance() -> None:
    async with MockHost() as host:
        urls = [(await host.start(EchoMock, instance=f"e{n}", seed="s")).url for n in range(3)]
    assert all(_refused(url) for url in urls)


async def test_a_taken_port_is_a_mock_host_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with MockHost() as host:
            with pytest.raises(MockHostError, match=f"cannot listen on 127.0.0.1:{port}"):
                await host.start(EchoMock, instance="echo", seed="s", port=port)
            assert host.running == 0


async def test_an_unknown_scenario_starts_nothing() -> None:
    async with MockHost() as host:
        with pytest.raises(KeyError, match="nope"):
            await host.start(EchoMock, instance="echo", seed="s", scenario="nope")
        assert host.running == 0


async def test_a_closed_host_starts_nothing() -> None:
    host = MockHost()
    with pytest.raises(MockHostError, match="not running"):
        await host.start(EchoMock, instance="echo", seed="s")
    async with host:
        pass
    with pytest.raises(MockHostError, match="not running"):
        await host.start(EchoMock, instance="echo", seed="s")


async def test_an_error_in_the_caller_leaves_as_itself() -> None:
    with pytest.raises(ZeroDivisionError):
        async with MockHost() as host:
            await host.start(EchoMock, instance="echo", seed="s")
            1 / 0  # noqa: B018


class _Worker(EchoMock):
    """An echo mock with a task of its own and an admin route of its own."""

    runs: list[tuple[_Worker, anyio.Event]] = []
    started = anyio.Event()  # set by the next run() to start

    async def run(self) -> None:
        ended = anyio.Event()
        _Worker.runs.append((self, ended))
        _Worker.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    def admin_routes(self) -> Sequence[BaseRoute]:
        async def runs(_request: Request) -> Response:
            return Response(str(len(_Worker.runs)).encode())

        return [Route("/__mock__/worker/runs", runs)]


async def test_a_mock_task_runs_while_serving_and_restarts_with_each_reset() -> None:
    _Worker.runs, _Worker.started = [], anyio.Event()
    async with MockHost() as host:
        hosted = await host.start(_Worker, instance="worker", seed="s")
        with anyio.fail_after(5):
            await _Worker.started.wait()
        (first, first_ended), = _Worker.runs
        assert first is hosted.app.service
        _Worker.started = anyio.Event()
        await admin(hosted, "POST", "reset")
        with anyio.fail_after(5):
            await _Worker.started.wait()
        second = _Worker.runs[1][0]
        assert first_ended.is_set() and second is hosted.app.service and second is not first
        answer = await admin(hosted, "GET", "worker/runs")
        assert answer.status_code == 200 and answer.text == "2"
        assert (await call("GET", hosted.url + "/__mock__/worker/runs")).status_code == 401
        await host.stop(hosted)
        assert _Worker.runs[1][1].is_set()


async def test_serving_again_after_a_cancelled_serve_answers() -> None:
    """Leaving `serve` by cancelling it, then serving again in the same event loop: the
    new server answers (the old one's listener is closed, not left on the fd number)."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from mocks._host import bind, serve

    async def hello(_request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    app = Starlette(routes=[Route("/", hello)])
    for _ in range(3):
        async with anyio.create_task_group() as tg:
            url = await tg.start(serve, app, bind("127.0.0.1"))
            answer = await anyio.to_thread.run_sync(
                lambda: requests.get(url + "/", timeout=5))  # noqa: B023 - used at once
            assert answer.text == "hello"
            tg.cancel_scope.cancel()
