"""A `selectors` selector whose poller is a libev loop (pyserver._core.EvSelectorCore).

`asyncio.SelectorEventLoop(EvSelector(core))` runs asyncio on the worker's libev loop, so libev
stays the only poller: one `select()` waits for asyncio's sockets and for the C core's HTTP
connections alike (DESIGN.md, section 2). The core only knows file descriptors; this class keeps
the file object -> SelectorKey map, as the standard selectors do, and hands each key to the core,
which then builds select()'s (key, events) list itself.

`EvEventLoop` is the asyncio loop pyserver runs ASGI apps on: asyncio's own SelectorEventLoop
(subprocesses, signal handlers, executors and every transport unchanged) over an EvSelector, whose
thread-safe wake-up (call_soon_threadsafe, run_in_executor results, child watchers) is the core's
ev_async instead of a byte written to, then read back from, asyncio's self-pipe socket.
"""

import asyncio
import selectors
from asyncio import base_events, events, format_helpers, selector_events
from collections.abc import Mapping
from selectors import EVENT_READ, EVENT_WRITE, SelectorKey

from ._core import EvLoopHelpers

__all__ = ["EvEventLoop", "EvSelector"]


def _fileobj_to_fd(fileobj):
    """The descriptor of an int or of an object with fileno(); ValueError when invalid."""
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


class _KeyMapping(Mapping):
    """Read-only file object -> SelectorKey view of a selector's registrations."""

    __slots__ = ("_selector",)

    def __init__(self, selector):
        self._selector = selector

    def __len__(self):
        return len(self._selector._fd_to_key)

    def __getitem__(self, fileobj):
        fd = self._selector._lookup_fd(fileobj)
        try:
            return self._selector._fd_to_key[fd]
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None

    def __iter__(self):
        return iter(self._selector._fd_to_key)


class EvSelector(selectors.BaseSelector):
    """selectors.BaseSelector over an EvSelectorCore (which it closes with itself).

    Without a core it makes one with a libev loop of its own; the server passes the core built
    over its worker's loop.
    """

    def __init__(self, core=None):
        if core is None:
            from ._core import EvSelectorCore

            core = EvSelectorCore()
        self._core = core
        self._fd_to_key = {}
        self._map = _KeyMapping(self)
        # The core's select() is this class's select(), without a Python frame in between.
        self.select = core.select

    def _lookup_fd(self, fileobj):
        """Like _fileobj_to_fd, but also finds a registered object whose fileno() now fails
        (a closed socket can still be unregistered)."""
        try:
            return _fileobj_to_fd(fileobj)
        except ValueError:
            for key in self._fd_to_key.values():
                if key.fileobj is fileobj:
                    return key.fd
            raise

    def _check_open(self):
        if self._map is None:
            raise RuntimeError("Selector is closed")

    def register(self, fileobj, events, data=None):
        self._check_open()
        if not events or events & ~(EVENT_READ | EVENT_WRITE):
            raise ValueError(f"Invalid events: {events!r}")
        fd = fileobj if type(fileobj) is int and fileobj >= 0 else self._lookup_fd(fileobj)
        key = SelectorKey(fileobj, fd, events, data)
        if key.fd in self._fd_to_key:
            raise KeyError(f"{fileobj!r} (FD {key.fd}) is already registered")
        self._core.register(key.fd, events, key)
        self._fd_to_key[key.fd] = key
        return key

    def unregister(self, fileobj):
        self._check_open()
        fd = fileobj if type(fileobj) is int and fileobj >= 0 else self._lookup_fd(fileobj)
        try:
            key = self._fd_to_key.pop(fd)
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None
        self._core.unregister(fd)
        return key

    def modify(self, fileobj, events, data=None):
        self._check_open()
        fd = fileobj if type(fileobj) is int and fileobj >= 0 else self._lookup_fd(fileobj)
        try:
            key = self._fd_to_key[fd]
        except KeyError:
            raise KeyError(f"{fileobj!r} is not registered") from None
        if events != key.events:
            if not events or events & ~(EVENT_READ | EVENT_WRITE):
                raise ValueError(f"Invalid events: {events!r}")
            key = SelectorKey(key.fileobj, fd, events, data)  # _replace() costs twice this
            self._core.modify(fd, events, key)
            self._fd_to_key[fd] = key
        elif data != key.data:
            key = SelectorKey(key.fileobj, fd, events, data)
            self._core.modify(fd, events, key)
            self._fd_to_key[fd] = key
        return key

    def select(self, timeout=None):
        """Waits like the standard selectors (None: block, <= 0: poll, else seconds); while it
        waits, every other watcher of the libev loop runs too. (Instances call the core's
        select() directly; this is the same thing for the class.)"""
        return self._core.select(timeout)

    def close(self):
        self._core.close()  # first: it refuses while another thread polls
        self._fd_to_key.clear()
        self._map = None

    def get_key(self, fileobj):
        if self._map is None:
            raise RuntimeError("Selector is closed")
        if type(fileobj) is int and fileobj >= 0:  # asyncio's own calls: one dict lookup
            try:
                return self._fd_to_key[fileobj]
            except KeyError:
                raise KeyError(f"{fileobj!r} is not registered") from None
        return self._map[fileobj]

    def get_map(self):
        return self._map


def _report_callback_error(handle, exc):
    """What asyncio's Handle._run does with an exception its callback raised (the C runner ran
    the callback)."""
    cb = format_helpers._format_callback_source(handle._callback, handle._args)
    context = {
        "message": f"Exception in callback {cb}",
        "exception": exc,
        "handle": handle,
    }
    if handle._source_traceback:
        context["source_traceback"] = handle._source_traceback
    handle._loop.call_exception_handler(context)


_helpers = EvLoopHelpers(
    events.Handle,
    events.TimerHandle,
    base_events.BaseEventLoop,
    selector_events.BaseSelectorEventLoop,
    _report_callback_error,
)


class EvEventLoop(asyncio.SelectorEventLoop):
    """asyncio.SelectorEventLoop over an EvSelector (a new one with its own libev loop when none
    is given) whose thread-safe wake-ups go through the core's ev_async.

    The self-pipe socket pair is still made and watched: signal handlers need it
    (signal.set_wakeup_fd writes the signal numbers there), but nothing else writes to it.

    The loop's hot methods are C (pyserver._core.EvLoopHelpers): one iteration of the loop
    (_run_once: timers, select, the ready queue, each asyncio Handle run in its context),
    call_soon, call_soon_threadsafe (where asyncio's makes a plain Handle) and get_debug. They
    do what asyncio's own do; in debug mode they are asyncio's own. They work over any
    selector; over an EvSelector the wake-up of call_soon_threadsafe is the core's ev_async.
    """

    _run_once = _helpers.method("run_once")
    call_soon = _helpers.method("call_soon")
    get_debug = _helpers.method("get_debug")
    if not hasattr(events, "_ThreadSafeHandle"):
        # Newer Pythons' call_soon_threadsafe makes a _ThreadSafeHandle (its cancel() takes a
        # lock); there asyncio's own stays, and still wakes the loop through _write_to_self.
        call_soon_threadsafe = _helpers.method("call_soon_threadsafe")

    def __init__(self, selector=None):
        if selector is None:
            selector = EvSelector()
        super().__init__(selector)
        if isinstance(selector, EvSelector):
            # call_soon_threadsafe() calls this: the core's wakeup() directly, no Python frame.
            # Thread-safe, no syscall while the loop is awake, a no-op once the selector is
            # closed (as the stock one is once the self-pipe is).
            self._write_to_self = selector._core.wakeup
