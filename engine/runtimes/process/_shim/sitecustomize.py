"""anvil process-runtime shim, loaded by every Python process of a service.

Many submissions hard-code the same port (8000). The process runtime has no
network namespaces, so this shim remaps a bind to the task's port onto a free
port on loopback chosen by the kernel, and reports every TCP bind to the file
named by ANVIL_BIND_REPORT (one line per bind: "<asked port> <real port> <4|6> <any|lo>").
A bind to loopback only is reported as "lo": inside a container it could not be
reached through the published port, so the engine treats it as not listening.
The engine reads that file to learn the service's address, and to explain a
service that listens on the wrong port.
"""

import os
import socket

_PORT = int(os.environ.get("ANVIL_SERVICE_PORT") or 0)
_REPORT = os.environ.get("ANVIL_BIND_REPORT")
_mapped = {}  # address family -> real port, so IPv4 and IPv6 binds agree
_original_bind = socket.socket.bind


def _loopback(host):
    return host in ("localhost", "::1") or str(host).startswith("127.")


def _report(asked, real, family, host):
    if not _REPORT:
        return
    try:
        with open(_REPORT, "a", encoding="ascii") as fh:
            fam = 6 if family == socket.AF_INET6 else 4
            fh.write(f"{asked} {real} {fam} {'lo' if _loopback(host) else 'any'}\n")
    except OSError:
        pass


def _bind(self, address):
    tcp = self.family in (socket.AF_INET, socket.AF_INET6) and self.type == socket.SOCK_STREAM
    if not tcp or not isinstance(address, tuple) or len(address) < 2:
        return _original_bind(self, address)
    asked = address[1]
    if _PORT and asked == _PORT:
        host = "127.0.0.1" if self.family == socket.AF_INET else "::1"
        wanted = next(iter(_mapped.values()), 0)
        try:
            _original_bind(self, (host, wanted) + tuple(address[2:]))
        except OSError:
            if not wanted:
                raise
            _original_bind(self, (host, 0) + tuple(address[2:]))
        real = self.getsockname()[1]
        _mapped.setdefault(self.family, real)
        _report(asked, real, self.family, address[0])
        return None
    result = _original_bind(self, address)
    if asked:
        _report(asked, self.getsockname()[1], self.family, address[0])
    return result


if _PORT:
    socket.socket.bind = _bind
