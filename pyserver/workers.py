"""Gunicorn worker classes that serve through pyserver's C core.

    gunicorn -k pyserver.workers.PyserverWorker myproject.asgi:application
    gunicorn -k pyserver.workers.PyserverWSGIWorker myproject.wsgi:application
    gunicorn -k pyserver.workers.PyserverASGIWorker myproject.asgi:application

Gunicorn's arbiter binds the sockets, forks the workers and watches them; each worker runs one
`_core.serve()` loop on the arbiter's sockets, with gunicorn's settings mapped onto a
pyserver Config (see docs/gunicorn.md for the mapping and what has none). The arbiter's
timeout works through a libev timer that calls `notify()` (config.on_tick), so a blocked loop
shows up as WORKER TIMEOUT. Gunicorn is optional: only this module needs it.
"""

import datetime
import os
import signal
import sys
from types import FrameType
from typing import Any

try:
    from gunicorn.workers.base import Worker as _GunicornWorker
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pyserver.workers needs gunicorn, which is not installed: pip install gunicorn"
    ) from exc

from pyserver import importer, logconfig, options
from pyserver.config import Config, resolve_access_log_format
from pyserver.hooks import Request, Response, _Body

__all__ = ["PyserverWorker", "PyserverWSGIWorker", "PyserverASGIWorker"]

# The options whose gunicorn setting means "no limit" with 0: the core's largest value
# stands in for it.
_ZERO_IS_MAX = tuple(opt for opt in options.OPTIONS if opt.gunicorn_rule == options.ZERO_IS_MAX)


def _setting(gcfg, name):
    """The gunicorn setting of option `name` (options.py says which it is)."""
    return options.gunicorn_setting(gcfg, name)


def _limit(opt, value):
    lo, hi = opt.bounds
    value = int(value)
    if value <= 0:
        return hi
    return max(lo, min(hi, value))


def _clamp(name, value):
    lo, hi = options.BY_NAME[name].bounds
    return max(lo, min(hi, int(value)))


def _is_default_hook(cfg, name):
    """True when the server hook `name` is gunicorn's own default (then it is not called)."""
    setting = cfg.settings[name]
    default = getattr(type(setting), "default", None)
    value = setting.get()
    return getattr(value, "__code__", value) is getattr(default, "__code__", default)


def _access_log_enabled(log, cfg):
    """Whether gunicorn writes access log lines (Logger.access_log_enabled in gunicorn 23+)."""
    enabled = getattr(log, "access_log_enabled", None)
    if enabled is None:
        enabled = (
            cfg.accesslog
            or cfg.logconfig
            or getattr(cfg, "logconfig_dict", None)
            or (cfg.syslog and not cfg.disable_redirect_access_to_syslog)
        )
    return bool(enabled)


