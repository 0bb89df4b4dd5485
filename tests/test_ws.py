"""WebSockets end to end: the ASGI websocket scope through a real server, with the
`websockets` client library and raw-socket frames (tests/wsclient.py)."""

import asyncio
import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import websockets
from helpers import HOST, UNDER_ASAN, pyserver_command, rss_kib, run_server, wait_for
from websockets.exceptions import ConnectionClosed, InvalidStatus
from wsclient import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Reader,
    at_eof,
    close_frame,
    frame,
    handshake,
)

APP = "apps.ws_apps:app"
MAX_SIZE = 4096


@pytest.fixture(scope="module")
def events_file(tmp_path_factory):
    return tmp_path_factory.mktemp("ws") / "events"


@pytest.fixture(scope="module")
def srv(events_file):
    with run_server(
        APP,
        "--ws-max-size",
        str(MAX_SIZE),
        "--timeout-keep-alive",
        "1",
        env={"WS_TEST_EVENTS": str(events_file)},
    ) as server:
        yield server


def url(srv, path):
    return f"ws://{HOST}:{srv.port}{path}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def events(path):
    return Path(path).read_text().splitlines() if Path(path).exists() else []


# ---- the scope and the messages ----


def test_echo_text_and_bytes(srv):
    async def main():
        async with websockets.connect(url(srv, "/echo"), max_size=None) as ws:
            await ws.send("héllo")
            assert await ws.recv() == "héllo"
            await ws.send(b"\x00\xff")
            assert await ws.recv() == b"\x00\xff"
            await ws.send("")
            assert await ws.recv() == ""

    run(main())
    assert srv.wait_for_log('"GET /echo HTTP/1.1" 101')


def test_scope(srv):
    import json

    async def main():
        async with websockets.connect(
            url(srv, "/scope?a=1"), subprotocols=["one", "two"], compression=None
        ) as ws:
            return json.loads(await ws.recv()), ws.subprotocol

    scope, sub = run(main())
    assert sub == "one"
    assert scope["type"] == "websocket"
    assert scope["scheme"] == "ws"
    assert scope["path"] == "/scope" and scope["raw_path"] == "/scope"
    assert scope["query_string"] == "a=1"
    assert scope["root_path"] == ""
    assert scope["http_version"] == "1.1"
    assert scope["subprotocols"] == ["one", "two"]
    assert scope["asgi"]["version"] == "3.0"
    assert scope["extensions"] == {"websocket.http.response": {}}
    assert "method" not in scope
    assert scope["client"][0] == HOST and scope["server"] == [HOST, srv.port]
    assert ["upgrade", "websocket"] in scope["headers"]
    assert scope["state"] == {}


def test_subprotocol_choice_and_accept_headers(srv):
    async def main():
        async with websockets.connect(url(srv, "/last-sub"), subprotocols=["a", "b"]) as ws:
            last = ws.subprotocol
        async with websockets.connect(url(srv, "/headers")) as ws:
            extra = ws.response.headers.get("x-extra")
            proto = ws.response.headers.get("sec-websocket-protocol")
        return last, extra, proto

    assert run(main()) == ("b", "1", None)


def test_refused_accept_headers_leave_nothing_behind(srv):
    # 200 accepts whose 21 headers do not fit the stack array and hold a str
    # name: each one's header array used to stay allocated (about 670 bytes).
    async def main():
        async with websockets.connect(url(srv, "/bad-accept")) as ws:
            return int(await ws.recv())

    assert run(main()) < 20_000


def test_receive_abandoned_by_wait_for(srv):
    async def main():
        async with websockets.connect(url(srv, "/wait-for")) as ws:
            got = []
            for text in ("a", "b"):
                got.append(await ws.recv())
                await ws.send(text)
                got.append(await asyncio.wait_for(ws.recv(), 5))
            return got

    assert run(main()) == ["timed out", "1:a", "timed out", "2:b"]


def test_send_abandoned_by_wait_for(srv):
    sock, status, _, rest = handshake(srv.port, "/send-wait-for")
    with sock:
        assert status == 101
        time.sleep(1.0)  # the app's send times out while nothing is read
        reader, texts = Reader(sock, rest), []
        while len(texts) < 2:
            _, _, op, payload = reader.frame()
            if op == OP_CLOSE:
                break
            if op == OP_TEXT:
                texts.append(payload)
        sock.sendall(close_frame(1000))
    assert texts == [b"after", b"ok"]


