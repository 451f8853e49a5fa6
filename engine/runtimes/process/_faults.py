"""Whose fault a failed step of the process runtime is: the candidate's or anvil's.

One table, in :func:`classify`, decides every build and start failure, from an
``OSError``'s errno or from pip's exit status and output. pip prints the same
"No matching distribution found" whether the package does not exist or the
index could not be reached, so the runtime gives pip ``--log FILE`` (a debug
log, whatever the console verbosity) and :func:`network_evidence` looks there
for the fetch that failed and why.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

from ..._errors import AnvilError, BuildFailed, CandidateFailure, HarnessError

# What a missing or broken CMD program raises: the submission's own doing.
_PROGRAM_ERRNOS = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR,
                   errno.ELOOP, errno.ENAMETOOLONG, errno.EPERM}

_RESOURCE_TEXT = re.compile(
    r"No space left on device|Disk quota exceeded|Too many open files|Cannot allocate memory"
    r"|Resource temporarily unavailable|\bMemoryError\b|\[Errno (?:28|24|23|12|11|122)\]")
_NETWORK_TEXT = re.compile(
    r"Retrying \(Retry\(|NewConnectionError|ConnectTimeoutError|ReadTimeoutError"
    r"|Read timed out|Connection (?:refused|reset|aborted)|Max retries exceeded"
    r"|Temporary failure in name resolution|Name or service not known|ProxyError|SSLError"
    r"|IncompleteRead|ProtocolError|HTTP error 5\d\d|\b5\d\d Server Error")
_FETCH_FAILED = re.compile(r"Could not fetch URL (\S+): (.*?)(?: - skipping)?$")
_NOT_FOUND = re.compile(r"^(?:404|410) Client Error")  # the project is not on that index


def network_evidence(pip_log: Path, limit: int = 64 * 1024 * 1024) -> str:
    """The first line of pip's debug log showing an index or a download unreachable, or "".

    A fetch answered 404 or 410 is not evidence: the index is there and the project
    is not. The log is read line by line (it can be large), at most ``limit`` bytes.
    """
    try:
        with open(pip_log, encoding="utf-8", errors="replace") as fh:
            read = 0
            for line in fh:
                read += len(line)
                if read > limit:
                    break
                fetch = _FETCH_FAILED.search(line)
                if fetch and not _NOT_FOUND.match(fetch.group(2)):
                    return f"{fetch.group(1)}: {fetch.group(2)}"[:300]
                if not fetch and _NETWORK_TEXT.search(line):
                    return line.split(" ", 1)[-1].strip()[:300]  # drop pip's timestamp
    except OSError:
        return ""
    return ""


def classify(
    where: str,
    what: str,
    *,
    error: OSError | None = None,
    returncode: int | None = None,
    output: str = "",
    evidence: str = "",
    ours: bool = False,
    candidate: type[CandidateFailure] = BuildFailed,
) -> AnvilError:
    """The error to raise for a failed step: a :class:`HarnessError` or a candidate failure.

    Args:
        where: ``Dockerfile:LINE`` (or the file) the step comes from.
        what: the step, as the user knows it (``pip install``, ``CMD python app.py``).
        error: the ``OSError`` raised running or preparing the step, if any.
        returncode: the step's exit status, if it ran (negative: killed by a signal).
        output: the step's last output lines, quoted in the reason.
        evidence: what pip's debug log says about the network (:func:`network_evidence`).
        ours: the step is anvil's own (creating the venv): no outcome blames the candidate.
        candidate: the candidate failure to raise (``ServiceExited`` when starting).

    ==============================================  ======================  =========
    cause                                           seen as                 verdict
    ==============================================  ======================  =========
    disk full, quota, read-only or failing disk     errno ENOSPC, EDQUOT,   error
                                                    EROFS, EIO, or the
                                                    text in pip's output
    no descriptors, processes or memory to spawn    errno EMFILE, ENFILE,   error
                                                    EAGAIN, ENOMEM
    the package index unreachable or failing        pip failed and its log  error
    (refused, timeout, DNS, TLS, HTTP 5xx, 401/3)   shows the failed fetch
    pip or the venv's python killed by a signal     returncode < 0          error
    the venv cannot be created (anvil's step)       ``ours``                error
    the CMD program missing or not executable       errno ENOENT, EACCES,   fail
                                                    ENOEXEC, ... (start)
    a requirement that does not exist (404 on a     pip failed, no network  fail
    reachable index), does not build, conflicts     or resource evidence
    ==============================================  ======================  =========

    Every ``error`` here is transient: another attempt, later, may succeed.
    """
    if error is not None:
        detail = error.strerror or str(error)
        if ours or error.errno not in _PROGRAM_ERRNOS:
            return HarnessError(f"{where}: `{what}`: {detail} (errno "
                                f"{errno.errorcode.get(error.errno or 0, error.errno)})")
        return candidate(f"{where}: cannot run `{what}`: {detail}")
    if ours:
        return HarnessError(f"{where}: `{what}` failed ({returncode}): {output}")
    if returncode is not None and returncode < 0:
        return HarnessError(f"{where}: `{what}` was killed by signal {-returncode}: {output}")
    if _RESOURCE_TEXT.search(output):
        return HarnessError(f"{where}: `{what}` ran out of a machine resource: {output}")
    if evidence or _NETWORK_TEXT.search(output):
        seen = evidence or output
        return HarnessError(f"{where}: `{what}` could not reach the package index ({seen})")
    return candidate(f"{where}: `{what}` failed ({returncode}): {output}")
