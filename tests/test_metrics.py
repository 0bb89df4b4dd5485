"""--metrics-bind: the Prometheus endpoint, served by the master from the workers' shared
counters (and by a single process from its own).

Every test runs a real server and scrapes it over a socket; the text is read with
prometheus_client's parser, and (when Debian's prometheus is installed) by a real
Prometheus server too. Counts are read as differences between two scrapes, and a count
is awaited for a moment: a worker counts a request just after its response is written,
so a client can read the response (and scrape) a moment before that.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest
from helpers import (
    HOST,
    UNDER_ASAN,
    ConnectionClosed,
    HTTPConn,
    assert_serving,
    build_request,
    fetch,
    free_port,
    raw_request,
    run_server,
    wait_for,
    worker_pid,
)
from prometheus_client.parser import text_string_to_metric_families

EXPECTED_FAMILIES = {
    "pyserver_requests": "counter",
    "pyserver_request_duration_seconds": "histogram",
    "pyserver_rejected_requests": "counter",
    "pyserver_received_bytes": "counter",
    "pyserver_sent_bytes": "counter",
    "pyserver_connections": "counter",
    "pyserver_open_connections": "gauge",
    "pyserver_keepalive_requests": "counter",
    "pyserver_websocket_connections": "counter",
    "pyserver_open_websocket_connections": "gauge",
    "pyserver_websocket_messages_received": "counter",
    "pyserver_websocket_messages_sent": "counter",
    "pyserver_workers": "gauge",
    "pyserver_worker_rss_bytes": "gauge",
}


# --------------------------------------------------------------------------- scraping


def scrape_raw(port=None, uds=None, request=b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"):
    """Everything the endpoint sends back for one request (it closes after one)."""
    if uds is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(uds)
    else:
        sock = socket.create_connection((HOST, port), timeout=10)
    with sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


class Scrape:
    """One scrape, parsed: the families and every sample by (name, labels)."""

    def __init__(self, raw):
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.0 200 OK", raw[:200]
        fields = dict(line.split(": ", 1) for line in lines[1:])
        assert fields["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert int(fields["Content-Length"]) == len(body)
        self.text = body.decode()
        families = list(text_string_to_metric_families(self.text))
        self.families = {f.name: f for f in families}
        assert len(self.families) == len(families), "two families with one name"
        self.samples = {}
        for family in self.families.values():
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                assert key not in self.samples, f"duplicate sample {key}"
                self.samples[key] = sample.value

    def value(self, name, **labels):
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def sum(self, name, **labels):
        """The sum of name's samples whose labels include `labels`."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and want <= set(ls))

    def requests(self, method, status):
        return self.value("pyserver_requests_total", method=method, status=status)

    def rejected(self, reason, status):
        return self.value("pyserver_rejected_requests_total", reason=reason, status=status)


def scrape(port=None, uds=None):
    return Scrape(scrape_raw(port, uds))


def await_scrape(port, predicate, timeout=5.0):
    """The first scrape for which predicate(scrape) holds; fails with the last one."""
    last = [None]

    def check():
        last[0] = scrape(port)
        return predicate(last[0])

    assert wait_for(check, timeout), f"metrics never matched; last scrape:\n{last[0].text}"
    return last[0]


def metrics_args(port):
    return ("--metrics-bind", f"{HOST}:{port}")


@pytest.fixture(scope="module")
def workers2():
    """A master with two workers; yields (server, metrics port)."""
    mport = free_port()
    with run_server("apps.basic:app", "-w", "2", *metrics_args(mport)) as srv:
        assert wait_for(lambda: scrape(mport).value("pyserver_workers") == 2, 10)
        yield srv, mport


@pytest.fixture(scope="module")
def single():
    """A single process (no master); yields (server, metrics port)."""
    mport = free_port()
    with run_server("apps.basic:app", *metrics_args(mport)) as srv:
        yield srv, mport


@pytest.fixture(params=["workers2", "single"])
def server(request):
    return request.getfixturevalue(request.param)


# --------------------------------------------------------------------------- the format


def test_exposition_parses_with_every_family_and_type(server):
    srv, mport = server
    assert_serving(srv.port)
    s = scrape(mport)
    for name, kind in EXPECTED_FAMILIES.items():
        assert name in s.families, f"{name} missing:\n{s.text}"
        assert s.families[name].type == kind, name
    assert s.value("pyserver_workers") >= 1
    assert s.sum("pyserver_worker_rss_bytes") > 1024 * 1024


