"""``anvil mocks list|serve``."""

from __future__ import annotations

import json
import signal
from importlib.metadata import entry_points
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import plugins
from mocks import MockHost, MockHostError, MockNotInstalled, MockService, load_mock
from mocks import available as mocks_available

from ._app import (
    ExitCode,
    err,
    fail,
    mocks_app,
    run_async,
)


@mocks_app.command("list")
def mocks_list() -> None:
    """List the installed mock kinds: where each comes from and its scenarios."""
    table = Table("kind", "scenarios", "provided by")
    for kind, target in mocks_available().items():
        try:
            scenarios = ", ".join(load_mock(kind).scenarios)
        except MockNotInstalled as exc:
            scenarios = f"[red]{escape(str(exc))}[/]"
        table.add_row(escape(kind), scenarios, escape(f"{target} ({_distribution(kind)})"))
    Console(highlight=False).print(table)


def _distribution(kind: str) -> str:
    for ep in entry_points(group=plugins.MOCKS, name=kind):
        if ep.dist is not None:
            return f"{ep.dist.name} {ep.dist.version}"
    return "source tree"


@mocks_app.command("serve")
def mocks_serve(
    kind: Annotated[str, typer.Argument(help="The mock's kind (see `anvil mocks list`).")],
    port: Annotated[int, typer.Option(min=0, max=65535, metavar="N",
                                      help="Port to listen on; 0: any free port.")] = 0,
    seed: Annotated[str, typer.Option(
        metavar="S", help="Seed of every id the mock makes: same seed, same requests, "
                          "same answers.")] = "anvil",
    scenario: Annotated[str, typer.Option(
        metavar="X", help="The named state the mock starts in.")] = "default",
    host: Annotated[str, typer.Option(
        metavar="ADDR", help="Address to listen on (loopback unless you need otherwise).")
    ] = "127.0.0.1",
    token: Annotated[str | None, typer.Option(
        metavar="T", help="Admin token of /__mock__/ [default: a random one, printed].")
    ] = None,
) -> None:
    """Run one mock standalone until Ctrl-C, to develop a candidate against it.

    Prints its URL, its admin token and the ANVIL_MOCKS line that lets an oracle's
    fixtures (payment.requests(), ...) reach it.
    """
    try:
        mock = load_mock(kind)
    except MockNotInstalled as exc:
        raise fail(str(exc)) from None
    if scenario not in mock.scenarios:
        raise fail(f"mock {kind!r} has no scenario {scenario!r} "
                    f"(it has: {', '.join(mock.scenarios)})")
    try:
        run_async(_serve_mock, mock, kind, host, port, seed, scenario, token)
    except MockHostError as exc:
        raise fail(str(exc), ExitCode.ERROR) from None


async def _serve_mock(mock: type[MockService], kind: str, host: str, port: int, seed: str,
                      scenario: str, token: str | None) -> None:
    async with MockHost() as mock_host:
        hosted = await mock_host.start(mock, instance=kind, seed=seed, scenario=scenario,
                                       host=host, port=port, token=token)
        env = f"{kind.upper().replace('-', '_')}_URL"
        described = [{"name": kind, "kind": kind, "env": env, "url": hosted.url,
                      "token": hosted.token, "scenario": scenario}]
        print(f"serving mock {kind} (scenario {scenario}, seed {seed}) at {hosted.url}")
        print(f"admin: {hosted.url}/__mock__/ with X-Mock-Token: {hosted.token}")
        print(f"export {env}={hosted.url} {env}_TOKEN={hosted.token}")
        print(f"export ANVIL_MOCKS='{json.dumps(described)}'", flush=True)
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                break
        err.print(f"stopped mock {escape(kind)}")
