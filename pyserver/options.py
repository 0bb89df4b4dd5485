"""Every option of pyserver, written once.

Each Option below says what the option is called on the command line (its flags), in
the environment (PYSERVER_<NAME>), in a -c config file and in [tool.pyserver] (its name,
or a gunicorn setting that means the same), which keyword argument and attribute of
Config holds it (its name), what a valid value is (type and bounds, or choices), its
default, and how it is described in --help and in docs/configuration.md. From this table
come the command-line parser (cli.py), the environment and config-file readers (cli.py,
configfile.py), Config's checks of each value (config.py), the gunicorn worker's mapping
(workers.py) and the option tables of docs/configuration.md:

    python -m pyserver.options --write docs/configuration.md   # after changing an option
    python -m pyserver.options --check docs/configuration.md   # exit 1 when out of date

What involves several options at once (uwsgi on a TLS listener, --asgi-path without
--asgi-app, --timeout's default under --reload) is Config's logic, not the table's.
"""

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyserver import checks, logconfig, sockets

ENV_PREFIX = "PYSERVER_"
MISSING: Any = object()  # Option.check: the keyword argument was not given


@dataclass(frozen=True)
class Group:
    """A group of options: its title in --help and the heading of its table in the docs."""

    title: str | None
    heading: str | None


@dataclass(frozen=True)
class Option:
    """One option. kind is how it is given: "value" (--opt VALUE), "list" (repeatable,
    space-separated in the environment), "flag" (--opt, on) or "switch" (--opt/--no-opt).
    type converts one value (one item of a list): int and float are checked against
    bounds (lo, hi; None: unbounded), choices are compared in lower case, any other
    callable is a check of pyserver.checks (or sockets) and raises ValueError."""

    name: str
    flags: tuple[str, ...]
    group: Group
    kind: str = "value"
    metavar: str | None = None
    type: Callable[[Any], Any] | None = None
    bounds: tuple[Any, Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = None
    # Config's value for None, when it is not the default (uvicorn's ws_ping_interval=None).
    when_none: Any = None
    # More environment variables read after PYSERVER_<NAME>, at the same precedence.
    env_also: tuple[str, ...] = ()
    # Config takes its default from this variable when it is set (gunicorn's rule).
    default_env: str | None = None
    # gunicorn setting names that mean this option in a -c file (and its transform).
    gunicorn: tuple[str, ...] = ()
    gunicorn_rule: str | None = None
    help: str = ""
    doc: str = ""
    doc_default: str | None = None
    doc_section: str | None = None
    hidden: bool = False  # not in --help nor in the docs
    octal: bool = False  # a number in a config file is the mode itself (0o660)
    config: bool = True  # a keyword argument of Config
    in_files: bool = True  # may be set in a -c file or [tool.pyserver]
    env: tuple[str, ...] = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "env", (ENV_PREFIX + self.name.upper(), *self.env_also))
        if self.kind in ("flag", "switch") and self.default is None:
            object.__setattr__(self, "default", False)

    @property
    def takes_value(self) -> bool:
        return self.kind in ("value", "list")

    def convert(self, value: Any) -> Any:
        """One value (one item of a list) as Config keeps it; raises ValueError."""
        if self.kind in ("flag", "switch"):
            return checks.boolean(value)
        if self.bounds is not None:
            lo, hi = self.bounds
            if self.type is float:
                return checks.seconds(value, lo, hi)
            return checks.integer(value, lo, hi)
        if self.choices is not None:
            return checks.choice(value, self.choices)
        if self.type is not None:
            return self.type(value)
        return value

    def check(self, value: Any = MISSING, environ: Mapping[str, str] | None = None) -> Any:
        """Config's value for a keyword argument (MISSING: not given); raises ValueError
        naming the option, or the environment variable the default came from."""
        where = self.name
        if value is None and self.when_none is not None:
            value = self.when_none
        if (value is None or value is MISSING) and self.default_env is not None:
            environ = os.environ if environ is None else environ
            value = environ.get(self.default_env)
            if value is not None:
                where = f"environment variable {self.default_env}"
        if self.kind == "list" and (value is None or value is MISSING or len(value) == 0):
            value = self.default or ()  # an empty list is no list: the default's items
        elif value is None or value is MISSING:
            value = self.default
            if value is None:
                return None
        try:
            if self.kind == "list":
                items = [value] if isinstance(value, str) else list(value)
                return [self.convert(item) for item in items]
            return self.convert(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None

    def default_text(self) -> str:
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)

    def help_text(self) -> str:
        return self.help.replace("{default}", self.default_text())


SOCKETS = Group("sockets", "Sockets")
APPLICATION = Group("application", "Application")
HTTP = Group("HTTP timeouts and limits", "HTTP timeouts and limits")
HTTP2 = Group("HTTP/2", "HTTP timeouts and limits")
WEBSOCKETS = Group("WebSockets (ASGI)", "HTTP timeouts and limits")
TLS = Group("TLS (on every TCP bind; unix-socket binds stay plain)", "TLS")
PROXY = Group("proxy headers", "Proxy headers")
STATIC = Group("static files (served by the core, before the app)", "Static files")
HEALTH = Group("health check and drain (answered by the core, before the app)", "Health checks")
COMPRESSION = Group("response compression", "Response compression")
LOGGING = Group("logging", "Logging")
PROCESSES = Group("processes", "Processes")
DEVELOPMENT = Group("development", "Development")
TOP = Group(None, None)  # APP and -c: the parser's own, in no table

LOG_LEVELS = tuple(logconfig.LOG_LEVELS)
# What --compress compresses unless --compress-types says otherwise: text and the
# text-like application types (already compressed formats such as images, fonts in WOFF2,
# archives and application/wasm are left out; a user can name them).
DEFAULT_COMPRESS_TYPES = (
    "text/*",
    "application/json",
    "*+json",
    "application/javascript",
    "application/xml",
    "*+xml",
    "application/x-ndjson",
)
# The default access line: the client, request and status, with gunicorn's user and time,
# the body bytes and the duration in seconds.
DEFAULT_ACCESS_LOG_FORMAT = '%(client)s - %(u)s %(t)s "%(r)s" %(s)s %(B)s %(L)s'
DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"
# How a -c file's gunicorn setting differs from the option (Option.gunicorn_rule).
ZERO_IS_MAX = "zero is max"  # gunicorn's 0, "no limit": the largest value pyserver accepts
TRUTH = "truth"  # any value, taken by its truth
NONE_IS_NO_ACCESS_LOG = "none is no access log"  # accesslog = None
GUNICORN_NOTES = {
    ZERO_IS_MAX: 'gunicorn\'s 0 ("no limit") is the largest value pyserver accepts',
    NONE_IS_NO_ACCESS_LOG: "`None` turns the access log off",
}


