"""The logs anvil writes (build, service, oracle): capped on disk, read from their end.

Every log is capped, keeping its head and its tail: the first lines say how a
service started, the last ones why it stopped. :class:`CappedLog` writes the
first ``cap/2`` bytes straight to the file and keeps the last ``cap/2`` bytes
in a ring buffer; closing it appends the tail after a marker line saying how
many bytes were dropped between them. A log of at most ``cap`` bytes is
written unchanged. :class:`AsyncCappedLog` is the same writer for async pumps:
a small chunk goes into the file's buffer on the event loop (microseconds), a big
one and the close go through a worker thread, and once the head is full a write
only appends to memory.

Reading is from the end: :func:`tail_lines` seeks back from the end of the
file, so a failure reason costs the same on a 2 GB log as on a 2 kB one;
:func:`read_tail` is the same call for async code (it runs in a worker thread).

Timestamps: a service writes what it writes, and the log holds exactly that, so
the time each piece arrived lives beside it. With ``times=True`` a log keeps a
sidecar ``<name>.times``, one text line per chunk that reached the file,
``<byte offset in the log> <unix ns when the chunk arrived>``.
:func:`lines_between` reads the lines of the chunks that arrived in a time
window through it, seeking in both files rather than reading either whole.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, TextIO

import anyio

MARKER = "[anvil: log capped at {cap} bytes: {dropped} bytes left out; its last lines follow]"
_TAIL_BLOCK = 8192
_TAIL_MAX = 1024 * 1024  # never read more than this from the end of a log
TIMES_SUFFIX = ".times"
INLINE_WRITE = 16 * 1024  # AsyncCappedLog writes chunks up to this size on the event loop
_WINDOW_MAX = 1024 * 1024  # lines_between never reads more than this of a log


class CappedLog:
    """A log file capped at ``cap`` bytes of what is written through it, head and tail kept.

    Use it as a context manager, or call :meth:`close`: the tail reaches the disk at
    close. Writing to a closed log is ignored (a late chunk of a pump never raises).

    Args:
        path: the file; created if missing.
        cap: the most bytes this writer adds to the file (plus one marker line).
        append: add to what the file holds already (a build log gathers several steps).
        times: keep the sidecar ``<path>.times`` (see the module docstring): an entry per
            chunk written to the head as it is written, the tail's entries at close.
    """

    def __init__(self, path: Path, cap: int, *, append: bool = True,
                 times: bool = False) -> None:
        self.path = path
        self.cap = max(cap, 2)
        self.head_cap = self.cap // 2
        self.tail_cap = self.cap - self.head_cap
        self.written = 0  # bytes given to write(), kept or not
        self.head = 0  # bytes of them on disk
        # Each tail chunk keeps its arrival time: its entry is written at close.
        self._tail: deque[tuple[int, bytes]] = deque()
        self._tail_size = 0
        self._file = open(path, "ab" if append else "wb")  # closed by close()
        self._times: TextIO | None = None
        self._offset = 0  # where the next byte lands in the file (kept with times only)
        if times:
            try:
                self._times = open(times_path(path), "a" if append else "w")  # closed by close()
                self._offset = self._file.tell()
            except OSError:
                self._file.close()
                raise
        self.closed = False

    @property
    def head_full(self) -> bool:
        """True once a write can no longer touch the disk (until :meth:`close`)."""
        return self.head >= self.head_cap

    @property
    def dropped(self) -> int:
        """Bytes written that the file will not hold (so far)."""
        return max(0, self.written - self.head - self._tail_size)

    def write(self, data: bytes, at_ns: int | None = None) -> None:
        """Add ``data``: to the file while the head has room, to the tail buffer after.

        Args:
            data: the chunk.
            at_ns: when it arrived (unix ns) for the times sidecar; now when omitted.

        Raises:
            OSError: the file cannot be written (disk full): the caller decides.
        """
        if self.closed or not data:
            return
        if at_ns is None:
            at_ns = time.time_ns()
        self.written += len(data)
        if self.head < self.head_cap:
            piece = data[: self.head_cap - self.head]
            self._file.write(piece)
            if self._times is not None:
                self._times.write(f"{self._offset} {at_ns}\n")
            self._offset += len(piece)
            self.head += len(piece)
            data = data[len(piece):]
            if self.head >= self.head_cap:
                self.flush()  # the head is final: readers may look at it now
            if not data:
                return
        if len(data) > self.tail_cap:
            data = data[-self.tail_cap:]  # one huge write keeps no more than the tail
        self._tail.append((at_ns, data))
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0][1]) >= self.tail_cap:
            self._tail_size -= len(self._tail.popleft()[1])

    def flush(self) -> None:
        if not self.closed:
            self._file.flush()
            if self._times is not None:
                self._times.flush()

    def close(self) -> None:
        """Write the tail (after a marker line if bytes were dropped) and close the file."""
        if self.closed:
            return
        self.closed = True
        try:
            chunks = list(self._tail)
            self._tail.clear()
            tail = b"".join(data for _, data in chunks)
            skip = max(0, len(tail) - self.tail_cap)  # bytes of the tail's first chunks left out
            tail = tail[skip:]
            dropped = self.written - self.head - len(tail)
            if dropped > 0:
                # Start the tail on a line boundary: a half line reads as garbage.
                cut = tail.find(b"\n")
                if 0 <= cut < len(tail) - 1:
                    dropped += cut + 1
                    skip += cut + 1
                    tail = tail[cut + 1:]
                marker = MARKER.format(cap=self.cap, dropped=dropped).encode()
                line = (b"\n" if self.head else b"") + marker + b"\n"
                self._file.write(line)
                self._offset += len(line)
            self._file.write(tail)
            if self._times is not None:
                self._times.writelines(self._tail_entries(chunks, skip))
        finally:
            try:
                self._file.close()
            finally:
                if self._times is not None:
                    self._times.close()

    def _tail_entries(self, chunks: list[tuple[int, bytes]], skip: int) -> Iterator[str]:
        """The times entries of the tail's chunks, the first ``skip`` bytes left out."""
        for at_ns, data in chunks:
            kept = len(data) - skip
            skip = max(0, -kept)
            if kept > 0:
                yield f"{self._offset} {at_ns}\n"
                self._offset += kept

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncCappedLog:
    """:class:`CappedLog` for async code: chunks up to :data:`INLINE_WRITE` bytes are
    written into the file's buffer on the event loop (a thread hop would cost a hundred
    times the write), bigger ones and the close in a worker thread. Once the head is full
    a write only appends to memory, so a service flooding its output costs no hop at all.
    """

    def __init__(self, log: CappedLog) -> None:
        self.log = log

    @classmethod
    async def open(cls, path: Path, cap: int, *, append: bool = True,
                   times: bool = False) -> AsyncCappedLog:
        return cls(await anyio.to_thread.run_sync(
            lambda: CappedLog(path, cap, append=append, times=times)))

    async def write(self, data: bytes) -> None:
        at_ns = time.time_ns()  # when it arrived, not when a worker thread got to it
        if self.log.head_full or len(data) <= INLINE_WRITE:
            # Into the file's buffer (a page-cache write when it fills): microseconds,
            # where a worker thread's round trip costs a hundred of them.
            self.log.write(data, at_ns)
        else:
            await anyio.to_thread.run_sync(self.log.write, data, at_ns)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):  # the tail is the part a user reads
            await anyio.to_thread.run_sync(self.log.close)

    async def __aenter__(self) -> AsyncCappedLog:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def tail_lines(path: Path, lines: int = 5) -> str:
    """The last non-empty lines of a log, joined with `` | ``, for failure reasons.

    Reads backwards from the end in blocks (never more than 1 MiB), so the size of
    the log does not matter. A missing or unreadable log gives ``""``.
    """
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            data = b""
            position = end
            while position > 0 and end - position < _TAIL_MAX:
                step = min(_TAIL_BLOCK, position)
                position -= step
                fh.seek(position)
                data = fh.read(step) + data
                if len([ln for ln in data.splitlines() if ln.strip()]) > lines:
                    break
    except OSError:
        return ""
    # When the read stopped early, the first line may be cut: it is never among the last.
    found = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return " | ".join(found[-lines:])


