"""Serve a WSGI app with bjoern: run_bjoern.py MODULE:ATTR HOST PORT."""

import importlib
import sys

import bjoern


def main():
    target, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    module, _, attr = target.partition(":")
    app = getattr(importlib.import_module(module), attr or "app")
    bjoern.run(app, host, port)


if __name__ == "__main__":
    main()
