"""``anvil gc`` (and the automatic cache trim) and ``anvil docker bootstrap``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .._errors import AnvilError, RuntimeUnavailable
from .._reaper import reap_orphans
from .._subscribers import (
    plural,
)
from ..runtimes import cache_dir
from ..runtimes.docker import (
    BootstrapResult,
    bootstrap,
    docker_client,
    gc_images,
    parse_size,
    reap_docker,
)
from ._app import (
    HomeOpt,
    app,
    code_of,
    docker_app,
    err,
    fail,
    run_async,
)
from ._caches import trim_venvs


@app.command()
def gc(
    images: Annotated[bool, typer.Option(
        "--caches", "--images",
        help="Also trim the caches (venvs, and build images of this home) to --budget each, "
             "least recently used first; what a live run uses stays.")] = False,
    budget: Annotated[str, typer.Option(
        envvar="ANVIL_CACHE_BUDGET",
        help="Disk budget of each cache (venvs; build images). `anvil run` trims to it "
             "automatically when a run ends.")] = "10G",
    everything: Annotated[bool, typer.Option(
        "--all", help="Remove every anvil container and network, even of live runs.")] = False,
    home: HomeOpt = Path(".anvil"),
) -> None:
    """Reap what a killed anvil left: processes, containers and networks whose owner is gone
    or whose lease expired."""
    try:
        size = parse_size(budget)
    except ValueError as exc:
        raise fail(f"--budget {budget}: {exc}") from None
    try:
        run_async(_gc, images, size, everything, home.resolve())
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None


async def _gc(images: bool, budget: int, everything: bool, home: Path) -> None:
    reaped = reap_orphans()
    for orphan in reaped:
        err.print(f"killed process group {orphan.pgid} "
                  f"(run {escape(str(orphan.run_id))}, owner {escape(str(orphan.owner))})")
    err.print(f"reaped {plural(len(reaped), 'process')}")
    if images:
        await trim_venvs(home, budget)
    try:
        docker = await docker_client()
    except RuntimeUnavailable as exc:
        err.print(f"docker: skipped ({escape(str(exc))})")
        return
    try:
        removed = await reap_docker(docker, everything=everything)
        for name in removed:
            err.print(f"removed {escape(name)}")
        err.print(f"reaped containers and networks: {len(removed)}")
        if images:
            gone = await gc_images(docker, cache_dir(home), budget)
            for tag, size in gone:
                err.print(f"removed image {escape(tag)} ({size / 2**20:.0f} MiB)")
            err.print(f"removed {plural(len(gone), 'image')}")
    finally:
        await docker.close()




@docker_app.command("bootstrap")
def docker_bootstrap(
    force: Annotated[bool, typer.Option(help="Rebuild even if the image exists.")] = False,
) -> None:
    """Build the offline Python base image (python:3.11-slim and aliases) with debootstrap.

    Needs a running Docker daemon and debootstrap (apt-get install -y docker.io
    debootstrap). Idempotent: does nothing when the image is there.
    """
    try:
        result = run_async(_bootstrap, force)
    except AnvilError as exc:
        raise fail(str(exc), code_of(exc)) from None
    verb = "built" if result.built else "already there:"
    err.print(f"{verb} {', '.join(result.tags)} in {result.seconds:.1f}s")


async def _bootstrap(force: bool) -> BootstrapResult:
    docker = await docker_client()
    try:
        return await bootstrap(docker, force=force, say=lambda m: err.print(escape(m)))
    finally:
        await docker.close()
