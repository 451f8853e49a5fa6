"""Throughput of one workload scored three ways in one sitting, and how busy the machine was.

The workload: every example submission of the bundled tasks (``examples/<task>/``, as
each task's EXPECTED.toml lists them) against its task, cycled in order until there
are ``--evaluations`` of them (a submission scored twice is copied under another name,
so every evaluation has its own key). The three ways:

1. ``naive``: a sequential loop written the way benchmark authors script it today. Per
   evaluation: start the service, poll its health path until it answers (GET, 0.1 s
   sleep), run ``python -m pytest`` on the task's oracle folder with ``BASE_URL`` set,
   stop the service. Same-workload choice for the tasks with ``[[mocks]]`` (checkout,
   booking, notify): the loop hosts them too, as a benchmark author would with a small
   script over the mocks' public API: a fresh ``MockHost`` instance per mock per
   evaluation, its URL in the service's env, and for pytest the URL, ``<ENV>_TOKEN``
   and ``ANVIL_MOCKS`` with ``-p mocks._fixtures`` (the fixtures mark items themselves
   when anvil does not). Only orchestration differs from anvil: the loop runs what the
   runtime's own ``build()`` prepared (process runtime: the cached venv and the
   Dockerfile's CMD, in the submission laid out once per submission, untimed; Docker:
   the image, with ``docker run``/``docker rm -f``), and pytest runs as anvil runs it
   (an empty ini, plugin autoload off) minus anvil's own plugin. The service listens on
   the task's port itself (no port shim), so that port must be free on this machine.
2. ``anvil c=1``: ``anvil run --concurrency 1`` as a subprocess.
3. ``anvil c=N``: ``anvil run`` at its default concurrency (or ``--concurrency``).

Each anvil run has its own fresh ``--home`` (run folders, db) in a temp dir; all
share the runtime's cache (``--cache``, default anvil's own ``.anvil/cache`` here),
which one untimed build of every submission warms first, so no way pays for venv
creation or an image build.

For each way: wall time, evaluations per minute, the CPU seconds of its processes
(``RUSAGE_CHILDREN`` deltas around it: this script does no work in-process, even the
loop runs as a child, so the deltas hold everything each way ran: services, oracles,
mocks, anvil itself), and the verdicts, which must agree across the ways (a warning
line otherwise). ``busy`` = CPU seconds / cores / wall time (1.0: every core busy the
whole run); anvil's figure is the "machine limit" of the issue. ``own`` is the orchestrator's
own process's CPU (RUSAGE_SELF, reported by a small wrapper as it exits; for the loop,
its script's, which hosts its mocks in-process as anvil does), and ``svc+oracle/eval``
the rest per evaluation: what the services and oracles cost under each way. On the
Docker runtime a service runs under the daemon, not as anyone's child: its CPU is not
counted, so CPU figures there cover orchestration, mocks and oracles only.

    .venv/bin/python bench/throughput.py [--evaluations 40] [--runtime process]
        [--concurrency N] [--tasks taskboard,checkout] [--cache DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("taskboard", "checkout", "booking", "notify")
VERDICTS = ("pass", "fail", "error")
POLL = 0.1  # the loop's health poll interval
STOP_GRACE = 3.0  # SIGTERM, then SIGKILL after this (anvil's grace too)

# Runs `python -m engine` and writes the process's own rusage (max RSS in KiB, CPU
# seconds) to argv[1] as JSON on exit: RUSAGE_SELF, so anvil alone, not its children.
WRAPPER = r"""
import json, resource, runpy, sys
out = sys.argv.pop(1)
sys.argv[0] = "anvil"
try:
    runpy.run_module("engine", run_name="__main__", alter_sys=True)
finally:
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(out, "w") as fh:
        json.dump({"maxrss_kib": r.ru_maxrss, "cpu_s": r.ru_utime + r.ru_stime}, fh)
