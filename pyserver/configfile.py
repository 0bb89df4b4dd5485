"""Settings from files: `-c/--config FILE` (a Python file, gunicorn style) and the
`[tool.pyserver]` table of ./pyproject.toml.

Both give values for the command line's options; cli.parse_args applies them only to the
options that neither the command line nor the environment set, so the precedence is
CLI > environment > --config file > pyproject.toml > defaults. Every value goes through the
option's own converter, so a bad value is reported as the CLI would report it, naming the
file and the setting.

The Python file is run with runpy. Its module-level names are read: gunicorn's setting names
that pyserver has an equivalent for (GUNICORN below), pyserver's own option names, and the
server hooks (HOOKS). gunicorn's settings and hooks that do not apply (GUNICORN_ONLY,
UNSUPPORTED_HOOKS) are ignored with one warning naming them, so a typical gunicorn.conf.py
loads. Names starting with "_" and imported modules are skipped; any other name is an
error naming it (a helper function can be called `_helper`); functions and classes
imported from elsewhere are skipped too.
"""

import argparse
import os
import runpy
import sys
import types

# The server hooks a config file may define, with where they run (see docs/configuration.md).
HOOKS = (
    "on_starting",
    "when_ready",
    "pre_fork",
    "post_fork",
    "post_worker_init",
    "worker_exit",
    "on_exit",
    "pre_request",
    "post_request",
)
# gunicorn hooks that have no place to run in pyserver yet (ignored, with a warning).
UNSUPPORTED_HOOKS = {
    "pre_exec": "pyserver has no re-exec on USR2",
    "on_reload": "pyserver's master has no SIGHUP reload hook",
    "worker_int": "pyserver's own workers have no SIGINT hook",
    "worker_abort": "the watchdog aborts a worker without calling into Python",
    "child_exit": "the C master reaps workers without calling into Python",
    "nworkers_changed": "pyserver has no TTIN/TTOU",
}

# gunicorn setting -> pyserver option (the CLI's dest name).
GUNICORN = {
    "wsgi_app": "app",
    "bind": "bind",
    "backlog": "backlog",
    "workers": "workers",
    "worker_connections": "limit_connections",
    "timeout": "timeout",
    "graceful_timeout": "graceful_timeout",
    "keepalive": "timeout_keep_alive",
    "max_requests": "max_requests",
    "max_requests_jitter": "max_requests_jitter",
    "limit_request_line": "limit_request_line",
    "limit_request_fields": "limit_request_fields",
    "limit_request_field_size": "limit_request_field_size",
    "preload_app": "preload",
    "reuse_port": "reuse_port",
    "reload": "reload",
    "chdir": "chdir",
    "user": "user",
    "group": "group",
    "umask": "umask",
    "raw_env": "env",
    "pidfile": "pid",
    "forwarded_allow_ips": "forwarded_allow_ips",
    "errorlog": "error_logfile",
    "loglevel": "log_level",
    "logconfig": "log_config",
    "certfile": "ssl_certfile",
    "keyfile": "ssl_keyfile",
    "ca_certs": "ssl_ca_certs",
    "cert_reqs": "ssl_cert_reqs",
    "ciphers": "ssl_ciphers",
}
# gunicorn settings with no equivalent in pyserver (or that its own design makes moot): a
# gunicorn.conf.py that sets them still loads, with one warning naming them.
GUNICORN_ONLY = frozenset(
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
# gunicorn's 0 means "no limit" for these: the largest value pyserver accepts stands in.
GUNICORN_ZERO_IS_MAX = ("limit_request_line", "limit_request_fields", "limit_request_field_size")


class ConfigFileError(Exception):
    """A settings file cannot be read or holds a bad setting; str() names both."""


class FileSettings:
    """What the files gave: options (dest -> converted value), hooks, warnings to log."""

    def __init__(self):
        self.options = {}
        self.hooks = {}
        self.warnings = []


def convert(action, value):
    """Convert a file value the way the option's own parser would; raise ValueError."""
    if action.nargs == 0:  # store_true and --x/--no-x
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            word = value.strip().lower()
            if word in ("1", "true", "yes", "on"):
                return True
            if word in ("0", "false", "no", "off"):
                return False
        raise ValueError(f"expected true or false, got {value!r}")
    conv = action.type or str
    if action.option_strings and action.dest in LIST_DESTS:
        items = [value] if isinstance(value, str) else list(value)
        return [_one(conv, item) for item in items]
    return _one(conv, value)


def _one(conv, value):
    if isinstance(value, bool):
        raise ValueError(f"expected a value, got {value!r}")
    try:
        return conv(value if isinstance(value, str) else str(value))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc)) from None


