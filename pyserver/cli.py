"""The `pyserver` command: options map one to one onto Config.

Every option can also come from the environment as PYSERVER_<NAME> (for
example PYSERVER_PORT=9000, PYSERVER_ACCESS_LOG=false, PYSERVER_BIND="a b");
the command line wins. WEB_CONCURRENCY sets the worker count when neither
--workers nor PYSERVER_WORKERS does. Options still unset then come from the
-c/--config file and ./pyproject.toml's [tool.pyserver] (configfile.py).
"""

import argparse
import inspect
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pyserver import __version__, config, configfile, hooks, logconfig, reexec, workers_proc
from pyserver.config import Config, StartupError
from pyserver.importer import split_app_spec

ENV_PREFIX = "PYSERVER_"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")

# Whitespace-separated lists in the environment.
LIST_OPTIONS = (
    "bind",
    "reload_dirs",
    "reload_includes",
    "env",
    "proxy_protocol_bind",
    "static",
    "asgi_paths",
)

# Defaults shown in --help come from Config's signature: one source of truth.
D = {name: p.default for name, p in inspect.signature(Config.__init__).parameters.items()}


def _converter(name, check, *args):
    """An argparse type that reports ValueError messages as they are."""

    def convert(value):
        try:
            return check(*args, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name
    return convert


def _threads_text(cfg):
    if cfg.threads > 1 and cfg.interface != "asgi":
        return f"{cfg.threads} application threads"
    return "1 thread"


def _int(name):
    return _converter(name, config.check_int, name)


def _float(name):
    return _converter(name, config.check_float, name)


def _choice(choices):
    def check(value):
        value = value.lower()
        if value not in choices:
            raise ValueError(f"invalid choice {value!r} (choose from {', '.join(choices)})")
        return value

    return _converter("choice", check)


def _octal_up_to(limit, example):
    """An octal number from 0 to `limit` (file modes, umasks)."""

    def check(value):
        try:
            number = int(value, 8)
        except ValueError:
            number = -1
        if not 0 <= number <= limit:
            raise ValueError(f"expected {example}, got {value!r}")
        return number

    return check


_octal = _octal_up_to(0o7777, "octal permissions such as 660")
_umask = _octal_up_to(0o777, "an octal umask such as 022")


def _env_pair(value):
    key, sep, val = value.partition("=")
    if not sep or not key or "\0" in value:
        raise ValueError(f"expected KEY=VALUE, got {value!r}")
    return (key, val)


def _app_spec(value):
    module, attr = split_app_spec(value)
    return f"{module}:{attr}"


def _root_path(value):
    if value and not value.startswith("/"):
        raise ValueError(f"must start with '/', got {value!r}")
    return value


USAGE = "usage: pyserver [OPTIONS] APP"


class _Parser(argparse.ArgumentParser):
    """argparse with gunicorn's short usage errors: the usage line, the error, and for a
    mistyped option the nearest one (the whole option list is what --help is for)."""

    def error(self, message):
        self.exit(2, f"{USAGE}\npyserver: error: {message}{self._suggestion(message)}\n")

    def _suggestion(self, message):
        import difflib

        for prefix in ("unrecognized arguments: ", "ambiguous option: "):
            if message.startswith(prefix):
                word = message[len(prefix) :].split()[0].split("=")[0]
                break
        else:
            return ""
        if not word.startswith("-"):
            return ""
        close = difflib.get_close_matches(word, self._option_string_actions, n=1, cutoff=0.6)
        return f"\nDid you mean '{close[0]}'?" if close else ""


def build_parser():
    """Return (parser, options): options are the actions that map onto Config."""
    parser = _Parser(
        prog="pyserver",
        description="Serve a WSGI or ASGI application with pyserver's C core (libev + llhttp).",
        epilog="Every option can also be set as an environment variable PYSERVER_<OPTION> "
        "(e.g. PYSERVER_PORT=9000, PYSERVER_ACCESS_LOG=false). Precedence: command line, "
        "environment, -c FILE, ./pyproject.toml [tool.pyserver], defaults.",
    )
    options = []

    def add(group, *flags, **kwargs):
        kwargs.setdefault("default", None)
        options.append(group.add_argument(*flags, **kwargs))

    add(
        parser,
        "app",
        nargs="?",
        metavar="APP",
        help="the application, as MODULE:ATTR (e.g. myproject.wsgi:application); MODULE "
        "alone means MODULE:application",
    )

    sockets = parser.add_argument_group("sockets")
    add(sockets, "--host", help=f"bind to this address (default: {D['host']})")
    add(sockets, "--port", type=_int("port"), help=f"bind to this port (default: {D['port']})")
    add(
        sockets,
        "-b",
        "--bind",
        action="append",
        metavar="ADDRESS",
        type=_converter("bind", config.parse_bind),
        help="listen on HOST:PORT, [IPV6]:PORT, unix:PATH or fd://N, any of them after "
        "uwsgi:// to speak the uwsgi protocol there (nginx's uwsgi_pass); repeatable; "
        "replaces --host/--port",
    )
    add(
        sockets,
        "--protocol",
        choices=config.PROTOCOLS,
        help="what every listener speaks: http, or uwsgi for nginx's uwsgi_pass (peers "
        "must be trusted by --forwarded-allow-ips; default: http)",
    )
    add(sockets, "--uds", metavar="PATH", help="listen on this unix domain socket")
    add(
        sockets,
        "--uds-perms",
        metavar="MODE",
        type=_converter("mode", _octal),
        help="octal permissions for the --uds socket file (e.g. 660)",
    )
    add(
        sockets,
        "--fd",
        metavar="N",
        type=_int("fd"),
        help="listen on this inherited file descriptor (already bound)",
    )
    add(
        sockets,
        "--backlog",
        metavar="N",
        type=_int("backlog"),
        help=f"maximum number of pending connections (default: {D['backlog']})",
    )

    app = parser.add_argument_group("application")
    add(
        app,
        "--interface",
        type=_choice(config.INTERFACES),
        metavar="{auto,wsgi,asgi}",
        help="application interface; auto detects it (default: auto)",
    )
    add(
        app,
        "--asgi-app",
        metavar="MODULE:ATTR",
        type=_converter("asgi_app", _app_spec),
        help="an ASGI application beside a WSGI APP, in the same workers and on the same "
        "port: WebSocket upgrades and the lifespan protocol go to it, plain HTTP to APP "
        "(e.g. myproject.asgi:application; give --threads N too)",
    )
    add(
        app,
        "--asgi-path",
        dest="asgi_paths",
        action="append",
        metavar="PREFIX",
        help="with --asgi-app: HTTP requests under this path prefix go to the ASGI "
        "application as well (server-sent events, long polling); repeatable",
    )
    add(
        app,
        "--factory",
        action="store_true",
        help="APP is a factory: call it with no arguments to get the application",
    )
    add(
        app,
        "--app-dir",
        metavar="DIR",
        help="look for APP in this directory, put first on sys.path (default: .)",
    )
    add(
        app,
        "--root-path",
        metavar="PATH",
        type=_converter("root_path", _root_path),
        help="mount path of the application: WSGI SCRIPT_NAME, ASGI root_path (default: none)",
    )

    http = parser.add_argument_group("HTTP timeouts and limits")
    add(
        http,
        "--timeout-keep-alive",
        metavar="SECONDS",
        type=_float("timeout_keep_alive"),
        help="close idle keep-alive connections after this many seconds "
        f"(default: {D['timeout_keep_alive']:g})",
    )
    add(
        http,
        "--timeout-request-header",
        metavar="SECONDS",
        type=_float("timeout_request_header"),
        help="answer 408 and close when a request head is not complete this many seconds "
        "after its first byte; also how long a response write may make no progress "
        f"(default: {D['timeout_request_header']:g})",
    )
    add(
        http,
        "--timeout-request-body",
        metavar="SECONDS",
        type=_float("timeout_request_body"),
        help="answer 408 and close when a request body makes no progress for this many "
        f"seconds (default: {D['timeout_request_body']:g})",
    )
    add(
        http,
        "--graceful-timeout",
        "--timeout-graceful-shutdown",
        metavar="SECONDS",
        type=_float("graceful_timeout"),
        help="on SIGTERM or SIGINT, give requests in progress this many seconds to finish "
        f"(default: {D['graceful_timeout']:g})",
    )
    add(
        http,
        "--limit-concurrency",
        metavar="N",
        type=_int("limit_concurrency"),
        help="answer new requests 503 while more than N connections are open or N requests "
        "are in progress in a worker (default: no limit)",
    )
    add(
        http,
        "--limit-max-requests",
        metavar="N",
        type=_int("limit_max_requests"),
        help="the same as --max-requests (uvicorn's name for it)",
    )
    add(
        http,
        "--lifespan",
        type=_choice(config.LIFESPAN_MODES),
        help="ASGI lifespan events: auto, on or off (default: auto)",
    )
    add(
        http,
        "--limit-request-line",
        metavar="BYTES",
        type=_int("limit_request_line"),
        help="maximum size of the request line (method, target and version), 1-65536 "
        f"(default: {D['limit_request_line']})",
    )
    add(
        http,
        "--limit-request-fields",
        metavar="N",
        type=_int("limit_request_fields"),
        help="maximum number of request header fields, 1-32768 "
        f"(default: {D['limit_request_fields']})",
    )
    add(
        http,
        "--limit-request-field-size",
        metavar="BYTES",
        type=_int("limit_request_field_size"),
        help="maximum size of one request header field line (name, colon, whitespace, value "
        "and CRLF, as gunicorn counts it), 1-65536 "
        f"(default: {D['limit_request_field_size']})",
    )
    add(
        http,
        "--limit-request-head",
        metavar="BYTES",
        type=_int("limit_request_head"),
        help="maximum size of a request head (request line plus header fields); "
        f"431 beyond it (default: {D['limit_request_head']})",
    )
    add(
        http,
        "--limit-request-body",
        metavar="BYTES",
        type=_int("limit_request_body"),
        help="maximum size of a request body; 0 means no limit (default: 0)",
    )
    add(
        http,
        "--body-spool-threshold",
        metavar="BYTES",
        type=_int("body_spool_threshold"),
        help="WSGI: the server reads each request body before the application runs; bodies "
        "larger than this go to an unlinked temporary file in $TMPDIR instead of memory "
        f"(default: {D['body_spool_threshold']})",
    )
    add(
        http,
        "--limit-connections",
        metavar="N",
        type=_int("limit_connections"),
        help="open connections per worker; at the limit the worker stops accepting until "
        f"one closes (default: {D['limit_connections']})",
    )
    add(
        http,
        "--server-header",
        action=argparse.BooleanOptionalAction,
        help="send a Server header (default: on)",
    )
    add(
        http,
        "--date-header",
        action=argparse.BooleanOptionalAction,
        help="send a Date header (default: on)",
    )

    http2 = parser.add_argument_group("HTTP/2")
    add(
        http2,
        "--http",
        type=_choice(config.HTTP_MODES),
        help="auto: HTTP/1.1, and cleartext HTTP/2 by prior knowledge or Upgrade: h2c; "
        "1: HTTP/1.1 only; 2: HTTP/2 by prior knowledge only (default: auto)",
    )
    add(
        http2,
        "--http2-max-concurrent-streams",
        metavar="N",
        type=_int("http2_max_concurrent_streams"),
        help=f"streams one client may have open (default: {D['http2_max_concurrent_streams']})",
    )
    add(
        http2,
        "--http2-max-headers-size",
        metavar="BYTES",
        type=_int("http2_max_headers_size"),
        help="decoded request header list, names + values + 32 per field; 431 beyond "
        f"(default: {D['http2_max_headers_size']})",
    )
    add(
        http2,
        "--http2-initial-stream-window-size",
        metavar="BYTES",
        type=_int("http2_initial_stream_window_size"),
        help="request body bytes a stream may have unread "
        f"(default: {D['http2_initial_stream_window_size']})",
    )
    add(
        http2,
        "--http2-initial-connection-window-size",
        metavar="BYTES",
        type=_int("http2_initial_connection_window_size"),
        help="request body bytes a connection may have unread "
        f"(default: {D['http2_initial_connection_window_size']})",
    )
    add(
        http2,
        "--http2-max-new-streams",
        metavar="N",
        type=_int("http2_max_new_streams"),
        help="streams one client may open a second; one more: GOAWAY ENHANCE_YOUR_CALM "
        f"(default: {D['http2_max_new_streams']})",
    )
    add(
        http2,
        "--http2-max-resets",
        metavar="N",
        type=_int("http2_max_resets"),
        help="RST_STREAM frames received, plus streams reset for what the client did (refused, "
        "malformed, a frame on a closed stream), a second (the Rapid Reset bound); one more: "
        "GOAWAY ENHANCE_YOUR_CALM "
        f"(default: {D['http2_max_resets']})",
    )
    add(
        http2,
        "--http2-max-control-frames",
        metavar="N",
        type=_int("http2_max_control_frames"),
        help="SETTINGS, PING, PRIORITY and unknown frames a second; "
        "one more: GOAWAY ENHANCE_YOUR_CALM "
        f"(default: {D['http2_max_control_frames']})",
    )
    add(
        http2,
        "--http2-max-empty-frames",
        metavar="N",
        type=_int("http2_max_empty_frames"),
        help="DATA frames without payload or END_STREAM, a second; "
        "one more: GOAWAY ENHANCE_YOUR_CALM "
        f"(default: {D['http2_max_empty_frames']})",
    )
    add(
        http2,
        "--http2-max-window-updates",
        metavar="N",
        type=_int("http2_max_window_updates"),
        help="WINDOW_UPDATE frames a second; one more: GOAWAY ENHANCE_YOUR_CALM "
        f"(default: {D['http2_max_window_updates']})",
    )
    add(
        http2,
        "--http2-max-continuations",
        metavar="N",
        type=_int("http2_max_continuations"),
        help="CONTINUATION frames of one header block; one more: GOAWAY ENHANCE_YOUR_CALM "
        f"(default: {D['http2_max_continuations']})",
    )

    websocket = parser.add_argument_group("WebSockets (ASGI)")
    add(
        websocket,
        "--ws",
        type=_choice(config.WS_MODES),
        help="auto: upgrade requests get a websocket scope; none: an http scope (default: auto)",
    )
    add(
        websocket,
        "--ws-max-size",
        metavar="BYTES",
        type=_int("ws_max_size"),
        help="largest WebSocket message; a larger one closes with 1009 "
        f"(default: {D['ws_max_size']})",
    )
    add(
        websocket,
        "--ws-max-queue",
        metavar="N",
        type=_int("ws_max_queue"),
        help="messages received and not yet read by the application before the server stops "
        f"reading (default: {D['ws_max_queue']})",
    )
    add(
        websocket,
        "--ws-ping-interval",
        metavar="SECONDS",
        type=_float("ws_ping_interval"),
        help=f"send a ping this often; 0 for never (default: {D['ws_ping_interval']:g})",
    )
    add(
        websocket,
        "--ws-ping-timeout",
        metavar="SECONDS",
        type=_float("ws_ping_timeout"),
        help="close with 1011 when a ping is not answered within this time; 0 for never "
        f"(default: {D['ws_ping_timeout']:g})",
    )
    add(
        websocket,
        "--ws-per-message-deflate",
        metavar="BOOL",
        type=_parse_bool,
        help="accept permessage-deflate compression: true or false (default: true)",
    )
    add(
        websocket,
        "--ws-deflate-level",
        metavar="0-9",
        type=_int("ws_deflate_level"),
        help="deflate level of the messages the server compresses: 1 is ISA-L's igzip from a "
        "connection's first message of 256 bytes (zlib's 1 before it), about a fifth of the "
        "CPU of zlib's 6 for output about a fifth larger; 0 and 2-9 are zlib's (default: "
        f"{D['ws_deflate_level']})",
    )

    tls = parser.add_argument_group("TLS (on every TCP bind; unix-socket binds stay plain)")
    add(
        tls,
        "--ssl-certfile",
        "--certfile",
        metavar="FILE",
        help="serve TLS with this PEM certificate (then its chain)",
    )
    add(tls, "--ssl-keyfile", "--keyfile", metavar="FILE", help="the PEM private key")
    add(tls, "--ssl-keyfile-password", metavar="PASSWORD", help="the private key's password")
    add(
        tls,
        "--ssl-ca-certs",
        "--ca-certs",
        metavar="FILE",
        help="PEM file of the CAs whose client certificates are accepted",
    )
    add(
        tls,
        "--ssl-cert-reqs",
        "--cert-reqs",
        metavar="MODE",
        type=_converter("ssl_cert_reqs", config.check_cert_reqs),
        help="client certificates: none, optional or required (or 0, 1, 2; default: none)",
    )
    add(
        tls,
        "--ssl-ciphers",
        "--ciphers",
        metavar="LIST",
        help="OpenSSL cipher list for TLS 1.2 (default: ECDHE with AES-GCM or ChaCha20)",
    )
    add(
        tls,
        "--ssl-version",
        metavar="VERSION",
        type=_converter("ssl_version", config.check_tls_version),
        help="the lowest TLS version accepted: TLSv1.2 or TLSv1.3 (default: TLSv1.2)",
    )
    add(
        tls,
        "--timeout-tls-handshake",
        metavar="SECONDS",
        type=_float("timeout_tls_handshake"),
        help="close a connection whose TLS handshake is not done after this many seconds "
        f"(default: {D['timeout_tls_handshake']:g})",
    )
    add(
        tls,
        "--ssl-ticket-rotation",
        metavar="SECONDS",
        type=_float("ssl_ticket_rotation"),
        help=argparse.SUPPRESS,  # seconds between new session ticket keys (tests shorten it)
    )

    proxy = parser.add_argument_group("proxy headers")
    add(
        proxy,
        "--proxy-headers",
        action=argparse.BooleanOptionalAction,
        help="take the client address from X-Forwarded-For and the scheme from "
        "X-Forwarded-Proto when the peer is a trusted proxy (default: on)",
    )
    add(
        proxy,
        "--forwarded-allow-ips",
        metavar="LIST",
        type=_converter("forwarded_allow_ips", config.check_forwarded_allow_ips),
        help="trusted proxies: comma-separated IP addresses and CIDR networks, or * for "
        "all (default: $FORWARDED_ALLOW_IPS or 127.0.0.1,::1; unix-socket peers are "
        "always trusted)",
    )
    add(
        proxy,
        "--proxy-protocol",
        action=argparse.BooleanOptionalAction,
        help="every listener takes a PROXY protocol header (v1 or v2) before HTTP: trusted "
        "peers (--forwarded-allow-ips) must send one, others may not (default: off)",
    )
    add(
        proxy,
        "--proxy-protocol-bind",
        action="append",
        metavar="ADDRESS",
        type=_converter("proxy_protocol_bind", config.parse_bind),
        help="only this listener takes PROXY headers, written as in --bind (HOST:PORT, "
        "[IPV6]:PORT, unix:PATH, fd://N); repeatable",
    )

    static = parser.add_argument_group("static files (served by the core, before the app)")
    add(
        static,
        "--static",
        action="append",
        metavar="PREFIX=DIR",
        type=_converter("static", config.parse_static),
        help="serve the files under DIR at URL path PREFIX (e.g. /static=./staticfiles) "
        "with sendfile, GET and HEAD only; a miss reaches the application; repeatable",
    )
    add(
        static,
        "--static-max-age",
        metavar="SECONDS",
        type=_int("static_max_age"),
        help="static files get Cache-Control: public, max-age=SECONDS (default: none)",
    )
    add(
        static,
        "--static-strict",
        action=argparse.BooleanOptionalAction,
        help="a miss under a mount answers 404 and another method 405, instead of "
        "reaching the application (default: off)",
    )

    logs = parser.add_argument_group("logging")
    add(
        logs,
        "--log-level",
        type=_choice(tuple(logconfig.LOG_LEVELS)),
        metavar="LEVEL",
        help=f"one of critical, error, warning, info, debug, trace (default: {D['log_level']})",
    )
    add(
        logs,
        "--log-config",
        metavar="FILE",
        help="logging configuration: a dictConfig .json or .yaml file, or a fileConfig .ini file",
    )
    add(
        logs,
        "--access-log",
        action=argparse.BooleanOptionalAction,
        help="log one line per request on pyserver.access (default: on)",
    )
    add(
        logs,
        "--access-logformat",
        dest="access_log_format",
        metavar="FORMAT",
        help='the access line with gunicorn\'s atoms (%%(h)s %%(t)s "%%(r)s" %%(s)s '
        "%%(b)s %%(D)s %%({header}i)s ...), or json (default: "
        "'%%(client)s - %%(u)s %%(t)s \"%%(r)s\" %%(s)s %%(B)s %%(L)s')",
    )
    add(
        logs,
        "--access-log-json",
        action="store_true",
        default=None,
        help="write the access log as one JSON object per request (--access-logformat json)",
    )
    add(
        logs,
        "--access-logfile",
        metavar="FILE",
        help="write the access log to FILE ('-': stdout, the default); USR1 reopens it",
    )
    add(
        logs,
        "--error-logfile",
        metavar="FILE",
        help="write the error log to FILE ('-': stderr, the default); USR1 reopens it",
    )
    add(
        logs,
        "--wsgi-errors-level",
        type=_choice(tuple(logconfig.LOG_LEVELS)),
        metavar="LEVEL",
        help="log the lines applications write to wsgi.errors on pyserver.error at this "
        "level (default: none, the text is written as it comes to the error log's stream, "
        "as gunicorn does)",
    )

    procs = parser.add_argument_group("processes")
    add(
        procs,
        "-w",
        "--workers",
        metavar="N",
        type=_int("workers"),
        help="number of worker processes (default: $WEB_CONCURRENCY or 1)",
    )
    add(
        procs,
        "--threads",
        metavar="N",
        type=_int("threads"),
        help="WSGI: run the application on N threads per worker, the event loop keeping "
        "the network I/O (default: 1, the loop's own thread); ASGI: size asyncio's "
        "default executor (run_in_executor, Django's sync_to_async) to N threads",
    )
    add(
        procs,
        "--timeout",
        metavar="SECONDS",
        type=_float("timeout"),
        help="kill and replace a worker stuck in one request for this long; 0 disables "
        "(default: 30; giving it runs a master process even with one worker)",
    )
    add(
        procs,
        "--max-requests",
        metavar="N",
        type=_int("max_requests"),
        help="replace a worker after it has handled this many requests (default: 0, never)",
    )
    add(
        procs,
        "--max-requests-jitter",
        metavar="N",
        type=_int("max_requests_jitter"),
        help="add a random 0..N to --max-requests per worker (default: 0)",
    )
    add(
        procs,
        "--max-rss",
        metavar="MIB",
        type=_int("max_rss"),
        help="replace a worker whose resident memory exceeds this many MiB (default: 0, never)",
    )
    add(
        procs,
        "--preload",
        action="store_true",
        help="import the application in the master before forking the workers",
    )
    add(
        procs,
        "--reuse-port",
        action="store_true",
        help="each worker also listens on its own SO_REUSEPORT socket (TCP): the kernel "
        "spreads connections between the workers",
    )
    add(
        procs,
        "--metrics-bind",
        metavar="ADDRESS",
        help="serve Prometheus metrics (GET /metrics) on HOST:PORT or unix:PATH, from the "
        "master (or the single process); off by default",
    )
    add(procs, "--pid", metavar="FILE", help="write the server's process id to this file")
    add(
        procs,
        "--user",
        metavar="USER",
        help="after binding, before importing the application, run as this user "
        "(name or uid; the workers under a master, which stays as it started)",
    )
    add(procs, "--group", metavar="GROUP", help="run as this group (name or gid), like --user")
    add(procs, "--chdir", metavar="DIR", help="change to this directory before anything else")
    add(
        procs,
        "--umask",
        metavar="MASK",
        type=_converter("umask", _umask),
        help="octal umask of the server's processes (e.g. 022; default: inherited)",
    )
    add(
        procs,
        "--env",
        action="append",
        metavar="KEY=VALUE",
        type=_converter("env", _env_pair),
        help="set an environment variable before the application is imported; repeatable",
    )

    dev = parser.add_argument_group("development")
    add(
        dev,
        "--reload",
        action="store_true",
        help="restart the workers when a source file changes (uses watchfiles when installed)",
    )
    add(
        dev,
        "--reload-dir",
        dest="reload_dirs",
        action="append",
        metavar="DIR",
        help="watch this directory; repeatable (default: the --app-dir)",
    )
    add(
        dev,
        "--reload-include",
        dest="reload_includes",
        action="append",
        metavar="PATTERN",
        help="watch files whose name matches this glob; repeatable (default: *.py)",
    )

    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="a Python file of gunicorn-style settings and server hooks (also "
        "$PYSERVER_CONFIG); ./pyproject.toml's [tool.pyserver] is read too",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"pyserver {__version__} ({config.python_description()})",
        help="show the version and exit",
    )
    return parser, options


