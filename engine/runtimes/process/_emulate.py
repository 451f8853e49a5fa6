"""Emulating the Dockerfile subset of Python services in a private root folder.

Container paths map onto the root (``/app`` -> ``<root>/app``). ENV, ARG and
WORKDIR values are expanded as Docker does (``$VAR``, ``${VAR}``,
``${VAR:-default}``). ``RUN pip install`` lines are collected as steps, in
order, for one venv; ``RUN mkdir`` is done in the root; any other RUN, a
second FROM (multi-stage) or ``COPY --from`` is beyond this runtime and says
so (:class:`~engine.Unsupported`: an ``error`` that retrying cannot mend, not
the candidate's fault). COPY reads the submission as Docker reads a build
context (``_context``): .dockerignore honoured, symlinks copied as symlinks.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..._errors import BuildFailed, Unsupported
from .._dockerfile import Dockerfile, Instruction, split_shell
from ._context import BuildContext, LinkError, scoped

BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/etc", "/proc", "/dev", "/tmp", "/var/tmp")
_IGNORED = {"EXPOSE", "USER", "LABEL", "CMD", "ENTRYPOINT", "HEALTHCHECK", "STOPSIGNAL",
            "SHELL", "VOLUME", "MAINTAINER", "ONBUILD"}
_PIP_DROP = {"--no-cache-dir", "--user", "--break-system-packages", "-q", "--quiet", "-U",
             "--upgrade", "--no-warn-script-location", "--disable-pip-version-check"}
_PIP_DROP_WITH_VALUE = {"--root-user-action", "--progress-bar"}
_PIP_REFUSED = ("--prefix", "--target", "-t", "--root", "--src")  # would write host paths
_FILE_OPTIONS = ("-r", "--requirement", "-c", "--constraint")
_VAR = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")


def expand(text: str, env: dict[str, str]) -> str:
    """``$VAR``/``${VAR}``/``${VAR:-default}`` from ``env``, as Docker expands them."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        found = env.get(name, "")
        return found if found or m.group(2) is None else m.group(2)

    return _VAR.sub(value, text)


@dataclass
class PipStep:
    """One ``pip install`` of the Dockerfile, with what decides its outcome."""

    args: list[str]
    cwd: Path
    digest: str  # hash of the arguments and of every local file they name
    where: str  # Dockerfile:line, for messages


@dataclass
class Emulation:
    root: Path
    workdir: Path
    env: dict[str, str]
    argv: list[str]
    pip_steps: list[PipStep] = field(default_factory=list)