class PyserverWorker(_GunicornWorker):
    """Serves a WSGI or an ASGI application (detected like `--interface auto`)."""

    interface = "auto"
    # Config options gunicorn has no setting for (the WebSocket ones: ws, ws_max_size,
    # ws_max_queue, ws_ping_interval, ws_ping_timeout, ws_per_message_deflate,
    # ws_deflate_level; the HTTP/2 flood bounds: http2_max_new_streams, http2_max_resets,
    # http2_max_control_frames, http2_max_empty_frames, http2_max_window_updates,
    # http2_max_continuations; response compression: compress, compress_min_size,
    # compress_types, compress_level), set by a subclass as with uvicorn's worker:
    # class MyWorker(PyserverWorker): CONFIG_KWARGS = {...}
    CONFIG_KWARGS: dict[str, Any] = {}
    # Gunicorn's exit codes: the arbiter halts instead of respawning.
    WORKER_BOOT_ERROR = 3
    APP_LOAD_ERROR = 4

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._retiring = False

    # ---- boot ----

    def load_wsgi(self) -> None:
        """Imports the application; any failure exits with APP_LOAD_ERROR (4)."""
        try:
            super().load_wsgi()
        except SystemExit:
            raise
        except BaseException:
            self.log.exception("Exception while loading the application")
            sys.stderr.flush()
            sys.exit(self.APP_LOAD_ERROR)

    def handle_abort(self, sig: int, frame: FrameType | None) -> None:
        """The arbiter's timeout: run worker_abort, then leave at once.

        gunicorn raises SystemExit here; inside an application called by the core that would be
        caught as an application error (a 500), so the process ends with os._exit instead.
        """
        self.alive = False
        try:
            self.cfg.worker_abort(self)
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - best effort at exit
                    pass
            os._exit(1)

    # ---- serving ----

    def run(self) -> None:
        from pyserver import _core

        try:
            app, config = self._make_config()
        except Exception:
            self.log.exception("Cannot start the pyserver worker")
            sys.exit(self.WORKER_BOOT_ERROR)
        self.notify()
        status = _core.serve(app, [s.sock for s in self.sockets], config)
        if status:  # ASGI lifespan startup failed
            sys.exit(self.WORKER_BOOT_ERROR)

    def _tls_kwargs(self) -> dict[str, Any]:
        """gunicorn's certfile, keyfile, ca_certs, cert_reqs and ciphers as Config's ssl_*.

        do_handshake_on_connect needs nothing: the core always finishes the handshake on
        its loop before it reads a request.
        """
        gcfg = self.cfg
        if not gcfg.is_ssl:
            return {}
        names = ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs", "ssl_cert_reqs", "ssl_ciphers")
        # CONFIG_KWARGS may give the lists of several certificates (see docs/gunicorn.md).
        return {name: _setting(gcfg, name) for name in names if name not in self.CONFIG_KWARGS}

    def _http2_kwargs(self) -> dict[str, Any]:
        """gunicorn's HTTP/2 settings (gunicorn 25+) as Config's http and http2_*.

        HTTP/2 is served only when http_protocols names h2: over TLS by ALPN (h2 and
        http/1.1 offered, whatever their order in the setting), in cleartext when
        http2_cleartext is not "off" (any of its mechanisms turns on both prior knowledge
        and Upgrade: h2c, for every peer). A gunicorn without http_protocols keeps the
        core's default ("auto")."""
        gcfg = self.cfg
        protocols = getattr(gcfg, "http_protocols", None)
        if protocols is None:
            return {}
        if "h2" not in protocols:
            return {"http": "1"}
        cleartext = getattr(gcfg, "http2_cleartext", "off")
        kwargs: dict[str, Any] = {"http": "auto" if gcfg.is_ssl or cleartext != "off" else "1"}
        for ours, theirs in (
            ("http2_max_concurrent_streams", "http2_max_concurrent_streams"),
            ("http2_max_headers_size", "http2_max_header_list_size"),
            ("http2_initial_stream_window_size", "http2_initial_window_size"),
        ):
            setting = gcfg.settings.get(theirs)
            if setting is None:
                continue
            value = int(setting.get())
            if theirs == "http2_initial_window_size" and value == setting.default:
                continue  # the RFC's 65535: pyserver's larger default window stays
            kwargs[ours] = _clamp(ours, value)
        return kwargs

    def _make_config(self) -> tuple[Any, Config]:
        """Returns (app, config): the application as the core calls it and gunicorn's
        settings mapped onto a pyserver Config."""
        gcfg = self.cfg
        app = self.wsgi
        interface = self.interface
        if interface == "auto":
            interface = importer.detect_interface(app)
        if interface == "asgi":
            app = importer.as_asgi3(app)
        connections = max(1, int(_setting(gcfg, "limit_connections")))
        threads = int(_setting(gcfg, "threads") or 1)
        # gunicorn's --protocol uwsgi: every listener speaks it, to uwsgi_allow_ips' peers.
        uwsgi = getattr(gcfg, "protocol", "http") == "uwsgi"
        trusted = gcfg.uwsgi_allow_ips if uwsgi else _setting(gcfg, "forwarded_allow_ips")
        if uwsgi and gcfg.is_ssl:
            raise ValueError("--protocol uwsgi with certfile: nginx speaks uwsgi in clear")
        config = Config(
            getattr(self.app, "app_uri", None) or "gunicorn",
            interface=interface,
            root_path=self._root_path(),
            timeout_keep_alive=max(0.0, float(_setting(gcfg, "timeout_keep_alive"))),
            limit_connections=connections,
            limit_concurrency=connections,
            access_log=False,  # set below when the core writes gunicorn's access lines
            workers=1,  # not WEB_CONCURRENCY: the arbiter owns the process count
            # gunicorn's threads: application threads (WSGI), the default executor (ASGI)
            threads=threads if threads > 1 else None,
            # Like uvicorn's worker: a trusted proxy's X-Forwarded-For names the client.
            proxy_headers=True,
            forwarded_allow_ips=list(trusted or ()),
            **{opt.name: _limit(opt, _setting(gcfg, opt.name)) for opt in _ZERO_IS_MAX},
            **self._tls_kwargs(),
            **self._http2_kwargs(),
            **self._asgi_side(interface),
            **self._request_ids(),
            **self._health_kwargs(),
            **self.CONFIG_KWARGS,
        )
        if config.redirect_http is not None:
            raise ValueError("redirect_http: gunicorn's arbiter binds the sockets; not available")
        config.check_tls()  # a bad certificate or key: one logged line, WORKER_BOOT_ERROR
        if uwsgi:
            config.uwsgi_fds = [s.sock.fileno() for s in self.sockets]
        # gunicorn's scheme rule: each secure_scheme_headers header present says https
        # when it has the table's value, http otherwise; headers that disagree are a 400.
        config.secure_scheme_headers = dict(gcfg.secure_scheme_headers or {})
        config.workers = _setting(gcfg, "workers")  # for wsgi.multiprocess
        config.error_logger = self.log.error_log
        # wsgi.errors text goes to gunicorn's error log as it comes, as gunicorn's own does.
        config.wsgi_errors_write = logconfig.stream_writer(
            self.log.error_log, config.wsgi_errors_level
        )
        config.access_logger = self.log.access_log
        self._core_access_log = self._use_core_access_log(config)
        config.loaded_app = app
        if config.asgi_app is not None:
            config.loaded_asgi_app = config.load_asgi_side()
            app = config.loaded_app = config.link_to_loop(app)
        # Read by _core.serve: the heartbeat and the self-retiring after max_requests.
        config.on_tick = self._tick
        config.on_stop_signal = self._on_stop_signal
        config.tick_interval = max(0.1, min(1.0, self.timeout / 4.0)) if self.timeout else 1.0
        config.max_requests = self.max_requests if _setting(gcfg, "max_requests") > 0 else 0
        app = self._wrap(app, interface)
        return app, config

    def _asgi_side(self, interface):
        """--asgi-app and --asgi-path for gunicorn, which has no such settings: the
        environment's PYSERVER_ASGI_APP and PYSERVER_ASGI_PATHS (gunicorn's -e or raw_env
        set them), or a subclass's CONFIG_KWARGS. Returns Config's keyword arguments."""
        if "asgi_app" in self.CONFIG_KWARGS:
            return {}
        env = {**os.environ, **(self.cfg.env or {})}
        asgi_app = env.get(options.BY_NAME["asgi_app"].env[0]) or None
        if asgi_app is None:
            return {}
        paths = env.get(options.BY_NAME["asgi_paths"].env[0], "").split()
        return {"asgi_app": asgi_app, "asgi_paths": paths}

    def _request_ids(self):
        """--request-id and --request-start-header for gunicorn, which has no such settings:
        the environment's PYSERVER_REQUEST_ID and PYSERVER_REQUEST_START_HEADER (gunicorn's
        -e or raw_env set them), or a subclass's CONFIG_KWARGS. Config's keyword arguments."""
        env = {**os.environ, **(self.cfg.env or {})}
        kwargs = {}
        for name in ("request_id", "request_start_header"):
            value = env.get(options.BY_NAME[name].env[0])
            if value is not None and name not in self.CONFIG_KWARGS:
                kwargs[name] = value
        return kwargs

    def _health_kwargs(self):
        """Config's graceful_timeout, health_check_path and drain_delay.

        gunicorn has no setting for the last two: PYSERVER_HEALTH_CHECK_PATH and
        PYSERVER_DRAIN_DELAY come from the environment (gunicorn's -e or raw_env), unless a
        subclass's CONFIG_KWARGS gives them. The drain happens in this worker, within
        gunicorn's graceful_timeout (the arbiter kills the worker once that is over), so the
        requests still in progress after the drain get what is left of it."""
        env = {**os.environ, **(self.cfg.env or {})}
        kwargs = {}
        for name in ("health_check_path", "drain_delay"):
            value = env.get(options.BY_NAME[name].env[0])
            if name not in self.CONFIG_KWARGS and value:
                kwargs[name] = value
        delay = options.BY_NAME["drain_delay"].check(
            self.CONFIG_KWARGS.get("drain_delay", kwargs.get("drain_delay", options.MISSING))
        )
        graceful = max(0.0, float(_setting(self.cfg, "graceful_timeout")))
        if delay > 0 and delay >= graceful:
            self.log.warning(
                "drain_delay (%g s) is not shorter than gunicorn's graceful_timeout (%g s): "
                "the arbiter kills the worker before its drain ends",
                delay,
                graceful,
            )
        kwargs["graceful_timeout"] = max(0.1, graceful - delay) if delay > 0 else graceful
        return kwargs

    def _root_path(self):
        root = (self.cfg.env or {}).get("SCRIPT_NAME") or os.environ.get("SCRIPT_NAME", "")
        return root if root.startswith("/") else ""

    def _wrap(self, app, interface):
        """Adds gunicorn's per-request work only when it is asked for: the access log
        (accesslog or a logging config) and non-default pre_request/post_request hooks."""
        access = _access_log_enabled(self.log, self.cfg) and not self._core_access_log
        pre = not _is_default_hook(self.cfg, "pre_request")
        post = not _is_default_hook(self.cfg, "post_request")
        if not (access or pre or post):
            return app
        hooks = _AccessHooks(self, access, pre, post)
        if interface == "asgi":
            return _ASGIHooks(app, hooks)
        return _WSGIHooks(app, hooks)

    def _use_core_access_log(self, config):
        """Has the core write gunicorn's access lines (access_log_format, formatted in C) when
        gunicorn's own Logger writes them; a custom logger_class, or a format with an atom the
        core does not know, keeps gunicorn's Logger.access() on the Python path."""
        from gunicorn import glogging

        if not _access_log_enabled(self.log, self.cfg) or type(self.log) is not glogging.Logger:
            return False
        fmt = self.cfg.access_log_format
        try:
            config.access_log_format = resolve_access_log_format(fmt)
        except ValueError as exc:
            self.log.warning("%s: gunicorn's Logger writes the access log instead", exc)
            return False
        config.access_log = True
        return True

    def _tick(self, retire: bool) -> bool:
        """Called by the core's loop every tick_interval seconds. Returns True to stop
        gracefully: gunicorn's arbiter then starts the replacement worker."""
        self.notify()
        if self.ppid != os.getppid():
            self.log.info("Parent changed, shutting down: %s", self)
            self.alive = False
        if retire and not self._retiring:
            self._retiring = True
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        return not self.alive

    def _on_stop_signal(self, signum: int) -> None:
        """SIGINT/SIGQUIT: fast stop after gunicorn's worker_int hook; SIGTERM: graceful
        (the core's own stop, after its drain with drain_delay: _tick must not cut it short)."""
        if signum == signal.SIGTERM:
            return
        self.alive = False
        if signum in (signal.SIGINT, signal.SIGQUIT):
            self.cfg.worker_int(self)