async def read_tail(path: Path, lines: int = 5) -> str:
    """:func:`tail_lines` off the event loop."""
    return await anyio.to_thread.run_sync(tail_lines, path, lines)


def times_path(path: Path) -> Path:
    """The times sidecar of the log at ``path``: ``<path>.times``."""
    return path.with_name(path.name + TIMES_SUFFIX)


def lines_between(
    path: Path, start_ns: int, end_ns: int, limit: int = 500
) -> list[tuple[int, str]] | None:
    """The log's lines that arrived between ``start_ns`` and ``end_ns`` (unix ns, inclusive).

    A line belongs to the chunk it began in and carries that chunk's arrival time; a
    line whose first byte arrived before the window is left out even if it ends in it,
    one that began in it is read to its end. Both files are read by seeking: the times
    sidecar by bisection, the log from the window's first chunk, never more than 1 MiB
    of it and at most ``limit`` lines. The capped-log marker line is left out (it
    arrived at no time).

    Returns:
        ``[(arrival ns, line), ...]`` in file order, or ``None`` when the log has no
        readable times sidecar (missing, unreadable or garbled): the caller falls back
        to the log's tail.
    """
    try:
        with open(times_path(path), "rb") as times:
            entries, end = _entries_in(times, start_ns, end_ns)
        if not entries:
            return []
        first = entries[0][0]
        length = _WINDOW_MAX if end is None else min(_WINDOW_MAX, end - first)
        lead = 1 if first else 0  # the byte before: is the window's first byte a line start?
        with open(path, "rb") as log:
            log.seek(first - lead)
            data = log.read(length + lead)
            at_line_start = not lead or data[:1] == b"\n"
            data = data[lead:]
            if data and not data.endswith(b"\n") and len(data) < _WINDOW_MAX:
                # The window's last line goes on past it: read it to its end.
                rest = log.read(min(8 * _TAIL_BLOCK, _WINDOW_MAX - len(data)))
                cut = rest.find(b"\n")
                data += rest if cut < 0 else rest[: cut + 1]
    except (OSError, ValueError):
        return None
    position = 0
    if not at_line_start:
        # The first chunk goes on with a line an earlier chunk began: not this window's.
        position = data.find(b"\n") + 1
        if position == 0:
            return []
    marker = MARKER.split("{", 1)[0].encode()
    found: list[tuple[int, str]] = []
    index, previous = 0, b""
    while position < len(data) and len(found) < limit:
        offset = first + position
        if end is not None and offset >= end:
            break
        newline = data.find(b"\n", position)
        stop = len(data) if newline < 0 else newline + 1
        line = data[position:stop]
        while index + 1 < len(entries) and entries[index + 1][0] <= offset:
            index += 1
        if line.startswith(marker):
            if previous == b"\n":
                found.pop()  # the blank line the marker is written after is no output either
        else:
            found.append((entries[index][1], line.rstrip(b"\r\n").decode("utf-8", "replace")))
        position, previous = stop, line
    return found


