"""`python -m pyserver APP`: the same entry point as the `pyserver` script."""

import sys

from pyserver.cli import main

if __name__ == "__main__":
    sys.exit(main())