def _parse_bool(value):
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _from_env(action, raw):
    """Convert an environment value the way the option's own parser would."""
    if action.nargs == 0:
        return _parse_bool(raw)
    convert = action.type or str
    if action.dest in LIST_OPTIONS:
        return [convert(word) for word in raw.split()]
    return convert(raw)


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Parse the command line, fill unset options from the environment.

    Returns a dict of the options that were given, ready for Config(**kwargs).
    Exits with status 2 on a bad value, like argparse.
    """
    environ = os.environ if environ is None else environ
    parser, options = build_parser()
    # An unknown option is reported before APP is checked: `--wokers 4 app:app` takes "4"
    # for APP, and the mistyped option is the error to show.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        unknown = [word for word in unknown if word.startswith("-")] or unknown
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    for action in options:
        if getattr(args, action.dest) is not None:
            continue
        name = ENV_PREFIX + action.dest.upper()
        raw = environ.get(name)
        if raw is None and action.dest == "workers":
            name, raw = "WEB_CONCURRENCY", environ.get("WEB_CONCURRENCY")
        if raw is None:
            continue
        try:
            setattr(args, action.dest, _from_env(action, raw))
        except argparse.ArgumentTypeError as exc:
            parser.error(f"environment variable {name}: {exc}")
    found = _apply_files(args, options, environ, parser)
    if args.app is None:
        parser.error("the following arguments are required: APP")
    try:
        args.app = _app_spec(args.app)
    except ValueError as exc:
        parser.error(f"argument APP: {exc}")
    kwargs = {key: value for key, value in vars(args).items() if value is not None}
    kwargs.pop("config", None)
    if found.hooks:
        kwargs["hooks"] = found.hooks
    if found.warnings:
        kwargs["startup_warnings"] = found.warnings
    return kwargs


def _apply_files(args, options, environ, parser):
    """Fill the options still unset from --config FILE, then ./pyproject.toml."""
    actions = {action.dest: action for action in options}
    path = args.config or environ.get(ENV_PREFIX + "CONFIG")
    try:
        sources = [configfile.load_python(path, actions)] if path else []
        sources.append(configfile.load_pyproject("pyproject.toml", actions))
    except configfile.ConfigFileError as exc:
        parser.error(str(exc))
    found = configfile.FileSettings()
    for source in sources:
        for dest, value in source.options.items():
            if getattr(args, dest, None) is None:
                setattr(args, dest, value)
        found.hooks.update(source.hooks)
        found.warnings += source.warnings
    return found


def run(cfg: Config) -> int:
    """Load cfg, serve until stopped; return the process exit status."""
    try:
        from pyserver import _core
    except ImportError as exc:
        print(
            f"pyserver: error: the C core pyserver._core cannot be loaded ({exc}); "
            "build it with `make build` or `pip install .` in a source tree",
            file=sys.stderr,
        )
        return 1
    server = hooks.HookServer(cfg)
    try:
        cfg.prepare()
        hooks.run_startup(cfg, "on_starting", server)
        cfg.load()
        hooks.run_startup(cfg, "when_ready", server)
    except StartupError as exc:
        cfg.close_sockets()
        print(f"pyserver: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        cfg.close_sockets()
        return 130

    logger = cfg.error_logger
    role = "master" if cfg.use_master else "server"
    logger.info("Started pyserver %s %s (pid %d)", __version__, role, os.getpid())
    for sock in cfg.sockets:
        proxied = " (PROXY protocol)" if cfg.speaks_proxy_protocol(sock) else ""
        url = config.socket_url(sock, cfg.ssl_certfile is not None)
        if cfg.speaks_uwsgi(sock):
            url = "uwsgi://" + url.split("://", 1)[-1]
        logger.info("Listening on %s%s", url, proxied)
    if cfg.metrics_socket is not None:
        logger.info("Metrics on %s/metrics", config.socket_url(cfg.metrics_socket))
    if cfg.use_master:
        plural = "es" if cfg.workers > 1 else ""
        logger.info("Running %d worker process%s, %s each", cfg.workers, plural, _threads_text(cfg))
    else:
        logger.info("Running in a single process, %s", _threads_text(cfg))
    status = 0
    reloading = []
    if not cfg.use_master:
        # SIGHUP: stop gracefully, then start again on the same sockets (pyserver.reexec).

        def on_hup():
            # The new server reads the TLS files again: files that do not load
            # (a renewal gone wrong) would leave no server at all.
            if cfg.ssl_certfile is not None:
                try:
                    _core.check_tls(cfg)
                except ValueError as exc:
                    logger.error(
                        "Not reloading: %s; the server keeps serving with the files it loaded",
                        exc,
                    )
                    return False
            reloading.append(True)
            logger.info("Reloading (SIGHUP): finishing requests in progress")
            return True

        cfg.on_hup = on_hup
    try:
        write_pid_file(cfg.pid)
        if cfg.use_master:
            status = workers_proc.run_master(cfg)
        else:
            status = hooks.serve_single(cfg, server, _core)
    except OSError as exc:
        reloading.clear()
        print(f"pyserver: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        reloading.clear()
    except StartupError as exc:
        reloading.clear()
        print(f"pyserver: {exc}", file=sys.stderr)
        status = exc.exit_code
    finally:
        if not (reloading and status == 0):
            cfg.close_sockets()
            remove_pid_file(cfg.pid)
            hooks.run(cfg, "on_exit", server)
    if reloading and status == 0:
        logger.info("Reloading: starting again on the same sockets (pid %d)", os.getpid())
        _flush_logs()
        try:
            reexec.exec_again(cfg)
        except OSError as exc:
            logger.error("Cannot reload: %s", exc)
            cfg.close_sockets()
            remove_pid_file(cfg.pid)
            hooks.run(cfg, "on_exit", server)
            return 1
    logger.info("Finished %s process [%d]", role, os.getpid())
    return status


def _flush_logs():
    for handler in logging.getLogger().handlers + logging.getLogger("pyserver").handlers:
        handler.flush()
    for name in ("pyserver.error", "pyserver.access"):
        for handler in logging.getLogger(name).handlers:
            handler.flush()


def write_pid_file(path):
    if path is not None:
        try:
            with open(path, "w") as f:
                f.write(f"{os.getpid()}\n")
        except OSError as exc:
            raise OSError(f"cannot write the pid file {path}: {exc.strerror}") from exc


def remove_pid_file(path):
    """Remove the pid file if it is still ours."""
    if path is None:
        return
    try:
        with open(path) as f:
            if f.read().strip() != str(os.getpid()):
                return
        os.unlink(path)
    except OSError:
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pyserver` script and `python -m pyserver`."""
    reexec.remember(argv)
    kwargs = parse_args(argv)
    app = kwargs.pop("app")
    try:
        cfg = Config(app, **kwargs)
    except ValueError as exc:
        print(f"pyserver: error: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        print(f"pyserver: {exc}", file=sys.stderr)
        return exc.exit_code
    return run(cfg)
