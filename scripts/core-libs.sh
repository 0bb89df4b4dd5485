#!/bin/sh
# Print how to compile and link the core's libraries besides libev and
# llhttp (wslay, zlib, ISA-L, OpenSSL 3, brotli, zstd, libdeflate), with the same rule as setup.py:
# pkg-config when it knows the library, else the header under /usr/include
# or /usr/local/include and -l<name> (Debian's libwslay-dev has no .pc file).
#
#   scripts/core-libs.sh cflags    compiler flags
#   scripts/core-libs.sh libs      linker flags
set -eu

what=${1:-}
case "$what" in
    cflags | libs) ;;
    *) echo "usage: $0 cflags|libs" >&2; exit 2 ;;
esac

out=""
for spec in "libwslay wslay/wslay.h wslay libwslay-dev" "zlib zlib.h z zlib1g-dev" \
    "libisal isa-l/igzip_lib.h isal libisal-dev" "openssl openssl/ssl.h ssl libssl-dev" \
    "libbrotlienc brotli/encode.h brotlienc libbrotli-dev" "libzstd zstd.h zstd libzstd-dev" \
    "libdeflate libdeflate.h deflate libdeflate-dev"; do
    # shellcheck disable=SC2086
    set -- $spec
    if pkg-config --exists "$1" 2>/dev/null; then
        out="$out $(pkg-config "--$what" "$1")"
    elif [ -f "/usr/include/$2" ] || [ -f "/usr/local/include/$2" ]; then
        [ "$what" = libs ] && out="$out -l$3"
        [ "$what" = libs ] && [ "$3" = ssl ] && out="$out -lcrypto"
    else
        echo "pyserver needs $1: apt-get install $4" >&2
        exit 1
    fi
done
echo $out