def test_accept_headers_from_a_generator(srv):
    # The pairs exist only in the list made from the generator: they must outlive the
    # writing of the 101 (a 300 KB value is unmapped as soon as it is freed).
    size = 300_000
    sock, status, head, _ = handshake(srv.port, f"/generated-headers?size={size}")
    with sock:
        assert status == 101
        values = [line.split(": ", 1) for line in head.split("\r\n")[1:]]
        gen = {name.lower(): value for name, value in values if name.lower().startswith("x-gen")}
        sock.sendall(close_frame(1000))
    assert gen == {"x-gen-0": "v" * size, "x-gen-1": "v" * size}


def test_accept_reads_the_subprotocol_after_the_headers(srv):
    # Iterating the headers runs the app's code, which may change the message: the
    # subprotocol is read after it (it used to be a pointer into a str freed by then).
    sock, status, head, _ = handshake(
        srv.port, "/sub-popped", headers={"Sec-WebSocket-Protocol": "chat"}
    )
    with sock:
        assert status == 101
        sock.sendall(close_frame(1000))
    lines = [line.lower() for line in head.split("\r\n")]
    assert "x-popped: 1" in lines
    assert not [line for line in lines if line.startswith("sec-websocket-protocol")]


def test_close_before_accept_is_403(srv):
    async def main():
        with pytest.raises(InvalidStatus) as info:
            await websockets.connect(url(srv, "/close403"))
        return info.value.response.status_code

    assert run(main()) == 403
    assert srv.wait_for_log('"GET /close403 HTTP/1.1" 403')


def test_denial_response(srv):
    sock, status, head, rest = handshake(srv.port, "/deny")
    with sock:
        body = rest
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    assert status == 418
    assert "x-denied: yes" in head.lower()
    assert "transfer-encoding: chunked" in head.lower()
    assert body == b"3\r\nno \r\n9\r\nwebsocket\r\n0\r\n\r\n"
    assert srv.wait_for_log('"GET /deny HTTP/1.1" 418')


def test_exception_before_accept_is_500_and_after_is_1011(srv):
    sock, status, _, _ = handshake(srv.port, "/raise-before")
    sock.close()
    assert status == 500

    async def main():
        async with websockets.connect(url(srv, "/raise-after")) as ws:
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            return info.value.rcvd.code

    assert run(main()) == 1011
    assert srv.wait_for_log("boom after accept")
    log = srv.log()
    assert log.count("RuntimeError: boom before accept") == 1
    assert log.count("RuntimeError: boom after accept") == 1
    test_echo_text_and_bytes(srv)  # the worker keeps serving


def test_app_close_code_and_reason(srv, events_file):
    async def main():
        async with websockets.connect(url(srv, "/close-code")) as ws:
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            return info.value.rcvd.code, info.value.rcvd.reason

    assert run(main()) == (4001, "bye")
    assert wait_for(lambda: "websocket.disconnect 4001" in events(events_file))


def test_client_close_code_reaches_the_app(srv, events_file):
    async def main():
        async with websockets.connect(url(srv, "/disconnect")) as ws:
            await ws.close(4321, "see you")

    run(main())
    assert wait_for(lambda: "4321 see you" in events(events_file))


# ---- handshake refusals ----


def test_bad_version_gets_426(srv):
    sock, status, head, _ = handshake(srv.port, headers={"Sec-WebSocket-Version": "12"})
    sock.close()
    assert status == 426
    assert "Sec-WebSocket-Version: 13" in head
    assert srv.wait_for_log('"GET /echo HTTP/1.1" 426')


def test_bad_key_gets_400(srv):
    sock, status, _, _ = handshake(srv.port, headers={"Sec-WebSocket-Key": "c2hvcnQ="})
    sock.close()
    assert status == 400


def test_ws_none_gives_an_http_scope():
    with run_server(APP, "--ws", "none") as server:
        sock, status, _, rest = handshake(server.port, "/echo")
        with sock:
            body = rest + sock.recv(65536)
    assert status == 404
    assert b"http scope /echo" in body


# ---- protocol errors through the real server (RFC 6455 7.4) ----


