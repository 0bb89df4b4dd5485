"""Listening sockets: the --bind address forms, binding (TCP, unix sockets, inherited
descriptors, systemd socket activation, a reloading server's hand-over) and closing.

The functions that bind take the Config and keep what they did on it: `sockets` (the
listening sockets), `addresses` (what each was bound or inherited as), `bound_fds` (the
descriptors bound here), `proxy_protocol_fds` and `uwsgi_fds` (the listeners that read a
PROXY header or speak uwsgi), `redirect_fds` and `redirect_https_port` (--redirect-http's
listener and the port its redirects name), `metrics_socket` and `metrics_fd`
(--metrics-bind); the C core reads those attributes.
"""

import os
import socket
import stat

from pyserver import checks
from pyserver.errors import StartupError

PORT_RANGE = (0, 65535)
FD_RANGE = (0, None)

# nginx's uwsgi_pass speaks the uwsgi protocol in clear: a TLS listener cannot carry it.
UWSGI_OVER_TLS = (
    "error: the uwsgi protocol on a TLS listener ({}) is not supported; nginx's uwsgi_pass "
    "speaks it in clear: serve it on a plain or unix-socket bind"
)
UWSGI_AND_PROXY = (
    "error: the uwsgi protocol and the PROXY protocol on the same listener ({}): the uwsgi "
    "packet already carries the client's address (REMOTE_ADDR)"
)

# The PROXY header comes before the TLS handshake; the TLS listeners do not read it yet.
PROXY_OVER_TLS = (
    "error: --proxy-protocol on a TLS listener ({}) is not supported yet; "
    "serve the proxy on a plain or unix-socket bind"
)


def parse_bind(value):
    """Parse one --bind address.

    Returns ("tcp", host, port), ("unix", path) or ("fd", n). Accepted forms:
    HOST:PORT, HOST (port 8000), [IPV6]:PORT, [IPV6], unix:PATH, fd://N. Any of
    them after "uwsgi://" returns ("uwsgi", address): a listener that speaks the
    uwsgi protocol (nginx's uwsgi_pass). Raises ValueError for anything else.
    """
    if value.startswith("uwsgi://"):
        inner = value[len("uwsgi://") :]
        if inner.startswith("uwsgi://") or not inner:
            raise ValueError(f"expected uwsgi://HOST:PORT or uwsgi://unix:PATH, got {value!r}")
        return ("uwsgi", parse_bind(inner))
    if value.startswith("unix:"):
        path = value[len("unix:") :]
        if not path:
            raise ValueError(f"empty unix socket path in {value!r}")
        return ("unix", path)
    if value.startswith("fd://"):
        try:
            return ("fd", checks.integer(value[len("fd://") :], *FD_RANGE))
        except ValueError:
            raise ValueError(f"bad file descriptor in {value!r}") from None
    host, port = value, "8000"
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(f"missing ']' in {value!r}")
        host, rest = value[1:end], value[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"expected [HOST]:PORT, got {value!r}")
            port = rest[1:]
    elif ":" in value:
        host, _, port = value.rpartition(":")
        if ":" in host:
            raise ValueError(f"IPv6 addresses need brackets: [{host}]:{port}")
    try:
        return ("tcp", host, checks.integer(port, *PORT_RANGE))
    except ValueError as exc:
        raise ValueError(f"bad port in {value!r}: {exc}") from None


def bind_address(value):
    """One --bind address as parse_bind() returns it; a program may give the tuple."""
    return parse_bind(value) if isinstance(value, str) else tuple(value)


def parse_metrics_bind(value):
    """--metrics-bind: None, or ("tcp", host, port) / ("unix", path) as parse_bind() reads
    HOST:PORT and unix:PATH. Raises ValueError for anything else."""
    if value is None:
        return None
    address = parse_bind(value) if isinstance(value, str) else tuple(value)
    if address[0] not in ("tcp", "unix"):
        raise ValueError(f"--metrics-bind takes HOST:PORT or unix:PATH, got {value!r}")
    if isinstance(value, str) and address[0] == "tcp" and not _has_port(value):
        # --bind's HOST alone means port 8000, which the application's own port usually is.
        raise ValueError(f"--metrics-bind takes HOST:PORT (a port too), got {value!r}")
    return address


def parse_redirect_bind(value):
    """--redirect-http: None, or ("tcp", host, port) from HOST:PORT (a port is needed: the
    address is usually port 80, never --bind's 8000). Raises ValueError for anything else."""
    if value is None:
        return None
    address = parse_bind(value) if isinstance(value, str) else tuple(value)
    if address[0] != "tcp" or (isinstance(value, str) and not _has_port(value)):
        raise ValueError(f"--redirect-http takes HOST:PORT, got {value!r}")
    return address


def _has_port(value):
    return "]:" in value if value.startswith("[") else value.count(":") == 1


def format_host_port(host, port):
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


SD_LISTEN_FDS_START = 3