OPTIONS: tuple[Option, ...] = (
    Option(
        "app",
        (),
        TOP,
        metavar="APP",
        type=checks.app_spec,
        config=False,
        doc_section="Application",
        gunicorn=("wsgi_app",),
        help=(
            "the application, as MODULE:ATTR (e.g. myproject.wsgi:application); MODULE alone "
            "means MODULE:application"
        ),
        doc_default="required",
        doc=(
            "`MODULE:ATTR`; `ATTR` may be dotted; `MODULE` alone means `MODULE:application` (as"
            " in gunicorn)"
        ),
    ),
    Option(
        "host",
        ("--host",),
        SOCKETS,
        default="127.0.0.1",
        help="bind to this address (default: {default})",
        doc="address to bind; an address with `:` is IPv6",
    ),
    Option(
        "port",
        ("--port",),
        SOCKETS,
        metavar="PORT",
        type=int,
        bounds=sockets.PORT_RANGE,
        default=8000,
        help="bind to this port (default: {default})",
        doc="0-65535; 0 lets the kernel choose (the log shows the port)",
    ),
    Option(
        "bind",
        ("-b", "--bind"),
        SOCKETS,
        kind="list",
        metavar="ADDRESS",
        type=sockets.bind_address,
        gunicorn=("bind",),
        help=(
            "listen on HOST:PORT, [IPV6]:PORT, unix:PATH or fd://N, any of them after uwsgi:// "
            "to speak the uwsgi protocol there (nginx's uwsgi_pass); repeatable; replaces "
            "--host/--port"
        ),
        doc=("repeatable; `HOST:PORT`, `HOST` (port 8000), `[IPV6]:PORT`, `unix:PATH`, `fd://N`"),
    ),
    Option(
        "protocol",
        ("--protocol",),
        SOCKETS,
        metavar="{http,uwsgi}",
        choices=("http", "uwsgi"),
        default="http",
        help=(
            "what every listener speaks: http, or uwsgi for nginx's uwsgi_pass (peers must be "
            "trusted by --forwarded-allow-ips; default: {default})"
        ),
        doc=(
            "what every listener speaks: `uwsgi` for nginx's `uwsgi_pass` (one listener alone: "
            "`--bind uwsgi://ADDRESS`); the peers must be trusted by `--forwarded-allow-ips`, "
            "and uwsgi cannot be combined with TLS or the PROXY protocol on a listener"
        ),
    ),
    Option(
        "uds",
        ("--uds",),
        SOCKETS,
        metavar="PATH",
        help="listen on this unix domain socket",
        doc="unix domain socket to listen on",
    ),
    Option(
        "uds_perms",
        ("--uds-perms",),
        SOCKETS,
        metavar="MODE",
        type=checks.file_mode,
        octal=True,
        help="octal permissions for the --uds socket file (e.g. 660)",
        doc_default="umask",
        doc=(
            "octal permissions of the socket file, e.g. `660`; applied to every unix socket "
            "pyserver binds, `--bind unix:PATH` included"
        ),
    ),
    Option(
        "fd",
        ("--fd",),
        SOCKETS,
        type=int,
        bounds=sockets.FD_RANGE,
        help="listen on this inherited file descriptor (already bound)",
        doc="inherited socket to listen on (already bound, e.g. from systemd)",
    ),
    Option(
        "backlog",
        ("--backlog",),
        SOCKETS,
        type=int,
        bounds=(1, None),
        default=2048,
        gunicorn=("backlog",),
        help="maximum number of pending connections (default: {default})",
        doc="length of the listen queue",
    ),
    Option(
        "interface",
        ("--interface",),
        APPLICATION,
        metavar="{auto,wsgi,asgi}",
        choices=("auto", "wsgi", "asgi"),
        default="auto",
        help="application interface; auto detects it (default: {default})",
        doc=(
            "`auto` detects it: coroutine functions, objects with an async `__call__`, "
            "awaitable classes and ASGI 2 callables taking only `scope` are ASGI, the rest "
            "WSGI. ASGI 2 applications are wrapped into ASGI 3 (asgiref's "
            "`_asgi_single`/`_asgi_double` markers are honoured)."
        ),
    ),
    Option(
        "asgi_app",
        ("--asgi-app",),
        APPLICATION,
        metavar="MODULE:ATTR",
        type=checks.app_spec,
        help=(
            "an ASGI application beside a WSGI APP, in the same workers and on the same port: "
            "WebSocket upgrades and the lifespan protocol go to it, plain HTTP to APP (e.g. "
            "myproject.asgi:application; give --threads N too)"
        ),
        doc=(
            "an ASGI application beside a WSGI `APP`, in the same workers and on the same port:"
            " WebSocket upgrades and the lifespan protocol go to it, plain HTTP requests to "
            "`APP` (see [django.md](django.md#channels-without-the-asgi-tax)). With `--threads "
            "N` the WSGI views run on the N application threads while the loop thread runs "
            "asyncio; with `--threads 1` a warning says that a slow view holds the WebSockets "
            "of its worker. Naming a WSGI callable, or an ASGI `APP` (or `--interface asgi`), "
            "is one line and exit status 2; an import failure exits with 3"
        ),
    ),
    Option(
        "asgi_paths",
        ("--asgi-path",),
        APPLICATION,
        kind="list",
        metavar="PREFIX",
        help=(
            "with --asgi-app: HTTP requests under this path prefix go to the ASGI application "
            "as well (server-sent events, long polling); repeatable"
        ),
        doc=(
            "with `--asgi-app`, HTTP requests whose path is `PREFIX` or lies under it go to the"
            " ASGI application as well (server-sent events, long polling, async views); "
            "repeatable. Compared with the path as sent (before percent-decoding); a trailing "
            "`/` is dropped, so `/events/` takes `/events`, `/events/...` and `/events?...`, "
            "not `/eventsx`. Over HTTP/2 a stream is routed the same way; WebSockets over "
            "HTTP/2 are not offered"
        ),
    ),
    Option(
        "factory",
        ("--factory",),
        APPLICATION,
        kind="flag",
        help="APP is a factory: call it with no arguments to get the application",
        doc="call `ATTR` with no arguments to get the application",
    ),
    Option(
        "app_dir",
        ("--app-dir",),
        APPLICATION,
        metavar="DIR",
        default=".",
        help="look for APP in this directory, put first on sys.path (default: {default})",
        doc="directory inserted first on `sys.path` before importing",
    ),
    Option(
        "root_path",
        ("--root-path",),
        APPLICATION,
        metavar="PATH",
        type=checks.root_path,
        default="",
        help=("mount path of the application: WSGI SCRIPT_NAME, ASGI root_path (default: none)"),
        doc_default="empty",
        doc=(
            "where the application is mounted: `SCRIPT_NAME` for WSGI, the scope's `root_path` "
            "for ASGI (see [asgi.md](asgi.md)). Must start with `/`; a trailing `/` is dropped."
        ),
    ),
    Option(
        "timeout_keep_alive",
        ("--timeout-keep-alive",),
        HTTP,
        type=float,
        bounds=(0.0, None),
        default=5.0,
        gunicorn=("keepalive",),
        help=("close idle keep-alive connections after this many seconds (default: {default})"),
        doc="seconds an idle keep-alive connection is kept",
    ),
    Option(
        "timeout_request_header",
        ("--timeout-request-header",),
        HTTP,
        type=float,
        bounds=(0.001, None),
        default=60.0,
        help=(
            "answer 408 and close when a request head is not complete this many seconds after "
            "its first byte; also how long a response write may make no progress (default: "
            "{default})"
        ),
        doc=(
            "seconds a client has, from its first byte, to send a complete request head (one "
            "deadline: a head sent a byte at a time gets 408 all the same); also how long a "
            "response write may make no progress before the connection is closed"
        ),
    ),
    Option(
        "timeout_request_body",
        ("--timeout-request-body",),
        HTTP,
        type=float,
        bounds=(0.001, None),
        default=30.0,
        help=(
            "answer 408 and close when a request body makes no progress for this many seconds "
            "(default: {default})"
        ),
        doc=(
            "seconds a request body may make no progress (no read that adds body bytes; chunk "
            "framing alone does not count) before it is answered 408 and the connection closed"
        ),
    ),
    Option(
        "graceful_timeout",
        ("--graceful-timeout", "--timeout-graceful-shutdown"),
        HTTP,
        type=float,
        bounds=(0.0, None),
        default=30.0,
        gunicorn=("graceful_timeout",),
        help=(
            "on SIGTERM or SIGINT, give requests in progress this many seconds to finish "
            "(default: {default})"
        ),
        doc=(
            "on SIGTERM or SIGINT, seconds requests in progress get to finish; then their "
            "connections are closed. With 0, a single process waits without limit, while a "
            "master kills its workers 1 s after the stop began"
        ),
    ),
    Option(
        "limit_concurrency",
        ("--limit-concurrency",),
        HTTP,
        type=int,
        bounds=(0, None),
        default=0,
        help=(
            "answer new requests 503 while more than N connections are open or N requests are "
            "in progress in a worker (default: no limit)"
        ),
        doc_default="`0`, no limit",
        doc=(
            "a new request is answered `503 Service Unavailable` with `Connection: close`, "
            "without calling the application, while more than N connections are open in its "
            "worker (itself included; an HTTP/2 connection counts once per stream in progress) "
            "or N requests are in progress there (see below)"
        ),
    ),
    Option(
        "limit_max_requests",
        ("--limit-max-requests",),
        HTTP,
        type=int,
        bounds=(0, None),
        default=0,
        help="the same as --max-requests (uvicorn's name for it)",
        doc_section="ASGI",
        doc_default="`0`, never",
        doc=(
            "uvicorn's name for `--max-requests`: the master replaces the worker after N "
            "requests. It applies to WSGI too and runs a master; when both are given, "
            "`--max-requests` wins"
        ),
    ),
    Option(
        "lifespan",
        ("--lifespan",),
        HTTP,
        choices=("auto", "on", "off"),
        default="auto",
        help="ASGI lifespan events: auto, on or off (default: {default})",
        doc_section="ASGI",
        doc=(
            "lifespan events, with uvicorn's semantics: `on` requires them (a failure exits "
            "with status 3), `auto` goes on without them when the application raises before "
            "startup completes, `off` never sends them"
        ),
    ),
    Option(
        "limit_request_line",
        ("--limit-request-line",),
        HTTP,
        metavar="BYTES",
        type=int,
        bounds=(1, 65536),
        default=8190,
        gunicorn=("limit_request_line",),
        gunicorn_rule=ZERO_IS_MAX,
        help=(
            "maximum size of the request line (method, target and version), 1-65536 (default: "
            "{default})"
        ),
        doc=(
            "size of the whole request line in bytes (method, target, version and the spaces "
            "between them, without the CRLF), 1-65536; a longer line is answered 414"
        ),
    ),
    Option(
        "limit_request_fields",
        ("--limit-request-fields",),
        HTTP,
        type=int,
        bounds=(1, 32768),
        default=100,
        gunicorn=("limit_request_fields",),
        gunicorn_rule=ZERO_IS_MAX,
        help="maximum number of request header fields, 1-32768 (default: {default})",
        doc="number of header fields, 1-32768",
    ),
    Option(
        "limit_request_field_size",
        ("--limit-request-field-size",),
        HTTP,
        metavar="BYTES",
        type=int,
        bounds=(1, 65536),
        default=8190,
        gunicorn=("limit_request_field_size",),
        gunicorn_rule=ZERO_IS_MAX,
        help=(
            "maximum size of one request header field line (name, colon, whitespace, value and "
            "CRLF, as gunicorn counts it), 1-65536 (default: {default})"
        ),
        doc=(
            "size of one header field line in bytes, counted as gunicorn and nginx count it: "
            "name, colon, whitespace, value and CRLF; 1-65536"
        ),
    ),
    Option(
        "limit_request_head",
        ("--limit-request-head",),
        HTTP,
        metavar="BYTES",
        type=int,
        bounds=(1, 1073741824),
        default=65536,
        help=(
            "maximum size of a request head (request line plus header fields); 431 beyond it "
            "(default: {default})"
        ),
        doc=(
            "size of the whole request head in bytes (request line, header fields, their line "
            "ends and the blank line), 1-1073741824; checked while the head arrives, so a "
            "client can make a connection hold at most this much of a head; beyond it the "
            "answer is 431 and the connection is closed. The gunicorn worker class has no such "
            "gunicorn setting and keeps the default"
        ),
    ),
    Option(
        "limit_request_body",
        ("--limit-request-body",),
        HTTP,
        metavar="BYTES",
        type=int,
        bounds=(0, None),
        default=0,
        help="maximum size of a request body; 0 means no limit (default: {default})",
        doc=(
            "body size in bytes; 0 means no limit. A larger `Content-Length` is answered 413 at"
            " once (never `100 Continue`); a chunked body is answered 413 when it grows past "
            "the limit"
        ),
    ),
    Option(
        "body_spool_threshold",
        ("--body-spool-threshold",),
        HTTP,
        metavar="BYTES",
        type=int,
        bounds=(0, None),
        default=1048576,
        help=(
            "WSGI: the server reads each request body before the application runs; bodies "
            "larger than this go to an unlinked temporary file in $TMPDIR instead of memory "
            "(default: {default})"
        ),
        doc_default="`1048576` (1 MiB)",
        doc=(
            "WSGI: the worker reads each request body before it calls the application; a body "
            "of up to N bytes is held in memory, a larger one goes to an unlinked temporary "
            "file in `$TMPDIR` (or `/tmp`), closed when the request ends"
        ),
    ),
    Option(
        "limit_connections",
        ("--limit-connections",),
        HTTP,
        type=int,
        bounds=(1, None),
        default=10000,
        gunicorn=("worker_connections",),
        help=(
            "open connections per worker; at the limit the worker stops accepting until one "
            "closes (default: {default})"
        ),
        doc=(
            "open connections per worker; at the limit the worker stops accepting until one closes"
        ),
    ),
    Option(
        "server_header",
        ("--server-header",),
        HTTP,
        kind="switch",
        default=True,
        help="send a Server header (default: on)",
        doc="send a `Server` header",
    ),
    Option(
        "date_header",
        ("--date-header",),
        HTTP,
        kind="switch",
        default=True,
        help="send a Date header (default: on)",
        doc="send a `Date` header",
    ),
    Option(
        "http",
        ("--http",),
        HTTP2,
        choices=("auto", "1", "2"),
        default="auto",
        help=(
            "auto: HTTP/1.1, and cleartext HTTP/2 by prior knowledge or Upgrade: h2c; 1: "
            "HTTP/1.1 only; 2: HTTP/2 by prior knowledge only (default: {default})"
        ),
        doc=(
            "`auto`: HTTP/1.1, plus cleartext HTTP/2 (h2c) for a client that starts with the "
            "HTTP/2 preface (prior knowledge, `curl --http2-prior-knowledge`) or sends "
            "`Upgrade: h2c` with `HTTP2-Settings` on a request without a body (`curl --http2`; "
            "the request becomes stream 1). `1`: HTTP/1.1 only. `2`: HTTP/2 by prior knowledge "
            "only; an HTTP/1 request is answered 505. Server push is not implemented (it is "
            "deprecated)"
        ),
    ),
    Option(
        "http2_max_concurrent_streams",
        ("--http2-max-concurrent-streams",),
        HTTP2,
        type=int,
        bounds=(1, 1048576),
        default=100,
        help="streams one client may have open (default: {default})",
        doc=(
            "streams one HTTP/2 client may have open; each one more is refused with `RST_STREAM"
            " REFUSED_STREAM` and the connection goes on (the refusals count against "
            "`--http2-max-resets`)"
        ),
    ),
    Option(
        "http2_max_headers_size",
        ("--http2-max-headers-size",),
        HTTP2,
        metavar="BYTES",
        type=int,
        bounds=(1024, 16777216),
        default=65536,
        help=(
            "decoded request header list, names + values + 32 per field; 431 beyond (default: "
            "{default})"
        ),
        doc=(
            "decoded request header list (names + values + 32 bytes per field, RFC 9113's "
            "measure), announced as `SETTINGS_MAX_HEADER_LIST_SIZE`; a larger one is answered "
            "431. The field count is bounded by `--limit-request-fields`"
        ),
    ),
    Option(
        "http2_initial_stream_window_size",
        ("--http2-initial-stream-window-size",),
        HTTP2,
        metavar="BYTES",
        type=int,
        bounds=(1024, 2147483647),
        default=262144,
        help="request body bytes a stream may have unread (default: {default})",
        doc=(
            "request body bytes one stream may have sent and the application not read yet; the "
            "window reopens as the application reads"
        ),
    ),
    Option(
        "http2_initial_connection_window_size",
        ("--http2-initial-connection-window-size",),
        HTTP2,
        metavar="BYTES",
        type=int,
        bounds=(65535, 2147483647),
        default=1048576,
        help="request body bytes a connection may have unread (default: {default})",
        doc="the same for all the streams of a connection",
    ),
    Option(
        "http2_max_new_streams",
        ("--http2-max-new-streams",),
        HTTP2,
        type=int,
        bounds=(1, 16777216),
        default=1000000,
        help=(
            "streams one client may open a second; one more: GOAWAY ENHANCE_YOUR_CALM (default:"
            " {default})"
        ),
        doc=(
            "streams one HTTP/2 connection may open a second, 1-16777216. The default is above "
            "what one worker can serve on one connection (one h2load connection gets about "
            "160,000 hello-world responses a second here): a proxy that sends all its traffic "
            "over one connection must not be cut off. Rapid Reset is bounded by "
            "`--http2-max-resets`"
        ),
    ),
    Option(
        "http2_max_resets",
        ("--http2-max-resets",),
        HTTP2,
        type=int,
        bounds=(1, 16777216),
        default=200,
        help=(
            "RST_STREAM frames received, plus streams reset for what the client did (refused, "
            "malformed, a frame on a closed stream), a second (the Rapid Reset bound); one "
            "more: GOAWAY ENHANCE_YOUR_CALM (default: {default})"
        ),
        doc=(
            "`RST_STREAM` frames received, plus `HEADERS` or `DATA` on a stream the client has "
            "reset, a second: the Rapid Reset (CVE-2023-44487) bound, 1-16777216. Streams the "
            "server resets for what the client did count here too: refused over "
            "`--http2-max-concurrent-streams` (`REFUSED_STREAM`), a malformed request, a frame "
            "the stream's state forbids (`PROTOCOL_ERROR`, `STREAM_CLOSED`, "
            "`FLOW_CONTROL_ERROR`: the MadeYouReset attack, CVE-2025-8671), a body over the "
            "limit or a stalled reader (`CANCEL`); the client's next frame past the bound gets "
            "the `GOAWAY`. Resets after a complete response (`NO_ERROR`) and for an "
            "application's failure (`INTERNAL_ERROR`) are not counted"
        ),
    ),
    Option(
        "http2_max_control_frames",
        ("--http2-max-control-frames",),
        HTTP2,
        type=int,
        bounds=(1, 16777216),
        default=100,
        help=(
            "SETTINGS, PING, PRIORITY and unknown frames a second; one more: GOAWAY "
            "ENHANCE_YOUR_CALM (default: {default})"
        ),
        doc=(
            "`SETTINGS` and `PING` frames (not their ACKs), `PRIORITY` and unknown frames, a "
            "second, 1-16777216"
        ),
    ),
    Option(
        "http2_max_empty_frames",
        ("--http2-max-empty-frames",),
        HTTP2,
        type=int,
        bounds=(1, 16777216),
        default=100,
        help=(
            "DATA frames without payload or END_STREAM, a second; one more: GOAWAY "
            "ENHANCE_YOUR_CALM (default: {default})"
        ),
        doc="`DATA` frames with no payload and no `END_STREAM`, a second, 1-16777216",
    ),
    Option(
        "http2_max_window_updates",
        ("--http2-max-window-updates",),
        HTTP2,
        type=int,
        bounds=(1, 16777216),
        default=50000,
        help=(
            "WINDOW_UPDATE frames a second; one more: GOAWAY ENHANCE_YOUR_CALM (default: {default})"
        ),
        doc="`WINDOW_UPDATE` frames a second, 1-16777216",
    ),
    Option(
        "http2_max_continuations",
        ("--http2-max-continuations",),
        HTTP2,
        type=int,
        bounds=(1, 65536),
        default=16,
        help=(
            "CONTINUATION frames of one header block; one more: GOAWAY ENHANCE_YOUR_CALM "
            "(default: {default})"
        ),
        doc=(
            "`CONTINUATION` frames of one header block (CVE-2024-27316), 1-65536; the block's "
            "bytes are bounded too, by `--http2-max-headers-size` + 16384"
        ),
    ),
    Option(
        "ws",
        ("--ws",),
        WEBSOCKETS,
        choices=("auto", "none"),
        default="auto",
        help=(
            "auto: upgrade requests get a websocket scope; none: an http scope (default: {default})"
        ),
        doc=(
            "ASGI: an upgrade request (`Upgrade: websocket`, `Connection: upgrade`) gets a "
            "`websocket` scope; `none` gives it an ordinary `http` scope, as uvicorn does "
            "([asgi.md](asgi.md#websockets))"
        ),
    ),
    Option(
        "ws_max_size",
        ("--ws-max-size",),
        WEBSOCKETS,
        metavar="BYTES",
        type=int,
        bounds=(1, 1099511627776),
        default=16777216,
        help="largest WebSocket message; a larger one closes with 1009 (default: {default})",
        doc=(
            "largest WebSocket message in bytes, after inflating, over all its frames; a larger"
            " one closes the connection with 1009"
        ),
    ),
    Option(
        "ws_max_queue",
        ("--ws-max-queue",),
        WEBSOCKETS,
        type=int,
        bounds=(1, 1048576),
        default=32,
        help=(
            "messages received and not yet read by the application before the server stops "
            "reading (default: {default})"
        ),
        doc=(
            "messages received and not yet taken by `receive()`; at the bound the server stops "
            "reading the connection (TCP backpressure)"
        ),
    ),
    Option(
        "ws_ping_interval",
        ("--ws-ping-interval",),
        WEBSOCKETS,
        type=float,
        bounds=(0.0, None),
        default=20.0,
        when_none=0.0,
        help="send a ping this often; 0 for never (default: {default})",
        doc="seconds between server pings; 0 for none",
    ),
    Option(
        "ws_ping_timeout",
        ("--ws-ping-timeout",),
        WEBSOCKETS,
        type=float,
        bounds=(0.0, None),
        default=20.0,
        when_none=0.0,
        help=(
            "close with 1011 when a ping is not answered within this time; 0 for never "
            "(default: {default})"
        ),
        doc="a ping unanswered this long closes the connection with 1011; 0 waits forever",
    ),
    Option(
        "ws_per_message_deflate",
        ("--ws-per-message-deflate",),
        WEBSOCKETS,
        metavar="BOOL",
        type=checks.boolean,
        default=True,
        help="accept permessage-deflate compression: true or false (default: true)",
        doc_default="`true`",
        doc="accept permessage-deflate offers (the server compresses with a 12-bit window)",
    ),
    Option(
        "ws_deflate_level",
        ("--ws-deflate-level",),
        WEBSOCKETS,
        metavar="0-9",
        type=int,
        bounds=(0, 9),
        default=1,
        help=(
            "deflate level of the messages the server compresses: 1 is ISA-L's igzip from a "
            "connection's first message of 256 bytes (zlib's 1 before it), about a fifth of the"
            " CPU of zlib's 6 for output about a fifth larger; 0 and 2-9 are zlib's (default: "
            "{default})"
        ),
        doc=(
            "deflate level of the messages the server compresses: 1 is zlib's level 1 until a "
            "connection's first message of 256 bytes, then ISA-L's igzip; 0 and 2-9 zlib's "
            "levels (6: about a fifth smaller output for several times the CPU)"
        ),
    ),
    Option(
        "ssl_certfile",
        ("--ssl-certfile", "--certfile"),
        TLS,
        kind="list",
        metavar="FILE",
        gunicorn=("certfile",),
        type=checks.path,
        help=(
            "serve TLS with this PEM certificate (then its chain); repeat it with "
            "--ssl-keyfile for more certificates, chosen by the name a client asks for (SNI), "
            "the first being the default"
        ),
        doc_default="none: no TLS",
        doc=(
            "the PEM certificate, then its chain; several (each with its `--ssl-keyfile`, in "
            "the same order) are chosen by the server name a client sends, the first being the "
            "default: see below"
        ),
    ),
    Option(
        "ssl_keyfile",
        ("--ssl-keyfile", "--keyfile"),
        TLS,
        kind="list",
        metavar="FILE",
        gunicorn=("keyfile",),
        type=checks.path,
        help="the PEM private key of the --ssl-certfile in the same position",
        doc_default="the key is in the certificate file",
        doc="the PEM private key; one per `--ssl-certfile`, or none when each file holds its key",
    ),
    Option(
        "ssl_keyfile_password",
        ("--ssl-keyfile-password",),
        TLS,
        metavar="PASSWORD",
        help="the private key's password",
        doc="the password of an encrypted key (never prompted for)",
    ),
    Option(
        "ssl_ca_certs",
        ("--ssl-ca-certs", "--ca-certs"),
        TLS,
        metavar="FILE",
        gunicorn=("ca_certs",),
        type=checks.path,
        help="PEM file of the CAs whose client certificates are accepted",
        doc="the CAs whose client certificates are accepted (mTLS)",
    ),
    Option(
        "ssl_cert_reqs",
        ("--ssl-cert-reqs", "--cert-reqs"),
        TLS,
        metavar="MODE",
        type=checks.cert_reqs,
        gunicorn=("cert_reqs",),
        default=0,
        help="client certificates: none, optional or required (or 0, 1, 2; default: none)",
        doc_default="`none`",
        doc=(
            "client certificates: `none`, `optional` (verified when sent) or `required`; also "
            "`0`, `1`, `2` as uvicorn and gunicorn take them"
        ),
    ),
    Option(
        "ssl_ciphers",
        ("--ssl-ciphers", "--ciphers"),
        TLS,
        metavar="LIST",
        gunicorn=("ciphers",),
        help="OpenSSL cipher list for TLS 1.2 (default: ECDHE with AES-GCM or ChaCha20)",
        doc_default="ECDHE with AES-GCM or ChaCha20-Poly1305",
        doc="the OpenSSL cipher list for TLS 1.2 (TLS 1.3 keeps OpenSSL's suites)",
    ),
    Option(
        "ssl_version",
        ("--ssl-version",),
        TLS,
        metavar="VERSION",
        type=checks.tls_version,
        default="TLSv1.2",
        help="the lowest TLS version accepted: TLSv1.2 or TLSv1.3 (default: {default})",
        doc="the lowest version accepted: `TLSv1.2` or `TLSv1.3`",
    ),
    Option(
        "timeout_tls_handshake",
        ("--timeout-tls-handshake",),
        TLS,
        type=float,
        bounds=(0.001, None),
        default=10.0,
        help=(
            "close a connection whose TLS handshake is not done after this many seconds "
            "(default: {default})"
        ),
        doc="a connection whose handshake is not done after S seconds is closed",
    ),
    # ---- TLS without a proxy in front (issue 37): HSTS and the HTTP -> HTTPS redirect ----
    Option(
        "hsts",
        ("--hsts",),
        TLS,
        metavar="SECONDS[,includeSubDomains][,preload]",
        type=checks.hsts,
        help=(
            "send Strict-Transport-Security: max-age=SECONDS on every TLS response the "
            "application did not give one; add ,includeSubDomains and ,preload to say them too"
        ),
        doc_default="off",
        doc=(
            "`Strict-Transport-Security: max-age=SECONDS` on every response over TLS (HTTP/1.1 "
            "and HTTP/2) that has none from the application; `SECONDS,includeSubDomains`, "
            "`SECONDS,includeSubDomains,preload` add those directives (browsers remember them: "
            "see below)"
        ),
    ),
    Option(
        "redirect_http",
        ("--redirect-http",),
        TLS,
        metavar="ADDRESS",
        type=sockets.parse_redirect_bind,
        help=(
            "also listen in plain HTTP on HOST:PORT and answer every request with a redirect "
            "to the same URL in https (301 for GET and HEAD, 308 otherwise)"
        ),
        doc_default="off",
        doc=(
            "a plain-HTTP listener on `HOST:PORT` that answers each request with a redirect "
            "to `https://` the same host and target (301 for GET and HEAD, 308 for other "
            "methods); needs a TLS listener: see below"
        ),
    ),
    Option(
        "ssl_ticket_rotation",
        ("--ssl-ticket-rotation",),
        TLS,
        type=float,
        bounds=(0.1, None),
        default=3600.0,
        hidden=True,  # tests shorten it
        help="seconds between new session ticket keys (the last 4 decrypt)",
    ),
    Option(
        "proxy_headers",
        ("--proxy-headers",),
        PROXY,
        kind="switch",
        default=True,
        help=(
            "take the client address from X-Forwarded-For and the scheme from X-Forwarded-Proto"
            " when the peer is a trusted proxy (default: on)"
        ),
        doc=(
            "read `Forwarded` (RFC 7239) and `X-Forwarded-For`/`-Proto`/`-Host`/`-Port` from "
            "trusted proxies"
        ),
    ),
    Option(
        "forwarded_allow_ips",
        ("--forwarded-allow-ips",),
        PROXY,
        metavar="LIST",
        type=checks.forwarded_allow_ips,
        gunicorn=("forwarded_allow_ips",),
        default=DEFAULT_FORWARDED_ALLOW_IPS,
        default_env="FORWARDED_ALLOW_IPS",
        help=(
            "trusted proxies: comma-separated IP addresses and CIDR networks, or * for all "
            "(default: $FORWARDED_ALLOW_IPS or 127.0.0.1,::1; unix-socket peers are always "
            "trusted)"
        ),
        doc_default="`127.0.0.1,::1`",
        doc=(
            "the trusted proxies: comma-separated IPv4/IPv6 addresses and CIDR networks "
            "(`10.0.0.0/8`, `fd00::/8`), or `*` for every peer"
        ),
    ),
    Option(
        "proxy_protocol",
        ("--proxy-protocol",),
        PROXY,
        kind="switch",
        gunicorn=("proxy_protocol",),
        gunicorn_rule=TRUTH,
        help=(
            "every listener takes a PROXY protocol header (v1 or v2) before HTTP: trusted peers"
            " (--forwarded-allow-ips) must send one, others may not (default: off)"
        ),
        doc_section="The PROXY protocol",
        doc="every listener takes PROXY headers",
    ),
    Option(
        "proxy_protocol_bind",
        ("--proxy-protocol-bind",),
        PROXY,
        kind="list",
        metavar="ADDRESS",
        type=sockets.bind_address,
        help=(
            "only this listener takes PROXY headers, written as in --bind (HOST:PORT, "
            "[IPV6]:PORT, unix:PATH, fd://N); repeatable"
        ),
        doc_section="The PROXY protocol",
        doc=(
            "only these listeners do; `ADDRESS` is written as in `--bind` (`HOST:PORT`, "
            "`[IPV6]:PORT`, `unix:PATH`, `fd://N`) and must be one of the addresses served "
            "(`--bind`, `--host`/`--port`, `--uds`, `--fd`, or `fd://3` for a socket-activated "
            "one), else pyserver exits with status 2"
        ),
    ),
    # Request IDs and trace context (issue 37): X-Request-ID, traceparent, X-Request-Start.
    Option(
        "request_id",
        ("--request-id",),
        PROXY,
        kind="switch",
        help=(
            "every request gets an X-Request-ID: a trusted proxy's (--forwarded-allow-ips) "
            "when valid, else 128 random bits in hex; the application, the response and the "
            "access log see it, and the JSON access log the traceparent's ids (default: off)"
        ),
        doc_section="Request IDs and trace context",
        doc=(
            "every request gets one `X-Request-ID`: a trusted proxy's when it is 1 to 200 "
            'visible ASCII characters (no space, `"` or `\\`), else a new one (32 lowercase '
            "hex digits); the application sees it as a request header, the response carries "
            "it (unless the application sets its own), the access log has it (`%(rid)s`, JSON "
            "`request_id`) and, from a valid W3C `traceparent`, `trace_id` and `parent_id`. "
            "See [tracing.md](tracing.md)"
        ),
    ),
    Option(
        "request_start_header",
        ("--request-start-header",),
        PROXY,
        kind="switch",
        help=(
            "the application sees X-Request-Start: t=<microseconds since the epoch> (when the "
            "head was received; a trusted proxy's is kept) for APM queue time (default: off)"
        ),
        doc_section="Request IDs and trace context",
        doc=(
            "the application sees `X-Request-Start: t=<microseconds since the epoch>`, the "
            "moment the request's head was received (a trusted proxy's is kept), which New "
            "Relic, Datadog and Scout read as queue time"
        ),
    ),
    Option(
        "static",
        ("--static",),
        STATIC,
        kind="list",
        metavar="PREFIX=DIR",
        type=checks.static_mount,
        help=(
            "serve the files under DIR at URL path PREFIX (e.g. /static=./staticfiles) with "
            "sendfile, GET and HEAD only; a miss reaches the application; repeatable"
        ),
        doc=(
            "serve the files under `DIR` at URL path `PREFIX` (e.g. `/static=./staticfiles`), "
            "GET and HEAD only, before the application is called; a miss reaches the "
            "application. See [static.md](static.md)"
        ),
    ),
    Option(
        "static_max_age",
        ("--static-max-age",),
        STATIC,
        metavar="SECONDS",
        type=int,
        bounds=(0, None),
        help="static files get Cache-Control: public, max-age=SECONDS (default: none)",
        doc="static files get `Cache-Control: public, max-age=SECONDS`",
    ),
    Option(
        "static_strict",
        ("--static-strict",),
        STATIC,
        kind="switch",
        help=(
            "a miss under a mount answers 404 and another method 405, instead of reaching the "
            "application (default: off)"
        ),
        doc=(
            "a miss under a mount answers 404 (another method 405) instead of reaching the "
            "application"
        ),
    ),
    # ---- health check and drain (issue 37) ----
    Option(
        "health_check_path",
        ("--health-check-path",),
        HEALTH,
        metavar="PATH",
        type=checks.health_path,
        help=(
            "answer GET and HEAD on this URL path with 200 (503 while stopping) from the "
            "core, without calling the application (e.g. /healthz; default: none)"
        ),
        doc=(
            "answered by the core, never by the application: `200 ok` to GET and HEAD, `503 "
            "draining` once the server stops (SIGTERM or SIGINT), `405` to other methods; the "
            "query is ignored. Not in the access log nor in `pyserver_requests_total` "
            "(`pyserver_health_checks_total` counts them). See [deployment.md]"
            "(deployment.md#health-checks-and-drain-on-kubernetes)"
        ),
    ),
    Option(
        "drain_delay",
        ("--drain-delay",),
        HEALTH,
        type=float,
        bounds=(0.0, 3600.0),
        default=0.0,
        help=(
            "on SIGTERM, keep serving this many seconds while the health check answers 503, "
            "then stop gracefully; another SIGTERM or a SIGINT ends the wait (default: "
            "{default})"
        ),
        doc=(
            "on SIGTERM, seconds the server keeps serving (listening sockets open) while the "
            "health check answers 503, so that load balancers stop routing to it; then the "
            "graceful stop (`--graceful-timeout`). Another SIGTERM or a SIGINT ends the wait; "
            "SIGQUIT and SIGHUP are unchanged. 0: stop at once"
        ),
    ),
    # Response compression (--compress, issue 37): see docs/compression.md.
    Option(
        "compress",
        ("--compress",),
        COMPRESSION,
        kind="switch",
        help=(
            "compress responses with br, zstd or gzip as the client's Accept-Encoding "
            "prefers (default: off)"
        ),
        doc=(
            "compress responses with `br`, `zstd` or `gzip` as the client's `Accept-Encoding` "
            "prefers. See [compression.md](compression.md)"
        ),
    ),
    Option(
        "compress_min_size",
        ("--compress-min-size",),
        COMPRESSION,
        metavar="BYTES",
        type=int,
        bounds=(0, None),
        default=1024,
        help=(
            "a smaller body (or first piece of a streamed one) is sent as it is "
            "(default: {default})"
        ),
        doc="a smaller body, or first piece of a streamed body, is sent as it is",
    ),
    Option(
        "compress_types",
        ("--compress-types",),
        COMPRESSION,
        kind="list",
        metavar="TYPE",
        type=checks.media_type_pattern,
        default=DEFAULT_COMPRESS_TYPES,
        help=(
            "media types to compress: type/subtype, type/* or *+suffix; repeatable "
            "(default: text-like types)"
        ),
        doc=(
            "media types to compress: `type/subtype`, `type/*` or `*+suffix`, repeatable; "
            "`text/event-stream` never is"
        ),
        doc_default="`" + " ".join(DEFAULT_COMPRESS_TYPES) + "`",
    ),
    Option(
        "compress_level",
        ("--compress-level",),
        COMPRESSION,
        metavar="LEVEL",
        type=int,
        bounds=(1, 9),
        help=(
            "one level for every coding, 1 (fastest) to 9, instead of each coding's own "
            "default (br 4, zstd 3, gzip 5)"
        ),
        doc=(
            "one level for every coding, 1 (fastest) to 9, instead of each coding's own "
            "default (`br` 4, `zstd` 3, `gzip` 5)"
        ),
    ),
    Option(
        "static_precompressed",
        ("--static-precompressed",),
        STATIC,
        kind="switch",
        default=True,
        help=(
            "serve FILE.br, FILE.zst or FILE.gz beside FILE when the client accepts it "
            "(default: on; --no-static-precompressed turns it off)"
        ),
        doc=(
            "serve `FILE.br`, `FILE.zst` or `FILE.gz` beside `FILE` when the client accepts "
            "that coding (`--no-static-precompressed` turns it off)"
        ),
    ),
    Option(
        "compress_fail_after",
        ("--compress-fail-after",),
        COMPRESSION,
        metavar="BYTES",
        type=int,
        bounds=(0, None),
        default=0,
        hidden=True,  # tests only: a compressor fails once a response's input reaches BYTES
    ),
    Option(
        "log_level",
        ("--log-level",),
        LOGGING,
        metavar="LEVEL",
        choices=LOG_LEVELS,
        default="info",
        gunicorn=("loglevel",),
        help="one of critical, error, warning, info, debug, trace (default: {default})",
        doc="`critical`, `error`, `warning`, `info`, `debug`, `trace`",
    ),
    Option(
        "log_config",
        ("--log-config",),
        LOGGING,
        metavar="FILE",
        gunicorn=("logconfig",),
        help=("logging configuration: a dictConfig .json or .yaml file, or a fileConfig .ini file"),
        doc=(
            "`.json` or `.yaml`/`.yml` (dictConfig, YAML needs PyYAML), anything else "
            "fileConfig (`.ini`)"
        ),
    ),
    Option(
        "access_log",
        ("--access-log",),
        LOGGING,
        kind="switch",
        default=True,
        help="log one line per request on pyserver.access (default: on)",
        doc="one line per request",
    ),
    Option(
        "access_log_format",
        ("--access-logformat",),
        LOGGING,
        metavar="FORMAT",
        gunicorn=("access_log_format",),
        help=(
            'the access line with gunicorn\'s atoms (%%(h)s %%(t)s "%%(r)s" %%(s)s %%(b)s %%(D)s'
            ' %%({header}i)s ...), or json (default: \'%%(client)s - %%(u)s %%(t)s "%%(r)s" '
            "%%(s)s %%(B)s %%(L)s')"
        ),
        doc_default="see below",
        doc="the access line with gunicorn's atoms, or `json`",
    ),
    Option(
        "access_log_json",
        ("--access-log-json",),
        LOGGING,
        kind="flag",
        help="write the access log as one JSON object per request (--access-logformat json)",
        doc="one JSON object per request (the same as `--access-logformat json`)",
    ),
    Option(
        "access_logfile",
        ("--access-logfile",),
        LOGGING,
        metavar="FILE",
        gunicorn=("accesslog",),
        gunicorn_rule=NONE_IS_NO_ACCESS_LOG,
        help="write the access log to FILE ('-': stdout, the default); USR1 reopens it",
        doc_default="stdout",
        doc="write the access lines to FILE; `-` is stdout. SIGUSR1 reopens it (logrotate)",
    ),
    Option(
        "error_logfile",
        ("--error-logfile",),
        LOGGING,
        metavar="FILE",
        gunicorn=("errorlog",),
        help="write the error log to FILE ('-': stderr, the default); USR1 reopens it",
        doc_default="stderr",
        doc="write the server's messages to FILE; `-` is stderr. SIGUSR1 reopens it",
    ),
    Option(
        "wsgi_errors_level",
        ("--wsgi-errors-level",),
        LOGGING,
        metavar="LEVEL",
        choices=LOG_LEVELS,
        help=(
            "log the lines applications write to wsgi.errors on pyserver.error at this level "
            "(default: none, the text is written as it comes to the error log's stream, as "
            "gunicorn does)"
        ),
        doc=(
            "without it, text written to `wsgi.errors` goes as it comes, flushed at once, to "
            "the streams of `pyserver.error`'s handlers (stderr, or `--error-logfile`), as "
            "gunicorn writes it: Flask's `[time] ERROR in app: ...` arrives as Flask wrote it, "
            "with no second time or level (handlers without a stream, such as syslog, get each "
            "line at `warning`). With a LEVEL, each line is logged on `pyserver.error` at that "
            "level instead, its text unchanged; below `--log-level` it is dropped"
        ),
    ),
    Option(
        "workers",
        ("-w", "--workers"),
        PROCESSES,
        type=int,
        bounds=(1, 128),
        gunicorn=("workers",),
        default=1,
        env_also=("WEB_CONCURRENCY",),
        default_env="WEB_CONCURRENCY",
        help="number of worker processes (default: $WEB_CONCURRENCY or 1)",
        doc_default="1",
        doc="worker processes, 1-128",
    ),
    Option(
        "threads",
        ("--threads",),
        PROCESSES,
        type=int,
        bounds=(1, 1024),
        gunicorn=("threads",),
        help=(
            "WSGI: run the application on N threads per worker, the event loop keeping the "
            "network I/O (default: 1, the loop's own thread); ASGI: size asyncio's default "
            "executor (run_in_executor, Django's sync_to_async) to N threads"
        ),
        doc_default="1",
        doc=(
            "WSGI: application threads per worker, 1-1024 (1: the worker's loop thread runs the"
            " application); ASGI: the size of asyncio's default executor. See "
            "[threads.md](threads.md)"
        ),
    ),
    Option(
        "timeout",
        ("--timeout",),
        PROCESSES,
        type=float,
        bounds=(0.0, None),
        gunicorn=("timeout",),
        help=(
            "kill and replace a worker stuck in one request for this long; 0 disables (default:"
            " 30; giving it runs a master process even with one worker)"
        ),
        doc_default="`30` under a master (none with `--reload`)",
        doc=(
            "watchdog: a worker whose loop has not run for S seconds (stuck in one request) is "
            "aborted and replaced; 0 disables. Giving it, even as 0, runs a master"
        ),
    ),
    Option(
        "max_requests",
        ("--max-requests",),
        PROCESSES,
        type=int,
        bounds=(0, None),
        gunicorn=("max_requests",),
        default=0,
        help="replace a worker after it has handled this many requests (default: 0, never)",
        doc_default="`0`, never",
        doc="replace a worker after it has handled N requests",
    ),
    Option(
        "max_requests_jitter",
        ("--max-requests-jitter",),
        PROCESSES,
        type=int,
        bounds=(0, None),
        gunicorn=("max_requests_jitter",),
        default=0,
        help="add a random 0..N to --max-requests per worker (default: {default})",
        doc=("add a random 0..N to `--max-requests`, drawn per worker; alone it does nothing"),
    ),
    Option(
        "max_rss",
        ("--max-rss",),
        PROCESSES,
        metavar="MIB",
        type=int,
        bounds=(0, None),
        default=0,
        help=("replace a worker whose resident memory exceeds this many MiB (default: 0, never)"),
        doc_default="`0`, never",
        doc=("replace a worker whose resident memory exceeds MIB MiB (checked once a second)"),
    ),
    Option(
        "preload",
        ("--preload",),
        PROCESSES,
        kind="flag",
        gunicorn=("preload_app",),
        help="import the application in the master before forking the workers",
        doc="import the application in the master, then `gc.freeze()`, before forking",
    ),
    Option(
        "reuse_port",
        ("--reuse-port",),
        PROCESSES,
        kind="flag",
        gunicorn=("reuse_port",),
        help=(
            "each worker also listens on its own SO_REUSEPORT socket (TCP): the kernel spreads "
            "connections between the workers"
        ),
        doc=(
            "each worker also listens on a `SO_REUSEPORT` socket of its own (its lane, kept by "
            "the master for its replacement) for every TCP listener"
        ),
    ),
    Option(
        "metrics_bind",
        ("--metrics-bind",),
        PROCESSES,
        metavar="ADDRESS",
        type=sockets.parse_metrics_bind,
        help=(
            "serve Prometheus metrics (GET /metrics) on HOST:PORT or unix:PATH, from the master"
            " (or the single process); off by default"
        ),
        doc_default="off",
        doc=(
            "Prometheus metrics at `GET /metrics` on `HOST:PORT` or `unix:PATH`, served by the "
            "master from the workers' shared counters (or by the single process); see "
            "[metrics.md](metrics.md)"
        ),
    ),
    Option(
        "pid",
        ("--pid",),
        PROCESSES,
        metavar="FILE",
        gunicorn=("pidfile",),
        help="write the server's process id to this file",
        doc=(
            "write the process id (the master's, or the single process's) to FILE; removed at "
            "exit if it still holds that id"
        ),
    ),
    Option(
        "user",
        ("--user",),
        PROCESSES,
        metavar="USER",
        gunicorn=("user",),
        help=(
            "after binding, before importing the application, run as this user (name or uid; "
            "the workers under a master, which stays as it started)"
        ),
        doc_default="unchanged",
        doc=(
            "a name or a numeric id. The sockets are bound as the server started (root may bind "
            "ports below 1024), then the processes that import the application switch: a single"
            " process before importing it; under a master each worker after `post_fork` (the "
            "master stays as it started, so it can remove its socket files and pid file); with "
            "`--preload` the master itself, before importing. `--user` alone takes the user's "
            "primary group; root's supplementary groups are replaced by the user's. A unix "
            "socket file bound as root is given to that user and group (`--uds-perms` still "
            "sets its mode)"
        ),
    ),
    Option(
        "group",
        ("--group",),
        PROCESSES,
        metavar="GROUP",
        gunicorn=("group",),
        help="run as this group (name or gid), like --user",
        doc_default="unchanged",
        doc="a name or a numeric id, switched to like `--user`'s (groups first, then the user)",
    ),
    Option(
        "chdir",
        ("--chdir",),
        PROCESSES,
        metavar="DIR",
        gunicorn=("chdir",),
        help="change to this directory before anything else",
        doc_default="unchanged",
        doc=(
            "change to DIR first, before logging, binding and importing: relative paths "
            "(`--app-dir`, log files, `unix:` sockets, `--pid`) are then relative to DIR. "
            "`pyproject.toml` is read from the directory pyserver was started in"
        ),
    ),
    Option(
        "umask",
        ("--umask",),
        PROCESSES,
        metavar="MASK",
        type=checks.umask,
        octal=True,
        gunicorn=("umask",),
        help="octal umask of the server's processes (e.g. 022; default: inherited)",
        doc_default="inherited",
        doc="octal, e.g. `022`; set first, for every process",
    ),
    Option(
        "env",
        ("--env",),
        PROCESSES,
        kind="list",
        metavar="KEY=VALUE",
        type=checks.env_pair,
        gunicorn=("raw_env",),
        help="set an environment variable before the application is imported; repeatable",
        doc="set before the application is imported; repeatable",
    ),
    Option(
        "reload",
        ("--reload",),
        DEVELOPMENT,
        kind="flag",
        gunicorn=("reload",),
        help=("restart the workers when a source file changes (uses watchfiles when installed)"),
        doc=(
            "restart the workers when a watched file changes; `watchfiles` when installed, else"
            " stat polling once a second. A file that cannot be imported is reported with its "
            "traceback, and the worker waits for the next change instead of importing it again;"
            " the previous worker, if any, keeps serving meanwhile. No watchdog unless "
            "`--timeout` is given (a debugger may hold a request)"
        ),
    ),
    Option(
        "reload_dirs",
        ("--reload-dir",),
        DEVELOPMENT,
        kind="list",
        metavar="DIR",
        help="watch this directory; repeatable (default: the --app-dir)",
        doc_default="the `--app-dir`",
        doc="directory to watch; repeatable",
    ),
    Option(
        "reload_includes",
        ("--reload-include",),
        DEVELOPMENT,
        kind="list",
        metavar="PATTERN",
        default=("*.py",),
        help="watch files whose name matches this glob; repeatable (default: *.py)",
        doc_default="`*.py`",
        doc="glob matched against file names; repeatable; replaces the default",
    ),
    Option(
        "config",
        ("-c", "--config"),
        TOP,
        metavar="FILE",
        config=False,
        in_files=False,
        help="a Python file of gunicorn-style settings and server hooks (also "
        "$PYSERVER_CONFIG); ./pyproject.toml's [tool.pyserver] is read too",
    ),
)