"""


@dataclass
class Way:
    """What one way measured."""

    name: str
    wall: float
    cpu: float  # children's CPU seconds
    verdicts: dict[str, str]  # evaluation key (task/submission) -> verdict
    engine_cpu: float | None = None  # the orchestrator's own process (anvil; the loop's script)
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.counts = Counter(self.verdicts.values())

    @property
    def evaluations(self) -> int:
        return len(self.verdicts)

    @property
    def per_minute(self) -> float:
        return self.evaluations / self.wall * 60

    @property
    def cpu_per_eval(self) -> float:
        return self.cpu / max(self.evaluations, 1)

    @property
    def children_per_eval(self) -> float:
        """CPU per evaluation of what the orchestrator ran: services and oracles."""
        return (self.cpu - (self.engine_cpu or 0.0)) / max(self.evaluations, 1)

    def busy(self, cores: int) -> float:
        return self.cpu / cores / self.wall


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- the workload ------------------------------------------------------------------------


def workload(tasks: list[str], n: int) -> list[tuple[str, str, str]]:
    """``(task, key, submission)`` for ``n`` evaluations (at least every submission once):
    the submissions cycled in order; ``key`` is ``r<round>-<submission>``."""
    subs = []
    for task in tasks:
        expected = tomllib.loads((ROOT / "examples" / task / "EXPECTED.toml").read_text())
        subs += [(task, s) for s in expected if (ROOT / "examples" / task / s).is_dir()]
    if not subs:
        sys.exit("no submissions found")
    total = max(n, len(subs))
    return [(subs[i % len(subs)][0], f"r{i // len(subs) + 1}-{subs[i % len(subs)][1]}",
             subs[i % len(subs)][1]) for i in range(total)]


def lay_out(work: list[tuple[str, str, str]], folder: Path) -> None:
    """``folder/<task>/<key>``: a copy of each submission (anvil resolves links, and two
    evaluations of one folder would share a name)."""
    for task, key, sub in work:
        shutil.copytree(ROOT / "examples" / task / sub, folder / task / key, symlinks=True)


# -- the anvil ways ----------------------------------------------------------------------


def anvil_way(name: str, tasks: list[str], subs: Path, home: Path, runtime: str,
              concurrency: int | None, env: dict[str, str]) -> Way:
    engine_cpu_file = home.parent / f"{home.name}.engine-cpu"
    argv = [sys.executable, "-c", WRAPPER, str(engine_cpu_file), "run",
            *(str(ROOT / "tasks" / t) for t in tasks), "--submissions", str(subs),
            "--runtime", runtime, "--home", str(home), "--json"]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    cpu, started = children_cpu(), time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu
    if done.returncode not in (0, 3):  # 3: an evaluation ended in error (counted)
        sys.exit(f"{name}: anvil run exited {done.returncode}:\n{done.stderr[-3000:]}")
    verdicts = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            verdicts[f"{record['task']}/{Path(record['submission']).name}"] = record["verdict"]
    engine = (float(json.loads(engine_cpu_file.read_text())["cpu_s"])
              if engine_cpu_file.exists() else None)
    return Way(name, wall, cpu, verdicts, engine)


# -- the naive loop (runs as a child: `--_prepare` untimed, then `--_naive` timed) --------


def prepare(manifest: Path, runtime_name: str, cache: Path, scratch: Path) -> None:
    """Build every distinct submission with the runtime's own build (fills the cache) and
    write what the loop needs to run it: a JSON list, one object per submission."""
    import anyio

    from engine._errors import AnvilError
    from engine._task import load_task
    from engine.runtimes import make_runtime
    from engine.runtimes.docker._runtime import DockerImage
    from engine.runtimes.process._emulate import BASE_PATH
    from engine.runtimes.process._runtime import PreparedService, _venv_program
    from engine.types import BuildRequest

    work = json.loads(manifest.read_text())

    async def main() -> list[dict[str, Any]]:
        os.environ["ANVIL_CACHE"] = str(cache)
        runtime, _ = await make_runtime(runtime_name, scratch / "home")
        out = []
        async with contextlib.AsyncExitStack() as stack:
            if runtime_name == "docker":  # its client and gateway; the process runtime
                await stack.enter_async_context(runtime)  # is not entered: it would remove
                # the laid-out submissions on exit, which the loop runs
            for task_name, sub in dict.fromkeys((w[0], w[2]) for w in work):
                task = load_task(ROOT / "tasks" / task_name)
                svc = task.config.service
                entry: dict[str, Any] = {
                    "task": task_name, "submission": sub, "port": svc.port,
                    "health_path": svc.health_path or "/health",
                    "health_timeout": svc.health_timeout,
                    "oracle_dir": str(task.oracle_dir),
                    "oracle_timeout": task.config.oracle.timeout,
                    "listen_host": runtime.listen_host,
                    "mocks": [{"kind": m.kind, "env": m.env, "scenario": m.scenario}
                              for m in task.config.mocks],
                }
                workdir = scratch / "naive" / task_name / sub
                workdir.mkdir(parents=True)
                try:
                    artifact = await runtime.build(BuildRequest(
                        ROOT / "examples" / task_name / sub, workdir, workdir / "build.log"))
                except AnvilError as exc:
                    entry["build_failed"] = str(exc)
                    out.append(entry)
                    continue
                if isinstance(artifact, PreparedService):
                    venv = artifact.venv
                    path = [str(venv / "bin")] if venv else []
                    path.append(artifact.env.get("PATH", BASE_PATH))
                    entry.update(
                        argv=[_venv_program(a, venv) for a in artifact.argv],
                        cwd=str(artifact.workdir), home=str(workdir),
                        env={**artifact.env, "PATH": os.pathsep.join(p for p in path if p),
                             **({"VIRTUAL_ENV": str(venv)} if venv else {})})
                    # The venv stays in the cache (only a cache over its budget would lose
                    # it to GC); the laid-out submission stays for the loop to run.
                    if artifact.lease is not None:
                        artifact.lease.release()
                else:
                    assert isinstance(artifact, DockerImage)
                    entry["image"] = artifact.tag
                out.append(entry)
        return out

    (scratch / "prepared.json").write_text(json.dumps(anyio.run(main)))


def naive(manifest: Path, scratch: Path) -> None:
    """The loop itself: one evaluation after the other; prints one JSON verdict per line."""
    from anyio.from_thread import start_blocking_portal

    from mocks import MockHost, load_mock

    work = json.loads(manifest.read_text())
    built = {(e["task"], e["submission"]): e for e in json.loads(
        (scratch / "prepared.json").read_text())}
    ini = scratch / "oracle-pytest.ini"
    ini.write_text("[pytest]\n")
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(MockHost()) as host:
        for i, (task, key, sub) in enumerate(work):
            entry = built[(task, sub)]
            hosted = []
            for mock in entry["mocks"]:
                start = functools.partial(
                    host.start, load_mock(mock["kind"]), instance=mock["kind"],
                    seed=f"naive-{i}", scenario=mock["scenario"], host=entry["listen_host"])
                hosted.append((mock, portal.call(start)))
            try:
                verdict = naive_one(entry, hosted, ini, scratch / f"{i:03d}.log")
            finally:
                for _, h in hosted:
                    portal.call(host.stop, h)
            print(json.dumps({"key": f"{task}/{key}", "verdict": verdict}), flush=True)
    own = resource.getrusage(resource.RUSAGE_SELF)
    (scratch / "naive.own-cpu").write_text(str(own.ru_utime + own.ru_stime))


def naive_one(entry: dict[str, Any], hosted: list[tuple[dict[str, Any], Any]], ini: Path,
              log_path: Path) -> str:
    """Start, poll, pytest, stop: the verdict (``pass``/``fail``/``error``)."""
    if "build_failed" in entry:
        return "fail"
    docker = "image" in entry
    service_env = {m["env"]: h.url for m, h in hosted}
    if docker:
        service_env = {m["env"]: h.url.replace(entry["listen_host"], "host.docker.internal")
                       for m, h in hosted}
    port = entry["port"]
    with log_path.open("wb") as log:
        if docker:
            args = [a for k, v in {"PORT": str(port), **service_env}.items()
                    for a in ("-e", f"{k}={v}")]
            started = subprocess.run(
                ["docker", "run", "-d", "-p", f"127.0.0.1::{port}", *args, "--add-host",
                 "host.docker.internal:host-gateway", entry["image"]],
                capture_output=True, text=True, check=False)
            cid = started.stdout.strip()
            if started.returncode != 0:  # created but not started (a CMD that cannot run)
                if cid:
                    subprocess.run(["docker", "rm", "-f", cid], capture_output=True,
                                   check=False)
                return "fail"
            mapped = subprocess.run(["docker", "port", cid, f"{port}/tcp"],
                                    capture_output=True, text=True, check=True).stdout
            base_url = "http://" + mapped.splitlines()[0].strip()

            def alive() -> bool:
                return subprocess.run(
                    ["docker", "inspect", "-f", "{{.State.Running}}", cid],
                    capture_output=True, text=True, check=False).stdout.strip() == "true"

            def stop() -> None:
                subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
        else:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    raise SystemExit(f"port {port} is in use: the loop needs it free")
            env = {"HOME": entry["home"], "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
                   "PORT": str(port), **entry["env"], **service_env}
            process = subprocess.Popen(entry["argv"], cwd=entry["cwd"], env=env,
                                       stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            base_url = f"http://127.0.0.1:{port}"

            def alive() -> bool:
                return process.poll() is None

            def stop() -> None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(STOP_GRACE)
                except subprocess.TimeoutExpired:
                    pass
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        try:
            if not _answers(base_url + entry["health_path"], entry["health_timeout"], alive):
                return "fail"
            oracle_env = {**os.environ, "BASE_URL": base_url, "PYTHONDONTWRITEBYTECODE": "1",
                          "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
            argv = [sys.executable, "-m", "pytest", entry["oracle_dir"], "-c", str(ini),
                    "--rootdir", entry["oracle_dir"], "-p", "no:cacheprovider", "-q"]
            if hosted:
                argv += ["-p", "mocks._fixtures"]
                for mock, h in hosted:
                    oracle_env[mock["env"]] = h.url
                    oracle_env[f"{mock['env']}_TOKEN"] = h.token
                oracle_env["ANVIL_MOCKS"] = json.dumps([
                    {"name": m["kind"], "kind": m["kind"], "env": m["env"], "url": h.url,
                     "token": h.token, "scenario": m["scenario"]} for m, h in hosted])
            try:
                code = subprocess.run(argv, env=oracle_env, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=entry["oracle_timeout"], check=False).returncode
            except subprocess.TimeoutExpired:
                return "fail"
            return {0: "pass", 1: "fail"}.get(code, "error")
        finally:
            stop()


def _answers(url: str, timeout: float, alive: Any) -> bool:
    """Poll ``url`` until it answers 2xx (True), the service ends or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as answer:
                if 200 <= answer.status < 300:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(POLL)
    return False