def systemd_fds(environ=None):
    """The listening fds passed by systemd socket activation ([] if none).

    Reads LISTEN_FDS when LISTEN_PID is this process, then removes the
    LISTEN_* variables so that child processes do not take them as theirs.
    """
    environ = os.environ if environ is None else environ
    try:
        count = int(environ.get("LISTEN_FDS", ""))
        pid = int(environ.get("LISTEN_PID", ""))
    except ValueError:
        return []
    for name in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"):
        environ.pop(name, None)
    if pid != os.getpid() or count <= 0:
        return []
    return list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))


def remove_stale_unix_socket(path):
    """Remove a socket file left by a dead server; refuse to touch anything else.

    Raises OSError(EADDRINUSE) if a server still answers on it and
    FileExistsError if the path is not a socket.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(17, "File exists and is not a socket", path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
        return
    except OSError:
        return
    finally:
        probe.close()
    raise OSError(98, "Address already in use")


def describe_address(address):
    if address[0] == "unix":
        return f"unix:{address[1]}"
    if address[0] == "fd":
        return f"fd://{address[1]}"
    return format_host_port(address[1], address[2])


def socket_url(sock, tls=False):
    """How a listening socket is shown to the user: http(s)://HOST:PORT or unix:PATH."""
    if sock.family == socket.AF_UNIX:
        name = sock.getsockname()
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        return f"unix:{name}"
    host, port = sock.getsockname()[:2]
    return f"{'https' if tls else 'http'}://{format_host_port(host, port)}"


def bind_addresses(cfg):
    """The addresses to listen on: --bind, --uds and --fd, else --host/--port."""
    addresses = list(cfg.bind)
    if cfg.uds is not None:
        addresses.append(("unix", cfg.uds))
    if cfg.fd is not None:
        addresses.append(("fd", cfg.fd))
    if not addresses:
        addresses.append(("tcp", cfg.host, cfg.port))
    return addresses


def bind_sockets(cfg, handed=None):
    """Return cfg's listening, non-blocking sockets: bound here, inherited (--fd, socket
    activation) or, as `handed`, from the server this one replaces (pyserver.reexec).
    Raises StartupError (exit code 1; 2 for listeners the options cannot combine)."""
    if handed is not None:
        return _take_handed_sockets(cfg, handed)
    sockets = []
    addresses = bind_addresses(cfg)
    inherited = systemd_fds()
    if inherited:
        # Socket activation: the inherited sockets replace the default address.
        explicit = cfg.bind or cfg.uds is not None or cfg.fd is not None
        addresses = (addresses if explicit else []) + [("fd", fd) for fd in inherited]
    for address in cfg.proxy_protocol_bind:
        if address not in addresses:
            raise StartupError(
                f"error: --proxy-protocol-bind {describe_address(address)} is not one of "
                f"the addresses served ({', '.join(map(describe_address, addresses))})",
                2,
            )
        if cfg.ssl_certfile and address[0] not in ("unix", "fd"):
            raise StartupError(PROXY_OVER_TLS.format(describe_address(address)), 2)
    if cfg.proxy_protocol and cfg.ssl_certfile:
        for address in addresses:
            if address[0] not in ("unix", "fd"):
                raise StartupError(PROXY_OVER_TLS.format(describe_address(address)), 2)
    _check_uwsgi(cfg, addresses)
    addresses = addresses + _redirect_address(cfg, addresses)
    try:
        for address in addresses:
            sockets.append(_bind_one(cfg, address))
    except BaseException:
        cfg.sockets = sockets
        close_sockets(cfg)
        raise
    _select_proxy_protocol(cfg, addresses, sockets)
    return sockets


def _uwsgi_address(cfg, address):
    return cfg.protocol == "uwsgi" or address in cfg.uwsgi_bind


def _check_uwsgi(cfg, addresses):
    """uwsgi listeners: no TLS, no PROXY header. Raises StartupError (exit code 2)."""
    for address in addresses:
        if not _uwsgi_address(cfg, address):
            continue
        if cfg.ssl_certfile and address[0] not in ("unix", "fd"):
            raise StartupError(UWSGI_OVER_TLS.format(describe_address(address)), 2)
        if cfg.proxy_protocol or address in cfg.proxy_protocol_bind:
            raise StartupError(UWSGI_AND_PROXY.format(describe_address(address)), 2)


def _redirect_address(cfg, addresses):
    """--redirect-http's address, to bind beside the others ([] without it). Raises
    StartupError (exit code 2) when no listener speaks TLS or the address is served."""
    address = cfg.redirect_http
    if address is None:
        return []
    name = describe_address(address)
    if address in addresses:
        raise StartupError(f"error: --redirect-http {name} is also an address served", 2)
    if not any(a[0] in ("tcp", "fd") and not _uwsgi_address(cfg, a) for a in addresses):
        raise StartupError(f"error: --redirect-http {name} needs a TCP listener with TLS", 2)
    return [address]


