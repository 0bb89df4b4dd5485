"""Build the C extension pyserver._core.

Metadata lives in pyproject.toml; this file only describes the extension:
the core (csrc/base, codec, net, master, serve) and the CPython bridge (csrc/py), linked against
libev, llhttp, OpenSSL 3, nghttp2, wslay, zlib, ISA-L, brotli, zstd and libdeflate from the system.

Environment:
  PYSERVER_CFLAGS   extra compiler flags (also used for the bundled llhttp build)
  PYSERVER_LDFLAGS  extra linker flags
  PYSERVER_WERROR   1 to add -Werror to the extension's own sources
"""

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from glob import glob

# Before setuptools, which fails less clearly elsewhere: the core uses epoll and other Linux
# interfaces (accept4, SO_REUSEPORT lanes, kTLS, /proc).
if not sys.platform.startswith("linux"):
    sys.exit(f"error: pyserver runs on Linux only; this is {sys.platform}")

from setuptools import Extension, setup  # noqa: E402
from setuptools.command.build_clib import build_clib  # noqa: E402
from setuptools.command.build_ext import build_ext  # noqa: E402

LLHTTP_MIN_VERSION = "9.2"
DEBIAN_LLHTTP_SRC = "/usr/share/llhttp"
DEBIAN_LLHTTP_INCLUDE = "/usr/share/include/llhttp"

# What each library is for, and the Debian packages that provide it (the first one apt knows
# is named: Debian 13 has llhttp as a library, Debian 12 only its sources in node-llhttp).
LIBEV = ("libev", ("libev-dev",))
LLHTTP = (
    f"llhttp (or a libllhttp >= {LLHTTP_MIN_VERSION} that pkg-config finds)",
    ("libllhttp-dev", "node-llhttp"),
)
OPENSSL = ("OpenSSL 3 for TLS (pkg-config must find 'openssl >= 3.0')", ("libssl-dev",))
NGHTTP2 = ("nghttp2 for HTTP/2 (pkg-config must find 'libnghttp2 >= 1.52')", ("libnghttp2-dev",))
WSLAY = ("wslay (WebSocket framing)", ("libwslay-dev",))
ZLIB = ("zlib (gzip and WebSocket compression)", ("zlib1g-dev",))
BROTLI = ("brotli (response compression)", ("libbrotli-dev",))
ZSTD = ("zstd (response compression)", ("libzstd-dev",))
LIBDEFLATE = ("libdeflate (gzip of whole responses)", ("libdeflate-dev",))
ISAL = ("ISA-L (WebSocket compression)", ("libisal-dev",))


class Missing(Exception):
    """A library the build needs is not installed; args[0] is its entry above."""


def fail(message):
    sys.stderr.write(f"error: {message}\n")
    sys.exit(1)


def debian_package(names):
    """The first of names that apt knows (the last one when apt cannot tell)."""
    if shutil.which("apt-cache") is not None:
        for name in names:
            proc = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True)
            if "Candidate:" in proc.stdout and "Candidate: (none)" not in proc.stdout:
                return name
    return names[-1]


def fail_missing(missing):
    """One message for every library missing, and the one command that installs them all."""
    lines = [
        f"pyserver needs {len(missing)} more system "
        f"librar{'y' if len(missing) == 1 else 'ies'} to build:"
    ]
    packages = []
    for what, names in missing:
        package = debian_package(names)
        packages.append(package)
        lines.append(f"  {what}: Debian package {package}")
    lines.append(f"install them with: apt-get install {' '.join(packages)}")
    fail("\n".join(lines))


def env_flags(name):
    return shlex.split(os.environ.get(name, ""))


