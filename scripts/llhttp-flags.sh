#!/bin/sh
# Print how to compile and link llhttp, with the same rule as setup.py:
# a system libllhttp >= 9.2 found by pkg-config, else the Debian node-llhttp
# sources (8.1), compiled by the caller in strict mode.
#
#   scripts/llhttp-flags.sh cflags    compiler flags (include dir, macros)
#   scripts/llhttp-flags.sh libs      linker flags ("" when compiling sources)
#   scripts/llhttp-flags.sh sources   .c files to compile ("" with a system lib)
set -eu

DEB_SRC=/usr/share/llhttp
DEB_INCLUDE=/usr/share/include/llhttp

if pkg-config --exists 'libllhttp >= 9.2' 2>/dev/null; then
    case "${1:-}" in
        cflags) pkg-config --cflags libllhttp ;;
        libs) pkg-config --libs libllhttp ;;
        sources) echo ;;
        *) echo "usage: $0 cflags|libs|sources" >&2; exit 2 ;;
    esac
elif [ -f "$DEB_SRC/llhttp.c" ] && [ -f "$DEB_SRC/api.c" ] && [ -f "$DEB_SRC/http.c" ]; then
    case "${1:-}" in
        cflags) echo "-I$DEB_INCLUDE -DLLHTTP_STRICT_MODE=1" ;;
        libs) echo ;;
        sources) echo "$DEB_SRC/llhttp.c $DEB_SRC/api.c $DEB_SRC/http.c" ;;
        *) echo "usage: $0 cflags|libs|sources" >&2; exit 2 ;;
    esac
else
    echo "pyserver needs llhttp: install the Debian package node-llhttp" \
        "(apt-get install node-llhttp) or a libllhttp >= 9.2 with pkg-config" >&2
    exit 1
fi
