#!/usr/bin/env bash
# Build the libFuzzer driver tests/fuzz/fuzz_http1.c with clang against the
# core (csrc/*.c) and llhttp, then run it for FUZZ_SECONDS (default 60).
# New inputs go to build/fuzz/corpus; tests/fuzz/corpus is only read.
set -euo pipefail
cd "$(dirname "$0")/.."

driver=tests/fuzz/fuzz_http1.c
if [ ! -f "$driver" ]; then
    echo "fuzz: no $driver yet, nothing to run"
    exit 0
fi

CC=${FUZZ_CC:-clang}
out=build/fuzz
san="-fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer"
llhttp_cflags=$(scripts/llhttp-flags.sh cflags)
llhttp_libs=$(scripts/llhttp-flags.sh libs)
llhttp_sources=$(scripts/llhttp-flags.sh sources)
cflags="-std=gnu11 -Wall -Wextra -g -O1 -Icsrc $llhttp_cflags"

mkdir -p "$out/obj" "$out/corpus"
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
$CC $cflags $san "$driver" "${objs[@]}" -o "$out/fuzz_http1" -lev $llhttp_libs

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
seeds=()
[ -d tests/fuzz/corpus ] && seeds=(tests/fuzz/corpus)
"$out/fuzz_http1" -max_total_time="${FUZZ_SECONDS:-60}" -artifact_prefix="$out/" \
    "$out/corpus" "${seeds[@]}"