LIST_DESTS = ("bind", "reload_dirs", "reload_includes", "env", "static", "asgi_paths")


def _set(settings, actions, dest, value, where):
    action = actions[dest]
    if dest in ("umask", "uds_perms") and isinstance(value, int) and not isinstance(value, bool):
        value = format(value, "o")  # 0o022 in Python, 18 in TOML: the CLI reads octal text
    try:
        settings.options[dest] = convert(action, value)
    except (ValueError, TypeError) as exc:
        raise ConfigFileError(f"{where}: {exc}") from None


def load_python(path, actions):
    """Read a gunicorn-style Python config file. Returns FileSettings."""
    settings = FileSettings()
    if not os.path.isfile(path):
        raise ConfigFileError(f"config file {path}: no such file")
    try:
        namespace = runpy.run_path(path, run_name="__config__")
    except Exception as exc:
        raise ConfigFileError(f"config file {path}: {type(exc).__name__}: {exc}") from exc
    ignored = []
    for name, value in namespace.items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if callable(value) and getattr(value, "__module__", "__config__") != "__config__":
            continue  # imported (from multiprocessing import cpu_count), not a setting
        where = f"config file {path}: {name}"
        if name in HOOKS:
            if not callable(value):
                raise ConfigFileError(f"{where}: a server hook must be a function")
            settings.hooks[name] = value
        elif name in UNSUPPORTED_HOOKS:
            ignored.append(f"{name} ({UNSUPPORTED_HOOKS[name]})")
        elif name == "accesslog":
            if value is None:
                settings.options["access_log"] = False
            else:
                _set(settings, actions, "access_logfile", value, where)
        elif name == "access_log_format":
            _set(settings, actions, "access_log_format", value, where)
        elif name == "proxy_protocol":
            _set(settings, actions, "proxy_protocol", bool(value), where)
        elif name in GUNICORN:
            dest = GUNICORN[name]
            if dest in GUNICORN_ZERO_IS_MAX and value == 0:
                from pyserver.config import INT_BOUNDS

                value = INT_BOUNDS[dest][1]
            _set(settings, actions, dest, value, where)
        elif name in actions:
            _set(settings, actions, name, value, where)
        elif name in GUNICORN_ONLY:
            ignored.append(name)
        else:
            raise ConfigFileError(
                f"{where}: unknown setting (neither a pyserver option nor a gunicorn setting "
                "pyserver has an equivalent for; name helpers with a leading '_')"
            )
    if ignored:
        settings.warnings.append(
            f"config file {path}: gunicorn settings that do not apply to pyserver, ignored: "
            + ", ".join(ignored)
        )
    return settings


def load_pyproject(path, actions):
    """Read [tool.pyserver] of a pyproject.toml (pyserver's option names, '-' or '_').
    Returns FileSettings, empty when the file has no such table."""
    settings = FileSettings()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return settings
    except OSError as exc:
        raise ConfigFileError(f"{path}: {exc}") from None
    if b"tool.pyserver" not in raw:
        return settings
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ConfigFileError(
                f"{path}: reading [tool.pyserver] on Python 3.10 needs tomli (pip install tomli)"
            ) from None
    try:
        table = tomllib.loads(raw.decode("utf-8")).get("tool", {}).get("pyserver", {})
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: {exc}") from None
    for key, value in table.items():
        dest = key.replace("-", "_")
        where = f"{path} [tool.pyserver]: {key}"
        if dest not in actions or dest == "config":
            raise ConfigFileError(f"{where}: unknown option")
        _set(settings, actions, dest, value, where)
    return settings