def failed_with(srv, data: bytes, path="/echo"):
    sock, status, _, rest = handshake(srv.port, path, headers={"Sec-WebSocket-Extensions": None})
    with sock:
        assert status == 101
        sock.sendall(data)
        code, _ = Reader(sock, rest).close_code()
        assert at_eof(sock)
    return code


def test_unmasked_frame_is_1002(srv):
    assert failed_with(srv, frame(OP_TEXT, b"hi", mask=False)) == 1002


def test_reserved_bits_and_opcodes_are_1002(srv):
    assert failed_with(srv, frame(OP_TEXT, b"hi", rsv=2)) == 1002
    assert failed_with(srv, frame(3, b"hi")) == 1002


def test_bad_control_frames_are_1002(srv):
    assert failed_with(srv, frame(OP_PING, b"x" * 126)) == 1002
    assert failed_with(srv, frame(OP_PING, b"x", fin=False)) == 1002
    assert failed_with(srv, close_frame(999)) == 1002
    assert failed_with(srv, frame(OP_CLOSE, b"\x03")) == 1002


def test_invalid_utf8_is_1007(srv):
    assert failed_with(srv, frame(OP_TEXT, b"\xff\xfe")) == 1007
    split = frame(OP_TEXT, b"ok\xe2\x82", fin=False) + frame(OP_CONT, b"\x28")
    assert failed_with(srv, split) == 1007
    assert failed_with(srv, close_frame(1000, b"\xc3")) == 1007


