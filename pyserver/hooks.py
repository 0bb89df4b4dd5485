"""Server hooks from a --config file (gunicorn's names and arguments).

    on_starting(server)        the master or single process, logging set up, before binding
                               and importing
    when_ready(server)         the same process, sockets bound, before the workers are forked
    pre_fork(server, worker)   the master, just before it forks each worker (worker.pid is
                               still the master's); never in a single process
    post_fork(server, worker)  each worker, just after the fork (before --user/--group)
    post_worker_init(worker)   each worker, the application imported
    worker_exit(server, worker)  each worker, after its loop stopped, before it exits
    on_exit(server)            the master or single process, just before it exits
    pre_request(worker, req), post_request(worker, req, environ, resp)
                               WSGI: around each request (a wrapper exists only when one of
                               them is set: no cost otherwise)

A single process (no master) is its own worker: post_worker_init and worker_exit run in it;
post_fork does not. `server` has cfg, pid, app_spec and log; `worker` has cfg, pid, ppid,
number (1..workers: a replacement takes the number of the worker it replaces), age (the
same) and log. An exception in on_starting,
when_ready, post_fork or post_worker_init stops the process that ran it (status 1); in the
other hooks it is logged.
"""

import logging
import os

from pyserver.errors import StartupError

STARTUP_HOOKS = ("on_starting", "when_ready", "post_fork", "post_worker_init")


class HookServer:
    """The `server` argument of the hooks."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.app_spec = cfg.app_spec
        self.pid = os.getpid()

    @property
    def log(self):
        return self.cfg.error_logger or logging.getLogger("pyserver.error")


class HookWorker:
    """The `worker` argument of the hooks."""

    def __init__(self, cfg, number):
        self.cfg = cfg
        self.number = self.age = number
        self.pid = os.getpid()
        self.ppid = os.getppid()

    @property
    def log(self):
        return self.cfg.error_logger or logging.getLogger("pyserver.error")


def run(cfg, name, *args):
    """Call the hook `name` if the config file set it. Startup hooks raise StartupError
    when they fail; the others log the exception."""
    hook = cfg.hooks.get(name)
    if hook is None:
        return
    try:
        hook(*args)
    except Exception as exc:
        logger = cfg.error_logger or logging.getLogger("pyserver.error")
        if name in STARTUP_HOOKS:
            raise StartupError(f"error: the {name} hook failed: {exc!r}", 1) from exc
        logger.exception("Exception in the %s hook", name)


run_startup = run


def serve_single(cfg, server, core):
    """A single process: post_worker_init, serve, worker_exit. Returns the exit status."""
    worker = HookWorker(cfg, 1)
    run(cfg, "post_worker_init", worker)
    try:
        return core.serve(cfg.loaded_app, cfg.sockets, cfg) or 0
    finally:
        run(cfg, "worker_exit", server, worker)


def wrap_wsgi(app, cfg):
    """The application with pre_request/post_request around it, or app itself."""
    pre = cfg.hooks.get("pre_request")
    post = cfg.hooks.get("post_request")
    if pre is None and post is None:
        return app
    return _WSGIHooks(app, cfg, pre, post)


class Request:
    """What gunicorn's pre_request/post_request hooks and access log read of a request."""

    def __init__(self, environ):
        self.method = environ.get("REQUEST_METHOD", "")
        self.uri = environ.get("RAW_URI", "")
        self.path = environ.get("PATH_INFO", "")
        self.query = environ.get("QUERY_STRING", "")
        self.fragment = ""
        protocol = environ.get("SERVER_PROTOCOL", "HTTP/1.1")
        self.version = (1, 0) if protocol == "HTTP/1.0" else (1, 1)
        self.scheme = environ.get("wsgi.url_scheme", "http")
        self.remote_addr = environ.get("REMOTE_ADDR", "")
        self.headers = [
            (key[5:].replace("_", "-"), value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        ]
        for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            if environ.get(key):
                self.headers.append((key.replace("_", "-"), environ[key]))


class Response:
    """What post_request hooks and the access log read of a response."""

    def __init__(self):
        self.status = None
        self.status_code = None
        self.headers = []
        self.sent = 0
        self.response_length = None

    def start(self, status, headers):
        self.status = status
        try:
            self.status_code = int(str(status).split(None, 1)[0])
        except ValueError:
            self.status_code = None
        self.headers = headers


class _WSGIHooks:
    def __init__(self, app, cfg, pre, post):
        self.app = app
        self.cfg = cfg
        self.pre = pre
        self.post = post
        self.worker = None

    def _worker(self):
        if self.worker is None or self.worker.pid != os.getpid():
            self.worker = HookWorker(self.cfg, getattr(self.cfg, "worker_number", 1))
        return self.worker

    def __call__(self, environ, start_response):
        worker = self._worker()
        req = Request(environ)
        resp = Response()
        if self.pre is not None:
            self.pre(worker, req)

        def hooked_start_response(status, headers, exc_info=None):
            resp.start(status, headers)
            return start_response(status, headers, exc_info)

        try:
            result = self.app(environ, hooked_start_response)
        except BaseException:
            self._after(worker, req, environ, resp)
            raise
        if isinstance(result, (list, tuple)):
            resp.sent = sum(len(item) for item in result)
            self._after(worker, req, environ, resp)
            return result
        return _Body(result, lambda: self._after(worker, req, environ, resp), resp)

    def _after(self, worker, req, environ, resp):
        if self.post is None:
            return
        try:
            self.post(worker, req, environ, resp)
        except Exception:
            worker.log.exception("Exception in the post_request hook")


class _Body:
    """The response iterable, counting what it yields; post_request runs at close()."""

    def __init__(self, result, done, resp):
        self._result = result
        self._done = done
        self._resp = resp

    def __iter__(self):
        for item in self._result:
            self._resp.sent += len(item)
            yield item

    def close(self):
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()
