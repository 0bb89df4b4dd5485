"""SIGHUP to a single process (no master): a real reload.

The server stops gracefully, keeping its listening sockets open (connections that
arrive meanwhile wait in their queues, none is refused), then executes itself again:
the same pid, the same command line and working directory. The new server imports the
application afresh and serves the sockets it inherited instead of binding them;
everything else (options, config file, hooks) is read again as at a first start.
"""

import json
import os
import sys

from pyserver.sockets import describe_address, parse_bind

ENV = "PYSERVER_REEXEC_SOCKETS"

_launch = {"argv": None, "cwd": None}


def remember(argv):
    """Record the command line and directory this server was started with (cli.main)."""
    _launch["argv"] = list(sys.argv[1:] if argv is None else argv)
    _launch["cwd"] = os.getcwd()


def exec_again(cfg):
    """Replace this process with a new server on cfg's sockets. Returns only on failure,
    raising OSError."""
    handed = []
    for address, sock in zip(cfg.addresses, cfg.sockets, strict=True):
        fd = sock.fileno()
        os.set_inheritable(fd, True)
        handed.append([describe_address(address), fd, fd in cfg.bound_fds])
    os.environ[ENV] = json.dumps({"pid": os.getpid(), "sockets": handed})
    argv = _launch["argv"] if _launch["argv"] is not None else sys.argv[1:]
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if _launch["cwd"] is not None:
        os.chdir(_launch["cwd"])
    os.execv(sys.executable, [sys.executable, "-m", "pyserver", *argv])


def inherited(environ=None):
    """The sockets a reloading server handed to this process, as a list of (address,
    fd, bound_here), or None. Reads and removes the variable; it counts only when it
    names this very process (a child started by the application inherits none)."""
    environ = os.environ if environ is None else environ
    text = environ.pop(ENV, None)
    if text is None:
        return None
    try:
        state = json.loads(text)
        if state["pid"] != os.getpid():
            return None
        return [(parse_bind(name), int(fd), bool(bound)) for name, fd, bound in state["sockets"]]
    except (ValueError, KeyError, TypeError):
        return None
