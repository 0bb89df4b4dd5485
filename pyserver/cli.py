"""The `pyserver` command: the options of options.py, from the command line, the
environment, then the settings files, made into a Config.

Every option can also come from the environment as PYSERVER_<NAME> (for
example PYSERVER_PORT=9000, PYSERVER_ACCESS_LOG=false, PYSERVER_BIND="a b");
the command line wins. Options still unset then come from the -c/--config file and
./pyproject.toml's [tool.pyserver] (configfile.py).
"""

import argparse
import difflib
import logging
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pyserver import __version__, checks, configfile, hooks, options, reexec, sockets, workers_proc
from pyserver.config import Config
from pyserver.errors import StartupError


def _argument_type(opt):
    """The option's check as an argparse type: its ValueError message is the error."""

    def convert(value):
        try:
            return opt.convert(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = opt.name
    return convert


def _threads_text(cfg):
    if cfg.threads > 1 and cfg.interface != "asgi":
        return f"{cfg.threads} application threads"
    return "1 thread"


USAGE = "usage: pyserver [OPTIONS] APP"


class _Parser(argparse.ArgumentParser):
    """argparse with gunicorn's short usage errors: the usage line, the error, and for a
    mistyped option the nearest one (the whole option list is what --help is for)."""

    def error(self, message):
        self.exit(2, f"{USAGE}\npyserver: error: {message}{self._suggestion(message)}\n")

    def _suggestion(self, message):
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


ACTIONS = {
    "value": "store",
    "list": "append",
    "flag": "store_true",
    "switch": argparse.BooleanOptionalAction,
}


def build_parser() -> tuple[argparse.ArgumentParser, list[argparse.Action]]:
    """Return (parser, options): the parser made from the option table, and the actions
    of the table's options (dest: the option's name)."""
    parser = _Parser(
        prog="pyserver",
        description="Serve a WSGI or ASGI application with pyserver's C core (libev + llhttp).",
        epilog="Every option can also be set as an environment variable PYSERVER_<OPTION> "
        "(e.g. PYSERVER_PORT=9000, PYSERVER_ACCESS_LOG=false). Precedence: command line, "
        "environment, -c FILE, ./pyproject.toml [tool.pyserver], defaults.",
    )
    groups: dict[str | None, Any] = {None: parser}
    actions = []
    for opt in options.OPTIONS:
        title = opt.group.title
        if title not in groups:
            groups[title] = parser.add_argument_group(title)
        kwargs: dict[str, Any] = {
            "default": None,
            "help": argparse.SUPPRESS if opt.hidden else opt.help_text(),
            "metavar": options.metavar(opt),
        }
        if not opt.flags:  # APP: checked once every source had its say
            actions.append(groups[title].add_argument(opt.name, nargs="?", **kwargs))
            continue
        kwargs["dest"] = opt.name
        kwargs["action"] = ACTIONS[opt.kind]
        if opt.takes_value:
            kwargs["type"] = _argument_type(opt)
        else:
            del kwargs["metavar"]
        actions.append(groups[title].add_argument(*opt.flags, **kwargs))
    parser.add_argument(
        "--version",
        action="version",
        version=f"pyserver {__version__} ({python_description()})",
        help="show the version and exit",
    )
    return parser, actions


def _from_env(opt, raw):
    """An environment value, converted as the option's own parser would."""
    if opt.kind in ("flag", "switch"):
        return checks.boolean(raw)
    if opt.kind == "list":
        return [opt.convert(word) for word in raw.split()]
    return opt.convert(raw)


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Parse the command line, fill unset options from the environment, then the files.

    Returns a dict of the options that were given, ready for Config(**kwargs).
    Exits with status 2 on a bad value, like argparse.
    """
    environ = os.environ if environ is None else environ
    parser, _ = build_parser()
    # An unknown option is reported before APP is checked: `--wokers 4 app:app` takes "4"
    # for APP, and the mistyped option is the error to show.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        unknown = [word for word in unknown if word.startswith("-")] or unknown
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    for opt in options.OPTIONS:
        for name in opt.env:
            raw = environ.get(name)
            if getattr(args, opt.name) is not None or raw is None:
                continue
            try:
                setattr(args, opt.name, _from_env(opt, raw))
            except ValueError as exc:
                parser.error(f"environment variable {name}: {exc}")
    found = _apply_files(args, parser)
    if args.app is None:
        parser.error("the following arguments are required: APP")
    try:
        args.app = options.BY_NAME["app"].convert(args.app)
    except ValueError as exc:
        parser.error(f"argument APP: {exc}")
    kwargs = {
        opt.name: getattr(args, opt.name)
        for opt in options.OPTIONS
        if getattr(args, opt.name) is not None and (opt.config or not opt.flags)
    }
    if found.hooks:
        kwargs["hooks"] = found.hooks
    if found.warnings:
        kwargs["startup_warnings"] = found.warnings
    return kwargs


def _apply_files(args, parser):
    """Fill the options still unset from --config FILE, then ./pyproject.toml."""
    path = args.config
    try:
        sources = [configfile.load_python(path)] if path else []
        sources.append(configfile.load_pyproject("pyproject.toml"))
    except configfile.ConfigFileError as exc:
        parser.error(str(exc))
    found = configfile.FileSettings()
    for source in sources:
        for name, value in source.options.items():
            if getattr(args, name, None) is None:
                setattr(args, name, value)
        found.hooks.update(source.hooks)
        found.warnings += source.warnings
    return found


def python_description():
    """ "Python 3.11.7, CPython": for --version and the startup log."""
    return f"Python {platform.python_version()}, {platform.python_implementation()}"


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
        url = sockets.socket_url(sock, bool(cfg.ssl_certfile))
        if cfg.speaks_uwsgi(sock):
            url = "uwsgi://" + url.split("://", 1)[-1]
        if sockets.redirects_https(cfg, sock):
            url = sockets.socket_url(sock, False)
            proxied = " (redirects to https)"
        logger.info("Listening on %s%s", url, proxied)
    if cfg.metrics_socket is not None:
        logger.info("Metrics on %s/metrics", sockets.socket_url(cfg.metrics_socket))
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
            if cfg.ssl_certfile:
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
