"""Config: every server option in one place, resolved once by load().

The CLI maps its options one to one onto Config's keyword arguments. After
load(), the attributes read by the C core (`_core.serve(app, sockets, config)`)
hold final values:

    interface                 "wsgi"
    root_path                 str, no trailing slash ("" for none)
    timeout_keep_alive        float seconds
    timeout_request_header    float seconds
    timeout_request_body      float seconds a request body may make no progress
    graceful_timeout          float seconds
    limit_request_line        int
    limit_request_fields      int
    limit_request_field_size  int
    limit_request_head        int, bytes of request line plus header fields
    limit_request_body        int, 0 = no limit
    body_spool_threshold      int bytes: WSGI bodies larger than this are spooled to a
                              temporary file (in $TMPDIR) while they arrive
    limit_connections         int
    access_log                bool (False also when the access logger is disabled)
    access_log_format         str, the access line with gunicorn's atoms, or "json"
                              (checked here; compiled once by the core)
    server_header             bool
    date_header               bool
    ws                        "auto" (upgrades get a websocket scope) or "none" (an http one)
    ws_max_size               int bytes of one WebSocket message (close 1009 beyond)
    ws_max_queue              int messages received and not yet read by the application
    ws_ping_interval          float seconds between server pings, 0 for none
    ws_ping_timeout           float seconds a ping may wait for its pong (close 1011), 0: forever
    ws_per_message_deflate    bool: accept permessage-deflate offers
    ws_deflate_level          int deflate level of what the server compresses, 0..9 (1: igzip)
    http                      "auto" (HTTP/1.1, and HTTP/2 by prior knowledge or Upgrade: h2c),
                              "1" (HTTP/1.1 only) or "2" (HTTP/2 by prior knowledge only)
    http2_max_concurrent_streams  int streams a client may have open at once
    http2_max_headers_size    int bytes of a decoded request header list (431 beyond)
    http2_initial_stream_window_size  int request body bytes buffered per stream
    http2_initial_connection_window_size  int request body bytes buffered per connection
    http2_max_new_streams     int streams a client may open a second (flood bound)
    http2_max_resets          int RST_STREAMs received, plus streams reset for what the
                              client did, a second (the Rapid Reset bound)
    http2_max_control_frames  int SETTINGS, PING, PRIORITY and unknown frames a second
    http2_max_empty_frames    int DATA frames without payload or END_STREAM a second
    http2_max_window_updates  int WINDOW_UPDATE frames a second
    http2_max_continuations   int CONTINUATION frames of one header block
                              (over any of the six: GOAWAY ENHANCE_YOUR_CALM)
    url_scheme                "http" (a TLS connection's requests say "https")
    ssl_certfile              None, or the PEM certificate (then its chain): TLS on the
                              TCP binds; unix-socket binds stay plain
    ssl_keyfile               None (the key is in ssl_certfile) or the PEM private key
    ssl_keyfile_password      None or str, for an encrypted key
    ssl_ca_certs              None or the PEM file of the CAs that sign client certificates
    ssl_cert_reqs             int: 0 no client certificate, 1 optional, 2 required
    ssl_ciphers               None (ECDHE with AEAD ciphers) or an OpenSSL TLS 1.2 cipher list
    ssl_version               "TLSv1.2" or "TLSv1.3", the lowest version accepted
    timeout_tls_handshake     float seconds a TLS handshake may take
    ssl_ticket_rotation       float seconds: under a master, the workers share their session
                              ticket keys and get a new one this often (the last 4 decrypt)
    proxy_headers             bool: trusted proxies' Forwarded and X-Forwarded-* are read
    proxy_protocol            bool: every listener takes a PROXY header from trusted peers
    proxy_protocol_bind       list of parse_bind() addresses that do (when not all do)
    proxy_protocol_fds        list of the listening fds that do (set by bind_sockets)
    protocol                  "http" or "uwsgi": what every listener speaks (gunicorn's
                              --protocol); a uwsgi:// bind speaks uwsgi whatever it says
    uwsgi_bind                list of the addresses bound as uwsgi://ADDRESS
    uwsgi_fds                 list of the listening fds that speak uwsgi (set by bind_sockets)
    forwarded_allow_ips       str, the trusted proxies: "ADDR,NET/PREFIX,..." or "*"
    secure_scheme_headers     None (X-Forwarded-Proto sets the scheme) or gunicorn's
                              {header: value meaning https}
    error_logger              logging.Logger "pyserver.error"
    access_logger             logging.Logger "pyserver.access"
    app_spec                  str, "module:attr" for messages
    asgi_app                  None, or the "module:attr" (or the object) of an ASGI application
                              served beside a
                              WSGI APP: WebSocket upgrades, lifespan and asgi_paths go to it
    asgi_paths                list of path prefixes (no trailing slash) whose HTTP requests
                              go to asgi_app too
    loaded_asgi_app           the asgi_app object (ASGI 3), once imported, else None
    bound_fds                 list of the listening fds bound here (not inherited):
                              shut down at the server's last stop
    workers                   int, the number of worker processes
    threads                   int, WSGI: application threads per worker (1: the loop
                              thread runs the application)
    executor_threads          None, or int: ASGI, the size of asyncio's default executor
                              (--threads given)
    use_master                bool: a master process forks and supervises the workers
    timeout                   float seconds, the workers' watchdog (0 disables)
    max_requests              int, retire a worker after this many requests (0: never)
    max_requests_jitter       int, plus a random 0..jitter per worker
    max_rss                   int MiB, retire a worker above this resident size (0: never)
    reuse_port                bool: each worker also listens on its own SO_REUSEPORT socket
    metrics_bind              None, or the parse_bind() address of the Prometheus endpoint
                              (--metrics-bind: tcp or unix), served by the master (or the
                              single process) from the workers' shared counters
    metrics_fd                int, that endpoint's listening fd once bound (-1: none)
    reload                    bool: restart the workers when a watched file changes
    reload_dirs               list of directories to watch (default: app_dir)
    reload_includes           list of file name patterns to watch (default: *.py)
    wsgi_errors_level         int, the logging level of lines written to wsgi.errors
    hooks                     dict of the server hooks of a --config file (see hooks.py)
    static                    list of "PREFIX=DIR" mounts the core serves files from before
                              the application is called (DIR absolute after load())
    static_max_age            None (no Cache-Control) or int seconds: static files get
                              Cache-Control: public, max-age=N
    static_strict             bool: a miss under a mount answers 404 (another method 405)
                              instead of reaching the application

Supervision by a foreign process manager (the gunicorn worker sets these; None leaves
the worker alone):

    on_tick                   None or callable(retire: bool) -> bool, called every
                              tick_interval seconds from the worker's loop; True stops
                              the worker gracefully
    on_stop_signal            None or callable(signum), called before the worker acts on
                              SIGINT, SIGTERM or SIGQUIT
    tick_interval             float seconds between on_tick calls
    loaded_app                the application object, once imported

With one worker and no process-management option (--timeout, --max-requests,
--max-rss, --preload, --reuse-port, --reload) the server runs in a single process, without
a master.
"""

