"""Blocking calls: a coroutine run to its end on an asyncio event loop of the call's own,
with Ctrl-C cancelling it as ``asyncio.run`` would."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import sniffio

T = TypeVar("T")

#: In the task :func:`run_on_own_loop` runs (and the tasks it starts): that loop.
_OWN_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "workspace_tools_own_loop", default=None
)


def run_on_own_loop(
    run: Callable[[], Awaitable[T]], *, no_loop: Callable[[OSError], T] | None = None
) -> T:
    """``run()`` on an asyncio event loop of its own, as ``asyncio.run`` would run it,
    without what a short call cannot afford: ``anyio.run`` and ``asyncio.Runner`` cost
    about 80 µs a call more (context and debug set-up, a pass of the loop per shutdown
    step, the SIGINT handler put back by formatting the task). What they guarantee is
    kept: SIGINT cancels the main task (then ``KeyboardInterrupt``), tasks it left are
    cancelled and awaited, async generators and the default executor are shut down (at
    the end of the main task, in the same pass of the loop).

    ``no_loop(error)`` is returned instead when the loop cannot be made (its epoll and
    wake-up pipe need descriptors: ``OSError``, raised without ``no_loop``).

    Raises:
        RuntimeError: an event loop already runs in this thread.
        KeyboardInterrupt: Ctrl-C cancelled the call.
    """
    running = _running_async_library()
    if running is not None:
        raise RuntimeError(
            f"cannot block inside a running {running} event loop: await the call instead"
        )
    try:
        loop = asyncio.new_event_loop()
    except OSError as exc:
        _discard_half_made_loop(exc)
        if no_loop is None:
            raise
        return no_loop(exc)
    try:
        task = loop.create_task(_then_shut_down(run, loop))
        interrupted: list[bool] = []
        restore = _cancel_on_sigint(loop, task, interrupted)
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        finally:
            restore()
    finally:
        loop.close()


def _discard_half_made_loop(exc: OSError) -> None:
    """Let go of the loop an asyncio loop constructor left half made when ``exc`` stopped
    it (no descriptor for its epoll or its wake-up socket pair). Collected as it is, its
    ``__del__`` would close it, meet the socket pair that was never made and print an
    ``AttributeError`` traceback to stderr ("Exception ignored in ... '_ssock'") for every
    such call; and the epoll it did get would stay open until then. So: its selector is
    closed now and the loop counts as closed, which leaves its ``__del__`` nothing to do.
    A loop of another kind (uvloop's) is not one of asyncio's and is left alone."""
    trace = exc.__traceback__
    while trace is not None:
        loop = trace.tb_frame.f_locals.get("self")
        if isinstance(loop, asyncio.BaseEventLoop):
            selector = getattr(loop, "_selector", None)
            if selector is not None:
                selector.close()
            loop._closed = True  # type: ignore[attr-defined]  # what close() ends with
            return
        trace = trace.tb_next


def _running_async_library() -> str | None:
    """The event loop library running in this thread (``"asyncio"``, ``"trio"``), if any."""
    try:
        return str(sniffio.current_async_library())
    except sniffio.AsyncLibraryNotFoundError:
        return None


async def _then_shut_down(run: Callable[[], Awaitable[T]], loop: asyncio.AbstractEventLoop) -> T:
    """``run()``, then what it left on ``loop``: its tasks cancelled and awaited, its async
    generators closed, the default executor's threads joined."""
    _OWN_LOOP.set(loop)  # in this task's context only
    try:
        return await run()
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
        for leftover in pending:
            leftover.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()


# The C module under ``signal``, where there is one (CPython): ``signal.signal`` and
# ``signal.getsignal`` try to make a ``Handlers`` enum of each handler they return, which
# for a function raises and catches a ValueError inside: about 17 µs of the three calls
# each blocking call makes, for a value compared by identity here. Elsewhere, ``signal``.
try:
    import _signal as _handlers
except ImportError:  # pragma: no cover - another Python implementation
    _handlers = signal  # type: ignore[no-redef]
_SIGINT = int(signal.SIGINT)


def _cancel_on_sigint(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], interrupted: list[bool]
) -> Callable[[], None]:
    """As ``asyncio.Runner`` does: in the main thread, while SIGINT has Python's default
    handler, the first Ctrl-C cancels ``task`` (recorded in ``interrupted``) and a second
    one raises ``KeyboardInterrupt`` at once. Returns what puts the handler back."""
    if (
        threading.current_thread() is not threading.main_thread()
        or _handlers.getsignal(_SIGINT) is not signal.default_int_handler
    ):
        return lambda: None

    def on_sigint(signum: int, frame: object) -> None:
        if interrupted or task.done():
            raise KeyboardInterrupt
        interrupted.append(True)
        task.cancel()
        loop.call_soon_threadsafe(lambda: None)  # wake the loop from its wait

    _handlers.signal(_SIGINT, on_sigint)
    return lambda: _handlers.signal(_SIGINT, signal.default_int_handler)


def on_own_loop() -> bool:
    """Whether this code runs in a call of :func:`run_on_own_loop`, on its loop."""
    loop = _OWN_LOOP.get()
    if loop is None:
        return False
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def in_a_thread(func: Callable[[], T]) -> T:
    """``func()`` run in a thread of its own (with this task's context variables), awaited
    on the running asyncio loop; on cancellation the thread is left to finish (as
    ``anyio.to_thread.run_sync(..., abandon_on_cancel=True)``).

    For a loop of :func:`run_on_own_loop`, which runs one call: anyio's worker threads are
    made for each such loop and stopped with it, about 0.4 ms a call more than a thread
    started for it (measured: 0.61-0.78 ms against 0.28 ms, the loop included).

    Raises:
        whatever ``func`` raises.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, failure: BaseException | None) -> None:
        if done.done():
            return  # cancelled meanwhile: the call was left
        if failure is None:
            done.set_result(value)
        else:
            done.set_exception(failure)

    def work() -> None:
        value: Any = None
        failure: BaseException | None = None
        try:
            value = context.run(func)
        except BaseException as exc:
            failure = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: the call was left
            loop.call_soon_threadsafe(settle, value, failure)

    thread = threading.Thread(target=work, name="workspace-tools call")
    thread.start()
    try:
        return await done
    finally:
        if done.done() and not done.cancelled():
            thread.join()  # it has only to return: no thread outlives a call that ended
