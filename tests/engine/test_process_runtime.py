"""The process runtime with real processes: port sharing, venv cache, Dockerfile subset."""

from __future__ import annotations

import errno
import os
import resource
import socket
import time
from pathlib import Path

import aiohttp
import anyio
import psutil
import pytest

from engine import (
    BuildFailed,
    HarnessError,
    Phase,
    PhaseFinished,
    PhaseStarted,
    ProcessRuntime,
    Verdict,
)
from engine.runtimes.process import BASE_PATH, PreparedService
from engine.types import BuildRequest
from tests.conftest import MakeSubmission, run_engine


async def test_ten_services_hard_coding_port_8000_run_at_once(
    tiny_task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    subs = [make_submission("ok") for _ in range(10)]
    results, _, _ = await run_engine([(tiny_task, s) for s in subs], tmp_path, cache_dir,
                                     concurrency=10)
    assert [r.verdict for r in results] == [Verdict.PASS] * 10, [r.reason for r in results]
    # They really ran side by side: ten distinct loopback ports were bound for 8000.
    ports = set()
    for binds in (tmp_path / "runs").glob("*/*/binds.txt"):
        (line,) = [ln for ln in binds.read_text().splitlines() if ln.split()[2] == "4"]
        asked, real, _family, scope = line.split()
        assert (asked, scope) == ("8000", "any")
        ports.add(real)
    assert len(ports) == 10


async def test_concurrency_caps_services_and_oracles_and_builds_have_their_own_limit(
    tiny_task, make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    """With --concurrency 3, six services that live > 2 s each (one item hangs until its
    deadline): at every moment at most 3 services and 3 oracle runs, and 3 is reached;
    builds never more than their own limit (min(N, 2)). Counted from the event stream
    (a service holds its slot from startup until its teardown has finished) and checked
    against the live processes at each event."""
    from engine import Planned, Runner, RunSettings, Store

    n = 3
    subs = [make_submission("slow_item") for _ in range(6)]
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    live: dict[Phase, set[str]] = {Phase.BUILD: set(), Phase.STARTUP: set(),
                                   Phase.ORACLE: set()}
    peak = {phase: 0 for phase in live}
    peak_instances = 0
    async with ProcessRuntime(cache_dir) as runtime:
        runner = Runner(store, runtime, RunSettings(home=tmp_path, concurrency=n))
        run_id = await runner.start([Planned(tiny_task.root, s, tiny_task) for s in subs])

        def instances() -> int:
            """Services of this run alive now, by their per-instance env mark."""
            marks = set()
            for proc in psutil.process_iter(["environ", "status"]):
                env = proc.info["environ"] or {}
                if env.get("ANVIL_RUN") == run_id and "ANVIL_INSTANCE" in env \
                        and proc.info["status"] != psutil.STATUS_ZOMBIE:
                    marks.add(env["ANVIL_INSTANCE"])
            return len(marks)

        async def count(stream):  # type: ignore[no-untyped-def]
            nonlocal peak_instances
            async with stream:
                async for ev in stream:
                    if isinstance(ev, PhaseStarted) and ev.phase in live:
                        live[ev.phase].add(ev.evaluation_id)
                    elif isinstance(ev, PhaseFinished) and ev.phase in live \
                            and ev.phase is not Phase.STARTUP:
                        live[ev.phase].discard(ev.evaluation_id)
                    elif isinstance(ev, PhaseFinished) and ev.phase is Phase.TEARDOWN:
                        live[Phase.STARTUP].discard(ev.evaluation_id)  # the slot is free
                    for phase, ids in live.items():
                        peak[phase] = max(peak[phase], len(ids))
                    peak_instances = max(peak_instances, instances())

        with anyio.fail_after(90):
            results = await runner.execute(run_id, [count])
    # Every service ran its oracle to the end: nothing crashed its way to a low count.
    assert [(r.verdict, r.phase, r.items_passed) for r in results] == [
        (Verdict.FAIL, Phase.ORACLE, 3)] * len(subs), [r.reason for r in results]
    # Each cap is reached and never passed; the processes agree with the events.
    assert (peak[Phase.STARTUP], peak[Phase.ORACLE], peak_instances) == (n, n, n)
    assert peak[Phase.BUILD] == 2


async def test_same_requirements_share_one_venv_built_once(
    make_submission: MakeSubmission, tmp_path: Path, cache_dir: Path
) -> None:
    subs = []
    for _ in range(3):
        sub = make_submission("ok")
        (sub / "requirements.txt").write_text("# nothing to install\n")
        text = (sub / "Dockerfile").read_text().replace(
            "COPY server.py .", "COPY requirements.txt .\nRUN pip install -r requirements.txt\n"
            "COPY server.py .")
        (sub / "Dockerfile").write_text(text)
        subs.append(sub)
    cache = tmp_path / "cache"
    async with ProcessRuntime(cache) as runtime:
        artifacts = []
        async with anyio.create_task_group() as tg:
            for i, sub in enumerate(subs):
                work = tmp_path / f"w{i}"
                work.mkdir()

                async def build(sub: Path = sub, work: Path = work) -> None:
                    artifacts.append(await runtime.build(
                        BuildRequest(submission=sub, workdir=work, log_path=work / "build.log")))

                tg.start_soon(build)
    venvs = {a.venv for a in artifacts if isinstance(a, PreparedService)}
    assert len(venvs) == 1 and len(list((cache / "venvs").glob("*/.anvil-complete"))) == 1
    logs = [(tmp_path / f"w{i}" / "build.log").read_text() for i in range(3)]
    assert sum("creating" in log for log in logs) == 1
    assert sum("cache hit" in log for log in logs) == 2


@pytest.mark.parametrize(
    ("dockerfile", "error", "message"),
    [
        ("FROM python:3.11-slim\nRUN apt-get install -y curl\nCMD [\"python\", \"server.py\"]\n",
         HarnessError, "Dockerfile:2: the process runtime only emulates"),
        ("FROM python:3.11-slim\nCOPY missing.py .\nCMD [\"python\", \"server.py\"]\n",
         BuildFailed, "Dockerfile:2: COPY failed: missing.py not found"),
        ("WORKDIR /app\nCMD [\"python\", \"server.py\"]\n",
         BuildFailed, "the first instruction must be FROM"),
        ("FROM python:3.11-slim\nCOPY . .\n", BuildFailed, "no CMD or ENTRYPOINT"),
        ("FROM python:3.11-slim\nCOPY . .\nRUN pip install no-such-package-anvil-test==0.0.0\n"
         "CMD [\"python\", \"server.py\"]\n", BuildFailed, "Dockerfile:3: `pip install` failed"),
    ],
)
async def test_build_errors_name_the_file_and_line(
    dockerfile: str, error: type[Exception], message: str, make_submission: MakeSubmission,
    tmp_path: Path,
) -> None:
    sub = make_submission("ok")
    (sub / "Dockerfile").write_text(dockerfile)
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        with pytest.raises(error) as info:
            await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                             log_path=tmp_path / "build.log"))
    assert message in str(info.value)