def test_restarts_family_only_under_a_master(workers2, single):
    master = scrape(workers2[1])
    causes = {
        dict(ls)["cause"] for (n, ls) in master.samples if n == "pyserver_worker_restarts_total"
    }
    assert causes == {"crash", "watchdog", "max-requests", "max-rss", "hup", "reload"}
    assert master.value("pyserver_workers") == 2
    assert {
        dict(ls)["worker"] for (n, ls) in master.samples if n == "pyserver_worker_rss_bytes"
    } == {
        "1",
        "2",
    }
    assert "pyserver_worker_restarts" not in scrape(single[1]).families


def test_requests_counted_by_method_and_status_class(server):
    srv, mport = server
    before = scrape(mport)
    for _ in range(3):
        assert fetch(srv.port, "GET", "/hello").status == 200
    assert fetch(srv.port, "POST", "/echo", body=b"abc").status == 200
    assert fetch(srv.port, "PUT", "/echo", body=b"abc").status == 200
    assert fetch(srv.port, "GET", "/nope").status == 404
    assert fetch(srv.port, "HEAD", "/hello").status == 200
    assert fetch(srv.port, "PROPFIND", "/hello").status == 200
    expected = {
        ("GET", "2xx"): 3,
        ("POST", "2xx"): 1,
        ("PUT", "2xx"): 1,
        ("GET", "4xx"): 1,
        ("HEAD", "2xx"): 1,
        ("other", "2xx"): 1,
    }

    def matches(s):
        return (
            all(s.requests(m, c) - before.requests(m, c) == n for (m, c), n in expected.items())
            and s.sum("pyserver_requests_total") - before.sum("pyserver_requests_total") == 8
        )

    await_scrape(mport, matches)


def test_histogram_buckets_monotonic_and_count_equals_requests(server):
    srv, mport = server
    for _ in range(5):
        fetch(srv.port, "GET", "/hello")
    s = await_scrape(
        mport,
        lambda s: (
            s.value("pyserver_request_duration_seconds_count") == s.sum("pyserver_requests_total")
        ),
    )
    buckets = [
        (float(dict(ls)["le"]), v)
        for (n, ls), v in s.samples.items()
        if n == "pyserver_request_duration_seconds_bucket"
    ]
    buckets.sort()
    assert len(buckets) == 14 and buckets[-1][0] == float("inf")
    values = [v for _, v in buckets]
    assert values == sorted(values), buckets
    assert values[-1] == s.value("pyserver_request_duration_seconds_count")
    assert values[-1] >= 5
    assert 0 < s.value("pyserver_request_duration_seconds_sum") < values[-1] * 10


def test_slow_request_lands_in_a_late_bucket():
    mport = free_port()
    le = "pyserver_request_duration_seconds_bucket"
    with run_server("apps.proc_app:app", *metrics_args(mport)) as srv:
        assert fetch(srv.port, "GET", "/sleep/0.3").status == 200
        s = await_scrape(mport, lambda s: s.value(le, le="+Inf") == 1)
        assert s.value(le, le="0.25") == 0
        assert s.value(le, le="0.5") == 1
        assert 0.3 <= s.value("pyserver_request_duration_seconds_sum") < 0.5


def test_bytes_in_and_out_are_the_bytes_on_the_wire(server):
    srv, mport = server
    request = build_request("POST", "/echo", {"Connection": "close"}, body=b"x" * 1000)
    before = scrape(mport)
    response = raw_request(srv.port, request)
    assert b" 200 " in response.split(b"\r\n", 1)[0]

    def counted(s):
        got_in = s.value("pyserver_received_bytes_total") - before.value(
            "pyserver_received_bytes_total"
        )
        got_out = s.value("pyserver_sent_bytes_total") - before.value("pyserver_sent_bytes_total")
        return got_in == len(request) and got_out == len(response)

    await_scrape(mport, counted)


def test_keepalive_reuse_and_connections(server):
    srv, mport = server
    before = scrape(mport)
    with HTTPConn(socket.create_connection((HOST, srv.port), timeout=10)) as conn:
        for _ in range(3):
            assert conn.request("GET", "/hello").status == 200
        s = await_scrape(mport, lambda s: s.value("pyserver_open_connections") >= 1)
        assert (
            s.value("pyserver_connections_total") - before.value("pyserver_connections_total") == 1
        )
    await_scrape(
        mport,
        lambda s: (
            s.value("pyserver_keepalive_requests_total")
            - before.value("pyserver_keepalive_requests_total")
            == 2
            and s.value("pyserver_open_connections") == 0
        ),
    )


