"""A pyserver gunicorn worker with several certificates and HSTS (CONFIG_KWARGS), for
test_sni.py: $SNI_TEST_DIR holds server.pem, b.pem and their keys."""

import os

from pyserver.workers import PyserverWorker

_DIR = os.environ.get("SNI_TEST_DIR", ".")


class SniWorker(PyserverWorker):
    CONFIG_KWARGS = {
        "ssl_certfile": [f"{_DIR}/server.pem", f"{_DIR}/b.pem"],
        "ssl_keyfile": [f"{_DIR}/server.key", f"{_DIR}/b.key"],
        "hsts": "30",
    }
