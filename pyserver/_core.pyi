"""Type stub of pyserver._core, the C extension (csrc/py/)."""

from collections.abc import Callable, Iterator, Sequence
from socket import socket
from typing import Any

from pyserver.config import Config

LLHTTP_VERSION: str
LIBEV_VERSION_MAJOR: int

class ClientDisconnected(OSError):
    """Raised by an ASGI send() after the client went away."""

def serve(
    app: Callable[..., Any],
    sockets: Sequence[socket],
    config: Config,
    own_sockets: Sequence[socket] = ...,
) -> int | None:
    """Serve app on the listening sockets until stopped (one worker, this process)."""

def run_master(
    config: Config,
    spawn_worker: Callable[[int, tuple[int, ...]], object],
    poll_reload: Callable[[], bool] | None = None,
    pre_fork: Callable[[int], object] | None = None,
) -> int:
    """Fork and supervise config.workers workers; return the exit status."""

def check_forwarded_allow_ips(value: str) -> None:
    """Raise ValueError if the trust list is invalid."""

class FileWrapper:
    """wsgi.file_wrapper: sent with sendfile(2) when the file has a descriptor."""

    def __init__(self, filelike: Any, blksize: int = ...) -> None: ...
    def __iter__(self) -> Iterator[bytes]: ...
    def __next__(self) -> bytes: ...
    def close(self) -> None: ...

class EvSelectorCore:
    """Readiness of file descriptors on a libev loop (pyserver.evselector.EvSelector)."""

    def __init__(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def owns_loop(self) -> bool: ...
    def register(self, fd: int, events: int, key: object = None) -> None: ...
    def modify(self, fd: int, events: int, key: object = None) -> None: ...
    def unregister(self, fd: int) -> None: ...
    def poll(self, timeout: float | None = None) -> list[tuple[int, int]]: ...
    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]: ...
    def wakeup(self) -> None: ...
    def close(self) -> None: ...

class EvLoopHelpers:
    """C versions of asyncio.BaseEventLoop's _run_once, call_soon, call_soon_threadsafe and
    get_debug (pyserver.evselector.EvEventLoop)."""

    def __init__(
        self,
        handle: type,
        timer_handle: type,
        base_loop: type,
        base_selector_loop: type,
        report: Callable[[Any, BaseException], object],
        /,
    ) -> None: ...
    def run_once(self, loop: Any, /) -> None: ...
    def call_soon(
        self, loop: Any, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> Any: ...
    def call_soon_threadsafe(
        self, loop: Any, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> Any: ...
    def get_debug(self, loop: Any, /) -> bool: ...
    def method(self, name: str, /) -> Any: ...
