"""Fixtures: a shared server for apps.basic, plus a per-test time limit.

Helpers (run_server, raw_request, HTTPConn, ...) live in helpers.py so that test modules can
import them by name; this file holds only what pytest itself looks up.
"""

import signal

import pytest
from helpers import run_server

TEST_TIME_LIMIT = 120  # seconds; a hung test fails instead of hanging the suite


def pytest_configure(config):
    config.addinivalue_line("markers", "resource: memory/fd bound tests (slower, big transfers)")
    config.addinivalue_line("markers", "packaging: builds the sdist and wheel (about a minute)")
    config.addinivalue_line(
        "markers",
        "serial: CPU-heavy, needs the machine to itself; `make test` runs these in a pass of"
        " their own after the parallel one",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    def on_alarm(signum, frame):
        raise TimeoutError(f"{item.nodeid} exceeded {TEST_TIME_LIMIT}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIME_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def server():
    """One server for apps.basic:app with default options, shared by the whole session."""
    with run_server("apps.basic:app") as srv:
        yield srv


@pytest.fixture(scope="session")
def port(server):
    return server.port


@pytest.fixture(scope="session")
def redis_url():
    """A throwaway redis-server for the session (tests/redisproc.py); its redis:// URL."""
    from redisproc import RedisProcess

    redis = RedisProcess()
    try:
        yield redis.url
    finally:
        redis.stop()
