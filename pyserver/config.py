"""Config: every server option of one server, checked, then resolved once by load().

The options themselves (their names, types, bounds, defaults and meaning) are declared
once, in pyserver/options.py: each is a keyword argument of Config and an attribute of
the same name, checked by the table's rule. What is here is what involves several
options at once, and the attributes Config derives or gains on the way to serving, which
the C core reads too (`_core.serve(app, sockets, config)`; docs/configuration.md, "What
the C core reads"):

    app_spec                  str, "module:attr" for messages
    uwsgi_bind                list of the addresses bound as uwsgi://ADDRESS (taken out
                              of bind)
    executor_threads          None, or int: ASGI, the size of asyncio's default executor
                              (threads given); threads itself is then at least 1
    use_master                bool: a master process forks and supervises the workers
    url_scheme                "http" (a TLS connection's requests say "https")
    uid, gid                  None or the ids user and group name
    wsgi_errors_raw           bool: wsgi.errors text is written as it comes (no
                              wsgi_errors_level given), through wsgi_errors_write
    wsgi_errors_level         int, the logging level of lines written to wsgi.errors
    secure_scheme_headers     None (X-Forwarded-Proto sets the scheme) or gunicorn's
                              {header: value meaning https} (set by the gunicorn worker)
    error_logger              logging.Logger "pyserver.error"
    access_logger             logging.Logger "pyserver.access"
    loaded_app                the application object, once imported
    loaded_asgi_app           the asgi_app object (ASGI 3), once imported, else None
    sockets, addresses, bound_fds, proxy_protocol_fds, uwsgi_fds, redirect_fds,
    redirect_https_port, metrics_socket,
    metrics_fd                the listening sockets and what they speak (see sockets.py)
    hooks                     dict of the server hooks of a --config file (see hooks.py)

Supervision by a foreign process manager (the gunicorn worker sets these; None leaves
the worker alone):

    on_tick                   None or callable(retire: bool) -> bool, called every
                              tick_interval seconds from the worker's loop; True stops
                              the worker gracefully
    on_stop_signal            None or callable(signum), called before the worker acts on
                              SIGINT, SIGTERM or SIGQUIT
    tick_interval             float seconds between on_tick calls

With one worker and no process-management option (--timeout, --max-requests,
--max-rss, --preload, --reuse-port, --reload) the server runs in a single process, without
a master.
"""

import grp
import logging
import os
import pwd
from typing import TYPE_CHECKING, Any

from pyserver import checks, hooks, hybrid, importer, logconfig, options, reexec, sockets
from pyserver.errors import StartupError
from pyserver.sockets import describe_address, format_host_port, parse_bind, socket_url

# Names other modules and users' scripts import from here.
__all__ = [
    "Config",
    "StartupError",
    "describe_address",
    "format_host_port",
    "parse_bind",
    "socket_url",
]

DEFAULT_TIMEOUT = 30.0
# What Config takes besides the options: set by the CLI from the settings files.
EXTRA_KEYWORDS = ("hooks", "startup_warnings")


