"""Output held until the loop sleeps (csrc/serve/h1conn.c, hold()): the responses that one loop
iteration produces leave together, in bursts of a bounded size; nothing is lost, reordered
or mixed up between connections, and an informational response does not wait."""

import os
import socket
import time

import pytest
from helpers import HOST, HTTPConn, build_request, fetch, run_server

# More connections than one burst holds (HOLD_CONNS in csrc/serve/h1conn.c), all answered in the
# same loop iteration: a blocking request first makes their requests pile up.
CLIENTS = 100

SERVERS = {
    "asgi": ("apps.held_output:asgi_app", ()),
    "wsgi": ("apps.held_output:wsgi_app", ()),
    "wsgi-threads": ("apps.held_output:wsgi_app", ("--threads", "4")),
}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def srv(request):
    spec, args = SERVERS[request.param]
    with run_server(spec, *args, "--no-access-log") as server:
        yield server


def connect(port):
    return HTTPConn(socket.create_connection((HOST, port), timeout=10))


def test_requests_that_piled_up_get_their_own_answers(srv):
    """A blocked loop collects requests from CLIENTS connections; once it runs again they are
    answered in one iteration, over several bursts, each with its own body."""
    conns = [connect(srv.port) for _ in range(CLIENTS)]
    try:
        with connect(srv.port) as blocker:
            blocker.send(build_request("GET", "/block?ms=300"))
            time.sleep(0.05)  # let the blocking call start; the rest pile up behind it
            for i, conn in enumerate(conns):
                conn.send(build_request("GET", f"/echo?id={i}"))
            assert blocker.read_response().body == b"blocked"
        for round_ in range(2):  # and again on the same connections (keep-alive)
            for i, conn in enumerate(conns):
                response = conn.read_response()
                assert response.status == 200, response
                assert response.body == f"id={i}".encode()
                if round_ == 0:
                    conn.send(build_request("GET", f"/echo?id={i}"))
    finally:
        for conn in conns:
            conn.close()


def test_pipelined_requests_behind_a_burst_answered_in_order(srv):
    """Pipelined requests on each of many connections: each connection's answers come back
    in its own order, whatever the bursts."""
    conns = [connect(srv.port) for _ in range(40)]
    try:
        for i, conn in enumerate(conns):
            conn.send(b"".join(build_request("GET", f"/echo?id={i}-{k}") for k in range(5)))
        for i, conn in enumerate(conns):
            for k in range(5):
                assert conn.read_response().body == f"id={i}-{k}".encode()
    finally:
        for conn in conns:
            conn.close()


def test_early_hint_is_not_held_back(tmp_path):
    """A 103 is written at once: the client sees it while the application is still working
    (here: blocking the loop until the client has seen it)."""
    flag = tmp_path / "seen-103"
    with run_server("apps.held_output:asgi_app", "--no-access-log") as server:
        with connect(server.port) as conn:
            conn.send(build_request("GET", f"/hint-then-block?file={flag}"))
            hint = conn.read_response()
            assert hint.status == 103, hint
            flag.write_text("seen")
            final = conn.read_response()
            assert final.status == 200, final
            assert final.body == b"released"
        assert fetch(server.port, "GET", "/echo?id=after").body == b"id=after"


def test_connection_closed_by_client_while_its_output_is_held(srv):
    """Clients that send a request and reset at once, among others that wait: the resets
    cost only their own connections."""
    for _ in range(3):
        quitters = []
        with connect(srv.port) as blocker:
            blocker.send(build_request("GET", "/block?ms=100"))
            time.sleep(0.02)
            for i in range(20):
                s = socket.create_connection((HOST, srv.port))
                s.sendall(build_request("GET", f"/echo?id=q{i}"))
                s.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                quitters.append(s)
            for s in quitters:
                s.close()  # RST
            assert blocker.read_response().body == b"blocked"
        assert fetch(srv.port, "GET", "/echo?id=ok").body == b"id=ok"
    assert os.kill(srv.pid, 0) is None
