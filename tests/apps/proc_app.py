"""The application of the process-management tests (tests/test_process.py).

/pid            the worker's pid, so tests see which worker answered
/sleep/SECONDS  sleeps, then answers (a slow view, or one stuck past --timeout);
                /sleep/SECONDS/pid answers with the worker's pid
/alloc/MIB      allocates MIB mebibytes and keeps them (for --max-rss)
anything else   a short 200

PROC_APP_IMPORT_SLEEP=SECONDS in the environment makes the import itself slow
(a worker still booting, or one stuck at boot past --timeout).
PROC_APP_IMPORT_LOG=PATH makes every import append the importing process's pid to PATH.
"""

import os
import time

HOARD = []

if os.environ.get("PROC_APP_IMPORT_LOG"):
    with open(os.environ["PROC_APP_IMPORT_LOG"], "a") as log:
        log.write(f"{os.getpid()}\n")

time.sleep(float(os.environ.get("PROC_APP_IMPORT_SLEEP", "0")))


def app(environ, start_response):
    parts = environ.get("PATH_INFO", "/").strip("/").split("/")
    if parts[0] == "pid":
        body = str(os.getpid()).encode()
    elif parts[0] == "sleep":
        time.sleep(float(parts[1]))
        body = str(os.getpid()).encode() if parts[2:] == ["pid"] else b"slept"
    elif parts[0] == "alloc":
        HOARD.append(bytearray(int(parts[1]) * 1024 * 1024))
        for i in range(0, len(HOARD[-1]), 4096):
            HOARD[-1][i] = 1  # touch every page so it is resident
        body = b"allocated"
    else:
        body = b"ok"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
