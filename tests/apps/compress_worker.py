"""A pyserver gunicorn worker that compresses (CONFIG_KWARGS), for test_compress.py."""

from pyserver.workers import PyserverWorker


class CompressWorker(PyserverWorker):
    CONFIG_KWARGS = {"compress": True, "compress_min_size": 100, "compress_types": ["text/*"]}