BY_NAME = {opt.name: opt for opt in OPTIONS}
# Config's keyword arguments (APP is its positional argument, -c is the CLI's own).
CONFIG_OPTIONS = tuple(opt for opt in OPTIONS if opt.config)
# A -c file's gunicorn setting names.
BY_GUNICORN = {setting: opt for opt in OPTIONS for setting in opt.gunicorn}

# gunicorn settings with no equivalent in pyserver (or that its own design makes moot): a
# gunicorn.conf.py that sets them still loads, with one warning naming them.
GUNICORN_IGNORED = frozenset(
    (
        "worker_class worker_tmp_dir spew check_config print_config daemon capture_output "
        "logger_class syslog syslog_addr syslog_prefix syslog_facility "
        "enable_stdio_inheritance statsd_host statsd_prefix dogstatsd_tags proc_name "
        "default_proc_name pythonpath paste sendfile initgroups tmp_upload_dir "
        "secure_scheme_headers forwarder_headers proxy_allow_ips strip_header_spaces "
        "disable_redirect_access_to_syslog reload_engine reload_extra_files "
        "do_handshake_on_connect suppress_ragged_eofs ssl_context header_map "
        "logconfig_dict logconfig_json casefold_http_method permit_obsolete_folding "
        "permit_unconventional_http_method permit_unconventional_http_version "
        "tolerate_dangerous_framing uwsgi_allow_ips"
    ).split()
)