import grp
import logging
import os
import platform
import pwd
import socket
import stat

from pyserver import importer, logconfig

INTERFACES = ("auto", "wsgi", "asgi")
LIFESPAN_MODES = ("auto", "on", "off")
WS_MODES = ("auto", "none")
HTTP_MODES = ("auto", "1", "2")
PROTOCOLS = ("http", "uwsgi")

# Inclusive bounds (None = unbounded) shared by Config and the CLI.
INT_BOUNDS = {
    "port": (0, 65535),
    "fd": (0, None),
    "backlog": (1, None),
    "limit_request_line": (1, 65536),
    "limit_request_fields": (1, 32768),
    "limit_request_field_size": (1, 65536),
    "limit_request_head": (1, 1 << 30),
    "limit_request_body": (0, None),
    "body_spool_threshold": (0, None),
    "limit_connections": (1, None),
    "limit_concurrency": (0, None),
    "limit_max_requests": (0, None),
    "workers": (1, 128),
    "threads": (1, 1024),
    "max_requests": (0, None),
    "max_requests_jitter": (0, None),
    "max_rss": (0, None),
    "ws_max_size": (1, 1 << 40),
    "ws_max_queue": (1, 1 << 20),
    "ws_deflate_level": (0, 9),
    "http2_max_concurrent_streams": (1, 1 << 20),
    "http2_max_headers_size": (1024, 1 << 24),
    "http2_initial_stream_window_size": (1024, (1 << 31) - 1),
    "http2_initial_connection_window_size": (65535, (1 << 31) - 1),
    "http2_max_new_streams": (1, 1 << 24),
    "http2_max_resets": (1, 1 << 24),
    "http2_max_control_frames": (1, 1 << 24),
    "http2_max_empty_frames": (1, 1 << 24),
    "http2_max_window_updates": (1, 1 << 24),
    "http2_max_continuations": (1, 1 << 16),
    "static_max_age": (0, None),
}
FLOAT_BOUNDS = {
    "timeout_tls_handshake": (0.001, None),
    "ssl_ticket_rotation": (0.1, None),
    "timeout_keep_alive": (0.0, None),
    "timeout_request_header": (0.001, None),
    "timeout_request_body": (0.001, None),
    "graceful_timeout": (0.0, None),
    "timeout": (0.0, None),
    "ws_ping_interval": (0.0, None),
    "ws_ping_timeout": (0.0, None),
}
DEFAULT_TIMEOUT = 30.0
# --ssl-cert-reqs: uvicorn's and gunicorn's numbers (ssl.CERT_*) or their names.
CERT_REQS = {"none": 0, "optional": 1, "required": 2, "0": 0, "1": 1, "2": 2}
TLS_VERSIONS = {"tlsv1.2": "TLSv1.2", "1.2": "TLSv1.2", "tlsv1.3": "TLSv1.3", "1.3": "TLSv1.3"}


def check_cert_reqs(value):
    """Return --ssl-cert-reqs as 0, 1 or 2 (none, optional, required)."""
    key = str(int(value) if isinstance(value, int) else value).strip().lower()
    if key.startswith("cert_"):  # ssl.CERT_REQUIRED's name
        key = key[len("cert_") :]
    if key not in CERT_REQS:
        raise ValueError(f"expected none, optional or required (or 0, 1, 2), got {value!r}")
    return CERT_REQS[key]


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


def check_tls_version(value):
    """Return --ssl-version as "TLSv1.2" or "TLSv1.3" (the minimum accepted).

    uvicorn's default (ssl.PROTOCOL_TLS_SERVER, 17) and ssl.PROTOCOL_TLS (2) mean TLS 1.2;
    ssl.TLSVersion values (771, 772) their version.
    """
    if isinstance(value, int):
        by_number = {2: "TLSv1.2", 17: "TLSv1.2", 771: "TLSv1.2", 772: "TLSv1.3"}
        if value in by_number:
            return by_number[value]
    elif str(value).strip().lower() in TLS_VERSIONS:
        return TLS_VERSIONS[str(value).strip().lower()]
    raise ValueError(f"the minimum TLS version must be TLSv1.2 or TLSv1.3, got {value!r}")


DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"


class StartupError(Exception):
    """The server cannot start.

    str(self) is the one line to print after "pyserver: "; exit_code is the
    process status: 3 when the application cannot be loaded, 1 otherwise.
    """

    def __init__(self, message, exit_code=1):
        super().__init__(message)
        self.exit_code = exit_code


def _range_text(lo, hi):
    def text(x):
        return str(x) if isinstance(x, int) else f"{x:g}"  # 16777216, not 1.67772e+07

    if hi is None:
        return f"at least {text(lo)}"
    return f"between {text(lo)} and {text(hi)}"


def check_int(name, value):
    """Return value as an int within INT_BOUNDS[name]; raise ValueError otherwise."""
    lo, hi = INT_BOUNDS[name]
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {value!r}") from None
    if number < lo or (hi is not None and number > hi):
        raise ValueError(f"must be {_range_text(lo, hi)}, got {number}")
    return number


def check_float(name, value):
    """Return value as a float within FLOAT_BOUNDS[name]; raise ValueError otherwise."""
    lo, hi = FLOAT_BOUNDS[name]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number of seconds, got {value!r}") from None
    if not number >= lo or (hi is not None and number > hi):
        raise ValueError(f"must be {_range_text(lo, hi)}, got {value}")
    return number


def check_forwarded_allow_ips(value):
    """Return a trust list as the core reads it: "ADDR,NET/PREFIX,..." or "*".

    value is that string or a sequence of items (gunicorn's form). Raises ValueError
    naming the first item that is not an IP address, a CIDR network or "*".
    """
    if not isinstance(value, str):
        value = ",".join(str(item) for item in value)
    try:
        from pyserver import _core
    except ImportError:  # reported when the server starts
        return value
    _core.check_forwarded_allow_ips(value)
    return value


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
            return ("fd", check_int("fd", value[len("fd://") :]))
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
        return ("tcp", host, check_int("port", port))
    except ValueError as exc:
        raise ValueError(f"bad port in {value!r}: {exc}") from None


def parse_static(value):
    """Check one --static mount, "PREFIX=DIR" or a (PREFIX, DIR) pair.

    Returns "PREFIX=DIR" with PREFIX without its trailing '/'. PREFIX is an absolute URL
    path without '%', '\\', NUL, '.' or '..' segments; raises ValueError otherwise.
    """
    if isinstance(value, str):
        prefix, sep, directory = value.partition("=")
    else:
        (prefix, directory), sep = value, "="
    directory = os.fspath(directory)
    if not sep or not prefix.startswith("/") or not directory:
        raise ValueError(f"expected PREFIX=DIR with PREFIX starting with '/', got {value!r}")
    if any(ch in prefix for ch in "%\\\0") or any(
        part in (".", "..") for part in prefix.split("/")
    ):
        raise ValueError(f"PREFIX may not hold '%', '\\', NUL, '.' or '..': {prefix!r}")
    if "\0" in directory:
        raise ValueError(f"DIR may not hold NUL: {directory!r}")
    return f"{prefix.rstrip('/') or '/'}={directory}"


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


def _has_port(value):
    return "]:" in value if value.startswith("[") else value.count(":") == 1


def format_host_port(host, port):
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


# The default access line: today's client, request and status, with gunicorn's user and
# time, the body bytes and the duration in seconds.
DEFAULT_ACCESS_LOG_FORMAT = '%(client)s - %(u)s %(t)s "%(r)s" %(s)s %(B)s %(L)s'


def resolve_access_log_format(fmt, json_lines=False):
    """The access log format --access-logformat/--access-log-json ask for, checked by the core's
    compiler (ValueError naming an unknown atom)."""
    if json_lines:
        if fmt not in (None, "json"):
            raise ValueError("--access-log-json and --access-logformat: give only one")
        fmt = "json"
    if fmt is None:
        return DEFAULT_ACCESS_LOG_FORMAT
    if not isinstance(fmt, str):
        raise ValueError(f"access_log_format must be str, got {fmt!r}")
    try:
        from pyserver import _core
    except ImportError:  # reported when serving starts
        return fmt
    _core.check_access_log_format(fmt)
    return fmt


def check_asgi_side(asgi_app, asgi_paths, interface):
    """--asgi-app and --asgi-path, checked: returns (asgi_app, prefixes without a trailing
    slash). Raises ValueError."""
    paths = []
    for prefix in asgi_paths or ():
        if not prefix.startswith("/"):
            raise ValueError(f"--asgi-path must start with '/', got {prefix!r}")
        paths.append(prefix.rstrip("/") or "/")
    if asgi_app is None:
        if paths:
            raise ValueError("--asgi-path needs --asgi-app (the application that serves it)")
        return None, []
    if isinstance(asgi_app, str):
        importer.split_app_spec(asgi_app)
    if interface == "asgi":
        raise ValueError(
            "--asgi-app is for a WSGI APP (it takes WebSockets and lifespan beside it); "
            "with --interface asgi, APP serves everything"
        )
    return asgi_app, paths


def _app_name(app):
    module = getattr(app, "__module__", None) or "?"
    name = getattr(app, "__qualname__", None) or type(app).__qualname__
    return f"{module}:{name}"


