"""Runs CPython's own asyncio test modules (test.test_asyncio.*) with pyserver's EvEventLoop as
the loop asyncio makes, or with the stock loop, and prints the outcome as JSON.

    python tests/asyncio_cpython.py {ev,stock} MODULE [MODULE ...]
    python tests/asyncio_cpython.py compare      (make test-asyncio-cpython)

With `ev`, every loop the tests get from asyncio (the policy's new_event_loop(), and
asyncio.SelectorEventLoop(selector) with or without a selector) is an EvEventLoop: over an
EvSelector when no selector is given, else over the one given, so the C runner is tested over
other selectors too. Output: {"run": N, "failed": [test ids], "skipped": N, "ev_loops": how
many EvEventLoops were made (over an EvSelector, over another selector), "details": {test id:
traceback}}.

`compare` runs every test.test_asyncio module that applies to Linux both ways, each in its own
process, and exits 1 when a test fails with EvEventLoop that passes with the stock loop, or
when no EvEventLoop was made.
"""

import asyncio
import json
import os
import pkgutil
import subprocess
import sys
import unittest

NOT_LINUX = {"test_proactor_events", "test_windows_events", "test_windows_utils"}


def use_ev_loop():
    from asyncio import unix_events

    from pyserver.evselector import EvEventLoop, EvSelector

    class CountedEvEventLoop(EvEventLoop):
        made = {"EvSelector": 0, "other": 0}

        def __init__(self, selector=None):
            super().__init__(selector)
            kind = "EvSelector" if isinstance(self._selector, EvSelector) else "other"
            CountedEvEventLoop.made[kind] += 1

    unix_events._UnixDefaultEventLoopPolicy._loop_factory = CountedEvEventLoop
    asyncio.SelectorEventLoop = CountedEvEventLoop
    unix_events.SelectorEventLoop = CountedEvEventLoop
    return CountedEvEventLoop.made


def compare():
    import test.test_asyncio as package

    names = sorted(
        f"test.test_asyncio.{m.name}"
        for m in pkgutil.iter_modules(package.__path__)
        if m.name.startswith("test_") and m.name not in NOT_LINUX
    )
    totals = {"ev": [0, 0], "stock": [0, 0]}
    regressions, ev_loops = [], 0
    for name in names:
        out = {}
        for mode in ("ev", "stock"):
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), mode, name],
                capture_output=True,
                text=True,
                timeout=900,
            )
            lines = proc.stdout.strip().splitlines()
            if proc.returncode != 0 or not lines:
                print(f"{name} ({mode}): exit {proc.returncode}\n{proc.stderr[-2000:]}")
                return 1
            out[mode] = json.loads(lines[-1])
            totals[mode][0] += out[mode]["run"]
            totals[mode][1] += len(out[mode]["failed"])
        ev_loops += sum(out["ev"]["ev_loops"].values())
        new = sorted(set(out["ev"]["failed"]) - set(out["stock"]["failed"]))
        for test_id in new:
            regressions.append(test_id)
            print(f"FAILED with EvEventLoop only: {test_id}\n{out['ev']['details'][test_id]}")
        print(
            f"{name}: {out['ev']['run']} run, {len(out['ev']['failed'])} failed "
            f"(stock loop: {len(out['stock']['failed'])})",
            flush=True,
        )
    print(
        f"{len(names)} modules; EvEventLoop: {totals['ev'][0]} run, {totals['ev'][1]} failed; "
        f"stock: {totals['stock'][0]} run, {totals['stock'][1]} failed; "
        f"{ev_loops} EvEventLoops made"
    )
    return 1 if regressions or ev_loops == 0 else 0


def main(argv):
    if argv[:1] == ["compare"]:
        sys.exit(compare())
    mode, modules = argv[0], argv[1:]
    made = use_ev_loop() if mode == "ev" else None
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for name in modules:
        suite.addTests(loader.loadTestsFromName(name))
    with open("/dev/null", "w") as devnull:
        result = unittest.TextTestRunner(stream=devnull, verbosity=0).run(suite)
    failed = sorted({t.id() for t, _ in result.failures + result.errors})
    details = {t.id(): tb[-2000:] for t, tb in result.failures + result.errors}
    print(
        json.dumps(
            {
                "run": result.testsRun,
                "failed": failed,
                "skipped": len(result.skipped),
                "ev_loops": made,
                "details": details,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