def from_gunicorn(setting: str, value: Any) -> dict[str, Any]:
    """A -c file's gunicorn setting as {option name: value}, gunicorn's meaning kept."""
    opt = BY_GUNICORN[setting]
    if opt.gunicorn_rule == ZERO_IS_MAX and value == 0 and opt.bounds is not None:
        value = opt.bounds[1]
    elif opt.gunicorn_rule == TRUTH:
        value = bool(value)
    elif opt.gunicorn_rule == NONE_IS_NO_ACCESS_LOG and value is None:
        return {"access_log": False}
    return {opt.name: value}


def gunicorn_setting(gcfg: Any, name: str) -> Any:
    """The value of option name's gunicorn setting in gunicorn's config (the worker)."""
    return getattr(gcfg, BY_NAME[name].gunicorn[0])


# ---- docs/configuration.md ---------------------------------------------------------------

TABLE_START = re.compile(r"<!-- options: (.+?) -->\n")
TABLE_END = "<!-- end of generated table -->\n"
GUNICORN_START = "<!-- gunicorn settings -->\n"
TABLE_HEAD = "| option | environment | default | meaning |\n| --- | --- | --- | --- |\n"


def metavar(opt: Option) -> str | None:
    """What --help shows after the flag (None: argparse's own, the name in capitals)."""
    if opt.metavar is not None:
        return opt.metavar
    if opt.bounds is not None:
        return "SECONDS" if opt.type is float else "N"
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _doc_flags(opt: Option) -> str:
    if not opt.flags:
        return f"`{opt.metavar}` (positional)"
    meta = metavar(opt)
    if meta is None and opt.choices is not None:
        meta = "{" + ",".join(opt.choices) + "}"
    meta = "" if not opt.takes_value else " " + (meta or opt.name.upper())
    shown: list[str] = []
    for flag in opt.flags:
        canonical = flag.startswith("--") and not any(s.startswith("--") for s in shown)
        shown.append(flag + meta if canonical else flag)
        if canonical and opt.kind == "switch":
            shown.append("--no-" + flag[2:])
    text = ", ".join(f"`{flag}`" for flag in shown)
    return text + " (repeatable)" if opt.kind == "list" else text


