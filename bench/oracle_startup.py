"""CPU an oracle process pays before its first item: what loading anvil's plugin costs.

Every evaluation starts one pytest process with ``-p engine._oracle_plugin``. The
plugin must cost no more than what any oracle needs anyway (pytest and requests);
when ``import engine`` pulled the whole engine (sqlalchemy, aiohttp, aiodocker, rich)
it cost ~0.5 CPU-s more per evaluation. Measured side by side, in one sitting, with
the OS's child-process accounting (user + system CPU), N samples each:

    .venv/bin/python bench/oracle_startup.py [--samples 10]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "python alone": "pass",
    "pytest + requests (any oracle)": "import pytest, requests",
    "anvil's oracle plugin": "import pytest, requests, engine._oracle_plugin",
    "the whole engine (the old front door)": "import pytest, requests, engine.cli",
}


def cpu_seconds(code: str, samples: int) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(samples):
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    results = {name: cpu_seconds(code, args.samples) for name, code in CASES.items()}
    width = max(map(len, results))
    for name, seconds in results.items():
        print(f"{name:{width}}  {seconds:.3f} CPU-s per process")
    plugin = results["anvil's oracle plugin"] - results["pytest + requests (any oracle)"]
    whole = results["the whole engine (the old front door)"] / results["anvil's oracle plugin"]
    print(f"plugin overhead over pytest+requests: {plugin:+.3f} CPU-s; "
          f"whole engine / plugin: {whole:.2f}x")


if __name__ == "__main__":
    main()
