"""The Python side of the master and its workers.

The C master (`_core.run_master`) forks the workers and supervises them; in
each new worker process it calls `spawn_worker(cfg, number, own_fds)`, which imports
the application (unless the master preloaded it), serves it with
`_core.serve` and ends the process with `os._exit`: a worker never returns
into the code that started the master.
"""

import faulthandler
import functools
import gc
import logging
import os
import signal
import socket
import sys

from pyserver import hooks
from pyserver.errors import StartupError
from pyserver.reloader import make_reloader

try:
    from setproctitle import setproctitle as _setproctitle
except ImportError:  # optional
    _setproctitle = None  # type: ignore[assignment]


def set_title(title):
    """Show the process's role in ps and top when setproctitle is installed."""
    if _setproctitle is not None:
        _setproctitle(title)


def run_master(cfg):
    """Fork cfg.workers workers and supervise them; return the exit status."""
    from pyserver import _core

    set_title(f"pyserver: master [{cfg.app_spec}]")
    if cfg.preload:
        gc.collect()
        gc.freeze()  # the workers share the preloaded objects' pages
    poll_reload = None
    if cfg.reload:
        dirs = cfg.reload_dirs or [cfg.app_dir or "."]
        reloader = make_reloader(dirs, cfg.reload_includes)
        cfg.error_logger.info(
            "Watching %s for changes (%s)", ", ".join(dirs), type(reloader).__name__
        )
        poll_reload = reloader.changed
    pre_fork = None
    if cfg.hooks.get("pre_fork") is not None:
        server = hooks.HookServer(cfg)

        def pre_fork(number):
            hooks.run(cfg, "pre_fork", server, hooks.HookWorker(cfg, number))

    return _core.run_master(cfg, functools.partial(spawn_worker, cfg), poll_reload, pre_fork)


def spawn_worker(cfg, number, own_fds=()):
    """In a freshly forked worker: serve until told to stop, then exit the process.

    own_fds are the worker's --reuse-port lane: listening sockets the master
    opened for this worker and keeps for its replacement.
    """
    code = 1
    try:
        code = _serve_worker(cfg, number, own_fds)
    except KeyboardInterrupt:
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        cfg.error_logger.exception("Worker %d failed", number)
    finally:
        _flush()
        os._exit(code)


def _serve_worker(cfg, number, own_fds):
    from pyserver import _core

    set_title(f"pyserver: worker {number}")
    cfg.close_metrics_socket()  # the master serves --metrics-bind
    signal.signal(signal.SIGABRT, _on_watchdog_abort)
    cfg.worker_number = number
    server = hooks.HookServer(cfg)
    server.pid = os.getppid()
    worker = hooks.HookWorker(cfg, number)
    try:
        hooks.run(cfg, "post_fork", server, worker)
        if (cfg.uid is not None or cfg.gid is not None) and not cfg.preload:
            cfg.drop_privileges()
        app = cfg.load_worker_app()
        hooks.run(cfg, "post_worker_init", worker)
    except StartupError as exc:
        print(f"pyserver: {exc}", file=sys.stderr)
        if cfg.reload and exc.exit_code == 3:
            _wait_for_change(cfg)
        return exc.exit_code
    own = [socket.socket(fileno=fd) for fd in own_fds]
    cfg.error_logger.debug("Worker %d (pid %d) serving", number, os.getpid())
    try:
        status = _core.serve(app, cfg.sockets, cfg, own)
    finally:
        for sock in own:
            sock.close()
        hooks.run(cfg, "worker_exit", server, worker)
    return status or 0  # ASGI: 3 when lifespan startup failed


def _wait_for_change(cfg):
    """--reload and the application cannot be imported: wait, without trying again, until
    the master sees a watched file change and stops this worker to start a new one."""
    cfg.error_logger.info("Waiting for a watched file to change before importing again")
    _flush()
    for signum in (signal.SIGTERM, signal.SIGQUIT):
        signal.signal(signum, lambda signum, frame: os._exit(0))
    while True:
        signal.pause()


def _on_watchdog_abort(signum, frame):
    """The master's watchdog found this worker stuck: show where, and exit.

    Runs once the interpreter gets control back (a blocking sleep or read is
    interrupted); a worker stuck in C code is killed by the master instead.
    """
    print(f"pyserver: worker (pid {os.getpid()}) aborted by the watchdog in:", file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    _flush()
    os._exit(1)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def reopen_logs():
    """SIGUSR1: reopen every log file (after logrotate moved it)."""
    loggers = [logging.getLogger()]
    loggers += [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    seen = set()
    for logger in loggers:
        for handler in logger.handlers:
            if id(handler) in seen or not isinstance(handler, logging.FileHandler):
                continue
            seen.add(id(handler))
            handler.acquire()
            try:
                old = handler.setStream(handler._open())
                if old is not None:
                    old.close()
            finally:
                handler.release()