def _select_redirect(cfg, addresses, sockets):
    """redirect_fds and redirect_https_port: the first TLS listener's port (its bound one
    for port 0), which the redirects name unless it is 443."""
    cfg.redirect_fds = []
    for address, sock in zip(addresses, sockets, strict=True):
        if cfg.redirect_http is not None and address == cfg.redirect_http:
            cfg.redirect_fds.append(sock.fileno())
    for address, sock in zip(addresses, sockets, strict=True):
        tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        if tcp and sock.fileno() not in cfg.redirect_fds and not _uwsgi_address(cfg, address):
            cfg.redirect_https_port = sock.getsockname()[1]
            break


def redirects_https(cfg, sock):
    return sock.fileno() in cfg.redirect_fds


def _select_proxy_protocol(cfg, addresses, sockets):
    _select_redirect(cfg, addresses, sockets)
    cfg.addresses = addresses
    cfg.proxy_protocol_fds = [
        sock.fileno()
        for address, sock in zip(addresses, sockets, strict=True)
        if cfg.proxy_protocol or address in cfg.proxy_protocol_bind
    ]
    cfg.uwsgi_fds = [
        sock.fileno()
        for address, sock in zip(addresses, sockets, strict=True)
        if _uwsgi_address(cfg, address)
    ]


def _take_handed_sockets(cfg, handed):
    """The sockets of the server this one replaces after a SIGHUP (pyserver.reexec):
    served as they are, the ones it bound still counted as bound here."""
    sockets = []
    for address, fd, bound in handed:
        sock = socket.socket(fileno=fd)
        sock.set_inheritable(False)
        sock.setblocking(False)
        sockets.append(sock)
        if bound:
            cfg.bound_fds.append(fd)
            if address[0] == "unix":
                cfg._unix_paths.append(address[1])
    _select_proxy_protocol(cfg, [address for address, _, _ in handed], sockets)
    return sockets


def speaks_proxy_protocol(cfg, sock):
    return sock.fileno() in cfg.proxy_protocol_fds


def speaks_uwsgi(cfg, sock):
    return sock.fileno() in cfg.uwsgi_fds


def _bind_one(cfg, address):
    kind = address[0]
    name = describe_address(address)
    try:
        if kind == "fd":
            sock = socket.socket(fileno=address[1])
            if sock.type != socket.SOCK_STREAM:
                sock.detach()
                raise OSError(f"fd {address[1]} is not a stream socket")
        elif kind == "unix":
            sock = _bind_unix(cfg, address[1])
        else:
            sock = _bind_tcp(cfg, address[1], address[2])
    except OSError as exc:
        verb = "use" if kind == "fd" else "bind"
        raise StartupError(f"error: cannot {verb} {name}: {exc}", 1) from exc
    try:
        sock.listen(cfg.backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise StartupError(f"error: cannot listen on {name}: {exc}", 1) from exc
    if kind != "fd":
        cfg.bound_fds.append(sock.fileno())
    return sock


def _bind_tcp(cfg, host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if cfg.reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_unix(cfg, path):
    remove_stale_unix_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        cfg._unix_paths.append(path)
        if cfg.uds_perms is not None:
            os.chmod(path, cfg.uds_perms)
        if (cfg.uid is not None or cfg.gid is not None) and os.getuid() == 0:
            # The socket belongs to the user the workers run as (as gunicorn does).
            uid = -1 if cfg.uid is None else cfg.uid
            os.chown(path, uid, -1 if cfg.gid is None else cfg.gid)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_metrics_socket(cfg):
    """--metrics-bind: listen on the endpoint's address. Raises StartupError (exit 1)."""
    if cfg.metrics_bind is None or cfg.metrics_socket is not None:
        return
    address = cfg.metrics_bind
    name = describe_address(address)
    try:
        if address[0] == "unix":
            sock = _bind_unix(cfg, address[1])
        else:
            sock = _bind_tcp_plain(cfg, address[1], address[2])
        sock.listen(64)
        sock.setblocking(False)
    except OSError as exc:
        close_sockets(cfg)
        raise StartupError(f"error: cannot bind --metrics-bind {name}: {exc}", 1) from exc
    cfg.metrics_socket = sock
    cfg.metrics_fd = sock.fileno()


def close_metrics_socket(cfg):
    """A worker under a master: the endpoint is the master's."""
    if cfg.metrics_socket is not None:
        cfg.metrics_socket.close()
        cfg.metrics_socket = None
    cfg.metrics_fd = -1


def _bind_tcp_plain(cfg, host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def close_sockets(cfg):
    """Close the listening sockets and remove the unix socket files bound here."""
    for sock in cfg.sockets:
        sock.close()
    cfg.sockets = []
    close_metrics_socket(cfg)
    cfg.bound_fds = []
    for path in cfg._unix_paths:
        try:
            os.unlink(path)
        except OSError:
            pass
    cfg._unix_paths = []
