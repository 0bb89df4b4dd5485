#!/bin/sh
# The Autobahn WebSocket test cases (kosoku from PyPI, fuzzing-client mode) against
# pyserver serving tests/apps/ws_apps.py's echo endpoint on one worker.
#   scripts/autobahn.sh VENV [CASES...]   (default cases: sections 1-7, 9, 12 and 13)
# Writes the report to benchmarks/results/autobahn/ (index.json and HTML) and prints
# the counts per outcome and how long the run took; exits 1 when a case FAILED.
set -eu
VENV=${1:-.venv}
[ $# -gt 0 ] && shift
PY="$VENV/bin/python"
OUT=${AUTOBAHN_OUT:-benchmarks/results/autobahn}
PARALLEL=${AUTOBAHN_PARALLEL:-2}
[ -x "$VENV/bin/kosoku" ] || "$VENV/bin/pip" install -q kosoku
# kosoku gives one run 480 s in all: the default selection runs as several groups, each
# a run with its own report in $OUT/<n>/ (one argument is one group; spaces separate
# the cases of a group).
if [ $# -eq 0 ]; then
    set -- '1.* 2.* 3.* 4.* 5.* 6.* 7.*' '9.*' '12.1.* 12.4.*' '12.2.*' '12.3.*' '12.5.*' \
        '13.1.* 13.2.*' '13.3.* 13.4.*' '13.5.* 13.6.* 13.7.*'
fi
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
(cd tests && exec "../$PY" -m pyserver apps.ws_apps:app --host 127.0.0.1 --port "$port" \
    --no-access-log --ws-ping-interval 0) >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -f "$log"' EXIT
i=0
until "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 100 ] || { cat "$log"; exit 1; }
    sleep 0.1
done
start=$(date +%s)
rm -rf "$OUT"
n=0
for group in "$@"; do
    n=$((n + 1))
    include=""
    for c in $group; do include="$include -i $c"; done
    # shellcheck disable=SC2086
    "$VENV/bin/kosoku" -m fuzzingclient $include -p "$PARALLEL" -o "$OUT/$n" \
        "127.0.0.1:$port" >"$OUT.$n.log" 2>&1 || true
    tail -n 1 "$OUT.$n.log"
    mv "$OUT.$n.log" "$OUT/$n/kosoku.log" 2>/dev/null || true
done
end=$(date +%s)
"$PY" - "$OUT" "$((end - start))" <<'PY'
import collections, glob, json, sys
cases = {}
for path in sorted(glob.glob(sys.argv[1] + "/*/index.json")):
    cases.update(next(iter(json.load(open(path)).values())))
json.dump(cases, open(sys.argv[1] + "/summary.json", "w"), indent=1, sort_keys=True)
# Keep the JSON indexes, the logs and the cases that were not plainly OK (the full
# HTML report is about 25 MB); AUTOBAHN_KEEP_ALL=1 keeps everything.
import os
if not os.environ.get("AUTOBAHN_KEEP_ALL"):
    keep = {k.replace(".", "_") for k, c in cases.items() if c["behavior"] != "OK"}
    for path in glob.glob(sys.argv[1] + "/*/*_case_*"):
        case = path.rsplit("_case_", 1)[1].rsplit(".", 1)[0]
        if case not in keep or path.endswith(".html"):
            os.remove(path)
    for path in glob.glob(sys.argv[1] + "/*/index.html"):
        os.remove(path)
counts = collections.Counter(c["behavior"] for c in cases.values())
close = collections.Counter(c["behaviorClose"] for c in cases.values())
print(f"autobahn: {len(cases)} cases in {sys.argv[2]} s: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
print("closing behaviour: " + ", ".join(f"{k} {v}" for k, v in sorted(close.items())))
failed = sorted((k for k, c in cases.items() if c["behavior"] == "FAILED" or c["behaviorClose"] == "FAILED"),
                key=lambda k: [int(p) for p in k.split(".")])
if failed:
    print("FAILED: " + " ".join(failed))
    sys.exit(1)
PY
