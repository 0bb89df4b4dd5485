"""Settings from files: `-c/--config FILE` (a Python file, gunicorn style) and the
`[tool.pyserver]` table of ./pyproject.toml.

Both give values for the command line's options; cli.parse_args applies them only to the
options that neither the command line nor the environment set, so the precedence is
CLI > environment > --config file > pyproject.toml > defaults. Every value goes through the
option's own converter, so a bad value is reported as the CLI would report it, naming the
file and the setting.

The Python file is run with runpy. Its module-level names are read: gunicorn's setting names
that pyserver has an equivalent for (each option's `gunicorn` in options.py), pyserver's own
option names, and the server hooks (HOOKS). gunicorn's settings and hooks that do not apply
(options.GUNICORN_IGNORED, UNSUPPORTED_HOOKS) are ignored with one warning naming them, so a
typical gunicorn.conf.py loads. Names starting with "_" and imported modules are skipped;
any other name is an error naming it (a helper function can be called `_helper`);
functions and classes imported from elsewhere are skipped too.
"""

import os
import runpy
import sys
import types

from pyserver import checks, options

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

# The options a file may set, by name (pyproject.toml's keys may also use '-').
FILE_OPTIONS = frozenset(opt.name for opt in options.OPTIONS if opt.in_files)


class ConfigFileError(Exception):
    """A settings file cannot be read or holds a bad setting; str() names both."""


class FileSettings:
    """What the files gave: options (name -> converted value), hooks, warnings to log."""

    def __init__(self):
        self.options = {}
        self.hooks = {}
        self.warnings = []


def convert(opt, value):
    """A file's value for opt, converted as the option's own parser would; raises
        ValueError. A number is read as the command line reads its text (an int for an octal
        option is the mode itself: 0o022 in Python, 18 in TOML); a list for a repeatable option
        gives its items, any other sequence goes to the option's check (the trusted proxies take
    gunicorn's list); a bool is only for options that take one."""
    if opt.kind in ("flag", "switch") or opt.type is checks.boolean:
        if isinstance(value, (bool, str)):
            return checks.boolean(value)
        raise ValueError(f"expected true or false, got {value!r}")
    if opt.kind == "list":
        items = [value] if isinstance(value, str) else list(value)
        return [_one(opt, item) for item in items]
    return _one(opt, value)


def _one(opt, value):
    if isinstance(value, bool):
        raise ValueError(f"expected a value, got {value!r}")
    if opt.octal and isinstance(value, int):
        value = format(value, "o")
    elif isinstance(value, (int, float)) or opt.type is None:
        value = str(value)
    return opt.convert(value)


def _set(settings, name, value, where):
    try:
        settings.options[name] = convert(options.BY_NAME[name], value)
    except (ValueError, TypeError) as exc:
        raise ConfigFileError(f"{where}: {exc}") from None


def load_python(path):
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
        elif name in options.BY_GUNICORN:
            for option, setting in options.from_gunicorn(name, value).items():
                _set(settings, option, setting, where)
        elif name in FILE_OPTIONS:
            _set(settings, name, value, where)
        elif name in options.GUNICORN_IGNORED:
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


def load_pyproject(path):
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
        if dest not in FILE_OPTIONS:
            raise ConfigFileError(f"{where}: unknown option")
        _set(settings, dest, value, where)
    return settings
