"""Reading the logs anvil writes (build, service, oracle) for failure reasons."""

from __future__ import annotations

from pathlib import Path


def tail_lines(path: Path, lines: int = 5) -> str:
    """The last lines of a log, joined on one line, for failure reasons."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
