"""The generation slots of a front end, and the line of requests waiting for them: `SlotQueue`.

The HTTP service waits on the event loop (`SlotQueue.take`, an asyncio future per waiter);
the gRPC Generation service, whose calls each hold a server thread anyway, waits in that
thread (`SlotQueue.take_in_thread`).  Both wait in the one line, as vLLM's and SGLang's
schedulers keep the requests they cannot run yet waiting rather than refuse them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable


class QueueFull(RuntimeError):
    """Every slot is taken and the line of requests waiting for them is full (HTTP 429, gRPC
    RESOURCE_EXHAUSTED)."""


class _Waiter:
    __slots__ = ("count", "wake", "granted", "refused")

    def __init__(self, count: int, wake):
        self.count, self.wake, self.granted, self.refused = count, wake, False, None


class SlotQueue:
    """A counting semaphore of `size` slots whose waiters are served first come, first served,
    each waiting for all the slots it asks for at once, up to `max_waiting` of them; past
    those a request is refused with `refusal` (an exception class), saying the queue is full.

    FIFO, all or none: a request for `count` slots waits while any earlier one waits, even when
    `count` are free, so a request of n choices at the head is never overtaken for ever by
    single ones; slots freed meanwhile stay free for it until it has all it asked for.  That
    cannot deadlock: a waiter holds none until it is granted all (more than `size` is refused),
    and the slots held are held by running generations, which end.  `release` may be called
    from any thread (a generation's own, as it ends)."""

    def __init__(self, size: int, max_waiting: int, refusal: type[QueueFull] = QueueFull,
                 setting: str = "limits.max_queued_requests", waited: Callable[[float], None] | None = None):
        """setting: how the operator sets `max_waiting`, named in the refusal.  waited: told
        the seconds each request that got its slots waited for them (0 for none), from the
        thread or loop that waited."""
        self.size, self.max_waiting, self.refusal, self.setting = size, max_waiting, refusal, setting
        self._waited = waited or (lambda seconds: None)
        self._free = size
        self._waiting: deque[_Waiter] = deque()
        self._lock = threading.Lock()
        self._closed = None  # the error `close` refuses requests with

    @property
    def free(self) -> int:
        return self._free

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _join(self, count: int, wake) -> _Waiter | None:
        """None with the slots taken, when they are free and nobody waits; else a waiter in line
        (`wake()` called once it is granted); `refusal` when the line is full."""
        if count > self.size:  # it would wait at the head for ever, and every request behind it
            raise ValueError(f"{count} generations asked for at once, more than this service runs at once "
                             f"({self.size})")
        with self._lock:
            if self._closed is not None:
                raise self._closed()
            if not self._waiting and self._free >= count:
                self._free -= count
                return None
            if len(self._waiting) >= self.max_waiting:
                raise self.refusal(self._full_message())
            waiter = _Waiter(count, wake)
            self._waiting.append(waiter)
            return waiter

    def _leave(self, waiter: _Waiter) -> None:
        with self._lock:
            if waiter.granted:  # granted as it left: the slots go back
                self._free += waiter.count
            elif waiter.refused is None:  # a refused one is out of the line already
                self._waiting.remove(waiter)
            self._grant()  # the next in line may fit now

    async def take(self, count: int) -> None:
        """Take `count` slots, waiting in line on the event loop (no thread held); `refusal`, at
        once, when they are not free and `max_waiting` requests wait already.  Cancelled while
        it waits (its client gone), it leaves the line and holds nothing."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        since = time.perf_counter()
        waiter = self._join(count, lambda: loop.call_soon_threadsafe(_resolve, future))
        if waiter is not None:
            try:
                await future
            except BaseException:
                self._leave(waiter)
                raise
            if waiter.refused is not None:
                raise waiter.refused()
        self._waited(time.perf_counter() - since)

    def take_in_thread(self, count: int, woken: threading.Event) -> bool:
        """Take `count` slots, waiting in line in the calling thread until granted (True), or
        until the caller sets `woken` as it goes away (False: out of the line, holding
        nothing); `refusal` as `take`."""
        since = time.perf_counter()
        waiter = self._join(count, woken.set)
        if waiter is not None:
            woken.wait()
            with self._lock:
                granted, refused = waiter.granted, waiter.refused
            if not granted:
                if refused is not None:
                    raise refused()
                self._leave(waiter)
                return False
        self._waited(time.perf_counter() - since)
        return True

    def release(self, count: int = 1) -> None:
        """Give `count` slots back (from any thread), to the waiters first."""
        with self._lock:
            if self._free + count > self.size:
                raise ValueError("SlotQueue released more slots than it has")
            self._free += count
            self._grant()

    def close(self, refusal) -> None:
        """Refuse, from now on, every request for slots with `refusal()` (an exception
        factory), those waiting in line at once: the service is stopping, and they would
        otherwise wait for the generations in flight to end first.  Slots still held are
        released as before."""
        with self._lock:
            self._closed = refusal
            waiting, self._waiting = list(self._waiting), deque()
            for waiter in waiting:
                waiter.refused = refusal
        for waiter in waiting:
            try:
                waiter.wake()
            except RuntimeError:  # its event loop is closed: nobody awaits it any more
                pass

    def _grant(self) -> None:
        # under the lock: from the head, every waiter whose slots are all free
        while self._waiting and self._waiting[0].count <= self._free:
            waiter = self._waiting.popleft()
            self._free -= waiter.count
            waiter.granted = True
            try:
                waiter.wake()
            except RuntimeError:  # its event loop is closed: nobody awaits it any more
                waiter.granted = False
                self._free += waiter.count

    def _full_message(self) -> str:
        running = _counted(self.size, "generation")
        if self.max_waiting == 0:
            return (f"the service runs {running} at once, all of its slots are taken, and it queues no request "
                    f"({self.setting}: 0); retry later")
        waiting = len(self._waiting)
        return (f"the service runs {running} at once, all of its slots are taken, and its queue is full: "
                f"{_counted(waiting, 'request')} wait{'s' if waiting == 1 else ''} for them "
                f"({self.setting}: {self.max_waiting}); retry later")


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _resolve(future: asyncio.Future) -> None:
    if not future.done():  # cancelled meanwhile: its `take` gives the slots back
        future.set_result(None)
