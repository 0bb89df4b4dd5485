#!/usr/bin/env bash
# Build the libFuzzer drivers tests/fuzz/fuzz_*.c (the HTTP/1 parser, the
# HTTP/2 session, the uwsgi parser, static-file plans, WebSocket frames and
# permessage-deflate, whole connections over a socketpair) with clang against the core (every layer but csrc/py), llhttp, OpenSSL,
# nghttp2, wslay, zlib and ISA-L, then run each for
# FUZZ_SECONDS (default 60). FUZZ_TARGETS picks drivers by name
# ("http1 http2"; default: every driver). New inputs go to
# build/fuzz/corpus-NAME; tests/fuzz/corpus (HTTP/1) and
# tests/fuzz/corpus-NAME are only read.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=$(for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; echo -n "${n%.c} "; done)
targets=${FUZZ_TARGETS:-$all_targets}
CC=${FUZZ_CC:-clang}
out=build/fuzz
san="-fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer"
llhttp_cflags=$(scripts/llhttp-flags.sh cflags)
llhttp_libs=$(scripts/llhttp-flags.sh libs)
llhttp_sources=$(scripts/llhttp-flags.sh sources)
for pc in 'openssl >= 3.0' 'libnghttp2 >= 1.52'; do
    if ! pkg-config --exists "$pc"; then
        echo "fuzz: pkg-config cannot find '$pc' (apt-get install libssl-dev libnghttp2-dev)" >&2
        exit 1
    fi
done
dep_cflags="$(pkg-config --cflags libnghttp2) $(scripts/core-libs.sh cflags)"
dep_libs="$(pkg-config --libs libnghttp2) $(scripts/core-libs.sh libs)"
cflags="-std=gnu11 -Wall -Wextra -g -O1 -Icsrc -Itests/c $llhttp_cflags $dep_cflags"

mkdir -p "$out/obj"
objs=()
for src in $llhttp_sources; do
    obj="$out/obj/llhttp-$(basename "${src%.c}").o"
    $CC -c -g -O1 -w -fsanitize=fuzzer-no-link,address,undefined $llhttp_cflags "$src" -o "$obj"
    objs+=("$obj")
done
for src in csrc/base/*.c csrc/codec/*.c csrc/net/*.c csrc/master/*.c csrc/serve/*.c; do
    obj="$out/obj/$(basename "${src%.c}").o"
    $CC -c $cflags -fsanitize=fuzzer-no-link,address,undefined "$src" -o "$obj"
    objs+=("$obj")
done

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
for name in $targets; do
    driver=tests/fuzz/fuzz_$name.c
    if [ ! -f "$driver" ]; then
        echo "fuzz: no $driver, skipped"
        continue
    fi
    $CC $cflags $san "$driver" "${objs[@]}" -o "$out/fuzz_$name" -lev $llhttp_libs $dep_libs
    mkdir -p "$out/corpus-$name"
    seeds=()
    if [ "$name" = http1 ] && [ -d tests/fuzz/corpus ]; then
        seeds=(tests/fuzz/corpus)
    elif [ -d "tests/fuzz/corpus-$name" ]; then
        seeds=("tests/fuzz/corpus-$name")
    fi
    echo "fuzz: $name for ${FUZZ_SECONDS:-60} s"
    "$out/fuzz_$name" -max_total_time="${FUZZ_SECONDS:-60}" -artifact_prefix="$out/$name-" \
        "$out/corpus-$name" "${seeds[@]}"
done
