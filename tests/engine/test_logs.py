"""Capped logs keep their head and their tail; tails are read from the end of the file."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import anyio
import pytest

from engine._logs import AsyncCappedLog, CappedLog, read_tail, tail_lines


def test_a_log_under_its_cap_is_written_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"before\n")
    with CappedLog(path, 1000) as log:
        for i in range(10):
            log.write(f"line {i}\n".encode())
    assert path.read_bytes() == b"before\n" + b"".join(f"line {i}\n".encode() for i in range(10))
    assert log.dropped == 0


def test_an_overflowing_log_keeps_head_and_tail_and_counts_what_it_dropped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.log"
    cap = 4096
    lines = [f"line {i:05d} {'x' * 40}\n".encode() for i in range(2000)]
    with CappedLog(path, cap, append=False) as log:
        for line in lines:
            log.write(line)
    data = path.read_bytes()
    total = sum(map(len, lines))
    head, marker, tail = re.split(rb"\n?(\[anvil: log capped at 4096 bytes: \d+ bytes left "
                                  rb"out; its last lines follow\]\n)", data)
    assert data.startswith(b"line 00000 ") and head == b"".join(lines)[: cap // 2]
    assert tail.endswith(lines[-1]) and tail.startswith(b"line ")  # whole lines only
    dropped = int(re.search(rb"(\d+) bytes left out", marker).group(1))  # type: ignore[union-attr]
    assert len(head) + dropped + len(tail) == total
    assert len(data) <= cap + len(marker) + 1


def test_one_huge_write_is_capped_too(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with CappedLog(path, 1000, append=False) as log:
        log.write(b"a" * 10_000_000 + b"\nlast words\n")
    data = path.read_bytes()
    assert len(data) < 1200
    assert data.endswith(b"last words\n")


def test_tail_lines_reads_only_the_end_of_a_huge_file(tmp_path: Path) -> None:
    """A sparse 64 GiB log: reading it whole would take minutes; its tail is instant."""
    path = tmp_path / "huge.log"
    with open(path, "wb") as fh:
        fh.truncate(64 * 1024**3)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\nfirst\n\nsecond\nthird\n")
    started = time.monotonic()
    assert tail_lines(path, 2) == "second | third"
    assert tail_lines(path, 3).endswith("first | second | third")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(("text", "lines", "expected"), [
    ("", 3, ""),
    ("one\n", 3, "one"),
    ("a\nb\n\n\nc\n", 2, "b | c"),
    ("x" * 20000 + "\nend\n", 1, "end"),
])
def test_tail_lines(tmp_path: Path, text: str, lines: int, expected: str) -> None:
    path = tmp_path / "a.log"
    path.write_text(text)
    assert tail_lines(path, lines) == expected


def test_tail_lines_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert tail_lines(tmp_path / "nope.log") == ""


async def test_async_log_and_read_tail_off_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    async with await AsyncCappedLog.open(path, 2048) as log:
        for i in range(1000):
            await log.write(f"chunk {i}\n".encode())
    assert await read_tail(path, 2) == "chunk 998 | chunk 999"
    assert path.read_text().startswith("chunk 0\n")
    assert "bytes left out" in path.read_text()


async def test_the_tail_is_written_even_when_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with anyio.CancelScope() as scope:
        async with await AsyncCappedLog.open(path, 100) as log:
            await log.write(b"h" * 200 + b"\nfinal line\n")
            scope.cancel()
            await anyio.sleep(1)
    assert path.read_bytes().endswith(b"final line\n")


def test_a_full_disk_is_an_oserror_for_the_caller(tmp_path: Path) -> None:
    log = CappedLog(Path("/dev/full"), 1_000_000)
    with pytest.raises(OSError) as info:
        log.write(b"x" * 100_000)
        log.flush()
    assert info.value.errno == 28
    with pytest.raises(OSError):  # what was buffered cannot be written either
        log.close()
    assert log.closed
