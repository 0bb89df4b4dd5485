"""A throwaway Redis for the tests that need a shared Channels layer (test_hybrid_channels).

redis-server (Debian's `redis-server`, installed by `make deps`) runs in the foreground from a
private temporary directory, on a free loopback port, with persistence off; it is stopped
when the test session ends. A missing redis-server fails the tests that ask for it: it is
part of the test set-up, not optional."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from helpers import HOST, can_connect, free_port, wait_for

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisProcess:
    """redis-server on HOST:port from its own directory; url is what channels_redis takes."""

    def __init__(self):
        if not Path(REDIS_SERVER).exists():
            raise AssertionError("redis-server is not installed (make deps installs it)")
        self.dir = Path(tempfile.mkdtemp(prefix="pyserver-redis-"))
        self.port = free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        self.log = self.dir / "redis.log"
        argv = [REDIS_SERVER, "--bind", HOST, "--port", str(self.port)]
        argv += ["--dir", str(self.dir), "--save", "", "--appendonly", "no"]
        argv += ["--daemonize", "no", "--logfile", str(self.log)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        if not wait_for(lambda: can_connect(self.port) or self.proc.poll() is not None, 10.0):
            self.stop()
            raise AssertionError(f"redis-server did not start; log:\n{self.log_text()}")
        if self.proc.poll() is not None:
            text = self.log_text()
            self.stop()
            raise AssertionError(f"redis-server exited; log:\n{text}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)
