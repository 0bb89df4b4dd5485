"""The uwsgi protocol's options: uwsgi:// binds and --protocol uwsgi, refused where they
cannot work (TLS, the PROXY protocol) at start."""

import subprocess
from pathlib import Path

from helpers import free_port, run_cli


def test_uwsgi_refused_on_tls_and_with_proxy_protocol(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    port = str(free_port())
    tls = ["--certfile", str(cert), "--keyfile", str(key)]
    for args in (
        ["-b", f"uwsgi://127.0.0.1:{port}", *tls],
        ["-b", f"127.0.0.1:{port}", "--protocol", "uwsgi", *tls],
        ["-b", f"uwsgi://127.0.0.1:{port}", "--proxy-protocol"],
        ["-b", f"uwsgi://127.0.0.1:{port}", "--proxy-protocol-bind", f"127.0.0.1:{port}"],
    ):
        result = run_cli("apps.uwsgi_echo:app", "--app-dir", str(Path(__file__).parent), *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "uwsgi protocol" in result.stderr, result.stderr
    result = run_cli("apps.uwsgi_echo:app", "-b", "uwsgi://")
    assert result.returncode == 2 and "uwsgi://HOST:PORT" in result.stderr, result.stderr
    result = run_cli("apps.uwsgi_echo:app", "--protocol", "fastcgi")
    assert result.returncode == 2 and "--protocol" in result.stderr, result.stderr