def test_bad_request_counted_as_a_rejection_by_reason(server):
    srv, mport = server
    before = scrape(mport)
    response = raw_request(srv.port, b"GARBAGE\r\n\r\n")
    assert response.startswith(b"HTTP/1.1 400 ")
    huge = build_request("GET", "/hello", {"X-Big": "a" * 20000})
    assert raw_request(srv.port, huge).startswith(b"HTTP/1.1 431 ")
    s = await_scrape(
        mport,
        lambda s: (
            s.rejected("bad_request", "400") - before.rejected("bad_request", "400") == 1
            and s.rejected("header_too_large", "431") - before.rejected("header_too_large", "431")
            == 1
        ),
    )
    # Refused before the application: not a request it answered.
    assert s.sum("pyserver_requests_total") == before.sum("pyserver_requests_total")


@pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load (nghttp2-client) not installed")
def test_asgi_http1_and_http2_requests_counted():
    mport = free_port()
    with run_server("apps.asgi_basic:app", *metrics_args(mport)) as srv:
        before = scrape(mport)  # the readiness probe's connection is counted
        for _ in range(2):
            assert fetch(srv.port, "GET", "/hello").status == 200
        # h2load: three requests on one cleartext HTTP/2 connection (prior knowledge).
        out = subprocess.run(
            ["h2load", "-n", "3", "-c", "1", "-m", "1", f"http://{HOST}:{srv.port}/hello"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        assert "3 succeeded" in out and "status codes: 3 2xx" in out, out
        s = await_scrape(mport, lambda s: s.requests("GET", "2xx") == 5)
        # The three streams shared one connection: two reused it.
        assert s.value("pyserver_keepalive_requests_total") == 2
        # Two HTTP/1 connections and h2load's; the readiness probe's (connected and closed
        # without a byte, accepted late by the deferred accept) may land in between.
        connections = s.value("pyserver_connections_total")
        assert connections - before.value("pyserver_connections_total") in (3, 4)
        assert s.value("pyserver_request_duration_seconds_count") == 5
        assert s.value("pyserver_received_bytes_total") > 0


def test_wsgi_threads_requests_counted():
    mport = free_port()
    with run_server("apps.thread_apps:app", "--threads", "4", *metrics_args(mport)) as srv:
        results = []

        def get(path):
            results.append(fetch(srv.port, "GET", path).status)

        threads = [threading.Thread(target=get, args=("/sleep?s=0.2",)) for _ in range(4)]
        threads += [threading.Thread(target=get, args=("/fast",)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == [200] * 8
        le = "pyserver_request_duration_seconds_bucket"
        s = await_scrape(mport, lambda s: s.requests("GET", "2xx") == 8)
        assert s.value(le, le="+Inf") - s.value(le, le="0.1") >= 4  # the sleeping ones


# --------------------------------------------------------------------------- restarts


def test_killed_worker_counted_as_a_crash_and_its_counters_kept():
    mport = free_port()
    with run_server("apps.basic:app", "-w", "2", *metrics_args(mport)) as srv:
        for _ in range(20):
            assert fetch(srv.port, "GET", "/hello").status == 200
        victim = worker_pid(srv)
        before = await_scrape(mport, lambda s: s.requests("GET", "2xx") == 21)
        os.kill(victim, signal.SIGKILL)
        s = await_scrape(
            mport,
            lambda s: (
                s.value("pyserver_worker_restarts_total", cause="crash") == 1
                and s.value("pyserver_workers") == 2
            ),
            timeout=15,
        )
        # The dead worker's requests are still in the totals.
        assert s.requests("GET", "2xx") == before.requests("GET", "2xx") == 21
        assert s.value("pyserver_connections_total") >= 21
        assert s.value("pyserver_worker_restarts_total", cause="watchdog") == 0
        os.kill(srv.pid, signal.SIGHUP)
        s = await_scrape(
            mport, lambda s: s.value("pyserver_worker_restarts_total", cause="hup") == 2, 15
        )
        assert s.requests("GET", "2xx") == 21
        assert s.value("pyserver_worker_restarts_total", cause="crash") == 1
        assert_serving(srv.port)


def test_max_requests_restart_counted_and_totals_kept():
    mport = free_port()
    args = ("-w", "2", "--max-requests", "5", *metrics_args(mport))
    with run_server("apps.basic:app", *args) as srv:
        made = 0
        restarts = 0
        # Until two workers were retired (connections are not spread evenly).
        while restarts < 2 and made < 100:
            for _ in range(5):
                assert fetch(srv.port, "GET", "/hello").status == 200
                made += 1
            time.sleep(0.2)
            restarts = scrape(mport).value("pyserver_worker_restarts_total", cause="max-requests")
        assert restarts >= 2
        # Once the retired workers are gone, their requests are still counted.
        s = await_scrape(
            mport,
            lambda s: s.value("pyserver_workers") == 2 and s.requests("GET", "2xx") == made,
            timeout=15,
        )
        assert s.value("pyserver_request_duration_seconds_count") == made
        assert s.value("pyserver_worker_restarts_total", cause="crash") == 0


def test_watchdog_restart_counted():
    mport = free_port()
    args = ("-w", "1", "--timeout", "1", *metrics_args(mport))
    with run_server("apps.proc_app:app", *args) as srv:
        response = None
        with pytest.raises((OSError, ConnectionClosed)):
            response = fetch(srv.port, "GET", "/sleep/30", timeout=10)
        assert response is None
        await_scrape(
            mport,
            lambda s: (
                s.value("pyserver_worker_restarts_total", cause="watchdog") == 1
                and s.value("pyserver_worker_restarts_total", cause="crash") == 0
            ),
            timeout=15,
        )
        assert wait_for(lambda: fetch(srv.port, "GET", "/pid").status == 200, 15)


def test_max_rss_restart_counted():
    mport = free_port()
    # A sanitizer build's workers start near 100 MiB.
    limit, alloc = (300, 350) if UNDER_ASAN else (80, 120)
    args = ("-w", "1", "--max-rss", str(limit), *metrics_args(mport))
    with run_server("apps.proc_app:app", *args) as srv:
        assert fetch(srv.port, "GET", f"/alloc/{alloc}").status == 200
        await_scrape(
            mport,
            lambda s: s.value("pyserver_worker_restarts_total", cause="max-rss") == 1,
            timeout=15,
        )
        # The worker counts a request once it is done with it, which can be a moment after
        # the client has the response (here: after freeing the 120 MiB); wait for both.
        s = await_scrape(
            mport,
            lambda s: (
                s.sum("pyserver_worker_rss_bytes") < limit * 2**20 and s.requests("GET", "2xx") == 1
            ),
            15,
        )
        assert s.requests("GET", "2xx") == 1
        assert s.value("pyserver_worker_restarts_total", cause="crash") == 0


# --------------------------------------------------------------------------- WebSocket


def test_websocket_connections_and_messages():
    from websockets.sync.client import connect

    mport = free_port()
    with run_server("apps.ws_apps:app", *metrics_args(mport)) as srv:
        with connect(f"ws://{HOST}:{srv.port}/echo") as ws:
            for i in range(3):
                ws.send(f"m{i}")
                assert ws.recv(timeout=10) == f"m{i}"
            ws.send(b"\x00\x01")
            assert ws.recv(timeout=10) == b"\x00\x01"
            s = await_scrape(mport, lambda s: s.value("pyserver_open_websocket_connections") == 1)
            assert s.value("pyserver_websocket_messages_received_total") == 4
            assert s.value("pyserver_websocket_messages_sent_total") == 4
        s = await_scrape(mport, lambda s: s.value("pyserver_open_websocket_connections") == 0)
        assert s.value("pyserver_websocket_connections_total") == 1
        assert s.requests("GET", "1xx") == 1
        assert s.value("pyserver_open_connections") == 0


# --------------------------------------------------------------------------- robustness


def test_scrapes_while_serving_load(workers2):
    srv, mport = workers2
    before = scrape(mport)
    stop = threading.Event()
    done = []
    errors = []

    def client():
        try:
            with HTTPConn(socket.create_connection((HOST, srv.port), timeout=10)) as conn:
                while not stop.is_set():
                    assert conn.request("GET", "/hello").status == 200
                    done.append(1)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    totals = []
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            totals.append(scrape(mport).sum("pyserver_requests_total"))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert len(totals) >= 5
    assert totals == sorted(totals), "a counter went down"
    assert totals[-1] > totals[0]
    await_scrape(
        mport,
        lambda s: (
            s.sum("pyserver_requests_total") - before.sum("pyserver_requests_total") == len(done)
        ),
    )


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (b"GET /other HTTP/1.1\r\n\r\n", b"404"),
        (b"GET / HTTP/1.0\r\n\r\n", b"404"),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405"),
        (b"GARBAGE\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/9.9\r\n\r\n", b"400"),
        (b"GET /metr\x01ics HTTP/1.1\r\n\r\n", b"400"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\n\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 5000, b"431"),
    ],
)
def test_endpoint_answers_bad_requests_and_closes(workers2, request_bytes, status):
    srv, mport = workers2
    raw = scrape_raw(mport, request=request_bytes)
    assert raw.startswith(b"HTTP/1.0 " + status + b" "), raw[:100]
    assert b"Connection: close" in raw
    scrape(mport)
    assert_serving(srv.port)


def test_head_request_gets_the_length_without_the_body(workers2):
    raw = scrape_raw(workers2[1], request=b"HEAD /metrics HTTP/1.0\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200 OK") and body == b""
    assert int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]) > 1000


