"""static: the files the scenario serves, and WhiteNoise's WSGI app.

`python -m benchmarks.apps.static_files` writes 4k.bin (4 KiB) and 1m.bin (1 MiB) of
deterministic bytes into $BENCH_STATIC_DIR; `whitenoise_app` serves that directory at
/static/ with WhiteNoise in front of the hello-wsgi app (under gunicorn).
"""

import os

FILES = {"4k.bin": 4096, "1m.bin": 1 << 20}


def content(size):
    """The bytes of a file of SIZE bytes (a repeated 251-byte pattern)."""
    pattern = bytes(range(251))
    return (pattern * (size // len(pattern) + 1))[:size]


def make_files(directory):
    os.makedirs(directory, exist_ok=True)
    for name, size in FILES.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(content(size))


def _whitenoise():
    from whitenoise import WhiteNoise

    from benchmarks.apps.hello_wsgi import app

    return WhiteNoise(app, root=os.environ["BENCH_STATIC_DIR"], prefix="static/")


if __name__ == "__main__":
    make_files(os.environ["BENCH_STATIC_DIR"])
    print(f"{len(FILES)} files in {os.environ['BENCH_STATIC_DIR']}")
else:
    whitenoise_app = _whitenoise() if "BENCH_STATIC_DIR" in os.environ else None
