"""SIGHUP to a single process (no master): a real reload, not the end of the server.

The server finishes the requests in progress, keeps its listening sockets open (new
connections wait in their queue), then executes itself again with the same pid: the
application is imported afresh, so new code is served."""

import os
import signal
import socket
import tempfile
import threading
import time
import uuid

import pytest
from helpers import run_server, wait_for

WSGI_APP = """
import os, time
VERSION = {version!r}

def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path.startswith("/sleep/"):
        time.sleep(float(path.split("/")[2]))
    body = f"{{VERSION}} {{os.getpid()}} {{environ['REMOTE_ADDR']}}".encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
"""

ASGI_APP = """
import os
VERSION = {version!r}

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    client = scope["client"][0] if scope["client"] else ""
    body = f"{{VERSION}} {{os.getpid()}} {{client}}".encode()
    await send({{"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]}})
    await send({{"type": "http.response.body", "body": body}})
"""


def write_app(directory, name, kind, version):
    source = (WSGI_APP if kind == "wsgi" else ASGI_APP).format(version=version)
    (directory / f"{name}.py").write_text(source)
    # A new mtime even within the same second, so no stale bytecode is used.
    stamp = time.time() + (1 if version.endswith("2") else 0)
    os.utime(directory / f"{name}.py", (stamp, stamp))


def get(srv, path="/", data=None):
    with srv.connect(timeout=20) as conn:
        conn.send(data or f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        response = conn.read_response()
        assert response.status == 200, response
        return response.body.decode().split()


def reloaded(srv, count):
    return wait_for(
        lambda: srv.log().count("Reloading: starting again on the same sockets") >= count, 15
    )


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_hup_reloads_a_single_process_with_new_code(tmp_path, kind):
    name = f"reload_{kind}_{uuid.uuid4().hex[:6]}"
    write_app(tmp_path, name, kind, "v1")
    with run_server(f"{name}:app", "--app-dir", str(tmp_path)) as srv:
        version, pid, _ = get(srv)
        assert (version, int(pid)) == ("v1", srv.pid)
        write_app(tmp_path, name, kind, "v2")
        os.kill(srv.pid, signal.SIGHUP)
        assert reloaded(srv, 1), srv.log_tail()
        assert wait_for(lambda: get(srv)[0] == "v2", 15), srv.log_tail()
        assert int(get(srv)[1]) == srv.pid  # the same process: supervisors keep tracking it
        assert srv.proc.poll() is None
        os.kill(srv.pid, signal.SIGHUP)  # and again
        assert reloaded(srv, 2), srv.log_tail()
        assert get(srv)[0] == "v2"


def test_hup_finishes_requests_in_progress_and_queues_new_connections(tmp_path):
    name = f"reload_slow_{uuid.uuid4().hex[:6]}"
    write_app(tmp_path, name, "wsgi", "v1")
    with run_server(f"{name}:app", "--app-dir", str(tmp_path)) as srv:
        get(srv)
        results = {}
        slow = threading.Thread(target=lambda: results.update(slow=get(srv, "/sleep/1.5")))
        slow.start()
        time.sleep(0.3)  # the slow request is in the application
        write_app(tmp_path, name, "wsgi", "v2")
        os.kill(srv.pid, signal.SIGHUP)
        assert srv.wait_for_log("Reloading (SIGHUP)"), srv.log_tail()
        # Connected while the old server drains: queued, then served by the new one.
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
        slow.join(20)
        assert results["slow"][0] == "v1"  # finished by the old code
        assert answer.startswith(b"HTTP/1.1 200") and b"v2 " in answer, answer
        assert "Finished server process" not in srv.log()


def test_hup_keeps_a_unix_socket_and_proxy_protocol(tmp_path):
    name = f"reload_uds_{uuid.uuid4().hex[:6]}"
    write_app(tmp_path, name, "wsgi", "v1")
    uds = os.path.join(tempfile.gettempdir(), f"pyserver-reload-{uuid.uuid4().hex[:8]}.sock")
    proxied = b"PROXY TCP4 192.0.2.7 192.0.2.8 7 8\r\nGET / HTTP/1.1\r\nHost: x\r\n"
    proxied += b"Connection: close\r\n\r\n"
    with run_server(f"{name}:app", "--app-dir", str(tmp_path), "--proxy-protocol", uds=uds) as s:
        assert get(s, data=proxied)[2] == "192.0.2.7"
        os.kill(s.pid, signal.SIGHUP)
        assert reloaded(s, 1), s.log_tail()
        assert get(s, data=proxied)[2] == "192.0.2.7"  # the new server still takes PROXY
        assert os.path.exists(uds)
    assert not os.path.exists(uds)  # removed at the real stop, as before