def test_stalled_and_flooding_clients_do_not_block_the_master(workers2):
    srv, mport = workers2
    stalled = []
    try:
        # Idle connections (more than the endpoint serves at once) and one that sends
        # half a head: the endpoint keeps answering, the master keeps supervising.
        for _ in range(20):
            sock = socket.create_connection((HOST, mport), timeout=10)
            stalled.append(sock)
        stalled[-1].sendall(b"GET /metrics HTTP/1.1\r\nHost:")
        # The endpoint drops what is over its bound; once the stalled ones time out
        # (5 s), scrapes are answered again.
        assert wait_for(lambda: _try_scrape(mport), 10)
        assert_serving(srv.port)
        for _ in range(50):
            with socket.create_connection((HOST, mport), timeout=10) as sock:
                sock.sendall(os.urandom(300))
        assert wait_for(lambda: _try_scrape(mport), 10)
        s = scrape(mport)
        assert s.value("pyserver_workers") == 2
    finally:
        for sock in stalled:
            sock.close()
    assert_serving(srv.port)


def _try_scrape(port):
    try:
        scrape(port)
        return True
    except (OSError, AssertionError):
        return False


def test_unix_socket_endpoint():
    path = os.path.join(tempfile.mkdtemp(prefix="pyserver-metrics-"), "metrics.sock")
    with run_server("apps.basic:app", "-w", "2", "--metrics-bind", f"unix:{path}") as srv:
        fetch(srv.port, "GET", "/hello")
        assert wait_for(lambda: scrape(uds=path).requests("GET", "2xx") == 1)
    assert not os.path.exists(path)