class _Layout:
    """Container paths of the Dockerfile on the evaluation's root folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workdir = "/"

    def container(self, path: str) -> str:
        """``path`` as an absolute container path (relative ones start at WORKDIR)."""
        return os.path.normpath(os.path.join(self.workdir, path))

    def host(self, container_path: str, where: str = "") -> Path:
        """Where ``container_path`` is on the host: links inside the root resolved inside it.

        Raises:
            BuildFailed: the path goes through a symlink loop.
        """
        try:
            return scoped(self.root, self.container(container_path))
        except LinkError as exc:
            raise BuildFailed(f"{where or 'Dockerfile'}: {exc}") from None


def emulate(dockerfile: Dockerfile, context: Path, root: Path) -> Emulation:
    """Lay the submission out in ``root`` as the Dockerfile would; collect pip steps.

    Raises:
        BuildFailed: what docker build would also refuse (missing COPY source, ...).
        Unsupported: what this runtime cannot emulate.
        OSError: the disk failed (full, ...): the caller classifies it.
    """
    layout = _Layout(root)
    build_context = BuildContext(context)
    env: dict[str, str] = {"PATH": BASE_PATH}
    build_args: dict[str, str] = {}
    steps: list[PipStep] = []
    froms = 0
    for ins in dockerfile.instructions:
        where = f"{dockerfile.path}:{ins.line}"
        scope = {**build_args, **env}
        if ins.keyword == "FROM":
            froms += 1
            if froms > 1:
                raise Unsupported(f"{where}: multi-stage builds are beyond the process "
                                  "runtime; use --runtime docker")
        elif ins.keyword == "ARG":
            name, _, default = ins.args.strip().partition("=")
            build_args[name.strip()] = expand(default.strip().strip('"'), scope)
        elif ins.keyword == "WORKDIR":
            layout.workdir = os.path.normpath(
                os.path.join(layout.workdir, expand(ins.args.strip(), scope)))
            layout.host(".", where).mkdir(parents=True, exist_ok=True)
        elif ins.keyword in ("COPY", "ADD"):
            _copy(build_context, layout, ins, where, scope)
        elif ins.keyword == "ENV":
            for key, raw in _parse_env(ins, where).items():
                env[key] = expand(raw, {**build_args, **env})
        elif ins.keyword == "RUN":
            steps += _run(ins, layout, where, scope)
        elif ins.keyword not in _IGNORED:
            raise Unsupported(f"{where}: the process runtime cannot emulate {ins.keyword}; "
                              "use --runtime docker")
    argv = [_map_text(a, root) for a in dockerfile.command()]
    return Emulation(root, layout.host("."), _map_env(env, root), argv, steps)


def _run(ins: Instruction, layout: _Layout, where: str, scope: dict[str, str]) -> list[PipStep]:
    if ins.heredocs:
        raise Unsupported(f"{where}: the process runtime cannot emulate a heredoc in RUN; "
                          "use --runtime docker")
    argv = ins.exec_form()
    command = expand(" ".join(argv) if argv else ins.args, scope)
    steps = []
    for part in command.split("&&"):
        words = split_shell(part, where)
        if not words:
            continue
        pip_args = pip_install_args(words, where)
        if pip_args is not None:
            if pip_args and set(pip_args) <= {"pip", "setuptools", "wheel"}:
                continue  # upgrading the installer changes nothing we run
            steps.append(_pip_step(pip_args, layout, where))
        elif words[0] == "mkdir":
            for target in (w for w in words[1:] if not w.startswith("-")):
                layout.host(target, where).mkdir(parents=True, exist_ok=True)
        else:
            raise Unsupported(
                f"{where}: the process runtime only emulates `RUN pip install` and "
                f"`RUN mkdir`, not `{part.strip()}`; use --runtime docker")
    return steps


def pip_install_args(words: list[str], where: str) -> list[str] | None:
    """The arguments after ``pip install`` (any spelling), or None if not pip install."""
    head = os.path.basename(words[0])
    if head.startswith("python") and words[1:3] == ["-m", "pip"]:
        rest = words[3:]
    elif head in ("pip", "pip3") or re.fullmatch(r"pip3\.\d+", head):
        rest = words[1:]
    else:
        return None
    if rest[:1] != ["install"]:
        return None
    args: list[str] = []
    skip = False
    for word in rest[1:]:
        if skip:
            skip = False
        elif word in _PIP_DROP_WITH_VALUE:
            skip = True
        elif word.startswith(_PIP_REFUSED):
            raise Unsupported(f"{where}: `pip install {word}` writes outside a venv; "
                              "use --runtime docker")
        elif word not in _PIP_DROP and not word.startswith("--root-user-action="):
            args.append(word)
    return args


def _pip_step(args: list[str], layout: _Layout, where: str) -> PipStep:
    cwd = layout.host(".", where)
    digest = hashlib.sha256("\0".join(args).encode())
    named: list[tuple[str, bool]] = []  # (path, must exist)
    expect_file = False
    for arg in args:
        if expect_file:
            named.append((arg, True))
            expect_file = False
        elif arg in _FILE_OPTIONS or arg in ("-e", "--editable"):
            expect_file = True
        elif arg.startswith(("--requirement=", "--constraint=", "--editable=")):
            named.append((arg.split("=", 1)[1], True))
        elif arg.startswith(("-r", "-c", "-e")) and len(arg) > 2:
            named.append((arg[2:], True))
        elif not arg.startswith("-") and (os.sep in arg or arg.startswith(".")
                                          or arg.endswith((".whl", ".tar.gz", ".zip"))):
            named.append((arg, False))  # a local package, or a spec pip will judge
    for path, required in named:
        target = layout.host(path, where)
        if target.exists():
            digest.update(_tree_digest(target).encode())
        elif required:
            raise BuildFailed(f"{where}: {path} not found in the image")
    return PipStep(args, cwd, digest.hexdigest(), where)


def _tree_digest(path: Path) -> str:
    """Content hash of a file or a folder (local packages installed by pip).

    Links count by their text, never by what they point at: nothing outside the
    root is read.
    """
    digest = hashlib.sha256()
    if not path.is_dir():
        digest.update(path.read_bytes())
        return digest.hexdigest()
    for folder, dirs, files in os.walk(path):  # does not follow links to folders
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            item = Path(folder, name)
            digest.update(item.relative_to(path).as_posix().encode() + b"\0")
            mode = os.lstat(item).st_mode
            if stat.S_ISLNK(mode):
                digest.update(b"link:" + os.readlink(item).encode())
            elif stat.S_ISREG(mode):
                digest.update(item.read_bytes())
    return digest.hexdigest()


def _parse_env(ins: Instruction, where: str) -> dict[str, str]:
    words = split_shell(ins.args, where)
    if words and all("=" in w for w in words):
        return dict(w.split("=", 1) for w in words)
    if len(words) >= 2:  # legacy form: ENV KEY value with spaces
        key, _, value = ins.args.strip().partition(" ")
        return {key: value.strip()}
    raise BuildFailed(f"{where}: ENV needs KEY=value")


def _copy(context: BuildContext, layout: _Layout, ins: Instruction, where: str,
          scope: dict[str, str]) -> None:
    if ins.heredocs:
        raise Unsupported(f"{where}: the process runtime cannot emulate a heredoc in "
                          f"{ins.keyword}; use --runtime docker")
    words = ins.exec_form() or split_shell(ins.args, where)
    if any(w.startswith("--from") for w in words):
        raise Unsupported(f"{where}: COPY --from (multi-stage) is beyond the process runtime; "
                          "use --runtime docker")
    words = [expand(w, scope) for w in words if not w.startswith("--")]  # --chown: no meaning
    if len(words) < 2:
        raise BuildFailed(f"{where}: {ins.keyword} needs a source and a destination")
    *sources, dest = words
    if any(s.startswith(("http://", "https://")) for s in sources):
        raise Unsupported(f"{where}: the process runtime cannot fetch URLs in {ins.keyword}")
    matches = [path for source in sources for path in context.sources(source, where)]
    target = layout.container(dest)
    into_dir = (dest.endswith("/") or dest in (".", "./") or len(matches) > 1
                or layout.host(dest, where).is_dir())
    for rel in matches:
        try:
            context.copy(rel, layout.root, target, into_dir)
        except LinkError as exc:
            raise BuildFailed(f"{where}: {ins.keyword} failed: {exc}") from None


_ABS_PATH = re.compile(r"(?<![\w./-])(/[\w.-]+)((?:/[\w.-]*)*)")


def _map_text(text: str, root: Path) -> str:
    """Map container paths inside ``text`` (an argument, a shell line) onto ``root``."""

    def mapped(m: re.Match[str]) -> str:
        first = m.group(1)
        if first in SYSTEM_DIRS or not (root / first.lstrip("/")).exists():
            return m.group(0)
        return str(root / first.lstrip("/")) + m.group(2)

    return _ABS_PATH.sub(mapped, text)


def _map_env(env: dict[str, str], root: Path) -> dict[str, str]:
    """ENV values with container paths mapped; PATH-like lists entry by entry."""
    result = {}
    for key, value in env.items():
        if key in ("PATH", "PYTHONPATH") or ":" in value and value.startswith("/"):
            result[key] = os.pathsep.join(_map_text(p, root) for p in value.split(":") if p)
        else:
            result[key] = _map_text(value, root)
    return result