class PyserverWSGIWorker(PyserverWorker):
    """Serves the application as WSGI, whatever it looks like."""

    interface = "wsgi"


class PyserverASGIWorker(PyserverWorker):
    """Serves the application as ASGI (an ASGI 2 application is wrapped into ASGI 3)."""

    interface = "asgi"


# ---- gunicorn's per-request hooks and access log ----


class _AccessHooks:
    def __init__(self, worker, access, pre, post):
        self.worker = worker
        self.access = access
        self.pre = pre
        self.post = post

    def before(self, req):
        if self.pre:
            self.worker.cfg.pre_request(self.worker, req)

    def after(self, req, environ, resp, started):
        worker = self.worker
        if resp.status is None:
            resp.start("500 Internal Server Error", [])
        try:
            if self.access:
                worker.log.access(resp, req, environ, datetime.datetime.now() - started)
        finally:
            if self.post:
                worker.cfg.post_request(worker, req, environ, resp)


class _WSGIHooks:
    """WSGI middleware: pre_request, then the app, then post_request and the access log once
    the body is sent (a list or tuple body is logged as soon as it is returned)."""

    def __init__(self, app, hooks):
        self.app = app
        self.hooks = hooks

    def __call__(self, environ, start_response):
        started = datetime.datetime.now()
        req = Request(environ)
        resp = Response()
        hooks = self.hooks
        hooks.before(req)

        def counting_start_response(status, headers, exc_info=None):
            write = start_response(status, headers, exc_info)
            resp.start(status, headers)

            def counting_write(data):
                write(data)
                resp.sent += len(data)

            return counting_write

        try:
            result = self.app(environ, counting_start_response)
        except BaseException:
            resp.start("500 Internal Server Error", [])
            hooks.after(req, environ, resp, started)
            raise
        if isinstance(result, (list, tuple)):
            resp.sent += sum(len(item) for item in result)
            hooks.after(req, environ, resp, started)
            return result
        return _Body(result, lambda: hooks.after(req, environ, resp, started), resp)


