"""Runs one ASGI worker for tests/test_lifespan.py: `python lifespan_serve.py SPEC PORT MODE`.

It calls `_core.serve` itself, the way the CLI does, with `config.lifespan = MODE`; the exit
status is what serve() returns (0, or 3 when lifespan startup failed). The config is loaded as
WSGI and then switched to ASGI, so this works whether or not the CLI accepts ASGI apps yet.
"""

import os
import sys

from pyserver import _core
from pyserver.config import Config


def main():
    spec, port, mode = sys.argv[1:4]
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = Config(app=spec, interface="wsgi", port=int(port), app_dir=tests_dir)
    cfg.load()
    cfg.interface = "asgi"
    cfg.lifespan = mode
    sys.exit(_core.serve(cfg.loaded_app, cfg.sockets, cfg))


if __name__ == "__main__":
    main()
