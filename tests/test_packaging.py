"""The distribution: `python -m build` makes an sdist and a wheel; the wheel installs into a
fresh venv whose `pyserver` command serves a request.

One build (the wheel is built from the unpacked sdist, so the sdist is complete enough to
build from), about 30-60 s: the whole module shares it.
"""

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest
from helpers import HOST, ROOT, free_port, raw_request, wait_for

DIST_NAME = "pyserver_ev"  # the normalized form of the distribution name "pyserver-ev"
BUILD_TIMEOUT = 600

pytestmark = pytest.mark.packaging


def clean_env():
    """Our environment without anything that would make the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSERVER_"))}
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the test venv already has setuptools and wheel; no index is needed.
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    sdists = list(out.glob(f"{DIST_NAME}-*.tar.gz"))
    wheels = list(out.glob(f"{DIST_NAME}-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


def test_sdist_has_every_c_source_and_header(dist):
    sdist, _ = dist
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    wanted = {
        str(p.relative_to(ROOT))
        for pattern in ("csrc/*/*.c", "csrc/*/*.h")
        for p in ROOT.glob(pattern)
    }
    assert "csrc/base/spool.c" in wanted and "csrc/net/transport.h" in wanted
    missing = wanted - names
    assert not missing, f"not in the sdist: {sorted(missing)}"
    for name in ("setup.py", "pyproject.toml", "README.md", "pyserver/cli.py"):
        assert name in names


def test_wheel_metadata_and_contents(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = zf.read(metadata).decode()
        entry_points = zf.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    assert "Name: pyserver-ev" in text
    assert "Provides-Extra: gunicorn" in text
    assert any(n.startswith("pyserver/_core") and n.endswith(".so") for n in names), names
    assert "pyserver = pyserver.cli:main" in entry_points


def test_wheel_installs_in_a_fresh_venv_and_serves(dist, tmp_path):
    _, wheel = dist
    venv = tmp_path / "venv"
    env = clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "install", "--no-index", "--no-deps", str(wheel)], check=True, env=env, timeout=120
    )
    app_dir = tmp_path / "site"
    app_dir.mkdir()
    (app_dir / "smoke.py").write_text(
        "import pyserver\n"
        "def app(environ, start_response):\n"
        "    start_response('200 OK', [('Content-Type', 'text/plain')])\n"
        "    return [pyserver.__file__.encode()]\n"
    )
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(venv / "bin" / "pyserver"), "smoke:app", "--host", HOST, "--port", str(port)],
            cwd=app_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        assert wait_for(lambda: _answers(port) or proc.poll() is not None, 20.0), log.read_text()
        assert proc.poll() is None, log.read_text()
        raw = raw_request(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 200 "), raw
        # The installed package answered, not the repository's.
        assert str(venv).encode() in raw.split(b"\r\n\r\n", 1)[1], raw
    finally:
        proc.terminate()
        proc.wait(15)
    assert proc.returncode == 0, log.read_text()


def _answers(port):
    import socket

    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((HOST, port)) == 0