class Config:
    """All options of one server; call load() once before serving."""

    def __init__(
        self,
        app,
        *,
        host="127.0.0.1",
        port=8000,
        bind=None,
        uds=None,
        uds_perms=None,
        fd=None,
        backlog=2048,
        interface="auto",
        asgi_app=None,
        asgi_paths=None,
        factory=False,
        app_dir=".",
        root_path="",
        timeout_keep_alive=5.0,
        timeout_request_header=60.0,
        timeout_request_body=30.0,
        graceful_timeout=30.0,
        limit_request_line=8190,
        limit_request_fields=100,
        limit_request_field_size=8190,
        limit_request_head=65536,
        limit_request_body=0,
        body_spool_threshold=1 << 20,
        limit_connections=10000,
        limit_concurrency=0,
        limit_max_requests=0,
        lifespan="auto",
        server_header=True,
        date_header=True,
        ws="auto",
        ws_max_size=16 * 1024 * 1024,
        ws_max_queue=32,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        ws_per_message_deflate=True,
        ws_deflate_level=1,
        http="auto",
        http2_max_concurrent_streams=100,
        http2_max_headers_size=65536,
        http2_initial_stream_window_size=256 * 1024,
        http2_initial_connection_window_size=1024 * 1024,
        http2_max_new_streams=1000000,
        http2_max_resets=200,
        http2_max_control_frames=100,
        http2_max_empty_frames=100,
        http2_max_window_updates=50000,
        http2_max_continuations=16,
        proxy_headers=True,
        forwarded_allow_ips=None,
        proxy_protocol=False,
        proxy_protocol_bind=None,
        protocol="http",
        log_level="info",
        log_config=None,
        access_log=True,
        access_log_format=None,
        access_log_json=False,
        workers=None,
        threads=None,
        timeout=None,
        max_requests=0,
        max_requests_jitter=0,
        max_rss=0,
        preload=False,
        reuse_port=False,
        metrics_bind=None,
        pid=None,
        reload=False,
        reload_dirs=None,
        reload_includes=None,
        user=None,
        group=None,
        chdir=None,
        umask=None,
        env=None,
        access_logfile=None,
        error_logfile=None,
        wsgi_errors_level=None,
        ssl_certfile=None,
        ssl_keyfile=None,
        ssl_keyfile_password=None,
        ssl_ca_certs=None,
        ssl_cert_reqs=0,
        ssl_ciphers=None,
        ssl_version="TLSv1.2",
        timeout_tls_handshake=10.0,
        ssl_ticket_rotation=3600.0,
        hooks=None,
        static=None,
        static_max_age=None,
        static_strict=False,
        startup_warnings=(),
    ):
        self.app = app
        self.app_spec = app if isinstance(app, str) else _app_name(app)
        self.host = host
        self.port = check_int("port", port)
        self.bind = [parse_bind(b) if isinstance(b, str) else tuple(b) for b in bind or ()]
        # uwsgi://ADDRESS binds ADDRESS; its listener speaks uwsgi.
        self.uwsgi_bind = [b[1] for b in self.bind if b[0] == "uwsgi"]
        self.bind = [b[1] if b[0] == "uwsgi" else b for b in self.bind]
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        self.protocol = protocol
        self.uwsgi_fds = []
        self.uds = uds
        self.uds_perms = uds_perms
        self.fd = None if fd is None else check_int("fd", fd)
        self.backlog = check_int("backlog", backlog)
        if interface not in INTERFACES:
            raise ValueError(f"interface must be one of {', '.join(INTERFACES)}")
        self.interface = interface
        self.asgi_app, self.asgi_paths = check_asgi_side(asgi_app, asgi_paths, interface)
        self.loaded_asgi_app = None
        self.loop_link = None  # a hybrid.LoopLink around the WSGI app (see link_to_loop)
        self.factory = bool(factory)
        self.app_dir = app_dir
        if root_path and not root_path.startswith("/"):
            raise ValueError(f"root_path must start with '/', got {root_path!r}")
        self.root_path = root_path.rstrip("/")
        self.timeout_keep_alive = check_float("timeout_keep_alive", timeout_keep_alive)
        self.timeout_request_header = check_float("timeout_request_header", timeout_request_header)
        self.timeout_request_body = check_float("timeout_request_body", timeout_request_body)
        self.graceful_timeout = check_float("graceful_timeout", graceful_timeout)
        self.limit_request_line = check_int("limit_request_line", limit_request_line)
        self.limit_request_fields = check_int("limit_request_fields", limit_request_fields)
        self.limit_request_field_size = check_int(
            "limit_request_field_size", limit_request_field_size
        )
        self.limit_request_head = check_int("limit_request_head", limit_request_head)
        self.limit_request_body = check_int("limit_request_body", limit_request_body)
        self.body_spool_threshold = check_int("body_spool_threshold", body_spool_threshold)
        self.limit_connections = check_int("limit_connections", limit_connections)
        self.limit_concurrency = check_int("limit_concurrency", limit_concurrency or 0)
        self.limit_max_requests = check_int("limit_max_requests", limit_max_requests or 0)
        if lifespan not in LIFESPAN_MODES:
            raise ValueError(f"lifespan must be one of {', '.join(LIFESPAN_MODES)}")
        self.lifespan = lifespan
        self.server_header = bool(server_header)
        self.date_header = bool(date_header)
        if ws not in WS_MODES:
            raise ValueError(f"ws must be one of {', '.join(WS_MODES)}, got {ws!r}")
        self.ws = ws
        self.ws_max_size = check_int("ws_max_size", ws_max_size)
        self.ws_max_queue = check_int("ws_max_queue", ws_max_queue)
        self.ws_ping_interval = check_float("ws_ping_interval", ws_ping_interval or 0.0)
        self.ws_ping_timeout = check_float("ws_ping_timeout", ws_ping_timeout or 0.0)
        self.ws_per_message_deflate = bool(ws_per_message_deflate)
        self.ws_deflate_level = check_int("ws_deflate_level", ws_deflate_level)
        http = str(http).lower()
        if http not in HTTP_MODES:
            raise ValueError(f"http must be one of {', '.join(HTTP_MODES)}, got {http!r}")
        self.http = http
        self.http2_max_concurrent_streams = check_int(
            "http2_max_concurrent_streams", http2_max_concurrent_streams
        )
        self.http2_max_headers_size = check_int("http2_max_headers_size", http2_max_headers_size)
        self.http2_initial_stream_window_size = check_int(
            "http2_initial_stream_window_size", http2_initial_stream_window_size
        )
        self.http2_initial_connection_window_size = check_int(
            "http2_initial_connection_window_size", http2_initial_connection_window_size
        )
        self.http2_max_new_streams = check_int("http2_max_new_streams", http2_max_new_streams)
        self.http2_max_resets = check_int("http2_max_resets", http2_max_resets)
        self.http2_max_control_frames = check_int(
            "http2_max_control_frames", http2_max_control_frames
        )
        self.http2_max_empty_frames = check_int("http2_max_empty_frames", http2_max_empty_frames)
        self.http2_max_window_updates = check_int(
            "http2_max_window_updates", http2_max_window_updates
        )
        self.http2_max_continuations = check_int("http2_max_continuations", http2_max_continuations)
        self.proxy_headers = bool(proxy_headers)
        self.proxy_protocol = bool(proxy_protocol)
        self.proxy_protocol_bind = [
            parse_bind(b) if isinstance(b, str) else tuple(b) for b in proxy_protocol_bind or ()
        ]
        self.proxy_protocol_fds = []
        self.addresses = []  # what each of self.sockets was bound or inherited as
        source = "forwarded_allow_ips"
        if forwarded_allow_ips is None:
            forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS")
            source = "environment variable FORWARDED_ALLOW_IPS"
            if forwarded_allow_ips is None:
                forwarded_allow_ips = DEFAULT_FORWARDED_ALLOW_IPS
        try:
            self.forwarded_allow_ips = check_forwarded_allow_ips(forwarded_allow_ips)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        # gunicorn's secure_scheme_headers (set by the gunicorn worker); None reads
        # X-Forwarded-Proto instead.
        self.secure_scheme_headers = None
        if log_level not in logconfig.LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(logconfig.LOG_LEVELS)}")
        self.log_level = log_level
        self.log_config = log_config
        self.access_log = bool(access_log)
        self.access_log_format = resolve_access_log_format(access_log_format, access_log_json)
        if workers is None:
            workers = os.environ.get("WEB_CONCURRENCY", 1)
        self.workers = check_int("workers", workers)
        self.threads = check_int("threads", 1 if threads is None else threads)
        # ASGI: the size of asyncio's default executor, when --threads is given.
        self.executor_threads = None if threads is None else self.threads
        # --reload is for development: no watchdog (a debugger may stop a request) unless
        # --timeout is given.
        default_timeout = 0.0 if reload else DEFAULT_TIMEOUT
        self.timeout = default_timeout if timeout is None else check_float("timeout", timeout)
        # uvicorn's --limit-max-requests is gunicorn's --max-requests: the
        # master retires the worker once its replacement is ready.
        self.max_requests = check_int("max_requests", max_requests or self.limit_max_requests)
        self.max_requests_jitter = check_int("max_requests_jitter", max_requests_jitter)
        self.max_rss = check_int("max_rss", max_rss)
        self.preload = bool(preload)
        self.reuse_port = bool(reuse_port)
        self.metrics_bind = parse_metrics_bind(metrics_bind)
        self.metrics_socket = None
        self.metrics_fd = -1
        self.pid = pid
        self.reload = bool(reload)
        self.reload_dirs = list(reload_dirs or ())
        self.reload_includes = list(reload_includes or ("*.py",))
        self.use_master = (
            self.reload
            or self.workers > 1
            or timeout is not None
            or self.max_requests > 0
            or self.max_rss > 0
            or self.preload
            or self.reuse_port
        )
        self.url_scheme = "http"
        self.ssl_certfile = None if ssl_certfile is None else os.fspath(ssl_certfile)
        self.ssl_keyfile = None if ssl_keyfile is None else os.fspath(ssl_keyfile)
        self.ssl_keyfile_password = ssl_keyfile_password
        self.ssl_ca_certs = None if ssl_ca_certs is None else os.fspath(ssl_ca_certs)
        self.ssl_cert_reqs = check_cert_reqs(ssl_cert_reqs)
        self.ssl_ciphers = ssl_ciphers
        self.ssl_version = check_tls_version(ssl_version)
        self.timeout_tls_handshake = check_float("timeout_tls_handshake", timeout_tls_handshake)
        self.ssl_ticket_rotation = check_float("ssl_ticket_rotation", ssl_ticket_rotation)
        if self.ssl_certfile is None and (self.ssl_keyfile or self.ssl_ca_certs):
            raise ValueError("--ssl-keyfile and --ssl-ca-certs need --ssl-certfile")
        try:
            self.uid, self.gid = resolve_user_group(user, group)
        except ValueError as exc:  # the system's accounts, not the option's form: exit 1
            raise StartupError(f"error: {exc}", 1) from None
        self.chdir = chdir
        self.umask = umask
        self.env = [tuple(pair) for pair in env or ()]
        self.access_logfile = access_logfile
        self.error_logfile = error_logfile
        if wsgi_errors_level is not None and wsgi_errors_level not in logconfig.LOG_LEVELS:
            raise ValueError(f"wsgi_errors_level must be one of {', '.join(logconfig.LOG_LEVELS)}")
        # None: wsgi.errors text is written as it comes (wsgi_errors_write), as gunicorn does.
        self.wsgi_errors_raw = wsgi_errors_level is None
        self.wsgi_errors_level = logconfig.LOG_LEVELS[wsgi_errors_level or "warning"]
        # What the core writes wsgi.errors text with (None: it logs each line at
        # wsgi_errors_level); set with the loggers.
        self.wsgi_errors_write = None
        self.hooks = dict(hooks or {})
        self.static = [parse_static(mount) for mount in static or ()]
        self.static_max_age = (
            None if static_max_age is None else check_int("static_max_age", static_max_age)
        )
        self.static_strict = bool(static_strict)
        self.startup_warnings = list(startup_warnings)

        self.error_logger = None
        self.access_logger = None
        self.loaded_app = None
        self.on_tick = None
        self.on_stop_signal = None
        self.on_hup = None  # a single process: called on SIGHUP (see pyserver/reexec.py)
        self.tick_interval = 1.0
        self.sockets = []
        self.bound_fds = []  # of the sockets bound here (not --fd, not socket activation)
        self._unix_paths = []
        self.prepared = False  # prepare() ran
        self.loaded = False

    def prepare(self) -> None:
        """--umask, --chdir, --env, then logging: before the first server hook (on_starting
        logs as gunicorn's does). load() calls it when it was not called. Raises StartupError."""
        if self.prepared:
            return
        self.prepared = True
        self.apply_process_settings()
        self.configure_logging()
        for warning in self.startup_warnings:
            self.error_logger.warning("%s", warning)
        if self.asgi_app is not None and self.threads == 1:
            self.error_logger.warning(
                "--asgi-app with --threads 1: the WSGI application runs on the loop's own "
                "thread, so a slow view holds up the WebSockets of its worker; give --threads N"
            )

    def load(self) -> None:
        """Set up logging, check the files, bind the sockets, import the app. Raises
        StartupError."""
        assert not self.loaded, "Config.load() called twice"
        self.prepare()
        self.check_tls()
        self.check_static()
        check_pid_file(self.pid)
        # The sockets first: a port in use, a uwsgi listener on TLS or a metrics address
        # that cannot be bound is said at once, not after a slow import. With --user/--group
        # they are bound as we started, then privileges are dropped (here, or in each
        # worker under a master that imports nothing).
        self.sockets = self.bind_sockets()
        self.bind_metrics_socket()
        # Under a master the workers import the app, unless --preload.
        if not self.use_master or self.preload:
            try:
                if self.uid is not None or self.gid is not None:
                    self.drop_privileges()
                self.load_worker_app()
            except BaseException:
                self.close_sockets()
                raise
        self.loaded = True

    def check_tls(self):
        """Load the TLS certificate, key and settings once, as the workers will.

        Raises StartupError (exit 1) with the one line saying what is wrong.
        """
        if self.ssl_certfile is None:
            return
        from pyserver import _core

        try:
            _core.check_tls(self)
        except ValueError as exc:
            raise StartupError(f"error: {exc}", 1) from None

    def check_static(self):
        """Make each --static DIR absolute (after --chdir) and check it is a directory.

        Raises StartupError (exit 1) naming the mount.
        """
        mounts = []
        for mount in self.static:
            prefix, _, directory = mount.partition("=")
            directory = os.path.abspath(directory)
            if not os.path.isdir(directory):
                reason = "not a directory" if os.path.exists(directory) else "no such directory"
                raise StartupError(f"error: --static {mount}: {reason}", 1)
            if not os.access(directory, os.R_OK | os.X_OK):
                raise StartupError(f"error: --static {mount}: permission denied", 1)
            mounts.append(f"{prefix}={directory}")
        self.static = mounts

    def apply_process_settings(self):
        """--umask, --chdir, --env: before logging, binding and importing."""
        if self.umask is not None:
            os.umask(self.umask)
        if self.chdir is not None:
            try:
                os.chdir(self.chdir)
            except OSError as exc:
                raise StartupError(f"error: cannot change to {self.chdir}: {exc}", 1) from exc
        for key, value in self.env:
            os.environ[key] = value

    def drop_privileges(self):
        """Become --group and --user (groups first, then the user). Raises StartupError."""
        try:
            if self.gid is not None:
                if self.uid is not None and os.getuid() == 0:
                    os.initgroups(pwd.getpwuid(self.uid).pw_name, self.gid)
                elif os.getuid() == 0:
                    os.setgroups([self.gid])
                os.setgid(self.gid)
            if self.uid is not None:
                if os.getuid() == 0 and self.gid is None:
                    entry = pwd.getpwuid(self.uid)
                    os.initgroups(entry.pw_name, entry.pw_gid)
                    os.setgid(entry.pw_gid)
                os.setuid(self.uid)
        except (OSError, KeyError) as exc:
            raise StartupError(f"error: cannot switch to user/group: {exc}", 1) from exc

    def load_worker_app(self):
        """Import the app (once per process) and resolve the interface."""
        if self.loaded_app is None:
            app = self.load_app()
            self.interface = self.resolve_interface(app)
            if self.asgi_app is not None:
                self.loaded_asgi_app = self.load_asgi_side()
            detected = "ASGI, lifespan " + self.lifespan if self.interface == "asgi" else "WSGI"
            self.error_logger.info("Application %s: %s", self.app_spec, detected)
            if self.loaded_asgi_app is not None:
                spec = self.asgi_app if isinstance(self.asgi_app, str) else "given"
                paths = ", ".join(self.asgi_paths) or "none"
                self.error_logger.info(
                    "ASGI application %s: WebSockets, lifespan %s, HTTP paths %s",
                    spec,
                    self.lifespan,
                    paths,
                )
            if self.interface == "asgi":
                if "pre_request" in self.hooks or "post_request" in self.hooks:
                    self.error_logger.warning(
                        "pre_request/post_request hooks are for WSGI applications: not called"
                    )
                self.loaded_app = importer.as_asgi3(app)
            else:
                from pyserver import hooks

                self.loaded_app = self.link_to_loop(hooks.wrap_wsgi(app, self))
        return self.loaded_app

    def link_to_loop(self, app):
        """With --asgi-app and application threads: the WSGI app in a hybrid.LoopLink, which
        asgi_runner points at the worker's asyncio loop (self.loop_link); else app."""
        if self.loaded_asgi_app is None or self.threads <= 1:
            return app
        from pyserver.hybrid import LoopLink

        self.loop_link = LoopLink(app)
        return self.loop_link

    def load_asgi_side(self):
        """Import --asgi-app: the ASGI application beside the WSGI APP. Raises StartupError:
        exit 2 when either is of the wrong kind, 3 when it cannot be imported."""
        if self.interface == "asgi":
            raise StartupError(
                f"error: --asgi-app is for a WSGI APP, and {self.app_spec} is an ASGI "
                "application (it can serve WebSockets itself: drop --asgi-app)",
                2,
            )
        spec = self.asgi_app if isinstance(self.asgi_app, str) else _app_name(self.asgi_app)
        app_dir = os.path.abspath(self.app_dir) if self.app_dir is not None else None
        try:
            app = importer.load_app(self.asgi_app, app_dir=app_dir, name=spec)
        except importer.AppImportError as exc:
            if exc.in_app:
                self.error_logger.error("Traceback:", exc_info=exc.__cause__)
            raise StartupError(f"error: --asgi-app: {exc}", 3) from exc
        if importer.detect_interface(app) != "asgi":
            raise StartupError(
                f"error: --asgi-app {spec} is a WSGI application; it must be an ASGI one "
                "(for Django: myproject.asgi:application)",
                2,
            )
        return importer.as_asgi3(app)

    def configure_logging(self):
        try:
            self.error_logger, self.access_logger = logconfig.configure_logging(
                self.log_level,
                self.log_config,
                self.access_log,
                access_logfile=self.access_logfile,
                error_logfile=self.error_logfile,
                access_bare=self.access_log_format != DEFAULT_ACCESS_LOG_FORMAT,
            )
        except logconfig.LogConfigError as exc:
            raise StartupError(f"error: {exc}", 1) from exc
        if self.wsgi_errors_raw:
            self.wsgi_errors_write = logconfig.stream_writer(
                self.error_logger, self.wsgi_errors_level
            )
        # No access-log work in the core when nothing would be printed.
        self.access_log = self.access_log and self.access_logger.isEnabledFor(logging.INFO)

    def load_app(self):
        """Return the application object. Raises StartupError (exit code 3)."""
        app_dir = os.path.abspath(self.app_dir) if self.app_dir is not None else None
        try:
            return importer.load_app(
                self.app, app_dir=app_dir, factory=self.factory, name=self.app_spec
            )
        except importer.AppImportError as exc:
            # The summary line, then where in the application it failed (an error deep in
            # Django's settings needs its traceback); a module or attribute that does not
            # exist is said in the one line.
            tb = importer.app_traceback(exc.__cause__) if exc.in_app else ""
            raise StartupError(f"error: {exc}{tb}", 3) from exc

    def resolve_interface(self, app):
        interface = self.interface
        if interface == "auto":
            interface = importer.detect_interface(app)
        return interface

    def bind_addresses(self):
        """The addresses to listen on: --bind, --uds and --fd, else --host/--port."""
        addresses = list(self.bind)
        if self.uds is not None:
            addresses.append(("unix", self.uds))
        if self.fd is not None:
            addresses.append(("fd", self.fd))
        if not addresses:
            addresses.append(("tcp", self.host, self.port))
        return addresses

    def bind_sockets(self):
        """Return listening, non-blocking sockets. Raises StartupError (exit code 1)."""
        from pyserver import reexec

        handed = reexec.inherited()
        if handed is not None:
            return self._take_handed_sockets(handed)
        sockets = []
        addresses = self.bind_addresses()
        inherited = systemd_fds()
        if inherited:
            # Socket activation: the inherited sockets replace the default address.
            explicit = self.bind or self.uds is not None or self.fd is not None
            addresses = (addresses if explicit else []) + [("fd", fd) for fd in inherited]
        for address in self.proxy_protocol_bind:
            if address not in addresses:
                raise StartupError(
                    f"error: --proxy-protocol-bind {describe_address(address)} is not one of "
                    f"the addresses served ({', '.join(map(describe_address, addresses))})",
                    2,
                )
            if self.ssl_certfile is not None and address[0] not in ("unix", "fd"):
                raise StartupError(PROXY_OVER_TLS.format(describe_address(address)), 2)
        if self.proxy_protocol and self.ssl_certfile is not None:
            for address in addresses:
                if address[0] not in ("unix", "fd"):
                    raise StartupError(PROXY_OVER_TLS.format(describe_address(address)), 2)
        self._check_uwsgi(addresses)
        try:
            for address in addresses:
                sockets.append(self._bind_one(address))
        except BaseException:
            self.sockets = sockets
            self.close_sockets()
            raise
        self._select_proxy_protocol(addresses, sockets)
        return sockets

    def _speaks_uwsgi(self, address):
        return self.protocol == "uwsgi" or address in self.uwsgi_bind

    def _check_uwsgi(self, addresses):
        """uwsgi listeners: no TLS, no PROXY header. Raises StartupError (exit code 2)."""
        for address in addresses:
            if not self._speaks_uwsgi(address):
                continue
            if self.ssl_certfile is not None and address[0] not in ("unix", "fd"):
                raise StartupError(UWSGI_OVER_TLS.format(describe_address(address)), 2)
            if self.proxy_protocol or address in self.proxy_protocol_bind:
                raise StartupError(UWSGI_AND_PROXY.format(describe_address(address)), 2)

    def _select_proxy_protocol(self, addresses, sockets):
        self.addresses = addresses
        self.proxy_protocol_fds = [
            sock.fileno()
            for address, sock in zip(addresses, sockets, strict=True)
            if self.proxy_protocol or address in self.proxy_protocol_bind
        ]
        self.uwsgi_fds = [
            sock.fileno()
            for address, sock in zip(addresses, sockets, strict=True)
            if self._speaks_uwsgi(address)
        ]

    def _take_handed_sockets(self, handed):
        """The sockets of the server this one replaces after a SIGHUP (pyserver.reexec):
        served as they are, the ones it bound still counted as bound here."""
        sockets = []
        for address, fd, bound in handed:
            sock = socket.socket(fileno=fd)
            sock.set_inheritable(False)
            sock.setblocking(False)
            sockets.append(sock)
            if bound:
                self.bound_fds.append(fd)
                if address[0] == "unix":
                    self._unix_paths.append(address[1])
        self._select_proxy_protocol([address for address, _, _ in handed], sockets)
        return sockets

    def speaks_proxy_protocol(self, sock):
        return sock.fileno() in self.proxy_protocol_fds

    def speaks_uwsgi(self, sock):
        return sock.fileno() in self.uwsgi_fds

    def _bind_one(self, address):
        kind = address[0]
        name = describe_address(address)
        try:
            if kind == "fd":
                sock = socket.socket(fileno=address[1])
                if sock.type != socket.SOCK_STREAM:
                    sock.detach()
                    raise OSError(f"fd {address[1]} is not a stream socket")
            elif kind == "unix":
                sock = self._bind_unix(address[1])
            else:
                sock = self._bind_tcp(address[1], address[2])
        except OSError as exc:
            verb = "use" if kind == "fd" else "bind"
            raise StartupError(f"error: cannot {verb} {name}: {exc}", 1) from exc
        try:
            sock.listen(self.backlog)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise StartupError(f"error: cannot listen on {name}: {exc}", 1) from exc
        if kind != "fd":
            self.bound_fds.append(sock.fileno())
        return sock

    def _bind_tcp(self, host, port):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
        return sock

    def _bind_unix(self, path):
        remove_stale_unix_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            self._unix_paths.append(path)
            if self.uds_perms is not None:
                os.chmod(path, self.uds_perms)
            if (self.uid is not None or self.gid is not None) and os.getuid() == 0:
                # The socket belongs to the user the workers run as (as gunicorn does).
                uid = -1 if self.uid is None else self.uid
                os.chown(path, uid, -1 if self.gid is None else self.gid)
        except BaseException:
            sock.close()
            raise
        return sock

    def bind_metrics_socket(self):
        """--metrics-bind: listen on the endpoint's address. Raises StartupError (exit 1)."""
        if self.metrics_bind is None or self.metrics_socket is not None:
            return
        address = self.metrics_bind
        name = describe_address(address)
        try:
            if address[0] == "unix":
                sock = self._bind_unix(address[1])
            else:
                sock = self._bind_tcp_plain(address[1], address[2])
            sock.listen(64)
            sock.setblocking(False)
        except OSError as exc:
            self.close_sockets()
            raise StartupError(f"error: cannot bind --metrics-bind {name}: {exc}", 1) from exc
        self.metrics_socket = sock
        self.metrics_fd = sock.fileno()

    def close_metrics_socket(self):
        """A worker under a master: the endpoint is the master's."""
        if self.metrics_socket is not None:
            self.metrics_socket.close()
            self.metrics_socket = None
        self.metrics_fd = -1

    def _bind_tcp_plain(self, host, port):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except BaseException:
            sock.close()
            raise
        return sock

    def close_sockets(self):
        """Close the listening sockets and remove the unix socket files bound here."""
        for sock in self.sockets:
            sock.close()
        self.sockets = []
        self.close_metrics_socket()
        self.bound_fds = []
        for path in self._unix_paths:
            try:
                os.unlink(path)
            except OSError:
                pass
        self._unix_paths = []


def check_pid_file(path):
    """--pid: can the file be written? Raises StartupError (exit 1) naming it, before the
    server starts, so that the error is not found after "Listening on"."""
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        reason = "it is a directory"
    elif not os.path.isdir(directory):
        reason = f"no such directory {directory}"
    elif not os.access(path if os.path.exists(path) else directory, os.W_OK):
        reason = "permission denied"
    else:
        return
    raise StartupError(f"error: cannot write the pid file {path}: {reason}", 1)


def resolve_user_group(user, group):
    """Return (uid, gid) for --user/--group (names or numbers; None for not given).
    Raises ValueError naming an unknown user or group."""
    uid = gid = None
    if user is not None:
        user = str(user)
        try:
            uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
        except KeyError:
            raise ValueError(f"user: no such user {user!r}") from None
    if group is not None:
        group = str(group)
        try:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        except KeyError:
            raise ValueError(f"group: no such group {group!r}") from None
    return uid, gid


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


def python_description():
    """ "Python 3.11.7, CPython": for --version and the startup log."""
    return f"Python {platform.python_version()}, {platform.python_implementation()}"
