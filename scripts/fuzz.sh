#!/usr/bin/env bash
# Build the libFuzzer drivers tests/fuzz/fuzz_<name>.c with clang against the
# core (csrc/*.c) and llhttp, then run each for FUZZ_SECONDS (default 60).
# FUZZ_TARGETS picks the drivers (default: "http1 uwsgi static"). New inputs go to
# build/fuzz/corpus (http1) and build/fuzz/corpus-<name>; the seeds in
# tests/fuzz/corpus (http1) and tests/fuzz/corpus-<name> are only read.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=${FUZZ_TARGETS:-http1 uwsgi static}

CC=${FUZZ_CC:-clang}
out=build/fuzz
san="-fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer"
llhttp_cflags=$(scripts/llhttp-flags.sh cflags)
llhttp_libs=$(scripts/llhttp-flags.sh libs)
llhttp_sources=$(scripts/llhttp-flags.sh sources)
# csrc/transport.c needs OpenSSL, as in scripts/test-c.sh.
ssl_cflags=$(pkg-config --cflags openssl)
ssl_libs=$(pkg-config --libs openssl)
cflags="-std=gnu11 -Wall -Wextra -g -O1 -Icsrc $llhttp_cflags $ssl_cflags"

mkdir -p "$out/obj"
objs=()
for src in $llhttp_sources; do
    obj="$out/obj/llhttp-$(basename "${src%.c}").o"
    $CC -c -g -O1 -w -fsanitize=fuzzer-no-link,address,undefined $llhttp_cflags "$src" -o "$obj"
    objs+=("$obj")
done
for src in csrc/*.c; do
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
    if [ "$name" = http1 ]; then
        corpus=$out/corpus seed_dir=tests/fuzz/corpus
    else
        corpus=$out/corpus-$name seed_dir=tests/fuzz/corpus-$name
    fi
    mkdir -p "$corpus"
    $CC $cflags $san "$driver" "${objs[@]}" -o "$out/fuzz_$name" -lev $llhttp_libs $ssl_libs
    seeds=()
    [ -d "$seed_dir" ] && seeds=("$seed_dir")
    echo "fuzz: $name for ${FUZZ_SECONDS:-60} s"
    "$out/fuzz_$name" -max_total_time="${FUZZ_SECONDS:-60}" -artifact_prefix="$out/$name-" \
        "$corpus" "${seeds[@]}"
done
