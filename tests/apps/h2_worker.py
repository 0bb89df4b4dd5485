"""A pyserver gunicorn worker with low HTTP/2 flood bounds (CONFIG_KWARGS), for
test_h2_rfc9113.py."""

from pyserver.workers import PyserverASGIWorker


class LowResetsWorker(PyserverASGIWorker):
    CONFIG_KWARGS = {"http2_max_resets": 5, "http2_max_control_frames": 5}