def test_metrics_bind_from_the_environment():
    mport = free_port()
    env = {"PYSERVER_METRICS_BIND": f"{HOST}:{mport}"}
    with run_server("apps.basic:app", env=env) as srv:
        fetch(srv.port, "GET", "/hello")
        await_scrape(mport, lambda s: s.requests("GET", "2xx") == 1)
        assert srv.wait_for_log(f"Metrics on http://{HOST}:{mport}/metrics")


@pytest.mark.parametrize("value", ["fd://3", "127.0.0.1:notaport", "[::1"])
def test_bad_metrics_bind_is_a_usage_error(value):
    from helpers import run_cli

    result = run_cli("apps.basic:app", "--metrics-bind", value)
    assert result.returncode == 2, result
    assert "metrics" in result.stderr or "port" in result.stderr or "]" in result.stderr


def test_metrics_port_in_use_fails_at_startup():
    from helpers import run_cli

    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("apps.basic:app", "--port", str(free_port()), *metrics_args(port))
    assert result.returncode == 1
    assert "cannot bind --metrics-bind" in result.stderr + result.stdout


# --------------------------------------------------------------------------- Prometheus


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian's prometheus not installed")
def test_real_prometheus_scrapes_the_endpoint(workers2, tmp_path):
    srv, mport = workers2
    for _ in range(3):
        fetch(srv.port, "GET", "/hello")
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: pyserver\n"
        f"    static_configs:\n      - targets: ['{HOST}:{mport}']\n"
    )
    web = free_port()
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={HOST}:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def query(expr):
        url = f"http://{HOST}:{web}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.load(r)["data"]["result"]
        except OSError:
            return []

    try:
        assert wait_for(lambda: query('up{job="pyserver"} == 1'), 60, 0.5), "never scraped"
        got = []
        assert wait_for(
            lambda: got.extend(query('pyserver_requests_total{method="GET",status="2xx"}')) or got,
            30,
            0.5,
        )
        assert float(got[0]["value"][1]) >= 3
        targets = urllib.request.urlopen(f"http://{HOST}:{web}/api/v1/targets", timeout=5)
        active = json.load(targets)["data"]["activeTargets"]
        assert active and active[0]["health"] == "up" and not active[0]["lastError"]
        assert query("pyserver_request_duration_seconds_bucket")
    finally:
        proc.terminate()
        proc.wait(15)
