"""A raw-socket WebSocket client for the tests: the handshake and frames by hand, so a test
can send what a well-behaved client library never would (unmasked frames, reserved bits,
bad UTF-8, a frame cut in the middle)."""

from __future__ import annotations

import base64
import os
import socket
import struct

from helpers import HOST, SOCK_TIMEOUT

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def handshake(
    port: int, path: str = "/echo", headers: dict | None = None, timeout: float = SOCK_TIMEOUT
):
    """Open a connection and send an upgrade request. Returns (sock, status, head, rest)."""
    sock = socket.create_connection((HOST, port), timeout=timeout)
    fields = {
        "Host": f"{HOST}:{port}",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        "Sec-WebSocket-Version": "13",
    }
    fields.update(headers or {})
    lines = [f"GET {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in fields.items() if v is not None]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return sock, status, head.decode("latin-1"), rest


def frame(opcode: int, payload: bytes = b"", fin=True, mask=True, rsv=0) -> bytes:
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", b0, m | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BBQ", b0, m | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def close_frame(code: int | None = 1000, reason: bytes = b"") -> bytes:
    return frame(OP_CLOSE, b"" if code is None else struct.pack("!H", code) + reason)


class Reader:
    """Reads server frames from sock (rest: bytes already read after the 101 head)."""

    def __init__(self, sock, rest=b""):
        self.sock, self.buf = sock, rest

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        """Returns (fin, rsv, opcode, payload)."""
        b0, b1 = self._need(2)
        n = b1 & 0x7F
        assert not b1 & 0x80, "server frames are not masked"
        if n == 126:
            (n,) = struct.unpack("!H", self._need(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._need(8))
        return bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F, self._need(n)

    def close_code(self):
        """Skips data frames; returns (code, reason) of the close frame (None when empty)."""
        while True:
            _, _, op, payload = self.frame()
            if op == OP_CLOSE:
                if not payload:
                    return None, b""
                return struct.unpack("!H", payload[:2])[0], payload[2:]


def at_eof(sock, timeout=5.0) -> bool:
    """The server closed the TCP connection (EOF or reset) within timeout."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
