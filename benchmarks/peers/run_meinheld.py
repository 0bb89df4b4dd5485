"""Serve a WSGI app with meinheld: run_meinheld.py MODULE:ATTR HOST PORT.

Keep-alive is turned on (meinheld's default closes every connection) and the
access log is turned off, like every other server in the comparison.
"""

import importlib
import sys

from meinheld import server


def main():
    target, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    module, _, attr = target.partition(":")
    app = getattr(importlib.import_module(module), attr or "app")
    server.set_access_logger(None)
    server.set_keepalive(10)
    server.listen((host, port))
    server.run(app)


if __name__ == "__main__":
    main()
