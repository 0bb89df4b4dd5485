"""--reload: notice edited source files so the master restarts its workers.

The master calls `changed()` once a second. With `watchfiles` installed its
watcher thread collects changes; otherwise the watched trees are polled with
os.stat (fine for a development tree of a few thousand files).
"""

import fnmatch
import os
import threading

SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", ".tox", ".venv", "node_modules"}


class StatReloader:
    """Compares the mtimes of matching files between two calls."""

    def __init__(self, dirs, includes):
        self.dirs = [os.path.abspath(d) for d in dirs]
        self.includes = list(includes)
        self.mtimes = self.snapshot()

    def matches(self, name):
        return any(fnmatch.fnmatch(name, pattern) for pattern in self.includes)

    def snapshot(self):
        mtimes = {}
        for root_dir in self.dirs:
            for root, dirs, files in os.walk(root_dir):
                dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
                for name in files:
                    if self.matches(name):
                        path = os.path.join(root, name)
                        try:
                            mtimes[path] = os.stat(path).st_mtime_ns
                        except OSError:
                            pass
        return mtimes

    def changed(self):
        current = self.snapshot()
        changed = current != self.mtimes
        self.mtimes = current
        return changed


class WatchfilesReloader:
    """Collects changes from a watchfiles thread; changed() drains them."""

    def __init__(self, dirs, includes):
        import watchfiles

        self.includes = list(includes)
        self.pending = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self.watch, args=(watchfiles, dirs), name="pyserver-reloader", daemon=True
        )
        self.thread.start()

    def watch(self, watchfiles, dirs):
        for changes in watchfiles.watch(*dirs, stop_event=self.stop, yield_on_timeout=False):
            names = (os.path.basename(path) for _, path in changes)
            if any(fnmatch.fnmatch(n, p) for n in names for p in self.includes):
                self.pending.set()

    def changed(self):
        if self.pending.is_set():
            self.pending.clear()
            return True
        return False


def make_reloader(dirs, includes):
    """A reloader for dirs; watchfiles when importable, stat polling otherwise."""
    try:
        return WatchfilesReloader(dirs, includes)
    except ImportError:
        return StatReloader(dirs, includes)