def naive_way(scratch: Path, env: dict[str, str]) -> Way:
    argv = [sys.executable, str(Path(__file__).resolve()), "--_naive", str(scratch)]
    cpu, started = children_cpu(), time.monotonic()
    done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True,
                          check=False)
    wall, cpu = time.monotonic() - started, children_cpu() - cpu
    if done.returncode != 0:
        sys.exit(f"the naive loop exited {done.returncode}:\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    own = float((scratch / "naive.own-cpu").read_text())
    return Way("naive loop", wall, cpu, {r["key"]: r["verdict"] for r in records}, own)


# -- the report --------------------------------------------------------------------------


def table(ways: list[Way], cores: int) -> str:
    head = (f"{'way':<13}{'evals':>6}{'wall s':>8}{'eval/min':>9}{'CPU s':>8}"
            f"{'CPU s/eval':>11}{'busy':>6}{'own CPU s':>13}{'own/eval':>9}{'svc+oracle/eval':>16}"
            "  pass/fail/error")
    rows = [head]
    for w in ways:
        own = "-" if w.engine_cpu is None else (
            f"{w.engine_cpu:.1f} ({w.engine_cpu / w.cpu:.0%})" if w.cpu else f"{w.engine_cpu:.1f}")
        own_each = "-" if w.engine_cpu is None else f"{w.engine_cpu / max(w.evaluations, 1):.2f}"
        rows.append(f"{w.name:<13}{w.evaluations:>6}{w.wall:>8.1f}{w.per_minute:>9.1f}"
                    f"{w.cpu:>8.1f}{w.cpu / max(w.evaluations, 1):>11.2f}"
                    f"{w.busy(cores):>6.2f}{own:>13}{own_each:>9}{w.children_per_eval:>16.2f}  "
                    + "/".join(str(w.counts.get(v, 0)) for v in VERDICTS))
    return "\n".join(rows)


def disagreements(ways: list[Way]) -> list[str]:
    lines = []
    keys = sorted(set().union(*(w.verdicts for w in ways)))
    for key in keys:
        seen = [w.verdicts.get(key, "missing") for w in ways]
        if len(set(seen)) > 1:
            lines.append(f"  {key}: " + ", ".join(
                f"{w.name}={v}" for w, v in zip(ways, seen, strict=True)))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:-1]))
    parser.add_argument("--evaluations", type=int, default=40, metavar="N",
                        help="evaluations per way, at least (default 40; every submission "
                             "at least once)")
    parser.add_argument("--runtime", choices=("process", "docker"), default="process")
    parser.add_argument("--concurrency", type=int, default=None, metavar="N",
                        help="the third way's --concurrency (default: anvil's default)")
    parser.add_argument("--cold-oracles", action="store_true",
                        help="a fourth way: the default concurrency with ANVIL_ORACLE_WORKER=0 "
                             "(every oracle a cold interpreter), for the warm worker's effect")
    parser.add_argument("--tasks", default=",".join(TASKS),
                        help=f"comma-separated task ids (default {','.join(TASKS)})")
    parser.add_argument("--cache", type=Path, default=ROOT / ".anvil" / "cache",
                        help="the runtime cache every way shares (ANVIL_CACHE; "
                             "default: %(default)s)")
    parser.add_argument("--_prepare", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--_naive", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._naive:
        naive(args._naive / "work.json", args._naive)
        return
    if args._prepare:
        prepare(args._prepare / "work.json", args.runtime, args.cache.resolve(), args._prepare)
        return

    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s): {', '.join(unknown)} (known: {', '.join(TASKS)})")
    cores = os.cpu_count() or 1
    work = workload(tasks, args.evaluations)
    env = {**os.environ, "ANVIL_CACHE": str(args.cache.resolve())}
    env.pop("ANVIL_HOME", None)
    env.pop("ANVIL_DB", None)
    with tempfile.TemporaryDirectory(prefix="anvil-throughput-") as tmp:
        scratch = Path(tmp)
        (scratch / "work.json").write_text(json.dumps(work))
        subs = scratch / "subs"
        lay_out(work, subs)
        distinct = len({(t, s) for t, _, s in work})
        print(f"workload: {len(work)} evaluations ({distinct} submissions of "
              f"{', '.join(tasks)}, cycled), runtime {args.runtime}, {cores} cores",
              flush=True)
        started = time.monotonic()
        warm = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_prepare",
                               str(scratch), "--runtime", args.runtime, "--cache",
                               str(args.cache.resolve())],
                              cwd=scratch, env=env, capture_output=True, text=True, check=False)
        if warm.returncode != 0:
            sys.exit(f"warming the cache failed:\n{warm.stderr[-3000:]}")
        print(f"caches warm: every submission built once by the {args.runtime} runtime, "
              f"untimed ({time.monotonic() - started:.1f} s; cache {args.cache})", flush=True)
        ways = [naive_way(scratch, env)]
        print(f"  naive loop done in {ways[-1].wall:.1f} s", flush=True)
        ways.append(anvil_way("anvil c=1", tasks, subs, scratch / "home-c1", args.runtime, 1,
                              env))
        print(f"  anvil c=1 done in {ways[-1].wall:.1f} s", flush=True)
        label = f"anvil c={args.concurrency}" if args.concurrency else "anvil default"
        ways.append(anvil_way(label, tasks, subs, scratch / "home-default", args.runtime,
                              args.concurrency, env))
        print(f"  {label} done in {ways[-1].wall:.1f} s", flush=True)
        if args.cold_oracles:
            ways.append(anvil_way(f"{label}, cold oracles", tasks, subs,
                                  scratch / "home-cold", args.runtime, args.concurrency,
                                  {**env, "ANVIL_ORACLE_WORKER": "0"}))
            print(f"  {label}, cold oracles done in {ways[-1].wall:.1f} s", flush=True)
        if args.runtime == "process":
            # The loop's laid-out submissions are ours to remove (no runtime released them).
            shutil.rmtree(scratch / "naive", ignore_errors=True)
    print()
    print(table(ways, cores))
    if args.runtime == "docker":
        print("(docker: services run under the daemon; their CPU is not in these figures)")
    wrong = disagreements(ways)
    if wrong:
        print(f"WARNING: verdicts disagree on {len(wrong)} evaluations:")
        print("\n".join(wrong))
    naive_rate = ways[0].per_minute
    print(f"ratios: anvil c=1 / naive = {ways[1].per_minute / naive_rate:.2f}x, "
          f"{label} / naive = {ways[2].per_minute / naive_rate:.2f}x; "
          f"machine limit {ways[2].busy(cores):.2f}"
          + (f"; warm / cold oracles = {ways[2].per_minute / ways[3].per_minute:.2f}x, "
             f"CPU per evaluation {ways[3].cpu_per_eval:.2f} -> {ways[2].cpu_per_eval:.2f} s"
             if args.cold_oracles else ""))


if __name__ == "__main__":
    main()