def _doc_env(opt: Option) -> str:
    names = list(opt.env)
    if opt.default_env is not None and opt.default_env not in names:
        names.append(opt.default_env)
    text = ", then ".join(f"`{name}`" for name in names)
    return text + " (space-separated list)" if opt.kind == "list" else text


def _doc_default(opt: Option) -> str:
    if opt.doc_default is not None:
        return opt.doc_default
    if opt.default is None or opt.default == ():
        return "none"
    if isinstance(opt.default, bool):
        return "on" if opt.default else "off"
    return f"`{opt.default_text()}`"


def doc_section(opt: Option) -> str | None:
    return opt.doc_section or opt.group.heading


def markdown_table(heading: str) -> str:
    """The option table of the docs' section `heading`, in the table's order."""
    rows = [
        "| "
        + " | ".join(
            _cell(text)
            for text in (_doc_flags(opt), _doc_env(opt), _doc_default(opt), opt.doc or "")
        )
        + " |\n"
        for opt in OPTIONS
        if doc_section(opt) == heading and not opt.hidden
    ]
    if not rows:
        raise ValueError(f"no option is documented under {heading!r}")
    return TABLE_HEAD + "".join(rows)


def gunicorn_table() -> str:
    """The docs' table of gunicorn settings a -c file may use and what they set."""
    rows = ["| gunicorn setting | pyserver option |\n", "| --- | --- |\n"]
    for opt in OPTIONS:
        if not opt.gunicorn:
            continue
        settings = ", ".join(f"`{setting}`" for setting in opt.gunicorn)
        flag = next((f for f in opt.flags if f.startswith("--")), opt.metavar)
        note = GUNICORN_NOTES.get(opt.gunicorn_rule or "", "")
        rows.append(f"| {settings} | `{flag}`{'; ' + note if note else ''} |\n")
    return "".join(rows)


def render_docs(text: str) -> str:
    """text with every generated block (between its marker and TABLE_END) made again."""
    out = []
    pos = 0
    for start in re.finditer(TABLE_START.pattern + "|" + re.escape(GUNICORN_START), text):
        end = text.index(TABLE_END, start.end())
        heading = start.group(1)
        out.append(text[pos : start.end()])
        out.append(markdown_table(heading) if heading is not None else gunicorn_table())
        pos = end
    out.append(text[pos:])
    return "".join(out)


def main(argv: Iterable[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] not in ("--write", "--check"):
        print("usage: python -m pyserver.options --write|--check docs/configuration.md")
        return 2
    with open(args[1]) as f:
        text = f.read()
    new = render_docs(text)
    if args[0] == "--check":
        if new != text:
            print(
                f"{args[1]}: the option tables are out of date: python -m pyserver.options "
                f"--write {args[1]}"
            )
            return 1
        return 0
    if new != text:
        with open(args[1], "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
