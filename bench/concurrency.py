"""Wall time of the bundled workload (examples/taskboard) at --concurrency 1 vs N.

Both runs go through the real `anvil run` CLI, one after the other in the same
sitting, with the venv cache warmed first so neither pays for pip. Prints the
two wall times and their ratio.

    .venv/bin/python bench/concurrency.py [--concurrency N] [--runtime process]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def anvil_run(home: Path, concurrency: int, runtime: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "engine", "run", str(ROOT / "tasks" / "taskboard"),
         "--submissions", str(ROOT / "examples" / "taskboard"), "--runtime", runtime,
         "--concurrency", str(concurrency), "--home", str(home)],
        capture_output=True, text=True, check=False,
    )
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"anvil run failed ({done.returncode}):\n{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4, help="the parallel run's N")
    parser.add_argument("--runtime", default="process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="anvil-bench-") as tmp:
        home = Path(tmp)
        warm = anvil_run(home, args.concurrency, args.runtime)
        sequential = anvil_run(home, 1, args.runtime)
        parallel = anvil_run(home, args.concurrency, args.runtime)
    print(f"warm-up run (fills the venv cache): {warm:6.1f} s")
    print(f"--concurrency 1:                    {sequential:6.1f} s")
    print(f"--concurrency {args.concurrency}:                    {parallel:6.1f} s")
    print(f"speed-up: {sequential / parallel:.2f}x")


if __name__ == "__main__":
    main()
