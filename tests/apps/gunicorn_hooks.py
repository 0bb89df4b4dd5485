"""A gunicorn configuration file whose server hooks write one line each to $GUNICORN_HOOKS_FILE."""

import os


def _record(line):
    with open(os.environ["GUNICORN_HOOKS_FILE"], "a") as out:
        out.write(line + "\n")


def post_fork(server, worker):
    _record("post_fork")


def post_worker_init(worker):
    _record("post_worker_init")


def pre_request(worker, req):
    _record(f"pre_request {req.method} {req.path}")


def post_request(worker, req, environ, resp):
    _record(f"post_request {req.method} {req.path} {resp.status_code}")


def worker_int(worker):
    _record("worker_int")


def worker_abort(worker):
    _record("worker_abort")


def worker_exit(server, worker):
    _record("worker_exit")
