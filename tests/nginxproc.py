"""A real nginx for the tests that put pyserver behind one (test_nginx, test_uwsgi).

nginx runs in the foreground from a private directory with a generated main
configuration that includes the test's own `http {}` content; it listens on free
loopback ports the test chose. A test module skips when nginx cannot run here."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from helpers import wait_for

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def make_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for example.com and its key, in directory."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-subj", "/CN=example.com", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def rewrite(text: str, replacements) -> str:
    """text with each (old, new) replaced; every old must be there (the documented
    configuration changed if not)."""
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    return text


class NginxProcess:
    """nginx started from directory: `http_include` (a file in directory) inside
    `http {}`, and `main_include` at the top level when given (the stream module is
    loaded for it). Waits until every port in `ports` accepts connections."""

    def __init__(self, directory: Path, http_include: str, ports, main_include: str | None = None):
        self.dir = directory
        temp = "".join(
            f"    {name}_temp_path {directory}/{name};\n"
            for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        main = [
            "daemon off;",
            "worker_processes 1;",
            f"pid {directory}/nginx.pid;",
            f"error_log {directory}/error.log info;",
        ]
        if os.geteuid() == 0:
            main.append("user root;")  # its workers read this test's private directory
        if main_include:
            main.append(f"load_module {STREAM_MODULE};")
        main += [
            "events { worker_connections 256; }",
            "http {",
            f"    access_log {directory}/access.log;",
            temp + f"    include {directory}/{http_include};",
            "}",
        ]
        if main_include:
            main.append(f"include {directory}/{main_include};")
        self.conf = directory / "nginx.conf"
        self.conf.write_text("\n".join(main) + "\n")
        self.argv = [NGINX, "-p", str(directory), "-c", str(self.conf), "-e", "stderr"]
        check = subprocess.run([*self.argv, "-t"], capture_output=True, text=True)
        if check.returncode != 0:
            pytest.skip(f"nginx cannot run here: {check.stderr.strip()[-400:]}")
        self.log = open(directory / "nginx.out", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_for(lambda: all(map(listening, ports)), 10):
            self.stop()
            pytest.fail(f"nginx did not start: {(directory / 'nginx.out').read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
