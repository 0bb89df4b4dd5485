"""For tests/test_lifecycle.py and tests/test_config_file.py: reports the serving process's
identity and surroundings as JSON, and writes to wsgi.errors."""

import json
import os

IMPORTED_AS = (os.getuid(), os.getgid())  # who imported the module
IMPORT_CWD = os.getcwd()


def app(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/errors":
        environ["wsgi.errors"].write(environ.get("QUERY_STRING", "") + "\n")
        body = b"logged"
    else:
        mask = os.umask(0)
        os.umask(mask)
        info = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "uid": os.getuid(),
            "gid": os.getgid(),
            "groups": sorted(os.getgroups()),
            "imported_as": IMPORTED_AS,
            "import_cwd": IMPORT_CWD,
            "cwd": os.getcwd(),
            "umask": mask,
            "env": {k: v for k, v in os.environ.items() if k.startswith("OPS_")},
        }
        body = json.dumps(info).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
