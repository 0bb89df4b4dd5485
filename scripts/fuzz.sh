#!/usr/bin/env bash
# Build each libFuzzer driver tests/fuzz/fuzz_<name>.c (http1: the HTTP/1
# parser; ws: WebSocket frames and permessage-deflate) with clang against the
# core (csrc/*.c), llhttp and the core's libraries, then run each for
# FUZZ_SECONDS (default 60). FUZZ_DRIVERS="ws" picks some of them.
# New inputs go to build/fuzz/corpus (http1) and build/fuzz/corpus-<name>
# (the others); the seeds in tests/fuzz/corpus (http1) and
# tests/fuzz/corpus-<name> are only read.
set -euo pipefail
cd "$(dirname "$0")/.."

drivers=()
for name in ${FUZZ_DRIVERS:-http1 ws}; do
    if [ -f "tests/fuzz/fuzz_$name.c" ]; then
        drivers+=("$name")
    else
        echo "fuzz: no tests/fuzz/fuzz_$name.c, skipped"
    fi
done
if [ ${#drivers[@]} -eq 0 ]; then
    echo "fuzz: no driver to run"
    exit 0
fi

CC=${FUZZ_CC:-clang}
out=build/fuzz
san="-fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer"
llhttp_cflags=$(scripts/llhttp-flags.sh cflags)
llhttp_libs=$(scripts/llhttp-flags.sh libs)
llhttp_sources=$(scripts/llhttp-flags.sh sources)
core_cflags=$(scripts/core-libs.sh cflags)
core_libs=$(scripts/core-libs.sh libs)
cflags="-std=gnu11 -Wall -Wextra -g -O1 -Icsrc $llhttp_cflags $core_cflags"

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
for name in "${drivers[@]}"; do
    $CC $cflags $san "tests/fuzz/fuzz_$name.c" "${objs[@]}" -o "$out/fuzz_$name" -lev \
        $llhttp_libs $core_libs
    if [ "$name" = http1 ]; then
        corpus="$out/corpus" seeds_dir=tests/fuzz/corpus
    else
        corpus="$out/corpus-$name" seeds_dir="tests/fuzz/corpus-$name"
    fi
    mkdir -p "$corpus"
    seeds=()
    [ -d "$seeds_dir" ] && seeds=("$seeds_dir")
    echo "fuzz: $name for ${FUZZ_SECONDS:-60} s"
    "$out/fuzz_$name" -max_total_time="${FUZZ_SECONDS:-60}" -artifact_prefix="$out/$name-" \
        "$corpus" "${seeds[@]}"
done
