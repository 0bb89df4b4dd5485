"""What the harness needs on the machine: Debian packages and the peers' virtualenv."""

import json
import os
import platform
import re
import shutil
import subprocess
import sys

APT_PACKAGES = [
    "wrk",
    "apache2-utils",
    "nginx-light",
    "libev-dev",
    # socketify's bundled libsocketify_linux_amd64.so links the system libuv.so.1.
    "libuv1",
    "build-essential",
    "python3-dev",
    "python3-venv",
    # benchmarks/wsload (websocket-echo) links zlib and ISA-L; instructions counts with
    # callgrind; django-wsgi-db starts its own cluster from /usr/lib/postgresql/*/bin.
    "zlib1g-dev",
    "libisal-dev",
    "valgrind",
    "postgresql",
    # hello-tls and hello-h2: certificates (openssl), readiness (curl), HTTP/2 load (h2load).
    "openssl",
    "curl",
    "nghttp2-client",
]

# Peer servers and tools installed from PyPI into benchmarks/.venv-peers, never into
# the project's own environment.  name -> (pip requirement, import name or None).
PEER_PACKAGES = {
    "bjoern": ("bjoern", "bjoern"),
    # fastpysgi: a manylinux wheel, libuv and llhttp linked in.  socketify: an sdist that
    # ships uWebSockets prebuilt (libsocketify_*.so, loaded through cffi).
    "fastpysgi": ("fastpysgi", "fastpysgi"),
    "socketify": ("socketify", "socketify"),
    "granian": ("granian", "granian"),
    "gunicorn": ("gunicorn", "gunicorn"),
    "pyuwsgi": ("pyuwsgi", "pyuwsgi"),
    "uvicorn": ("uvicorn[standard]", "uvicorn"),
    "hypercorn": ("hypercorn", "hypercorn"),
    "daphne": ("daphne", "daphne"),
    # django-channels: the project's Channels consumer, imported by every ASGI peer.
    "channels": ("channels", "channels"),
    "uvicorn-worker": ("uvicorn-worker", "uvicorn_worker"),
    # hello-h2: uvicorn's experimental HTTP/2 (`--http zttp --http2`) needs the zttp parser.
    "zttp": ("zttp", "zttp"),
    "django": ("django", "django"),
    "starlette": ("starlette", "starlette"),
    "bottle": ("bottle", "bottle"),
    "matplotlib": ("matplotlib", "matplotlib"),
    # websocket-echo: uvicorn --ws wsproto (uvicorn[standard] brings websockets only).
    "wsproto": ("wsproto", "wsproto"),
    # django-wsgi-db: Django's PostgreSQL backend (psycopg 3, the binary wheel).
    "psycopg": ("psycopg[binary]", "psycopg"),
    # static: WhiteNoise under gunicorn, the static files Django projects use today.
    "whitenoise": ("whitenoise", "whitenoise"),
    # peregrine-server: a Swift core embedding CPython (HTTP/1.1, 2, 3; ASGI and WSGI),
    # run with uvloop beside it as in production (uvicorn[standard] brings uvloop).
    "peregrine-server": ("peregrine-server", "peregrine"),
    # The application scenarios (fastapi-json, starlette-json, flask-json).
    "fastapi": ("fastapi", "fastapi"),
    "flask": ("flask", "flask"),
}
# meinheld pins greenlet<0.5, which no longer compiles on CPython >= 3.11; its own C
# code builds and runs against a current greenlet, so install that first, then meinheld
# without dependencies.  Optional: a failure only drops meinheld from the comparison.
OPTIONAL_PACKAGES = {"meinheld": ("meinheld", "meinheld")}

STAMP = ".harness-installed.json"


def log(msg):
    print(msg, flush=True)


def ensure_apt_packages(packages=APT_PACKAGES):
    """Install missing Debian packages (needs root); return the ones still missing."""
    missing = [p for p in packages if not _dpkg_installed(p)]
    if not missing:
        return []
    log(f"setup: apt-get install {' '.join(missing)}")
    if os.geteuid() != 0:
        log("setup: not root, cannot install Debian packages; install them by hand")
        return missing
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, stdout=subprocess.DEVNULL)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
    return [p for p in packages if not _dpkg_installed(p)]


def _dpkg_installed(package):
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
    )
    return proc.returncode == 0 and "install ok installed" in proc.stdout


def venv_python(venv):
    return os.path.join(venv, "bin", "python")


