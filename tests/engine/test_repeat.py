"""Repeated runs: `anvil run --repeat K` on the process runtime, then pass@k, the flip rate
and the quarantine candidates of `anvil report`, checked against values worked out by hand.

The tiny task's four items (health, put_then_get, unknown_is_404, slow_answers) against five
submissions, each evaluated K = 4 times:

    submission  service                                        fails
    ok          tiny service                                   -
    flaky       counts its starts in a shared file; on odd     put_then_get, in 2 of 4 repeats
                starts its writes are lost
    lenient     answers 200 for unknown keys                   unknown_is_404, always
    reference   tiny service, slow_item (the task's reference) slow_answers, always
    crash       tiny service, crash                            startup, always (no items)

The flaky service's starts are numbered 1..4 whatever order the repeats run in, so two of its
repeats fail, whichever two they are.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from engine import Store
from engine._metrics import pass_at_k
from tests.conftest import FIXTURES
from tests.engine.test_cli import anvil

K = 4
ITEMS = ("test_health", "test_put_then_get", "test_unknown_is_404", "test_slow_answers")

SERVICE = '''\
import fcntl
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KIND = os.environ["KIND"]


def start_number():
    """This start's number among all starts of the service: 1, 2, ... (one file, locked)."""
    with open(os.environ["COUNTER"], "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = int(fh.read() or 0) + 1
        fh.seek(0)
        fh.truncate()
        fh.write(str(n))
    return n


FORGETS = KIND == "flaky" and start_number() % 2 == 1
ITEMS = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/items/"):
            key = self.path.rsplit("/", 1)[1]
            if key in ITEMS or KIND == "lenient":
                return self._send(200, {"key": key, "value": ITEMS.get(key)})
            return self._send(404, {"detail": "not found"})
        return self._send(200, {"status": "ok"})

    def do_PUT(self):
        key = self.path.rsplit("/", 1)[1]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if not FORGETS:
            ITEMS[key] = body.get("value")
        return self._send(200, {"key": key})


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
'''

DOCKERFILE = '''\
FROM python:3.11-slim
WORKDIR /srv/app
COPY service.py .
ENV KIND={kind}
ENV COUNTER={counter}
CMD ["python", "service.py"]
'''


def _tiny(folder: Path, mode: str) -> None:
    shutil.copytree(FIXTURES / "tiny_service", folder)
    dockerfile = folder / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("ENV MODE=ok", f"ENV MODE={mode}"))


def _own(folder: Path, kind: str, counter: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "service.py").write_text(SERVICE)
    (folder / "Dockerfile").write_text(DOCKERFILE.format(kind=kind, counter=counter))


class Repeated:
    def __init__(self, root: Path, cache: Path) -> None:
        self.root, self.cache, self.home = root, cache, root / "home"
        self.subs = root / "subs"
        _tiny(self.subs / "ok", "ok")
        _own(self.subs / "flaky", "flaky", root / "flaky-starts")
        _own(self.subs / "lenient", "lenient", root / "lenient-starts")
        _tiny(self.subs / "reference", "slow_item")
        _tiny(self.subs / "crash", "crash")
        done = anvil("run", str(FIXTURES / "tiny_task"), "--submissions", str(self.subs),
                     "--runtime", "process", "--repeat", str(K), home=self.home, cache=cache)
        assert done.returncode == 0, done.stderr
        self.run_id = str(self.report("latest")["run"]["id"])

    def report(self, *args: str) -> dict:  # type: ignore[type-arg]
        done = anvil("report", *args, "--format", "json", home=self.home, cache=self.cache)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def repeated(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Repeated:
    return Repeated(tmp_path_factory.mktemp("repeat"), cache_dir)


@pytest.mark.parametrize(("k", "expected"), [
    # n = 5 repeats, c = 2 passed: 1 - P(all k drawn without replacement fail), fail = 3.
    (1, 1 - Fraction(3, 5)),
    (2, 1 - Fraction(3, 5) * Fraction(2, 4)),
    (3, 1 - Fraction(3, 5) * Fraction(2, 4) * Fraction(1, 3)),
    (4, Fraction(1)),  # only 3 fail: any 4 hold a pass
    (5, Fraction(1)),
])
def test_pass_at_k_matches_the_closed_form(k: int, expected: Fraction) -> None:
    assert pass_at_k(5, 2, k) == pytest.approx(float(expected), abs=1e-12)
    assert pass_at_k(5, 2, k) == pytest.approx(1 - math.comb(3, k) / math.comb(5, k))


def test_pass_at_k_edges() -> None:
    assert [pass_at_k(4, 0, k) for k in range(1, 5)] == [0.0] * 4  # never passes
    assert [pass_at_k(4, 4, k) for k in range(1, 5)] == [1.0] * 4
    assert pass_at_k(1, 1, 1) == 1.0 and pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is c / n
    for n, c, k in ((3, 1, 4), (3, 4, 1), (3, 1, 0), (3, -1, 1)):
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_repeats_are_evaluations_of_their_own(repeated: Repeated) -> None:
    store = Store(f"sqlite:///{repeated.home / 'anvil.db'}")
    try:
        record = store.run(repeated.run_id)
        assert record is not None and record.options_dict()["repeat"] == K
        rows = store.evaluations(repeated.run_id)
    finally:
        store.close()
    names = ["crash", "flaky", "lenient", "ok", "reference"]  # sorted folder names
    # Repeat after repeat: position p is repeat p // 5 + 1 of submission names[p % 5].
    assert [(r.position, Path(r.submission).name) for r in rows] == [
        (p, names[p % 5]) for p in range(5 * K)]
    run_dir = repeated.home / "runs" / repeated.run_id
    for r in rows:
        repeat = r.position // 5 + 1
        expected = (repeated.subs / names[r.position % 5] if repeat == 1
                    else run_dir / f"repeat-{repeat}" / "tiny" / names[r.position % 5])
        assert Path(r.submission) == expected
        assert Path(r.submission).resolve() == (repeated.subs / names[r.position % 5])
    verdicts: dict[str, list[str | None]] = {}
    for r in rows:
        verdicts.setdefault(Path(r.submission).name, []).append(r.verdict)
    assert {n: sorted(v, key=str) for n, v in verdicts.items()} == {
        "ok": ["pass"] * 4, "flaky": ["fail", "fail", "pass", "pass"], "lenient": ["fail"] * 4,
        "reference": ["fail"] * 4, "crash": ["fail"] * 4}
    assert (repeated.root / "flaky-starts").read_text() == str(K)  # one start per repeat


def test_repeat_metrics_match_the_hand_computed_values(repeated: Repeated) -> None:
    m = repeated.report(repeated.run_id)["metrics"]
    # ok 4 passes, flaky 2: of 20 judged evaluations.
    assert m["success"] == {"passed": 6, "total": 20, "rate": 0.3}
    # 16 evaluations ran the oracle (crash did not), 4 items each; failed: flaky 2,
    # lenient 4, reference 4.
    assert m["item_pass_rate"] == {"passed": 54, "total": 64, "rate": round(54 / 64, 4)}

    r = m["repeats"]
    assert r["repeats"] == K
    # Per submission (n = 4): ok c=4 -> 1; flaky c=2; lenient, reference, crash c=0 -> 0.
    flaky = {1: 1 - 2 / 4,  # one draw fails with probability 2/4
             2: 1 - (2 / 4) * (1 / 3),  # both draws are among the 2 failures
             3: 1.0, 4: 1.0}  # three draws cannot all be among 2 failures
    assert [p["k"] for p in r["pass_at_k"]] == [1, 2, 3, 4]
    for p in r["pass_at_k"]:
        assert p["groups"] == 5
        assert p["value"] == pytest.approx((1 + flaky[p["k"]] + 0 + 0 + 0) / 5, abs=1e-4)
    assert r["pass_at_k"][0]["value"] == m["success"]["rate"]  # equal n: pass@1 is success
    # 4 submissions x 4 items judged in 4 repeats each; only flaky's put_then_get flips.
    assert r["flip_rate"] == {"passed": 1, "total": 16, "rate": 0.0625}
    assert r["flipping_items"] == [{"task": "tiny", "submission": "flaky",
                                    "item": "test_tiny.py::test_put_then_get",
                                    "passed": 2, "total": 4}]

    q = m["quarantine"]
    assert q["items"] == [
        {"task": "tiny", "item": "test_tiny.py::test_slow_answers", "reasons": ["reference fails"]},
        {"task": "tiny", "item": "test_tiny.py::test_put_then_get", "reasons": ["flips"]},
    ]
    assert q["success"]["with"] == m["success"]
    assert q["item_pass_rate"]["with"] == m["item_pass_rate"]
    # Without slow_answers and put_then_get: ok, flaky and reference pass every repeat;
    # lenient still fails unknown_is_404 and crash still fails at startup.
    assert q["success"]["without"] == {"passed": 12, "total": 20, "rate": 0.6}
    # 16 evaluations x 2 items left (health, unknown_is_404); lenient fails 4.
    assert q["item_pass_rate"]["without"] == {"passed": 28, "total": 32, "rate": 0.875}

    per_submission = {row["submission"]: {p: n for p, n in row["phases"].items() if n}
                      for row in m["failed_evaluations_by_phase_per_submission"]}
    assert per_submission == {"ok": {}, "flaky": {"oracle": 2}, "lenient": {"oracle": 4},
                              "reference": {"oracle": 4}, "crash": {"startup": 4}}


def test_the_table_shows_the_repeats(repeated: Repeated) -> None:
    done = anvil("report", repeated.run_id, home=repeated.home, cache=repeated.cache)
    assert done.returncode == 0, done.stderr
    table = done.stdout
    for line in ("repeated runs (4 repeats)", "pass@1", "30% (over 5 task x submission)",
                 "pass@2", "37% (over 5 task x submission)", "pass@4",
                 "40% (over 5 task x submission)", "item flip rate", "6% (1/16)",
                 "flipping items", "2/4", "quarantine candidates", "reference fails", "flips",
                 "scores with and without the quarantine candidates", "30% (6/20)",
                 "60% (12/20)", "84% (54/64)", "88% (28/32)"):
        assert line in table, line


def test_report_help_documents_the_repeat_metrics(cache_dir: Path) -> None:
    env = {**os.environ, "COLUMNS": "200", "ANVIL_CACHE": str(cache_dir)}

    def help_of(command: str) -> str:
        return subprocess.run([sys.executable, "-m", "engine", command, "--help"],
                              capture_output=True, text=True, env=env, check=True).stdout

    lines = help_of("report").splitlines()
    for metric in ("- pass@k (run --repeat K): mean of 1-C(n-c,k)/C(n,k)",
                   "- item flip rate: ", "- quarantine: "):
        (at,) = [n for n, line in enumerate(lines) if metric in line]
        following = lines[at + 1].strip()
        assert following == "" or following.startswith("- "), f"{metric} takes one line"
    assert any(line.lstrip().startswith("--plot DIR") for line in lines)
    assert "--repeat" in help_of("run")


def test_repeat_is_refused_on_resume(tmp_path: Path, cache_dir: Path) -> None:
    done = anvil("run", "--resume", "x", "--repeat", "2", home=tmp_path, cache=cache_dir)
    assert done.returncode == 2 and "--repeat is for a new run" in done.stderr
    done = anvil("run", str(FIXTURES / "tiny_task"), "-s", str(tmp_path), "--repeat", "0",
                 home=tmp_path, cache=cache_dir)
    assert done.returncode == 2 and "--repeat" in done.stderr
