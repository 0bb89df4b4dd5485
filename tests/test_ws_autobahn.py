"""A bounded subset of the Autobahn WebSocket cases (kosoku, fuzzing-client mode) against
pyserver's echo endpoint; `make autobahn` runs sections 1-7 and 12-13 in full."""

import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HOST, run_server

KOSOKU = shutil.which("kosoku") or str(Path(sys.executable).with_name("kosoku"))
# Sections 1-7 (framing, pings, reserved bits and opcodes, fragmentation, UTF-8, close
# handling) and a few compressed cases: about 15 s.
CASES = [
    "1.*",
    "2.*",
    "3.*",
    "4.*",
    "5.*",
    "6.*",
    "7.*",
    "12.1.1",
    "12.1.5",
    "13.1.3",
    "13.3.5",
    "13.7.9",
]


@pytest.mark.skipif(not Path(KOSOKU).exists(), reason="kosoku is not installed")
def test_autobahn_subset(tmp_path):
    with run_server("apps.ws_apps:app", "--no-access-log", "--ws-ping-interval", "0") as server:
        argv = [KOSOKU, "-m", "fuzzingclient", "-p", "2", "-o", str(tmp_path)]
        for case in CASES:
            argv += ["-i", case]
        result = subprocess.run(
            [*argv, f"{HOST}:{server.port}"], capture_output=True, text=True, timeout=300
        )
    index = json.loads((tmp_path / "index.json").read_text())
    cases = next(iter(index.values()))
    outcomes = collections.Counter(c["behavior"] for c in cases.values())
    failed = {k: c for k, c in cases.items() if "FAILED" in (c["behavior"], c["behaviorClose"])}
    assert not failed, (failed, result.stdout[-2000:], result.stderr[-2000:])
    assert len(cases) > 250, outcomes
    assert set(outcomes) <= {"OK", "NON-STRICT", "INFORMATIONAL"}, outcomes
