"""TLS and HTTP/2 scenarios: the run's certificates (openssl CLI) and the readiness probe
(curl), which checks the protocol a server really speaks."""

import os
import subprocess

from harness.procs import LaunchError

CURVE = "P-256"
SERVER_EXT = (
    "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
    "basicConstraints=critical,CA:FALSE\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth\n"
)


def cert_paths(tmpdir):
    """{ca, cert, key}: where the run's CA certificate and server certificate and key live."""
    d = os.path.join(tmpdir, "tls")
    return {
        "ca": os.path.join(d, "ca.crt"),
        "cert": os.path.join(d, "server.crt"),
        "key": os.path.join(d, "server.key"),
    }


def cert_commands(d):
    """The openssl commands that make an ECDSA P-256 CA and a server certificate for
    127.0.0.1 and localhost signed by it, in directory D (relative names)."""
    genkey = ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt"]
    genkey += [f"ec_paramgen_curve:{CURVE}"]
    return [
        [*genkey, "-out", "ca.key"],
        ["openssl", "req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "7"]
        + ["-subj", "/CN=pyserver benchmark CA", "-addext", "basicConstraints=critical,CA:TRUE"]
        + ["-addext", "keyUsage=critical,keyCertSign", "-out", "ca.crt"],
        [*genkey, "-out", "server.key"],
        ["openssl", "req", "-new", "-key", "server.key", "-subj", "/CN=localhost"]
        + ["-out", "server.csr"],
        ["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key"]
        + ["-CAcreateserial", "-days", "7", "-sha256", "-extfile", "server.ext"]
        + ["-out", "server.crt"],
        ["openssl", "verify", "-CAfile", "ca.crt", "server.crt"],
    ]


def make_certs(tmpdir):
    """Make the run's certificates once (every server of every TLS scenario gets the same
    files); returns (cert_paths, the commands run). Raises RuntimeError when openssl fails."""
    paths = cert_paths(tmpdir)
    d = os.path.dirname(paths["ca"])
    commands = cert_commands(d)
    if os.path.exists(paths["cert"]):
        return paths, commands
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write(SERVER_EXT)
    for argv in commands:
        try:
            proc = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=60)
        except OSError as exc:
            raise RuntimeError(f"{argv[0]}: {exc}") from exc
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()[-300:]}")
    os.chmod(paths["key"], 0o644)  # servers run as this user; the tmpdir is private enough
    return paths, commands


def url(sc, port, host):
    return f"{'https' if sc.tls else 'http'}://{host}:{port}{sc.path}"


def probe(sc, ca):
    """probe(host, port, path) -> (status, body) for procs.Server.wait_ready: one GET with
    curl in the scenario's protocol. TLS: exactly TLS 1.3, the certificate checked against
    the run's CA. h2c: prior knowledge. h2: ALPN must select h2. A server that answers in
    another protocol raises LaunchError at once (it will not change its mind)."""
    want = "2" if sc.http2 else "1.1"

    def get(host, port, path):
        argv = ["curl", "-sS", "--max-time", "2", "-o", "-", "-w", "\n%{http_code} %{http_version}"]
        if sc.tls:
            argv += ["--cacert", ca, "--tlsv1.3", "--tls-max", "1.3"]
        if sc.http2 == "h2c":
            argv.append("--http2-prior-knowledge")
        elif sc.http2 == "h2":
            argv.append("--http2")
        else:
            argv.append("--http1.1")
        scheme = "https" if sc.tls else "http"
        argv.append(f"{scheme}://{host}:{port}{path}")
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=10)
        except subprocess.TimeoutExpired as exc:
            raise OSError("curl did not finish in 10 s") from exc
        body, _, tail = proc.stdout.rpartition(b"\n")
        if proc.returncode != 0:
            raise OSError(f"curl exit {proc.returncode}: {proc.stderr.decode(errors='replace')}")
        status, _, version = tail.decode().partition(" ")
        if status == "200" and version != want:
            raise LaunchError(
                f"answers over HTTP/{version}, not HTTP/{want}"
                + (" (ALPN did not select h2)" if sc.http2 == "h2" else "")
            )
        return int(status), body

    return get
