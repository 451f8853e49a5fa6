"""The logs anvil writes (build, service, oracle): capped on disk, read from their end.

Every log is capped, keeping its head and its tail: the first lines say how a
service started, the last ones why it stopped. :class:`CappedLog` writes the
first ``cap/2`` bytes straight to the file and keeps the last ``cap/2`` bytes
in a ring buffer; closing it appends the tail after a marker line saying how
many bytes were dropped between them. A log of at most ``cap`` bytes is
written unchanged. :class:`AsyncCappedLog` is the same writer for async pumps:
it touches the disk off the event loop, and only while the head fills up or
when it closes.

Reading is from the end: :func:`tail_lines` seeks back from the end of the
file, so a failure reason costs the same on a 2 GB log as on a 2 kB one;
:func:`read_tail` is the same call for async code (it runs in a worker thread).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from types import TracebackType

import anyio

MARKER = "[anvil: log capped at {cap} bytes: {dropped} bytes left out; its last lines follow]"
_TAIL_BLOCK = 8192
_TAIL_MAX = 1024 * 1024  # never read more than this from the end of a log


class CappedLog:
    """A log file capped at ``cap`` bytes of what is written through it, head and tail kept.

    Use it as a context manager, or call :meth:`close`: the tail reaches the disk at
    close. Writing to a closed log is ignored (a late chunk of a pump never raises).

    Args:
        path: the file; created if missing.
        cap: the most bytes this writer adds to the file (plus one marker line).
        append: add to what the file holds already (a build log gathers several steps).
    """

    def __init__(self, path: Path, cap: int, *, append: bool = True) -> None:
        self.path = path
        self.cap = max(cap, 2)
        self.head_cap = self.cap // 2
        self.tail_cap = self.cap - self.head_cap
        self.written = 0  # bytes given to write(), kept or not
        self.head = 0  # bytes of them on disk
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._file = open(path, "ab" if append else "wb")  # closed by close()
        self.closed = False

    @property
    def head_full(self) -> bool:
        """True once a write can no longer touch the disk (until :meth:`close`)."""
        return self.head >= self.head_cap

    @property
    def dropped(self) -> int:
        """Bytes written that the file will not hold (so far)."""
        return max(0, self.written - self.head - self._tail_size)

    def write(self, data: bytes) -> None:
        """Add ``data``: to the file while the head has room, to the tail buffer after.

        Raises:
            OSError: the file cannot be written (disk full): the caller decides.
        """
        if self.closed or not data:
            return
        self.written += len(data)
        if self.head < self.head_cap:
            piece = data[: self.head_cap - self.head]
            self._file.write(piece)
            self.head += len(piece)
            data = data[len(piece):]
            if self.head >= self.head_cap:
                self._file.flush()  # the head is final: readers may look at it now
            if not data:
                return
        if len(data) > self.tail_cap:
            data = data[-self.tail_cap:]  # one huge write keeps no more than the tail
        self._tail.append(data)
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0]) >= self.tail_cap:
            self._tail_size -= len(self._tail.popleft())

    def flush(self) -> None:
        if not self.closed:
            self._file.flush()

    def close(self) -> None:
        """Write the tail (after a marker line if bytes were dropped) and close the file."""
        if self.closed:
            return
        self.closed = True
        try:
            tail = b"".join(self._tail)
            self._tail.clear()
            if len(tail) > self.tail_cap:
                tail = tail[len(tail) - self.tail_cap:]
            dropped = self.written - self.head - len(tail)
            if dropped > 0:
                # Start the tail on a line boundary: a half line reads as garbage.
                cut = tail.find(b"\n")
                if 0 <= cut < len(tail) - 1:
                    dropped += cut + 1
                    tail = tail[cut + 1:]
                marker = MARKER.format(cap=self.cap, dropped=dropped).encode()
                self._file.write((b"\n" if self.head else b"") + marker + b"\n")
            self._file.write(tail)
        finally:
            self._file.close()

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
    """:class:`CappedLog` for async code: disk work runs in a worker thread.

    Once the head is full a write only appends to memory, so a service flooding
    its output costs no thread hop per chunk.
    """

    def __init__(self, log: CappedLog) -> None:
        self.log = log

    @classmethod
    async def open(cls, path: Path, cap: int, *, append: bool = True) -> AsyncCappedLog:
        return cls(await anyio.to_thread.run_sync(lambda: CappedLog(path, cap, append=append)))

    async def write(self, data: bytes) -> None:
        if self.log.head_full:
            self.log.write(data)
        else:
            await anyio.to_thread.run_sync(self.log.write, data)

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
