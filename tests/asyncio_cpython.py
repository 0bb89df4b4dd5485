"""Runs CPython's own asyncio test modules (test.test_asyncio.*) with pyserver's EvEventLoop as
the loop asyncio makes, or with the stock loop, and prints the outcome as JSON.

    python tests/asyncio_cpython.py {ev,stock} MODULE [MODULE ...]

With `ev`, every loop the tests get from asyncio (the policy's new_event_loop(), and
asyncio.SelectorEventLoop(selector) with or without a selector) is an EvEventLoop: over an
EvSelector when no selector is given, else over the one given, so the C runner is tested over
other selectors too. Output: {"run": N, "failed": [test ids], "skipped": N, "ev_loops": how
many EvEventLoops were made (over an EvSelector, over another selector), "details": {test id:
traceback}}.
"""

import asyncio
import json
import sys
import unittest


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


def main(argv):
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
