"""Capped logs keep their head and their tail; tails are read from the end of the file."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import anyio
import pytest

from engine._logs import (
    AsyncCappedLog,
    CappedLog,
    lines_between,
    read_tail,
    tail_lines,
    times_path,
)


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


def _times(path: Path) -> list[tuple[int, int]]:
    return [(int(o), int(t)) for o, t in
            (line.split() for line in times_path(path).read_text().splitlines())]


def test_times_entries_point_at_each_chunk_in_the_file_even_after_the_cap(
        tmp_path: Path) -> None:
    """Every chunk on disk has an entry: its real offset and the time it was given."""
    path = tmp_path / "service.log"
    path.write_bytes(b"from an earlier attempt\n")
    chunks = [f"chunk {i:04d} {'y' * (i % 7)}\n".encode() for i in range(400)]
    with CappedLog(path, 2000, times=True) as log:
        for i, chunk in enumerate(chunks):
            log.write(chunk, 1_000 + i)
    data = path.read_bytes()
    entries = _times(path)
    assert data.startswith(b"from an earlier attempt\nchunk 0000 \n")  # unchanged: no times
    assert b"bytes left out" in data
    marker_end = data.index(b"its last lines follow]\n") + len(b"its last lines follow]\n")
    head = [(o, t) for o, t in entries if o < marker_end]
    tail = [(o, t) for o, t in entries if o >= marker_end]
    assert head[0] == (len(b"from an earlier attempt\n"), 1_000)
    assert tail and tail[0][0] == marker_end  # the tail starts on a whole chunk (a line)
    for offset, at in entries:
        chunk = chunks[at - 1_000]
        if offset + len(chunk) <= len(data) and (offset, at) != head[-1]:
            assert data[offset:offset + len(chunk)] == chunk, (offset, at)
    last_head_offset, last_head_at = head[-1]  # cut by the head cap: a prefix of its chunk
    assert chunks[last_head_at - 1_000].startswith(data[last_head_offset:marker_end - 1]
                                                   .split(b"\n")[0])
    assert tail[-1] == (len(data) - len(chunks[-1]), 1_000 + 399)
    assert [t for _, t in tail] == list(range(tail[0][1], 1_400))  # in order, none missing


def test_a_tail_chunk_cut_by_the_cap_gets_its_kept_part(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    with CappedLog(path, 100, append=False, times=True) as log:
        log.write(b"h" * 50, 1)  # the head, exactly
        log.write(b"dropped line\nkept\n", 2)  # the tail keeps 50 bytes: "kept" of this
        log.write(b"q" * 40 + b"\n", 3)
    data = path.read_bytes()
    (o1, t1), (o2, t2), (o3, t3) = _times(path)
    assert (o1, t1) == (0, 1) and (t2, t3) == (2, 3)
    assert data[o2:o3] == b"kept\n" and data[o3:] == b"q" * 40 + b"\n"
    assert data[50:o2].endswith(b"its last lines follow]\n")


def test_without_times_no_sidecar_is_written(tmp_path: Path) -> None:
    with CappedLog(tmp_path / "a.log", 100) as log:
        log.write(b"x\n")
    assert not times_path(tmp_path / "a.log").exists()


def test_lines_between_picks_the_lines_of_the_chunks_that_arrived_in_the_window(
        tmp_path: Path) -> None:
    path = tmp_path / "service.log"
    with CappedLog(path, 1_000_000, append=False, times=True) as log:
        log.write(b"early one\nearly two\n", 100)
        log.write(b"a line that ", 200)  # a line begun before the window...
        log.write(b"ends inside it\nin window\nsplit ", 300)  # ...is not the window's
        log.write(b"across chunks\n", 400)
        log.write(b"last in window\n", 500)
        log.write(b"late\n", 600)
    assert lines_between(path, 300, 500) == [
        (300, "in window"), (300, "split across chunks"), (500, "last in window")]
    assert lines_between(path, 0, 150) == [(100, "early one"), (100, "early two")]
    assert lines_between(path, 150, 250) == [(200, "a line that ends inside it")]
    assert lines_between(path, 350, 450) == []  # only the end of a line begun earlier
    assert lines_between(path, 700, 800) == []
    assert lines_between(path, 0, 10**20, limit=3) == [
        (100, "early one"), (100, "early two"), (200, "a line that ends inside it")]


def test_lines_between_across_the_cap_marker(tmp_path: Path) -> None:
    path = tmp_path / "service.log"
    with CappedLog(path, 360, append=False, times=True) as log:  # a head of 20 lines
        for i in range(100):
            log.write(f"line {i:03d}\n".encode(), 1_000 + i)
    everything = lines_between(path, 0, 10**20)
    assert everything is not None
    assert [t for t, _ in everything] == sorted(t for t, _ in everything)
    assert all(text == f"line {t - 1_000:03d}" for t, text in everything)  # no marker, no blank
    assert everything[-1] == (1_099, "line 099") and everything[19] == (1_019, "line 019")
    assert b"\n\n[anvil: log capped" in path.read_bytes()  # a blank line before the marker
    assert lines_between(path, 1_098, 1_098) == [(1_098, "line 098")]


def test_lines_between_without_a_usable_sidecar_is_none(tmp_path: Path) -> None:
    path = tmp_path / "service.log"
    path.write_text("no times\n")
    assert lines_between(path, 0, 10**20) is None
    times_path(path).write_text("0 12\nnot an entry at all\n")
    assert lines_between(path, 0, 10**20) is None
    times_path(path).write_text("0 12\n")
    assert lines_between(path, 0, 10**20) == [(12, "no times")]


def test_lines_between_bisects_a_huge_sidecar_and_reads_little_of_the_log(
        tmp_path: Path) -> None:
    """A million chunks: the window's lines come back at once, not after a full read."""
    path = tmp_path / "service.log"
    n = 1_000_000
    path.write_bytes(b"".join(b"%07d\n" % i for i in range(n)))
    times_path(path).write_bytes(b"".join(b"%d %d\n" % (i * 8, 10**18 + i * 1000)
                                          for i in range(n)))
    started = time.monotonic()
    found = lines_between(path, 10**18 + 500_000_000, 10**18 + 500_004_000)
    assert time.monotonic() - started < 0.2
    assert found == [(10**18 + i * 1000, f"{i:07d}") for i in range(500_000, 500_005)]


async def test_an_async_log_stamps_chunks_when_they_arrive(tmp_path: Path) -> None:
    path = tmp_path / "service.log"
    before = time.time_ns()
    async with await AsyncCappedLog.open(path, 10_000, times=True) as log:
        await log.write(b"first\n")
        middle = time.time_ns()
        await log.write(b"second\n")
    after = time.time_ns()
    found = lines_between(path, middle, after)
    assert found is not None and [text for _, text in found] == ["second"]
    assert [o for o, _ in _times(path)] == [0, 6]
    assert before <= _times(path)[0][1] <= middle <= found[0][0] <= after
