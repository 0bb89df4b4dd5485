"""Build the C extension pyserver._core.

Metadata lives in pyproject.toml; this file only describes the extension:
the core (csrc/*.c) and the CPython bridge (csrc/py/*.c), linked against
libev, llhttp, OpenSSL 3, nghttp2, wslay, zlib and ISA-L from the system.

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

from setuptools import Extension, setup
from setuptools.command.build_clib import build_clib
from setuptools.command.build_ext import build_ext

LLHTTP_MIN_VERSION = "9.2"
DEBIAN_LLHTTP_SRC = "/usr/share/llhttp"
DEBIAN_LLHTTP_INCLUDE = "/usr/share/include/llhttp"

LLHTTP_MISSING = (
    "pyserver needs llhttp: install the Debian package node-llhttp "
    "(apt-get install node-llhttp) or a libllhttp >= 9.2 with pkg-config"
)
LIBEV_MISSING = "pyserver needs libev: apt-get install libev-dev"
OPENSSL_MISSING = (
    "pyserver needs OpenSSL 3 for TLS: apt-get install libssl-dev "
    "(pkg-config must find 'openssl >= 3.0')"
)
NGHTTP2_MISSING = (
    "pyserver needs nghttp2 for HTTP/2: apt-get install libnghttp2-dev "
    "(pkg-config must find 'libnghttp2 >= 1.52')"
)
WSLAY_MISSING = "pyserver needs wslay (WebSocket framing): apt-get install libwslay-dev"
ZLIB_MISSING = "pyserver needs zlib (WebSocket compression): apt-get install zlib1g-dev"
ISAL_MISSING = "pyserver needs ISA-L (WebSocket compression): apt-get install libisal-dev"


def fail(message):
    sys.stderr.write(f"error: {message}\n")
    sys.exit(1)


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
    fail(LIBEV_MISSING)


def find_openssl():
    """Return (compile_args, link_args) for libssl and libcrypto (OpenSSL 3).

    Without pkg-config, a Debian libssl-dev in /usr is taken as it is.
    """
    if pkg_config("--exists", "openssl >= 3.0") is not None:
        return pkg_config("--cflags", "openssl"), pkg_config("--libs", "openssl")
    if shutil.which("pkg-config") is None and os.path.exists("/usr/include/openssl/ssl.h"):
        return [], ["-lssl", "-lcrypto"]
    fail(OPENSSL_MISSING)


def find_nghttp2():
    """Return (compile_args, link_args) for libnghttp2 (>= 1.52, Debian 12's)."""
    if pkg_config("--exists", "libnghttp2 >= 1.52") is not None:
        return pkg_config("--cflags", "libnghttp2"), pkg_config("--libs", "libnghttp2")
    if shutil.which("pkg-config") is None and os.path.exists("/usr/include/nghttp2/nghttp2.h"):
        return [], ["-lnghttp2"]
    fail(NGHTTP2_MISSING)


def find_system_lib(package, header, lib, missing):
    """Return (compile_args, link_args) for a library found by pkg-config
    (`package`), else by its header under /usr/include or /usr/local/include
    (Debian's libwslay-dev has no .pc file)."""
    cflags = pkg_config("--cflags", package)
    libs = pkg_config("--libs", package)
    if cflags is not None and libs is not None:
        return cflags, libs
    if any(os.path.exists(os.path.join(d, header)) for d in ("/usr/include", "/usr/local/include")):
        return [], [f"-l{lib}"]
    fail(missing)


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
    fail(LLHTTP_MISSING)


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
    sources = sorted(glob("csrc/*.c")) + sorted(glob("csrc/py/*.c"))
    if not sources:
        fail("no C sources found in csrc/ (run setup.py from the repository root)")
    return sources


def main():
    ev_cflags, ev_libs = find_libev()
    llhttp_cflags, llhttp_libs, llhttp_library = find_llhttp()
    ssl_cflags, ssl_libs = find_openssl()
    h2_cflags, h2_libs = find_nghttp2()
    others = [
        find_system_lib("libwslay", "wslay/wslay.h", "wslay", WSLAY_MISSING),
        find_system_lib("zlib", "zlib.h", "z", ZLIB_MISSING),
        find_system_lib("libisal", "isa-l/igzip_lib.h", "isal", ISAL_MISSING),
    ]

    compile_args = ["-std=gnu11", "-Wall", "-Wextra", "-O2", "-fvisibility=hidden"]
    if os.environ.get("PYSERVER_WERROR") == "1":
        compile_args.append("-Werror")
    compile_args += ev_cflags + llhttp_cflags + ssl_cflags + h2_cflags
    compile_args += env_flags("PYSERVER_CFLAGS")
    link_args = llhttp_libs + ev_libs + ssl_libs + h2_libs
    for cflags, libs in others:
        compile_args += cflags
        link_args += libs
    link_args += env_flags("PYSERVER_LDFLAGS")

    core = Extension(
        "pyserver._core",
        sources=extension_sources(),
        include_dirs=["csrc"],
        depends=sorted(glob("csrc/*.h") + glob("csrc/py/*.h")),
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
