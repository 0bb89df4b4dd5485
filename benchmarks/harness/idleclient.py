"""Open many connections to a server and hold them, for the `idle` benchmark.

    python idleclient.py --port 8400 --connections 10000 [--mode idle|head|ws]

--mode idle: each connection sends one `GET /` and reads the whole answer, then stays
open, silent.  --mode ws: each connection asks for a WebSocket (GET --path with
Upgrade: websocket), reads the 101 answer, then stays open, silent.  --mode head: each
connection sends a request line and header fields adding up to --head-bytes, without
the blank line that would end the head, then stays open.  At most --window
connections are in progress (connecting, sending or reading)
at a time.  When every connection is settled (or --deadline passed) the client prints
one JSON line (phase "ready": how many are open, how the server answered), then waits
for a line on stdin, closes every connection with a reset (no TIME_WAIT left behind,
so runs can follow each other) and prints a last JSON line (phase "closed").

Standard library only; run it in its own process so that it holds the connections,
not the server.
"""

import argparse
import errno
import json
import resource
import selectors
import socket
import struct
import sys
import time

FIELD = 4000  # bytes per header field in --mode head, well below 8 KiB limits


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def head_bytes(host, port, size):
    """A request line and header fields of SIZE bytes in all, without the final CRLF."""
    head = f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
    n = 0
    while len(head) < size:
        name = f"X-Fill-{n:03d}: ".encode()
        room = size - len(head) - len(name) - 2
        if room <= 0:  # too little left for one more field: lengthen the last one
            head = head[:-2] + b"a" * (size - len(head)) + b"\r\n"
            break
        head += name + b"a" * min(FIELD, room) + b"\r\n"
        n += 1
    return head


class Conn:
    __slots__ = ("sock", "state", "out", "inbuf", "need", "status")

    def __init__(self, sock, out):
        self.sock = sock
        self.state = "connecting"
        self.out = memoryview(out)
        self.inbuf = b""
        self.need = None  # bytes of the whole answer once its head is read
        self.status = None  # the server's status code, if it answered


def status_of(data):
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


class Client:
    def __init__(self, args):
        self.args = args
        self.sel = selectors.DefaultSelector()
        self.conns = []
        self.active = 0
        self.counts = {"connect_errors": 0, "closed_by_server": 0, "reset_by_server": 0}
        if args.mode == "idle":
            self.request = f"GET / HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n\r\n".encode()
        elif args.mode == "ws":
            self.request = (
                f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        else:
            self.request = head_bytes(args.host, args.port, args.head_bytes)

    def open_one(self):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        err = sock.connect_ex((self.args.host, self.args.port))
        c = Conn(sock, self.request)
        self.conns.append(c)
        if err not in (0, errno.EINPROGRESS):
            self.fail(c, "connect_errors")
            return
        self.active += 1
        self.sel.register(sock, selectors.EVENT_WRITE, c)

    def fail(self, c, what):
        self.counts[what] += 1
        if c.state in ("connecting", "sending", "reading"):
            self.active -= 1
        c.state = "dead"
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()

    def settle(self, c, state):
        """C leaves the in-progress set: "idle" (answered) or "held" (head sent)."""
        self.active -= 1
        c.state = state
        if state == "idle":
            self.sel.unregister(c.sock)
        else:  # keep watching: the server may answer or close while we hold it
            self.sel.modify(c.sock, selectors.EVENT_READ, c)

    def on_event(self, c, mask):
        if c.state == "connecting":
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                return self.fail(c, "connect_errors")
            c.state = "sending"
        if c.state == "sending" and mask & selectors.EVENT_WRITE:
            try:
                sent = c.sock.send(c.out)
            except BlockingIOError:
                return
            except OSError:
                return self.fail(c, "reset_by_server")
            c.out = c.out[sent:]
            if not c.out:
                if self.args.mode in ("idle", "ws"):
                    c.state = "reading"
                    self.sel.modify(c.sock, selectors.EVENT_READ, c)
                else:
                    self.settle(c, "held")
            return
        if mask & selectors.EVENT_READ:
            self.on_read(c)

    def on_read(self, c):
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            return self.fail(c, "reset_by_server")
        if not data:
            return self.fail(c, "closed_by_server")
        c.inbuf += data
        if c.status is None and b"\r\n" in c.inbuf:
            c.status = status_of(c.inbuf)
        if c.state == "held":  # answered while holding an incomplete head
            c.inbuf = c.inbuf[-4096:]
            return
        if c.need is None and b"\r\n\r\n" in c.inbuf:
            head, _, _ = c.inbuf.partition(b"\r\n\r\n")
            if c.status == 101:  # a WebSocket: the head is the whole answer
                c.inbuf = b""
                self.settle(c, "idle")
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            c.need = len(head) + 4 + length
        if c.need is not None and len(c.inbuf) >= c.need:
            c.inbuf = b""
            self.settle(c, "idle")

    def run(self):
        started = time.monotonic()
        deadline = started + self.args.deadline
        while time.monotonic() < deadline:
            while len(self.conns) < self.args.connections and self.active < self.args.window:
                self.open_one()
            if self.active == 0 and len(self.conns) >= self.args.connections:
                break
            for key, mask in self.sel.select(0.5):
                self.on_event(key.data, mask)
        opened_s = time.monotonic() - started
        # Late answers or closes (a head deadline, a limit) show up in the next second.
        settle_until = time.monotonic() + self.args.settle
        while time.monotonic() < settle_until:
            for key, mask in self.sel.select(0.1):
                self.on_event(key.data, mask)
        return opened_s

    def summary(self, opened_s):
        states, statuses = {}, {}
        for c in self.conns:
            states[c.state] = states.get(c.state, 0) + 1
            if c.status is not None:
                statuses[str(c.status)] = statuses.get(str(c.status), 0) + 1
        return {
            "phase": "ready",
            "mode": self.args.mode,
            "connections": len(self.conns),
            "open": sum(1 for c in self.conns if c.state != "dead"),
            "states": states,
            "statuses": statuses,
            "request_bytes": len(self.request),
            "opened_s": round(opened_s, 3),
            **self.counts,
        }

    def close_all(self):
        linger = struct.pack("ii", 1, 0)
        for c in self.conns:
            if c.state != "dead":
                try:
                    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                except OSError:
                    pass
                c.sock.close()
        self.sel.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--mode", choices=("idle", "head", "ws"), default="idle")
    ap.add_argument("--path", default="/", help="--mode ws: the WebSocket's path")
    ap.add_argument("--head-bytes", type=int, default=60 * 1024)
    ap.add_argument("--window", type=int, default=100, help="connections in progress at once")
    ap.add_argument("--deadline", type=float, default=120.0, help="seconds to open them all")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait after that")
    args = ap.parse_args()
    limit = raise_nofile(args.connections + 256)
    if limit < args.connections + 16:
        sys.exit(f"RLIMIT_NOFILE is {limit}, too low for {args.connections} connections")
    client = Client(args)
    opened_s = client.run()
    print(json.dumps(client.summary(opened_s)), flush=True)
    sys.stdin.readline()
    client.close_all()
    print(json.dumps({"phase": "closed"}), flush=True)


if __name__ == "__main__":
    main()
