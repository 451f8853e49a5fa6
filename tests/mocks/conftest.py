"""Helpers for the mock fabric's tests: real instances on 127.0.0.1, a real HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import requests

from mocks import Hosted, MockHost
from mocks._base import MockFactory
from mocks.echo import EchoMock


@asynccontextmanager
async def serving(factory: MockFactory = EchoMock, *, seed: str = "seed",
                  instance: str = "echo", **options: Any) -> AsyncIterator[Hosted]:
    """One instance on a real uvicorn server, stopped on the way out."""
    async with MockHost() as host:
        hosted = await host.start(factory, instance=instance, seed=seed, **options)
        yield hosted


async def call(method: str, url: str, **kwargs: Any) -> requests.Response:
    """One request with ``requests`` (what oracles use), off the event loop."""
    kwargs.setdefault("timeout", 10)
    return await anyio.to_thread.run_sync(lambda: requests.request(method, url, **kwargs))


async def admin(hosted: Hosted, method: str, path: str, **kwargs: Any) -> requests.Response:
    """A call to the instance's admin surface with its token."""
    return await call(method, f"{hosted.url}/__mock__/{path}",
                      headers={"X-Mock-Token": hosted.token}, **kwargs)
