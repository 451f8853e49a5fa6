"""anvil process-runtime shim, loaded by every Python process of a service.

Services run side by side on one host, without network namespaces, and many
hard-code the same ports (8000 for the API, 8080 for a metrics page). So the
shim gives each service a private port space, as a container's own network
namespace would: EVERY TCP bind to a nonzero port is remapped onto a free
port on loopback chosen by the kernel, and a connect to a loopback address on
a port the service bound goes to the port it really got (through the report
file, so it works across the service's processes too).

Every remapped bind is reported to the file named by ANVIL_BIND_REPORT, one
line per bind: "<asked port> <real port> <4|6> <any|lo>". A bind to loopback
only is reported as "lo": inside a container it could not be reached through
the published port, so the engine treats it as not listening. The engine reads
that file to learn the service's address, and to explain a service that
listens on the wrong port.

With ANVIL_MEMORY_MB set, each Python process of the service gets that much
data memory at most (RLIMIT_DATA: heap and private writable mappings): a
service that allocates past it gets MemoryError and ends, as one past a
container's memory limit is OOM-killed. It is a per-process limit, not a
cgroup: the process runtime isolates nothing.
"""

import os
import socket

_MEMORY_MB = int(os.environ.get("ANVIL_MEMORY_MB") or 0)
if _MEMORY_MB > 0:
    import resource

    _limit = _MEMORY_MB * 1024 * 1024
    _soft, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    if _hard == resource.RLIM_INFINITY or _hard > _limit:
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (_limit, _limit))
        except (ValueError, OSError):
            pass

_PORT = int(os.environ.get("ANVIL_SERVICE_PORT") or 0)
_REPORT = os.environ.get("ANVIL_BIND_REPORT")
_mapped = {}  # asked port -> real port, so IPv4 and IPv6 binds of one port agree
_original_bind = socket.socket.bind
_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex


def _loopback(host):
    return host in ("localhost", "::1") or str(host).startswith("127.")


def _this_host(host):
    """A connect destination on this machine (0.0.0.0 reaches loopback on Linux)."""
    return _loopback(host) or host in ("0.0.0.0", "::", "")


def _tcp(sock, address):
    return (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
            and isinstance(address, tuple) and len(address) >= 2
            and isinstance(address[1], int) and address[1] != 0)


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
    if not _tcp(self, address):
        return _original_bind(self, address)
    asked = address[1]
    host = "127.0.0.1" if self.family == socket.AF_INET else "::1"
    wanted = _mapped.get(asked, 0)
    try:
        _original_bind(self, (host, wanted) + tuple(address[2:]))
    except OSError:
        if not wanted:
            raise
        _original_bind(self, (host, 0) + tuple(address[2:]))
    real = self.getsockname()[1]
    _mapped.setdefault(asked, real)
    _report(asked, real, self.family, address[0])
    return None


def _real_port(asked, family):
    """The port a bind of this service to ``asked`` really got, or None."""
    if asked in _mapped:
        return _mapped[asked]
    if not _REPORT:
        return None
    fam = "6" if family == socket.AF_INET6 else "4"
    found = None
    try:
        with open(_REPORT, encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) == 4 and parts[0] == str(asked) and parts[1].isdigit():
                    if parts[2] == fam or found is None:
                        found = int(parts[1])
    except OSError:
        return None
    return found


def _redirect(sock, address):
    if not _tcp(sock, address) or not _this_host(address[0]):
        return address
    real = _real_port(address[1], sock.family)
    if real is None:
        return address  # not one of ours: a port of the host
    return (address[0], real) + tuple(address[2:])


def _connect(self, address):
    return _original_connect(self, _redirect(self, address))


def _connect_ex(self, address):
    return _original_connect_ex(self, _redirect(self, address))


if _PORT:
    socket.socket.bind = _bind
    socket.socket.connect = _connect
    socket.socket.connect_ex = _connect_ex
