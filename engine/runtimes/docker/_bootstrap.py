"""``anvil docker bootstrap``: a Python base image built offline, without a registry.

No container registry is reachable, so ``FROM python:3.11-slim`` cannot be
pulled. anvil builds its own: debootstrap a minimal Debian root filesystem
with python3, pip and venv from the machine's own Debian mirror, make pip
usable there (no PEP 668 marker, the host's CA bundle, a ``python`` command),
and import it as an image tagged with the names ordinary Dockerfiles use.
Debian bookworm ships Python 3.11; the 3.12 tags are mapped to it.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from aiodocker.exceptions import DockerError

from ..._errors import HarnessError
from ._client import call

BASE_LABEL = "anvil.base"
PRIMARY = "python:3.11-slim"
ALIASES = ("python:3.11", "python:3.11-slim-bookworm", "python:3.11-bookworm",
           "python:3.12-slim", "python:3.12", "python:3-slim", "python:3", "python:slim",
           "python:latest")
PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")

DOCKERFILE = f"""\
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 PYTHONUNBUFFERED=1
LABEL {BASE_LABEL}=1
CMD ["python3"]
"""


@dataclass(frozen=True)
class BootstrapResult:
    tags: tuple[str, ...]
    built: bool  # False: the image was already there
    seconds: float


def debian_mirror(sources: Path = Path("/etc/apt")) -> tuple[str, str]:
    """The machine's Debian mirror and suite, from its apt sources (never hard-coded).

    Raises:
        HarnessError: no Debian source found.
    """
    candidates: list[tuple[str, str]] = []
    for path in sorted(sources.glob("sources.list.d/*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                (k.strip(), v.strip()) for k, _, v in
                (ln.partition(":") for ln in stanza.splitlines() if ":" in ln and
                 not ln.startswith("#"))
            )
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if fields.get("Types", "deb").split()[0] == "deb" and uris and suites:
                candidates += [(uris[0], s) for s in suites]
    for path in [sources / "sources.list", *sorted(sources.glob("sources.list.d/*.list"))]:
        if path.is_file():
            for line in path.read_text().splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    candidates.append((m.group(1), m.group(2)))
    for uri, suite in candidates:
        if "security" not in uri and "-" not in suite:  # the main suite, not updates
            return uri, suite
    raise HarnessError(f"no Debian mirror in {sources}/sources.list(.d): cannot debootstrap")


def _pip_conf(ca_path: str) -> str:
    lines = ["[global]", f"cert = {ca_path}", "timeout = 120", "disable-pip-version-check = 1"]
    return "\n".join(lines) + "\n"


def prepare_rootfs(root: Path) -> None:
    """Make a debootstrapped tree behave like the official python images for pip."""
    for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()  # PEP 668 would refuse `pip install` outside a venv
    for name, target in (("python", "python3"), ("pip", "pip3")):
        link = root / "usr/bin" / name
        if not link.exists() and (root / "usr/bin" / target).exists():
            link.symlink_to(target)
    ca_dir = root / "usr/local/share/anvil"
    ca_dir.mkdir(parents=True, exist_ok=True)
    if HOST_CA.is_file():
        shutil.copy(HOST_CA, ca_dir / "ca-certificates.crt")
        ca = "/usr/local/share/anvil/ca-certificates.crt"
    else:
        ca = "/etc/ssl/certs/ca-certificates.crt"
    (root / "etc/pip.conf").write_text(_pip_conf(ca))
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


async def _image_labels(docker: Any, tag: str) -> dict[str, str] | None:
    try:
        info = await call(f"inspect {tag}", lambda: docker.images.inspect(tag))
    except DockerError as exc:
        if exc.status == 404:
            return None
        raise HarnessError(f"Docker API inspect {tag}: {exc.message}") from exc
    return dict((info.get("Config") or {}).get("Labels") or {})


async def has_base_image(docker: Any) -> bool:
    return await _image_labels(docker, PRIMARY) is not None


async def bootstrap(
    docker: Any, *, force: bool = False, say: Callable[[str], None] = print,
    workdir: Path | None = None,
) -> BootstrapResult:
    """Build and tag the base image unless it is there already (idempotent).

    Raises:
        HarnessError: debootstrap is missing or fails, or the daemon refuses the image.
    """
    started = time.monotonic()
    labels = await _image_labels(docker, PRIMARY)
    if labels is not None and not force:
        if BASE_LABEL not in labels:
            say(f"{PRIMARY} exists and is not anvil's: left as it is")
        await _tag_aliases(docker)
        return BootstrapResult((PRIMARY, *ALIASES), False, time.monotonic() - started)
    if shutil.which("debootstrap") is None:
        raise HarnessError("debootstrap is missing: apt-get install -y debootstrap")
    mirror, suite = debian_mirror()
    with tempfile.TemporaryDirectory(prefix="anvil-rootfs-", dir=workdir) as tmp:
        root = Path(tmp) / "rootfs"
        say(f"debootstrap {suite} from {mirror} (about a minute)")
        done = await anyio.run_process(
            ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", suite, str(root),
             mirror], check=False, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            tail = done.stdout.decode(errors="replace").strip().splitlines()[-5:]
            raise HarnessError(f"debootstrap failed ({done.returncode}): {' | '.join(tail)}")
        await anyio.to_thread.run_sync(prepare_rootfs, root)
        say("packing the root filesystem")
        rootfs_tar = Path(tmp) / "rootfs.tar"
        packed = await anyio.run_process(["tar", "-C", str(root), "-cf", str(rootfs_tar), "."],
                                         check=False, stderr=subprocess.STDOUT)
        if packed.returncode != 0:
            raise HarnessError(f"tar of the root filesystem failed: "
                               f"{packed.stdout.decode(errors='replace')[-500:]}")
        context = Path(tmp) / "context.tar"
        await anyio.to_thread.run_sync(_context, rootfs_tar, context)
        say(f"importing as {PRIMARY}")
        await _build_base(docker, context)
    await _tag_aliases(docker)
    return BootstrapResult((PRIMARY, *ALIASES), True, time.monotonic() - started)


def _context(rootfs_tar: Path, out: Path) -> None:
    with tarfile.open(out, "w") as tar:
        data = DOCKERFILE.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        tar.add(rootfs_tar, arcname="rootfs.tar")


async def _build_base(docker: Any, context: Path) -> None:
    error = ""
    with open(context, "rb") as fh:  # noqa: ASYNC230 - streamed by aiohttp, not read here
        try:
            async for chunk in docker.images.build(fileobj=fh, tag=PRIMARY, rm=True,
                                                   forcerm=True, stream=True,
                                                   encoding="identity"):
                if chunk.get("error"):
                    error = str(chunk["error"])
        except DockerError as exc:
            error = exc.message
    if error:
        raise HarnessError(f"importing the base image failed: {error}")


async def _tag_aliases(docker: Any) -> None:
    for alias in ALIASES:
        repo, _, tag = alias.partition(":")
        labels = await _image_labels(docker, alias)
        if labels is None or BASE_LABEL in labels:  # never retag someone else's image
            await call(f"tag {alias}", partial(docker.images.tag, PRIMARY, repo, tag=tag))