def _entries_in(
    times: BinaryIO, start_ns: int, end_ns: int
) -> tuple[list[tuple[int, int]], int | None]:
    """The (offset, ns) entries of ``times`` in the window and the offset where it ends.

    The end is the offset of the first entry after the window (``None``: the end of
    the log). Entries are in arrival order, so the window's first one is bisected for.

    Raises:
        ValueError: a line read is not ``<offset> <ns>``.
    """
    size = times.seek(0, os.SEEK_END)

    def entry_from(position: int) -> tuple[int, tuple[int, int] | None]:
        """The first entry starting at or after ``position`` and where it starts."""
        if position:
            times.seek(position - 1)
            times.readline()  # the rest of the line ``position`` may be inside
        else:
            times.seek(0)
        start = times.tell()
        return start, _entry(times.readline())

    lo, hi = 0, size  # the first entry at or after the window starts in [lo, hi]
    while lo < hi:
        middle = (lo + hi) // 2
        start, entry = entry_from(middle)
        if entry is None or entry[1] >= start_ns:
            hi = middle
        else:
            lo = start + 1  # past this entry's first byte: the next line start is after it
    _, entry = entry_from(lo)
    entries: list[tuple[int, int]] = []
    previous_offset = -1
    while entry is not None and entry[1] <= end_ns:
        if entry[0] <= previous_offset:
            raise ValueError("times entries out of order")
        entries.append(entry)
        previous_offset = entry[0]
        entry = _entry(times.readline())
        if len(entries) > _WINDOW_MAX:
            break  # a window holds no more lines than this anyway
    return entries, entry[0] if entry is not None else None


def _entry(line: bytes) -> tuple[int, int] | None:
    """``b"<offset> <ns>\\n"`` as a pair; ``None`` at the end of the file.

    Raises:
        ValueError: the line is not an entry (a garbled sidecar).
    """
    if not line.endswith(b"\n"):
        return None  # the end, or an entry still being written
    offset, at_ns = line.split()
    return int(offset), int(at_ns)
