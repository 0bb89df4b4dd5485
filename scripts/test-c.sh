#!/usr/bin/env bash
# Build and run the C unit tests: each tests/c/test_*.c is linked with the
# core (csrc/base, codec, net, master, serve; never csrc/py), llhttp and the core's libraries (libev,
# OpenSSL, nghttp2, wslay, zlib, ISA-L), under ASan and UBSan, and run; then each fuzz
# driver over its seed corpus. The compiles and the test runs go in parallel.
# Exits non-zero if any test fails to build or run.
set -euo pipefail
cd "$(dirname "$0")/.."

shopt -s nullglob
tests=(tests/c/test_*.c)
if [ ${#tests[@]} -eq 0 ]; then
    echo "test-c: no tests/c/test_*.c yet, nothing to run"
    exit 0
fi

CC=${CC:-cc}
out=build/test-c
san="-fsanitize=address,undefined -fno-omit-frame-pointer"
llhttp_cflags=$(scripts/llhttp-flags.sh cflags)
llhttp_libs=$(scripts/llhttp-flags.sh libs)
llhttp_sources=$(scripts/llhttp-flags.sh sources)
if ! pkg-config --exists 'openssl >= 3.0'; then
    echo "test-c: pyserver needs OpenSSL 3 for TLS: apt-get install libssl-dev" >&2
    exit 1
fi
if ! pkg-config --exists 'libnghttp2 >= 1.52'; then
    echo "test-c: pyserver needs nghttp2 for HTTP/2: apt-get install libnghttp2-dev" >&2
    exit 1
fi
ssl_cflags=$(pkg-config --cflags openssl)
ssl_libs=$(pkg-config --libs openssl)
h2_cflags=$(pkg-config --cflags libnghttp2)
h2_libs=$(pkg-config --libs libnghttp2)
core_cflags=$(scripts/core-libs.sh cflags)
core_libs=$(scripts/core-libs.sh libs)
# The tests decode what the core compresses with the stock brotli decoder.
test_libs=$(pkg-config --libs libbrotlidec 2>/dev/null || echo -lbrotlidec)
cflags="-std=gnu11 -Wall -Wextra -Werror -g -O1 -DPS_DEBUG_ASSERTS $san -Icsrc -Itests/c $llhttp_cflags $ssl_cflags"
cflags="$cflags $h2_cflags $core_cflags"

rm -rf "$out"
mkdir -p "$out/core" "$out/llhttp" "$out/log"

# Every compile, link and test run is a job of its own, TEST_C_JOBS at a time (default: one
# per CPU); a job's output goes to $out/log/<name> and is printed when all are done, in order.
jobs=${TEST_C_JOBS:-$(nproc)}
names=()
declare -A pids

# start NAME COMMAND...: run COMMAND in the background once a job slot is free.
start() {
    local name=$1
    shift
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
        wait -n 2>/dev/null || true
    done
    "$@" >"$out/log/$name" 2>&1 &
    pids[$name]=$!
    names+=("$name")
}

# finish: wait for every job started; the failed ones' names are appended to $failed.
finish() {
    local name
    for name in "${names[@]}"; do
        wait "${pids[$name]}" || failed+=("$name")
    done
}

failed=()
objs=()
for src in $llhttp_sources; do
    obj="$out/llhttp/$(basename "${src%.c}").o"
    # -w: llhttp's warnings are not ours; sanitizers still apply.
    start "cc_llhttp_$(basename "$src")" $CC -c -g -O1 -w $san $llhttp_cflags "$src" -o "$obj"
    objs+=("$obj")
done
for src in csrc/base/*.c csrc/codec/*.c csrc/net/*.c csrc/master/*.c csrc/serve/*.c; do
    obj="$out/core/$(basename "${src%.c}").o"
    start "cc_$(basename "$src")" $CC -c $cflags "$src" -o "$obj"
    objs+=("$obj")
done
finish
if [ ${#failed[@]} -ne 0 ]; then
    for name in "${failed[@]}"; do cat "$out/log/$name"; done
    printf 'test-c: FAILED to build %s\n' "${failed[@]}"
    exit 1
fi
names=()

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# build_and_run NAME SOURCE [ARGS...]: link the test binary $out/NAME from SOURCE and the
# core, then run it with ARGS.
build_and_run() {
    local name=$1 src=$2
    shift 2
    if ! $CC $cflags "$src" "${extra_srcs[@]}" "${objs[@]}" -o "$out/$name" -lev \
        -pthread $llhttp_libs $ssl_libs $h2_libs $core_libs $test_libs; then
        echo "test-c: $name did not build"
        return 1
    fi
    echo "test-c: $name"
    timeout 300 "$out/$name" "$@"
}

extra_srcs=()
for test in "${tests[@]}"; do
    name=$(basename "${test%.c}")
    start "$name" build_and_run "$name" "$test"
done
# The fuzz drivers over their seed corpora (tests/fuzz/replay.c: each seed whole and cut
# short), so their invariants hold in every `make test`; `make fuzz` explores further.
extra_srcs=(-Itests/fuzz tests/fuzz/replay.c)
for driver in tests/fuzz/fuzz_*.c; do
    name=${driver##*/fuzz_}
    name=${name%.c}
    seeds=tests/fuzz/corpus-$name
    [ "$name" = http1 ] && seeds=tests/fuzz/corpus
    [ -d "$seeds" ] || continue
    start "replay_$name" build_and_run "replay_$name" "$driver" "$seeds"
done
finish
for name in "${names[@]}"; do
    cat "$out/log/$name"
done

passed=$((${#names[@]} - ${#failed[@]}))
echo "test-c: ${passed} passed, ${#failed[@]} failed"
if [ ${#failed[@]} -ne 0 ]; then
    printf 'test-c: FAILED %s\n' "${failed[@]}"
    exit 1
fi