def pkg_config(*args):
    """Return pkg-config's output split into words, or None if it fails."""
    if shutil.which("pkg-config") is None:
        return None
    proc = subprocess.run(["pkg-config", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return proc.stdout.split()


def find_libev():
    """Return (compile_args, link_args) for libev."""
    cflags = pkg_config("--cflags", "libev")
    libs = pkg_config("--libs", "libev")
    if cflags is not None and libs is not None:
        return cflags, libs
    if os.path.exists("/usr/include/ev.h") or os.path.exists("/usr/local/include/ev.h"):
        return [], ["-lev"]
    raise Missing(LIBEV)


def find_openssl():
    """Return (compile_args, link_args) for libssl and libcrypto (OpenSSL 3).

    Without pkg-config, a Debian libssl-dev in /usr is taken as it is.
    """
    if pkg_config("--exists", "openssl >= 3.0") is not None:
        return pkg_config("--cflags", "openssl"), pkg_config("--libs", "openssl")
    if shutil.which("pkg-config") is None and os.path.exists("/usr/include/openssl/ssl.h"):
        return [], ["-lssl", "-lcrypto"]
    raise Missing(OPENSSL)


def find_nghttp2():
    """Return (compile_args, link_args) for libnghttp2 (>= 1.52, Debian 12's)."""
    if pkg_config("--exists", "libnghttp2 >= 1.52") is not None:
        return pkg_config("--cflags", "libnghttp2"), pkg_config("--libs", "libnghttp2")
    if shutil.which("pkg-config") is None and os.path.exists("/usr/include/nghttp2/nghttp2.h"):
        return [], ["-lnghttp2"]
    raise Missing(NGHTTP2)


def find_system_lib(package, header, lib, missing):
    """Return (compile_args, link_args) for a library found by pkg-config
    (`package`), else by its header under /usr/include or /usr/local/include
    (Debian's libwslay-dev has no .pc file). Raises Missing."""
    cflags = pkg_config("--cflags", package)
    libs = pkg_config("--libs", package)
    if cflags is not None and libs is not None:
        return cflags, libs
    if any(os.path.exists(os.path.join(d, header)) for d in ("/usr/include", "/usr/local/include")):
        return [], [f"-l{lib}"]
    raise Missing(missing)


def find_llhttp():
    """Return (compile_args, link_args, static_library_or_None) for llhttp.

    A system libllhttp >= 9.2 is used as is. Otherwise Debian's node-llhttp
    sources (8.1) are compiled at build time into a static helper library,
    in strict mode; they are never copied into this repository.
    """
    if pkg_config("--exists", f"libllhttp >= {LLHTTP_MIN_VERSION}") is not None:
        return pkg_config("--cflags", "libllhttp"), pkg_config("--libs", "libllhttp"), None
    sources = [os.path.join(DEBIAN_LLHTTP_SRC, f) for f in ("llhttp.c", "api.c", "http.c")]
    if all(os.path.exists(s) for s in sources):
        library = (
            "llhttp",
            {
                "sources": sources,
                "include_dirs": [DEBIAN_LLHTTP_INCLUDE],
                "macros": [("LLHTTP_STRICT_MODE", "1")],
                # -w: llhttp's own warnings are not ours to fix.
                "cflags": ["-O2", "-w", "-fPIC", "-fvisibility=hidden"]
                + env_flags("PYSERVER_CFLAGS"),
            },
        )
        cflags = [f"-I{DEBIAN_LLHTTP_INCLUDE}", "-DLLHTTP_STRICT_MODE=1"]
        return cflags, [], library
    raise Missing(LLHTTP)


class BuildExt(build_ext):
    """build_ext that builds the static llhttp helper first.

    Plain `setup.py build_ext` does not run build_clib on its own. The helper
    library goes to a directory named after the extra flags, so switching
    between a normal and a sanitizer build never links stale objects.
    """

    def run(self):
        if self.distribution.has_c_libraries():
            self.run_command("build_clib")
        super().run()


class BuildClib(build_clib):
    """build_clib for the llhttp helper, whose sources are system files.

    They are not part of pyserver's source distribution, so they are kept
    out of the manifest (which would reject their absolute paths).
    """

    def get_source_files(self):
        return []


def flavor_dir():
    flags = os.environ.get("PYSERVER_CFLAGS", "") + "|" + os.environ.get("PYSERVER_LDFLAGS", "")
    return os.path.join("build", "clib-" + hashlib.sha1(flags.encode()).hexdigest()[:10])


def extension_sources():
    # The core by layer (csrc/base, codec, net, master, serve), then the bridge (csrc/py).
    sources = sorted(glob("csrc/*/*.c"))
    if not sources:
        fail("no C sources found in csrc/ (run setup.py from the repository root)")
    return sources


def find_all():
    """Every library's (compile_args, link_args), and the llhttp helper library or None.
    Looks for all of them before failing, so one message names everything missing."""
    found, missing, llhttp_library = [], [], None
    for find, args in (
        (find_libev, ()),
        (find_llhttp, ()),
        (find_openssl, ()),
        (find_nghttp2, ()),
        (find_system_lib, ("libwslay", "wslay/wslay.h", "wslay", WSLAY)),
        (find_system_lib, ("zlib", "zlib.h", "z", ZLIB)),
        (find_system_lib, ("libisal", "isa-l/igzip_lib.h", "isal", ISAL)),
        (find_system_lib, ("libbrotlienc", "brotli/encode.h", "brotlienc", BROTLI)),
        (find_system_lib, ("libzstd", "zstd.h", "zstd", ZSTD)),
        (find_system_lib, ("libdeflate", "libdeflate.h", "deflate", LIBDEFLATE)),
    ):
        try:
            result = find(*args)
        except Missing as exc:
            missing.append(exc.args[0])
            continue
        if find is find_llhttp:
            *result, llhttp_library = result
        found.append(result)
    if missing:
        fail_missing(missing)
    return found, llhttp_library


def main():
    found, llhttp_library = find_all()

    compile_args = ["-std=gnu11", "-Wall", "-Wextra", "-O2", "-fvisibility=hidden"]
    if os.environ.get("PYSERVER_WERROR") == "1":
        compile_args.append("-Werror")
    link_args = []
    for cflags, libs in found:
        compile_args += cflags
        link_args += libs
    compile_args += env_flags("PYSERVER_CFLAGS")
    link_args += env_flags("PYSERVER_LDFLAGS")

    core = Extension(
        "pyserver._core",
        sources=extension_sources(),
        include_dirs=["csrc"],
        depends=sorted(glob("csrc/*/*.h")),
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
    options = {}
    libraries = []
    if llhttp_library is not None:
        libraries.append(llhttp_library)
        build_dir = flavor_dir()
        options["build_clib"] = {"build_clib": build_dir, "build_temp": build_dir + "-temp"}

    setup(
        ext_modules=[core],
        libraries=libraries,
        cmdclass={"build_ext": BuildExt, "build_clib": BuildClib},
        options=options,
    )


main()
