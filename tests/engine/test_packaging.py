"""Packaging: a wheel of anvil carries its data and entry points, and builds without the
~40 'absent from the packages configuration' warnings users saw."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_the_wheel_builds_cleanly_with_the_shim_and_runtime_entry_points(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
         "-w", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr
    assert "is absent from" not in built.stdout + built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "engine/runtimes/process/_shim/sitecustomize.py" in names
    assert "plugins/_discovery.py" in names
    assert "[anvil.runtimes]" in entry_points
    assert "process = engine.runtimes.process:ProcessRuntime" in entry_points