async def test_dockerfile_subset_is_emulated(make_submission: MakeSubmission,
                                             tmp_path: Path) -> None:
    sub = make_submission("ok")
    (sub / "conf").mkdir()
    (sub / "conf" / "a.txt").write_text("a")
    (sub / "Dockerfile").write_text(
        "# comment\nFROM python:3.11-slim AS base\nARG X=1\nWORKDIR /srv\nWORKDIR app\n"
        "COPY --chown=app:app server.py ./\nCOPY conf /etc/svc/\n"
        "ENV A=1 B=\"two words\"\nENV LEGACY some value\nRUN mkdir -p /data && \\\n"
        "    pip install --upgrade pip\nUSER app\nEXPOSE 8000\n"
        "ENTRYPOINT [\"python\"]\nCMD [\"/srv/app/server.py\"]\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                               log_path=tmp_path / "build.log"))
        assert isinstance(art, PreparedService)
        assert art.workdir == tmp_path / "root" / "srv" / "app"
        assert (art.workdir / "server.py").is_file()
        assert (tmp_path / "root" / "etc" / "svc" / "a.txt").read_text() == "a"
        assert (tmp_path / "root" / "data").is_dir()
        assert art.env == {"PATH": BASE_PATH, "A": "1", "B": "two words", "LEGACY": "some value"}
        assert art.argv == ["python", str(tmp_path / "root" / "srv" / "app" / "server.py")]
    assert not (tmp_path / "root").exists()  # released with the runtime: never started


async def test_exit_of_a_started_service_is_seen_at_once(
    make_submission: MakeSubmission, tmp_path: Path
) -> None:
    from engine.types import StartRequest

    sub = make_submission("crash")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await runtime.build(BuildRequest(submission=sub, workdir=tmp_path,
                                               log_path=tmp_path / "build.log"))
        started = time.monotonic()
        inst = await runtime.start(art, StartRequest(
            port=8000, env={}, workdir=tmp_path, log_path=tmp_path / "svc.log", log_cap=1000))
        with anyio.fail_after(5):
            info = await inst.wait_exit()
        assert time.monotonic() - started < 2
        assert (info.returncode, info.reason) == (3, "exited 3")
        await runtime.stop(inst)
        await runtime.stop(inst)  # stop is idempotent


async def test_an_error_inside_the_runtime_leaves_as_itself(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="boom"):
        async with ProcessRuntime(tmp_path / "cache"):
            raise HarnessError("boom")


# -- the submission read as Docker reads a build context ----------------------------


def _service(tmp_path: Path, server: str, dockerfile: str | None = None,
             name: str = "sub") -> Path:
    sub = tmp_path / name
    sub.mkdir(parents=True)
    (sub / "server.py").write_text(server)
    (sub / "Dockerfile").write_text(dockerfile or "FROM python:3.11-slim\nWORKDIR /app\n"
                                    "COPY server.py .\nCMD [\"python\", \"server.py\"]\n")
    return sub


async def _build_in(runtime: ProcessRuntime, sub: Path, work: Path) -> PreparedService:
    work.mkdir(parents=True, exist_ok=True)
    art = await runtime.build(BuildRequest(submission=sub, workdir=work,
                                           log_path=work / "build.log"))
    assert isinstance(art, PreparedService)
    return art


def _tree_bytes(path: Path) -> int:
    return sum(os.lstat(os.path.join(d, n)).st_size
               for d, dirs, files in os.walk(path) for n in files)


async def test_symlinks_are_copied_as_links_and_never_followed_out(
    tmp_path: Path, make_submission: MakeSubmission
) -> None:
    sub = make_submission("ok")
    (sub / "docs").symlink_to("/usr/share/doc")  # 100+ MB outside the submission
    (sub / "d").mkdir()
    (sub / "d" / "up").symlink_to("..")  # a loop through the tree
    (sub / "dangling").symlink_to("nowhere")
    (sub / "l1").symlink_to("l2")
    (sub / "l2").symlink_to("l1")
    (sub / "alias.py").symlink_to("server.py")
    outside = tmp_path / "outside"
    outside.mkdir()
    (sub / "out").symlink_to(outside)
    (sub / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY . .\nCOPY alias.py /srv/alias.py\n"
        "COPY server.py /app/out/evil.py\nRUN mkdir -p /app/out/made\n"
        "CMD [\"python\", \"server.py\"]\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await _build_in(runtime, sub, tmp_path / "w")
        app = art.root / "app"
        assert os.readlink(app / "docs") == "/usr/share/doc"
        assert os.readlink(app / "d" / "up") == ".." and os.readlink(app / "dangling") == "nowhere"
        assert os.readlink(app / "l1") == "l2" and os.readlink(app / "alias.py") == "server.py"
        assert _tree_bytes(art.root) < 100_000  # nothing of /usr/share/doc came along
        # COPY of a link inside the context copies what it names, resolved in the context.
        assert (art.root / "srv" / "alias.py").read_text() == (sub / "server.py").read_text()
        # A link the submission put in the root cannot make a later step write outside it.
        assert list(outside.iterdir()) == []
        assert (art.root / outside.relative_to("/") / "evil.py").is_file()
        assert (art.root / outside.relative_to("/") / "made").is_dir()


@pytest.mark.parametrize(("source", "problem"), [
    ("dangling", "COPY failed: dangling is a symlink to nowhere, which is not in the build "
                 "context"),
    ("l1", "COPY failed: l1: a symlink loop"),
    ("docs", "COPY failed: docs is a symlink to /usr/share/doc, which is not in the build "
             "context"),
    ("d/up/d/up/l2", "COPY failed: d/up/d/up/l2: a symlink loop"),
])
async def test_copying_a_broken_link_is_the_candidates_fail_in_one_line(
    tmp_path: Path, source: str, problem: str
) -> None:
    sub = _service(tmp_path, "print(1)\n", "FROM python:3.11-slim\nWORKDIR /app\n"
                   f"COPY {source} /app/x\nCMD [\"python\", \"server.py\"]\n")
    (sub / "docs").symlink_to("/usr/share/doc")
    (sub / "dangling").symlink_to("nowhere")
    (sub / "l1").symlink_to("l2")
    (sub / "l2").symlink_to("l1")
    (sub / "d").mkdir()
    (sub / "d" / "up").symlink_to("..")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        with pytest.raises(BuildFailed) as info:
            await _build_in(runtime, sub, tmp_path / "w")
    assert str(info.value) == f"{sub}/Dockerfile:3: {problem}"
    assert not (tmp_path / "w" / "root").exists()  # a failed build leaves only its logs


async def test_a_broken_link_is_a_fail_at_build_through_the_engine(
    tiny_task, tmp_path: Path, cache_dir: Path  # type: ignore[no-untyped-def]
) -> None:
    sub = _service(tmp_path, "print(1)\n", "FROM python:3.11-slim\nWORKDIR /app\n"
                   "COPY config.yaml .\nCMD [\"python\", \"server.py\"]\n")
    (sub / "config.yaml").symlink_to("/nonexistent/config.yaml")
    (result,), _, _ = await run_engine([(tiny_task, sub)], tmp_path, cache_dir)
    assert (result.verdict, result.phase) == (Verdict.FAIL, "build")
    assert "config.yaml is a symlink to /nonexistent/config.yaml" in result.reason
    assert "\n" not in result.reason and len(result.reason) < 300


async def test_dockerignore_has_dockers_meaning(tmp_path: Path) -> None:
    sub = _service(tmp_path, "print(1)\n", "FROM python:3.11-slim\nWORKDIR /app\nCOPY . .\n"
                   "CMD [\"python\", \"server.py\"]\n")
    files = ["README.md", "NOTES.md", "sub/NOTES.md", "a.log", "deep/er/b.log",
             "secrets/key.pem", "secrets/keep.txt", "data/x.csv"]
    for name in files:
        (sub / name).parent.mkdir(parents=True, exist_ok=True)
        (sub / name).write_text(name)
    (sub / ".dockerignore").write_text(
        "# comment\n*.md\n!README.md\n**/*.log\nsecrets/\n!secrets/keep.txt\n/data\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await _build_in(runtime, sub, tmp_path / "w")
        copied = sorted(str(p.relative_to(art.workdir)) for p in art.workdir.rglob("*")
                        if p.is_file())
    # `*.md` is the root's only (patterns are anchored); `!` brings a file back.
    assert copied == [".dockerignore", "Dockerfile", "README.md", "secrets/keep.txt",
                      "server.py", "sub/NOTES.md"]


async def test_an_ignored_copy_source_is_not_found(tmp_path: Path) -> None:
    sub = _service(tmp_path, "print(1)\n", "FROM python:3.11-slim\nWORKDIR /app\n"
                   "COPY server.py .\nCOPY .env .\nCMD [\"python\", \"server.py\"]\n")
    (sub / ".env").write_text("SECRET=1\n")
    (sub / ".dockerignore").write_text(".env\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        with pytest.raises(BuildFailed, match="Dockerfile:4: COPY failed: .env not found"):
            await _build_in(runtime, sub, tmp_path / "w")


async def test_a_dockerfile_with_a_byte_order_mark_builds(
    tmp_path: Path, make_submission: MakeSubmission
) -> None:
    sub = make_submission("ok")
    text = (sub / "Dockerfile").read_text()
    (sub / "Dockerfile").write_bytes("\ufeff".encode() + text.encode())
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await _build_in(runtime, sub, tmp_path / "w")
        assert art.argv == ["python", "server.py"] and (art.workdir / "server.py").is_file()


# -- ports: every service has a private port space ----------------------------------


async def test_two_services_binding_8080_at_once_both_run(
    tmp_path: Path, make_submission: MakeSubmission
) -> None:
    from engine.types import StartRequest

    async with ProcessRuntime(tmp_path / "cache") as runtime:
        instances = []
        for name in ("one", "two"):
            work = tmp_path / name
            art = await _build_in(runtime, make_submission("wrong_port"), work)
            instances.append(await runtime.start(art, StartRequest(
                port=8000, env={}, workdir=work, log_path=work / "service.log",
                log_cap=100_000)))
        real = []
        for inst in instances:
            with anyio.fail_after(10):  # a condition (its bind reported), with a deadline
                while True:
                    if inst.diagnose().startswith("the service listens on port 8080"):
                        break
                    await anyio.sleep(0.02)
            assert inst.diagnose() == "the service listens on port 8080, the task expects port 8000"
            (bind,) = [b for b in inst._binds() if b.family == "4"]  # type: ignore[attr-defined]
            assert (bind.asked, bind.loopback) == (8080, False)
            real.append(bind.real)
        assert len(set(real)) == 2
        for port in real:  # both are alive and answer on the port they really got
            with anyio.fail_after(10):
                while True:  # reported at bind(): listen() may follow a moment later
                    try:
                        status, _ = await _get(f"http://127.0.0.1:{port}/health")
                        break
                    except aiohttp.ClientConnectorError:
                        await anyio.sleep(0.02)
            assert status == 200
        for inst in instances:
            with anyio.move_on_after(0.2):
                await inst.wait_exit()
                pytest.fail("a service exited: its bind collided")
            await runtime.stop(inst)


async def test_a_service_reaches_its_own_remapped_ports(tmp_path: Path) -> None:
    """Inside a service, 127.0.0.1:9000 is the service's own 9000, as in a container."""
    from engine.types import StartRequest

    server = r'''
import threading, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Helper(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "6"); self.end_headers()
        self.wfile.write(b"helper")
    def log_message(self, *a): pass

class Api(BaseHTTPRequestHandler):
    def do_GET(self):
        with urllib.request.urlopen("http://127.0.0.1:9000/", timeout=5) as r:
            body = r.read()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)

helper = ThreadingHTTPServer(("0.0.0.0", 9000), Helper)
threading.Thread(target=helper.serve_forever, daemon=True).start()
ThreadingHTTPServer(("0.0.0.0", 8000), Api).serve_forever()
'''
    sub = _service(tmp_path, server)
    blocker = socket.socket()  # the host's own 9000 is taken: the service must not care
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        blocker.bind(("127.0.0.1", 9000))
        blocker.listen()
    except OSError:
        pass  # something else holds 9000 already: the same situation
    try:
        async with ProcessRuntime(tmp_path / "cache") as runtime:
            work = tmp_path / "w"
            art = await _build_in(runtime, sub, work)
            inst = await runtime.start(art, StartRequest(port=8000, env={}, workdir=work,
                                                         log_path=work / "service.log",
                                                         log_cap=100_000))
            with anyio.fail_after(10):
                url = await inst.wait_listening()
            assert await _get(url + "/") == (200, b"helper")
            await runtime.stop(inst)
    finally:
        blocker.close()


async def _get(url: str) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with session.get(url) as resp:
            return resp.status, await resp.read()


# -- start: whose fault a failed spawn is; the log a crash leaves --------------------


async def test_no_file_descriptors_to_spawn_is_a_harness_error(
    tmp_path: Path, make_submission: MakeSubmission
) -> None:
    from engine.types import StartRequest

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        work = tmp_path / "w"
        art = await _build_in(runtime, make_submission("ok"), work)
        request = StartRequest(port=8000, env={}, workdir=work, log_path=work / "service.log",
                               log_cap=1000)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64,
                                                        hard))
            with pytest.raises(OSError) as exhausted:
                while True:
                    held.append(os.open(os.devnull, os.O_RDONLY))
            assert exhausted.value.errno == errno.EMFILE
            with pytest.raises(HarnessError) as info:
                await runtime.start(art, request)
        finally:
            for fd in held:
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "EMFILE" in str(info.value) and info.value.transient


async def test_a_cmd_that_does_not_exist_is_the_candidates_fail(tmp_path: Path) -> None:
    from engine import ServiceExited
    from engine.types import StartRequest

    sub = _service(tmp_path, "", "FROM python:3.11-slim\nCMD [\"/no/such/program\"]\n")
    async with ProcessRuntime(tmp_path / "cache") as runtime:
        art = await _build_in(runtime, sub, tmp_path / "w")
        with pytest.raises(ServiceExited, match="cannot run `/no/such/program`: No such file"):
            await runtime.start(art, StartRequest(port=8000, env={}, workdir=tmp_path / "w",
                                                  log_path=tmp_path / "w" / "s.log",
                                                  log_cap=1000))


async def test_a_service_that_floods_then_crashes_shows_its_last_line_as_the_reason(
    tiny_task, tmp_path: Path, cache_dir: Path  # type: ignore[no-untyped-def]
) -> None:
    server = ("import sys\nfor i in range(50_000):\n    print('noise', i, 'x' * 100)\n"
              "print('fatal: DATABASE_URL is not set', flush=True)\nsys.exit(3)\n")
    sub = _service(tmp_path, server)
    cap = 64 * 1024
    (result,), _, _ = await run_engine([(tiny_task, sub)], tmp_path, cache_dir, log_cap=cap)
    assert (result.verdict, result.phase) == (Verdict.FAIL, "startup")
    assert result.reason.endswith("fatal: DATABASE_URL is not set"), result.reason
    (log,) = (tmp_path / "runs").glob("*/*/service.log")
    text = log.read_text()
    assert text.startswith("noise 0 x") and f"[anvil: log capped at {cap} bytes" in text
    assert log.stat().st_size < cap + 200