def test_message_of_exactly_max_size_passes_one_more_byte_is_1009(srv):
    sock, status, _, rest = handshake(srv.port, headers={"Sec-WebSocket-Extensions": None})
    with sock:
        assert status == 101
        sock.sendall(frame(OP_BINARY, b"a" * MAX_SIZE))
        _, _, op, payload = Reader(sock, rest).frame()
        assert op == OP_BINARY and payload == b"a" * MAX_SIZE
    # counted over the whole message, not per frame
    over = frame(OP_BINARY, b"a" * (MAX_SIZE // 2), fin=False) + frame(
        OP_CONT, b"a" * (MAX_SIZE // 2 + 1)
    )
    assert failed_with(srv, over) == 1009


def test_binary_messages_around_the_direct_size_arrive_whole_in_any_pieces(srv):
    """From 1 KiB up, an unfragmented binary message is unmasked straight into the bytes
    object the application gets: sizes on both sides of that line, sent in pieces that cut
    the header and the payload anywhere, come back byte for byte; so does a fragmented one."""
    rng = random.Random(10)
    sock, status, _, rest = handshake(srv.port, headers={"Sec-WebSocket-Extensions": None})
    with sock:
        assert status == 101
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = Reader(sock, rest)
        for size in (1023, 1024, 1025, 3000, MAX_SIZE):
            payload = rng.randbytes(size)
            data = frame(OP_BINARY, payload)
            cuts = sorted(rng.sample(range(1, len(data)), 5))
            for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
                sock.sendall(data[a:b])
                time.sleep(0.01)
            _, _, op, echoed = reader.frame()
            assert (op, echoed) == (OP_BINARY, payload), size
        payload = rng.randbytes(2048)
        sock.sendall(frame(OP_BINARY, payload[:1500], fin=False) + frame(OP_CONT, payload[1500:]))
        assert reader.frame()[2:] == (OP_BINARY, payload)


def test_disconnect_inside_a_large_binary_frame_gives_1006(srv, events_file):
    sock, status, _, _ = handshake(
        srv.port, "/disconnect", headers={"Sec-WebSocket-Extensions": None}
    )
    assert status == 101
    data = frame(OP_BINARY, b"x" * 3000)
    sock.sendall(data[:1500])
    time.sleep(0.2)
    sock.close()
    assert wait_for(lambda: events(events_file).count("1006 ") >= 1)


def test_unread_binary_messages_are_freed_with_their_connection(events_file):
    """Binary messages queued for an app that never reads them (each unmasked into its own
    bytes object) go with the connection: once the allocator has reached its high-water
    mark, 150 more connections leaving 4 x 64 KiB each (38 MiB in all) do not grow the
    worker by more than 16 MiB."""
    with run_server(APP, "--ws-max-queue", "4", env={"WS_TEST_EVENTS": str(events_file)}) as server:
        msgs = frame(OP_BINARY, b"q" * 65536) * 4 + frame(OP_BINARY, b"r" * 30000)[:5000]

        def one():
            sock, status, _, _ = handshake(
                server.port, "/noread?seconds=0.2", headers={"Sec-WebSocket-Extensions": None}
            )
            with sock:
                assert status == 101
                sock.sendall(msgs)

        for _ in range(150):  # the allocator's high-water mark
            one()
        time.sleep(1.0)
        before = rss_kib(server.pid)
        for _ in range(150):
            one()
        time.sleep(1.0)
        after = rss_kib(server.pid)
        if not UNDER_ASAN:  # ASan's quarantine holds freed memory; LeakSanitizer checks leaks
            assert after - before < 16 * 1024, (before, after)


def test_ping_is_answered_with_its_payload(srv):
    sock, status, _, rest = handshake(srv.port, headers={"Sec-WebSocket-Extensions": None})
    with sock:
        sock.sendall(frame(OP_PING, b"payload-42"))
        _, _, op, payload = Reader(sock, rest).frame()
    assert (op, payload) == (OP_PONG, b"payload-42")


def test_disconnect_mid_frame_gives_1006(srv, events_file):
    sock, status, _, _ = handshake(
        srv.port, "/disconnect", headers={"Sec-WebSocket-Extensions": None}
    )
    assert status == 101
    data = frame(OP_TEXT, b"x" * 1000)
    sock.sendall(data[:500])
    time.sleep(0.2)
    sock.close()
    assert wait_for(lambda: "1006 " in events(events_file))


# ---- connections, idleness, backpressure ----


def test_200_concurrent_connections(srv):
    async def one(i):
        async with websockets.connect(url(srv, "/echo"), open_timeout=30) as ws:
            await ws.send(f"m{i}")
            assert await ws.recv() == f"m{i}"
            await asyncio.sleep(0.5)
            await ws.send(f"n{i}")
            assert await ws.recv() == f"n{i}"

    async def main():
        await asyncio.gather(*(one(i) for i in range(200)))

    run(main())


def test_idle_websocket_outlives_keep_alive_timeout(srv):
    async def main():
        async with websockets.connect(url(srv, "/echo"), ping_interval=None) as ws:
            await asyncio.sleep(2.5)  # --timeout-keep-alive 1
            await ws.send("still here")
            return await ws.recv()

    assert run(main()) == "still here"


def test_client_that_stops_reading_makes_send_wait(events_file):
    """The app sends 200 MiB to a client that reads nothing: the worker's memory stays
    flat (send waits), and the client gets everything once it reads."""
    n, size = 3200, 65536
    with run_server(
        APP, "--ws-per-message-deflate", "false", env={"WS_TEST_EVENTS": str(events_file)}
    ) as server:
        sock, status, _, rest = handshake(server.port, f"/flood?n={n}&size={size}")
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            assert status == 101
            time.sleep(2.0)
            before = rss_kib(server.pid)
            time.sleep(1.0)
            after = rss_kib(server.pid)
            sent = [e for e in events(events_file) if e.startswith("sent ")]
            assert "flood done" not in events(events_file)
            assert after - before < 8 * 1024, (before, after)
            assert int(sent[-1].split()[1]) < 200, sent[-1]
            reader, total = Reader(sock, rest), 0
            while True:
                _, _, op, payload = reader.frame()
                if op == OP_TEXT:
                    assert payload == b"done"
                    break
                total += len(payload)
            assert total == n * size
            sock.sendall(close_frame(1000))
        assert wait_for(lambda: "flood done" in events(events_file))


def test_max_queue_stops_reading(events_file):
    """An app that never calls receive(): past --ws-max-queue the server reads no more, so
    the client's sends block while the worker's memory stays flat."""
    with run_server(APP, "--ws-max-queue", "4", env={"WS_TEST_EVENTS": str(events_file)}) as server:
        sock, status, _, _ = handshake(
            server.port, "/noread?seconds=4", headers={"Sec-WebSocket-Extensions": None}
        )
        with sock:
            assert status == 101
            before = rss_kib(server.pid)
            sock.settimeout(3.0)
            data = frame(OP_BINARY, b"z" * 65536)
            sent = 0
            with pytest.raises(TimeoutError):
                for _ in range(2000):  # 128 MiB
                    sock.sendall(data)
                    sent += 1
            after = rss_kib(server.pid)
            assert sent < 200
            assert after - before < 16 * 1024, (before, after)


def test_ping_timeout_closes_with_1011(events_file):
    with run_server(
        APP,
        "--ws-ping-interval",
        "0.3",
        "--ws-ping-timeout",
        "0.5",
        env={"WS_TEST_EVENTS": str(events_file)},
    ) as server:
        # websockets answers pings: the connection stays up across several intervals
        async def main():
            async with websockets.connect(url(server, "/echo")) as ws:
                await asyncio.sleep(1.5)
                await ws.send("alive")
                return await ws.recv()

        assert run(main()) == "alive"
        # a raw client that never answers: a ping, then close 1011
        sock, status, _, rest = handshake(
            server.port, "/disconnect", headers={"Sec-WebSocket-Extensions": None}
        )
        with sock:
            reader = Reader(sock, rest)
            _, _, op, _ = reader.frame()
            assert op == OP_PING
            code, _ = reader.close_code()
            assert code == 1011
        assert wait_for(lambda: any(e.startswith("1011") for e in events(events_file)))


def test_term_sends_1001_to_open_websockets(events_file):
    with run_server(APP, env={"WS_TEST_EVENTS": str(events_file)}) as server:

        async def main():
            conns = [await websockets.connect(url(server, "/echo")) for _ in range(3)]
            for ws in conns:
                await ws.send("x")
                assert await ws.recv() == "x"
            os.kill(server.pid, signal.SIGTERM)
            codes = []
            for ws in conns:
                with pytest.raises(ConnectionClosed) as info:
                    await ws.recv()
                codes.append(info.value.rcvd.code)
            return codes

        assert run(main()) == [1001, 1001, 1001]
        server.proc.wait(10)
        assert server.proc.returncode == 0
    assert events(events_file).count("1001 ") >= 3


# ---- permessage-deflate with the websockets client ----


@pytest.mark.parametrize("offer", ["deflate", None])
def test_permessage_deflate(srv, offer):
    async def main():
        async with websockets.connect(url(srv, "/echo"), compression=offer) as ws:
            ext = ws.response.headers.get("sec-websocket-extensions")
            text = "compress me " * 300
            for _ in range(5):
                await ws.send(text)
                assert await ws.recv() == text
            await ws.send(b"\x00" * 4000)
            assert await ws.recv() == b"\x00" * 4000
            return ext

    ext = run(main())
    if offer:
        assert ext.startswith("permessage-deflate")
    else:
        assert ext is None


def test_deflate_off_declines_offers():
    with run_server(APP, "--ws-per-message-deflate", "false") as server:

        async def main():
            async with websockets.connect(url(server, "/echo")) as ws:
                await ws.send("x" * 1000)
                assert await ws.recv() == "x" * 1000
                return ws.response.headers.get("sec-websocket-extensions")

        assert run(main()) is None


def test_compressed_frames_on_the_wire(srv):
    """A raw client offering permessage-deflate gets RSV1 frames that inflate to the text."""
    import zlib

    sock, status, head, rest = handshake(
        srv.port, headers={"Sec-WebSocket-Extensions": "permessage-deflate"}
    )
    with sock:
        assert "permessage-deflate" in head
        text = b"abc" * 1000
        comp = zlib.compressobj(wbits=-15)
        payload = comp.compress(text) + comp.flush(zlib.Z_SYNC_FLUSH)
        sock.sendall(frame(OP_TEXT, payload[:-4], rsv=4))
        _, rsv, op, data = Reader(sock, rest).frame()
        assert op == OP_TEXT and rsv == 4
        assert len(data) < len(text) // 10
        assert zlib.decompressobj(wbits=-15).decompress(data + b"\x00\x00\xff\xff") == text


def _json_like_text(size):
    rng = random.Random(7)
    words = ["price", "order", "trade", "status", "user", "room", "chat", "update"]
    parts, n = [], 0
    while n < size:
        a, b, c = (rng.choice(words) for _ in range(3))
        part = f'{{"id": {rng.randrange(10**6)}, "user": "{a}", "text": "{b} {c}", '
        part += f'"qty": {rng.randrange(1000)}}}, '
        parts.append(part)
        n += len(part)
    return "".join(parts)[:size].encode()


@pytest.mark.parametrize("level,how", [(None, "default"), (6, "cli"), (0, "env"), (9, "cli")])
def test_deflate_level_sets_what_the_server_sends(level, how):
    """The server compresses with --ws-deflate-level (default 1): at levels 2-9 the echoed
    payload is byte for byte zlib's output at that level with the negotiated window
    (12 bits) and memLevel 5; level 1 is ISA-L's igzip, as small as zlib's level 1 to
    within 10%; level 0 is stored blocks. The client's message is inflated whatever its
    own level."""
    import zlib

    args, env = [], None
    if how == "cli":
        args = ["--ws-deflate-level", str(level)]
    elif how == "env":
        env = {"PYSERVER_WS_DEFLATE_LEVEL": str(level)}
    expected_level = 1 if level is None else level
    text = _json_like_text(16384)
    with run_server(APP, *args, env=env) as server:
        sock, status, head, rest = handshake(
            server.port, headers={"Sec-WebSocket-Extensions": "permessage-deflate"}
        )
        with sock:
            assert status == 101 and "server_max_window_bits=12" in head
            reader = Reader(sock, rest)
            ours = zlib.compressobj(9, zlib.DEFLATED, -15)
            sent = ours.compress(text) + ours.flush(zlib.Z_SYNC_FLUSH)
            sock.sendall(frame(OP_TEXT, sent[:-4], rsv=4))
            _, rsv, op, data = reader.frame()
            assert op == OP_TEXT and rsv == 4
            if expected_level == 0:  # stored blocks, cut where the server's buffer ends
                assert len(data) > len(text)
            elif expected_level == 1:
                zlib1 = zlib.compressobj(1, zlib.DEFLATED, -12, 5)
                want = zlib1.compress(text) + zlib1.flush(zlib.Z_SYNC_FLUSH)
                assert len(data) < len(text) / 2 and len(data) <= 1.1 * len(want)
            else:
                theirs = zlib.compressobj(expected_level, zlib.DEFLATED, -12, 5)
                want = theirs.compress(text) + theirs.flush(zlib.Z_SYNC_FLUSH)
                assert data == want[:-4]
            inflated = zlib.decompressobj(wbits=-12).decompress(data + b"\x00\x00\xff\xff")
            assert inflated == text


@pytest.mark.parametrize("value", ["10", "-1", "fast"])
def test_bad_deflate_level_is_a_cli_error(value):
    proc = subprocess.run(
        [*pyserver_command(), APP, "--ws-deflate-level", value],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "--ws-deflate-level" in proc.stderr


def test_gunicorn_worker_serves_websockets_with_its_settings():
    pytest.importorskip("gunicorn")
    from test_gunicorn import gunicorn

    with gunicorn(APP, worker="apps.ws_worker.SmallMessagesWorker", workers=1) as g:
        sock, status, head, rest = handshake(
            g.port, headers={"Sec-WebSocket-Extensions": "permessage-deflate"}
        )
        with sock:
            assert status == 101
            assert "permessage-deflate" not in head
            reader = Reader(sock, rest)
            sock.sendall(frame(OP_TEXT, b"a" * 100))
            assert reader.frame()[3] == b"a" * 100
            sock.sendall(frame(OP_TEXT, b"a" * 101))
            assert reader.close_code()[0] == 1009


def test_hup_rolling_restart_closes_old_workers_websockets_with_1001(events_file):
    with run_server(APP, "--workers", "1", "--timeout", "30") as server:

        async def main():
            ws = await websockets.connect(url(server, "/echo"))
            await ws.send("before")
            assert await ws.recv() == "before"
            os.kill(server.pid, signal.SIGHUP)
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 20)
            async with websockets.connect(url(server, "/echo"), open_timeout=20) as new:
                await new.send("after")
                assert await new.recv() == "after"
            return info.value.rcvd.code

        assert run(main()) == 1001


def test_protocol_error_code_reaches_the_app(srv, events_file):
    def count(code):
        return sum(e.startswith(f"{code} ") for e in events(events_file))

    before = count(1007), count(1009)
    assert failed_with(srv, frame(OP_TEXT, b"\xff"), path="/disconnect") == 1007
    assert wait_for(lambda: count(1007) == before[0] + 1)
    assert failed_with(srv, frame(OP_BINARY, b"a" * (MAX_SIZE + 1)), path="/disconnect") == 1009
    assert wait_for(lambda: count(1009) == before[1] + 1)
