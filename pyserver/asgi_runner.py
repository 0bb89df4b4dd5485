"""One ASGI worker's life on asyncio, over the worker's libev loop.

The C side (pyserver._core.serve with an ASGI app) builds an EvSelectorCore over its loop and an
AsgiServer object, then calls run(). Here asyncio's own SelectorEventLoop runs on an EvSelector
(pyserver.evselector.EvEventLoop), so asyncio and the C HTTP connections share one poller:

    lifespan startup -> server.start(loop, state) -> loop.run_forever()
        (the server calls loop.stop() once a graceful stop has finished the last request)
    -> lifespan shutdown -> server.finish() -> leftover tasks cancelled -> loop closed
"""

import asyncio
import concurrent.futures

from .evselector import EvEventLoop, EvSelector
from .lifespan import STARTUP_FAILURE, Lifespan

__all__ = ["run"]


def run(app, selector_core, config, server):
    """Serves `app` until the server stops the loop. Returns the worker's exit code: 0, or
    STARTUP_FAILURE (3) when lifespan startup failed. `config.lifespan` is "auto" (the default
    when absent), "on" or "off"; messages go to `config.error_logger`."""
    logger = config.error_logger
    mode = getattr(config, "lifespan", None) or "auto"
    loop = EvEventLoop(EvSelector(selector_core))
    threads = getattr(config, "executor_threads", None)
    if threads:
        # --threads N: the default executor behind run_in_executor(None, ...),
        # asyncio.to_thread() and Django's sync_to_async(thread_sensitive=False).
        loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix="pyserver-executor"
            )
        )
    asyncio.set_event_loop(loop)
    # --asgi-app with application threads: the WSGI views' async_to_sync runs on this loop.
    link = getattr(config, "loop_link", None)
    if link is not None:
        link.loop = loop
    try:
        return _serve(loop, app, mode, logger, server)
    finally:
        if link is not None:
            link.loop = None
        try:
            _cancel_all_tasks(loop, logger)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _serve(loop, app, mode, logger, server):
    lifespan = Lifespan(app, mode, logger)
    if not loop.run_until_complete(lifespan.startup()):
        return STARTUP_FAILURE
    server.start(loop, lifespan.state)
    try:
        loop.run_forever()
        loop.run_until_complete(lifespan.shutdown())
    finally:
        server.finish()
    return 0


def _cancel_all_tasks(loop, logger):
    """Cancels the tasks still pending (background work of the app, a lifespan task that never
    finished) and waits for them; exceptions other than the cancellation are logged."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    for task in tasks:
        if task.cancelled():
            continue
        exc = task.exception()
        if exc is not None:
            logger.error("Unhandled exception in task %r at worker exit", task, exc_info=exc)