class _ASGIHooks:
    """ASGI middleware for HTTP scopes: the same hooks, with a WSGI-like environ built from
    the scope for the access log atoms."""

    def __init__(self, app, hooks):
        self.app = app
        self.hooks = hooks

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = datetime.datetime.now()
        environ = _scope_environ(scope)
        req = Request(environ)
        resp = Response()
        hooks = self.hooks
        hooks.before(req)

        async def counting_send(message):
            kind = message["type"]
            if kind == "http.response.start":
                headers = [
                    (name.decode("latin-1"), value.decode("latin-1"))
                    for name, value in message.get("headers", ())
                ]
                resp.start(str(message["status"]), headers)
            elif kind == "http.response.body":
                resp.sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            hooks.after(req, environ, resp, started)


def _scope_environ(scope):
    query = scope.get("query_string", b"").decode("latin-1")
    raw_path = scope.get("raw_path") or scope.get("path", "").encode("utf-8")
    raw_uri = raw_path.decode("latin-1") + ("?" + query if query else "")
    client = scope.get("client") or ("", 0)
    environ = {
        "REQUEST_METHOD": scope.get("method", ""),
        "RAW_URI": raw_uri,
        "PATH_INFO": scope.get("path", ""),
        "QUERY_STRING": query,
        "SERVER_PROTOCOL": "HTTP/" + scope.get("http_version", "1.1"),
        "REMOTE_ADDR": client[0],
        "REMOTE_PORT": str(client[1]),
        "SCRIPT_NAME": scope.get("root_path", ""),
        "wsgi.url_scheme": scope.get("scheme", "http"),
    }
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value.decode("latin-1")
        else:
            key = "HTTP_" + key
            value = value.decode("latin-1")
            environ[key] = environ[key] + "," + value if key in environ else value
    return environ