def resolve_access_log_format(fmt, json_lines=False):
    """The access log format --access-logformat/--access-log-json ask for, checked by the core's
    compiler (ValueError naming an unknown atom)."""
    if json_lines:
        if fmt not in (None, "json"):
            raise ValueError("--access-log-json and --access-logformat: give only one")
        fmt = "json"
    if fmt is None:
        return options.DEFAULT_ACCESS_LOG_FORMAT
    return checks.access_log_format(fmt)


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

    if TYPE_CHECKING:
        # The option attributes are set from the table (options.py), one per option.
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init__(self, app, **kwargs):
        unknown = sorted(set(kwargs) - {opt.name for opt in options.CONFIG_OPTIONS})
        unknown = [name for name in unknown if name not in EXTRA_KEYWORDS]
        if unknown:
            raise TypeError(f"Config() got an unexpected keyword argument {unknown[0]!r}")
        self.app = app
        self.app_spec = app if isinstance(app, str) else _app_name(app)
        for opt in options.CONFIG_OPTIONS:
            setattr(self, opt.name, opt.check(kwargs.get(opt.name, options.MISSING)))
        self.hooks = dict(kwargs.get("hooks") or {})
        self.startup_warnings = list(kwargs.get("startup_warnings") or ())
        self._combine(timeout_given=self.timeout is not None)
        self._runtime_fields()

    def _combine(self, timeout_given):
        """What the options mean together. Raises ValueError (a usage error, exit 2) or
        StartupError."""
        # uwsgi://ADDRESS binds ADDRESS; its listener speaks uwsgi.
        self.uwsgi_bind = [b[1] for b in self.bind if b[0] == "uwsgi"]
        self.bind = [b[1] if b[0] == "uwsgi" else b for b in self.bind]
        self.asgi_app, self.asgi_paths = check_asgi_side(
            self.asgi_app, self.asgi_paths, self.interface
        )
        self.access_log_format = resolve_access_log_format(
            self.access_log_format, self.access_log_json
        )
        # ASGI: the size of asyncio's default executor, when --threads is given.
        self.executor_threads = self.threads
        self.threads = self.threads or 1
        # --reload is for development: no watchdog (a debugger may stop a request) unless
        # --timeout is given.
        if not timeout_given:
            self.timeout = 0.0 if self.reload else DEFAULT_TIMEOUT
        # uvicorn's --limit-max-requests is gunicorn's --max-requests: the
        # master retires the worker once its replacement is ready.
        self.max_requests = self.max_requests or self.limit_max_requests
        self.use_master = (
            self.reload
            or self.workers > 1
            or timeout_given
            or self.max_requests > 0
            or self.max_rss > 0
            or self.preload
            or self.reuse_port
        )
        if not self.ssl_certfile and (self.ssl_keyfile or self.ssl_ca_certs):
            raise ValueError("--ssl-keyfile and --ssl-ca-certs need --ssl-certfile")
        if self.ssl_keyfile and len(self.ssl_keyfile) != len(self.ssl_certfile):
            raise ValueError(
                f"{len(self.ssl_certfile)} --ssl-certfile and {len(self.ssl_keyfile)} "
                "--ssl-keyfile: give one key per certificate, in the same order (or none when "
                "each certificate file holds its key)"
            )
        if not self.ssl_certfile and (self.hsts or self.redirect_http):
            raise ValueError("--hsts and --redirect-http need TLS: give --ssl-certfile")
        try:
            self.uid, self.gid = resolve_user_group(self.user, self.group)
        except ValueError as exc:  # the system's accounts, not the option's form: exit 1
            raise StartupError(f"error: {exc}", 1) from None
        # None: wsgi.errors text is written as it comes (wsgi_errors_write), as gunicorn does.
        self.wsgi_errors_raw = self.wsgi_errors_level is None
        self.wsgi_errors_level = logconfig.LOG_LEVELS[self.wsgi_errors_level or "warning"]

    def _runtime_fields(self):
        """The fields filled on the way to serving (see the module's docstring)."""
        self.url_scheme = "http"
        self.loaded_asgi_app = None
        self.loop_link = None  # a hybrid.LoopLink around the WSGI app (see link_to_loop)
        # gunicorn's secure_scheme_headers (set by the gunicorn worker); None reads
        # X-Forwarded-Proto instead.
        self.secure_scheme_headers = None
        # What the core writes wsgi.errors text with (None: it logs each line at
        # wsgi_errors_level); set with the loggers.
        self.wsgi_errors_write = None
        self.error_logger = None
        self.access_logger = None
        self.loaded_app = None
        self.on_tick = None
        self.on_stop_signal = None
        self.on_hup = None  # a single process: called on SIGHUP (see pyserver/reexec.py)
        self.tick_interval = 1.0
        self.sockets = []
        self.addresses = []  # what each of self.sockets was bound or inherited as
        self.bound_fds = []  # of the sockets bound here (not --fd, not socket activation)
        self.proxy_protocol_fds = []
        self.uwsgi_fds = []
        self.redirect_fds = []  # --redirect-http's listeners
        self.redirect_https_port = 443  # the port its redirects name (443: none)
        self.metrics_socket = None
        self.metrics_fd = -1
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
        if not self.ssl_certfile:
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
                self.loaded_app = self.link_to_loop(hooks.wrap_wsgi(app, self))
        return self.loaded_app

    def link_to_loop(self, app):
        """With --asgi-app and application threads: the WSGI app in a hybrid.LoopLink, which
        asgi_runner points at the worker's asyncio loop (self.loop_link); else app."""
        if self.loaded_asgi_app is None or self.threads <= 1:
            return app
        self.loop_link = hybrid.LoopLink(app)
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
                access_bare=self.access_log_format != options.DEFAULT_ACCESS_LOG_FORMAT,
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

    # ---- the listening sockets (sockets.py) ----

    def bind_addresses(self):
        return sockets.bind_addresses(self)

    def bind_sockets(self):
        """Return the listening sockets. Raises StartupError (exit code 1)."""
        return sockets.bind_sockets(self, reexec.inherited())

    def speaks_proxy_protocol(self, sock):
        return sockets.speaks_proxy_protocol(self, sock)

    def speaks_uwsgi(self, sock):
        return sockets.speaks_uwsgi(self, sock)

    def bind_metrics_socket(self):
        sockets.bind_metrics_socket(self)

    def close_metrics_socket(self):
        sockets.close_metrics_socket(self)

    def close_sockets(self):
        sockets.close_sockets(self)


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
