"""What a new user of gunicorn or uvicorn trips over, through the real command line, real
clients and the real log output: access lines for every answer, short usage errors, access
logs written as configured, gunicorn config files, start-up errors that say what and where.
"""

import json
import re
import textwrap

import pytest
from helpers import HTTPConn, free_port, run_cli, run_server, wait_for

ASGI = "apps.newuser_apps:asgi"
WSGI = "apps.newuser_apps:wsgi"


def get(srv, target):
    conn = srv.connect()
    try:
        return conn.request("GET", target)
    finally:
        conn.close()


# ---- every answer gets an access line, whichever interface ----------------------------


@pytest.mark.parametrize("path", ["/raise", "/silent"])
@pytest.mark.parametrize("json_lines", [False, True])
def test_asgi_500_has_an_access_line(path, json_lines):
    args = ["--access-log-json"] if json_lines else []
    with run_server(ASGI, *args) as srv:
        assert get(srv, path).status == 500
        assert get(srv, "/after").status == 200  # the line after it is there: so would it be
        assert srv.wait_for_log("/after"), srv.log_tail()
        log = srv.log()
    if json_lines:
        records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert [(r["path"], r["status"]) for r in records] == [(path, 500), ("/after", 200)]
    else:
        assert f'"GET {path} HTTP/1.1" 500 ' in log, log
    # The error line names the request, whichever way the application failed.
    assert f"(GET {path})" in log, log