def ensure_peers_venv(venv, reinstall=False):
    """Create VENV and pip-install the peers; return {package: "ok" | failure reason}."""
    python = venv_python(venv)
    stamp_path = os.path.join(venv, STAMP)
    wanted = sorted(PEER_PACKAGES) + sorted(OPTIONAL_PACKAGES)
    if os.path.exists(stamp_path) and not reinstall:
        with open(stamp_path) as f:
            stamp = json.load(f)
        if stamp.get("wanted") == wanted:
            return stamp["status"]
    if not os.path.exists(python):
        base = getattr(sys, "_base_executable", sys.executable)
        log(f"setup: creating {venv} with {base}")
        subprocess.run([base, "-m", "venv", venv], check=True)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    pip_log = os.path.join(venv, "pip.log")
    log(f"setup: pip install peers into the peers venv (first run only; log: {pip_log})")
    _pip_one(pip, ["-U", "pip", "setuptools", "wheel"], pip_log)
    reqs = [req for req, _ in PEER_PACKAGES.values()]
    if _pip_one(pip, reqs, pip_log) == "ok":
        status = dict.fromkeys(PEER_PACKAGES, "ok")
    else:  # find out which one breaks and keep the others
        status = {name: _pip_one(pip, [req], pip_log) for name, (req, _) in PEER_PACKAGES.items()}
    status["meinheld"] = _pip_one(pip, ["greenlet"], pip_log)
    if status["meinheld"] == "ok":
        args = ["--no-deps", "--no-build-isolation", "meinheld"]
        status["meinheld"] = _pip_one(pip, args, pip_log)
    for name, verdict in status.items():
        if verdict != "ok":
            log(f"setup: {name} did not install: {verdict}")
    with open(stamp_path, "w") as f:
        json.dump({"wanted": wanted, "status": status}, f, indent=1)
    return status


def ensure_project_packages(python, requirements):
    """pip-install REQUIREMENTS (an app's, e.g. psycopg) into the project's venv when their
    import is missing: benchmark apps only, never the project's declared dependencies."""
    missing = [r for r in requirements if not importable(python, [_import_name(r)])]
    if not missing:
        return
    log(f"setup: pip install {' '.join(missing)} into {os.path.dirname(os.path.dirname(python))}")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    verdict = _pip_one(pip, missing, os.path.join(os.path.dirname(python), "..", "bench-pip.log"))
    if verdict != "ok":
        log(f"setup: {' '.join(missing)} did not install: {verdict}")


def _import_name(requirement):
    return re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].replace("-", "_")


def _pip_one(pip, args, log_path):
    """Run `pip install ARGS`, output appended to LOG_PATH; "ok" or the error lines."""
    proc = subprocess.run([*pip, *args], capture_output=True, text=True)
    with open(log_path, "a") as f:
        f.write(f"$ pip install {' '.join(args)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode == 0:
        return "ok"
    errors = [ln.strip() for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    return "; ".join(errors[:3])[:300] or f"pip exited {proc.returncode}"


def importable(python, modules):
    """The subset of MODULES that PYTHON can import."""
    code = (
        "import importlib.util, sys\n"
        "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))\n"
    )
    try:
        proc = subprocess.run(
            [python, "-c", code, *modules], capture_output=True, text=True, timeout=60
        )
    except OSError:
        return set()
    return set(proc.stdout.split())


def import_error(python, module):
    """The last line of what `import MODULE` prints in PYTHON when it fails ("" if it works)."""
    try:
        proc = subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
        )
    except OSError as exc:
        return str(exc)
    lines = proc.stderr.strip().splitlines()
    return lines[-1][:300] if proc.returncode != 0 and lines else ""


def deb_version(package):
    """Version of an installed Debian package, or None."""
    try:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True
        )
    except OSError:
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def dist_versions(python, dists):
    """{distribution: version or None} as installed for PYTHON."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for d in sys.argv[1:]:\n"
        "    try:\n"
        "        out[d] = m.version(d)\n"
        "    except m.PackageNotFoundError:\n"
        "        out[d] = None\n"
        "print(json.dumps(out))\n"
    )
    try:
        proc = subprocess.run(
            [python, "-c", code, *dists], capture_output=True, text=True, timeout=60
        )
        return json.loads(proc.stdout)
    except (OSError, ValueError):
        return dict.fromkeys(dists)


def python_version(python):
    try:
        proc = subprocess.run(
            [python, "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    return proc.stdout.strip() or None


def tool_version(argv, pattern):
    """The version a tool prints (stdout or stderr), matched by PATTERN's group 1, or None."""
    if shutil.which(argv[0]) is None:
        return None
    proc = subprocess.run(argv, capture_output=True, text=True)
    m = re.search(pattern, proc.stdout + proc.stderr)
    return m.group(1) if m else None


def machine_info():
    model = None
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "os": _os_release(),
    }


def _os_release():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()
