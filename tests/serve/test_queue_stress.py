"""Stress tests of the generation slots' queue (`rayspec.engine.slots.SlotQueue`) and of the
services around it: many event-loop and thread waiters at once, cancelled at random (fixed
seeds), slots released from other threads, the queue closed as they wait.  Whatever the
interleaving, every slot comes back exactly once (`free == size`, nobody left waiting),
every request ends exactly once, no more slots are held than there are, and waiters are
granted in the order they joined the line."""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
import time

import pytest

from rayspec.engine.slots import SlotQueue
from rayspec.serve.config import LimitsConfig
from rayspec.serve.service import Overloaded, Service, ShuttingDown

WHO = contextvars.ContextVar("who")  # the request a `_join` is for, in its task's or thread's context


class Closed(Exception):
    pass


class Watched(SlotQueue):
    """A SlotQueue that logs the order requests join its line in, and the order their wakes
    are called in: `_grant` calls them under the queue's lock, so that log is the order of the
    grants."""

    def __init__(self, size: int, max_waiting: int):
        super().__init__(size, max_waiting, Overloaded)
        self.joined: list = []
        self.woken: list = []
        # who -> what to do as it is granted (its client leaving): before its wake, or after
        self.before_wake: dict = {}
        self.after_wake: dict = {}
        self._joining = threading.Lock()  # only around `_join`: joins stay concurrent with the rest

    def _join(self, count, wake):
        who = WHO.get(None)

        def logged():
            self.woken.append(who)
            self.before_wake.pop(who, lambda: None)()
            wake()
            self.after_wake.pop(who, lambda: None)()

        with self._joining:
            waiter = super()._join(count, logged)
            if waiter is not None:
                self.joined.append(who)
        return waiter


class Ledger:
    """What each request did, and the slots held at once, checked as they change."""

    def __init__(self, size: int):
        self.size, self.held, self.peak = size, 0, 0
        self.outcomes: dict = {}
        self.errors: list = []
        self._lock = threading.Lock()

    def hold(self, count: int) -> None:
        with self._lock:
            self.held += count
            self.peak = max(self.peak, self.held)
            if self.held > self.size:
                self.errors.append(f"{self.held} slots held of {self.size}")

    def unhold(self, count: int) -> None:
        with self._lock:
            self.held -= count

    def end(self, who, outcome: str) -> None:
        with self._lock:
            if who in self.outcomes:
                self.errors.append(f"{who} ended twice: {self.outcomes[who]}, then {outcome}")
            self.outcomes[who] = outcome


def check_fifo(queue: Watched) -> None:
    """Among the waiters that were granted, the earlier to join was granted first."""
    order = {who: i for i, who in enumerate(queue.joined)}
    granted = [order[who] for who in queue.woken]
    assert granted == sorted(granted), "a waiter was granted before one that joined the line earlier"


def crowd(queue: SlotQueue, plan: dict, threads: int, as_granted: dict | None = None,
          close_after: float | None = None) -> Ledger:
    """Run `plan`'s requests (who -> (slots, cancelled?, cancelled after s, held for s)):
    those named loop* as tasks on an event loop, the others in `threads` threads, each in
    turn; a cancelled one is cancelled (its task, or its caller setting `woken`) after a
    while; one in `as_granted` (who -> `Watched.before_wake` or `after_wake`) is cancelled
    as it is granted; a granted one holds its slots a while, then releases them from a
    thread.  `close_after`: seconds after which the queue is closed (with `Closed`).  What
    each request did, once every thread ended and every slot was released (or 5 s)."""
    ledger, as_granted = Ledger(queue.size), as_granted or {}
    on_loop_names = [who for who in plan if who.startswith("loop")]
    in_threads = [who for who in plan if not who.startswith("loop")]

    def hold_then_release(count: int, hold: float) -> None:
        ledger.hold(count)
        time.sleep(hold)
        ledger.unhold(count)
        queue.release(count)

    async def on_loop(who: str) -> None:
        WHO.set(who)
        count, _, _, hold = plan[who]
        try:
            await queue.take(count)
        except asyncio.CancelledError:
            return ledger.end(who, "cancelled")
        except Closed:
            return ledger.end(who, "refused")
        ledger.end(who, "ran")
        threading.Thread(target=hold_then_release, args=(count, hold)).start()

    async def loop_side() -> None:
        loop, tasks = asyncio.get_running_loop(), []
        for i, who in enumerate(on_loop_names):
            tasks.append(asyncio.ensure_future(on_loop(who)))
            _, cancel, after, _ = plan[who]
            if cancel:
                loop.call_later(after, tasks[-1].cancel)
            elif who in as_granted:
                as_granted[who][who] = lambda task=tasks[-1]: loop.call_soon_threadsafe(task.cancel)
            if i % 10 == 0:
                await asyncio.sleep(0.001)
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 8)

    def thread_side(first: int) -> None:
        for who in in_threads[first::threads]:
            WHO.set(who)
            count, cancel, after, hold = plan[who]
            woken = threading.Event()
            if cancel:
                threading.Timer(after, woken.set).start()
            try:
                took = queue.take_in_thread(count, woken)
            except Closed:
                ledger.end(who, "refused")
                continue
            ledger.end(who, "ran" if took else "cancelled")
            if took:
                hold_then_release(count, hold)

    running = [threading.Thread(target=thread_side, args=(first,), daemon=True) for first in range(threads)]
    for thread in running:
        thread.start()
    if close_after is not None:
        threading.Timer(close_after, queue.close, args=(Closed,)).start()
    asyncio.run(loop_side())
    deadline = time.monotonic() + 8
    for thread in running:
        thread.join(max(deadline - time.monotonic(), 0))
    assert not any(thread.is_alive() for thread in running), "a thread waiter never woke"
    deadline = time.monotonic() + 5
    while queue.free != queue.size and time.monotonic() < deadline:  # the last holders release
        time.sleep(0.01)
    return ledger


def plan_of(rng: random.Random, each: int, cancelled: float, within: float) -> dict:
    return {who: (rng.randint(1, 3), rng.random() < cancelled, rng.uniform(0, within), rng.uniform(0, 0.003))
            for who in [f"loop{i}" for i in range(each)] + [f"thread{i}" for i in range(each)]}


def test_event_loop_and_thread_waiters_cancelled_at_random_give_every_slot_back_in_order():
    """4 slots, 120 requests of 1 to 3 slots each on an event loop and 120 in 12 threads; a third
    of them are cancelled at a random moment (the task, or the thread's caller going away),
    and a fifth of the loop's as they are granted: before their future is resolved (they
    must not run), or just after (they run, or give the slots back, as the loop goes)."""
    rng = random.Random(1234)
    queue = Watched(4, 1000)
    plan = plan_of(rng, 120, cancelled=0.33, within=0.004)
    as_granted = {who: rng.choice([queue.before_wake, queue.after_wake])
                  for who in plan if who.startswith("loop") and not plan[who][1] and rng.random() < 0.2}
    ledger = crowd(queue, plan, 12, as_granted)

    assert ledger.errors == []
    assert sorted(ledger.outcomes) == sorted(plan)  # each request ended, once (`end` logs a second end)
    assert queue.free == 4 and queue.waiting == 0 and ledger.held == 0
    outcomes = list(ledger.outcomes.values())
    assert outcomes.count("cancelled") > 10 and outcomes.count("ran") > 100 and ledger.peak == 4
    assert len(queue.joined) > 50  # most waited in line: the test exercised the queue, not free slots
    left_before = {who for who in queue.woken if as_granted.get(who) is queue.before_wake}
    assert len(left_before) >= 3 and {ledger.outcomes[who] for who in left_before} == {"cancelled"}
    assert sum(as_granted.get(who) is queue.after_wake for who in queue.woken) >= 3
    check_fifo(queue)


def test_closing_the_queue_as_waiters_come_and_go_refuses_each_once_and_loses_no_slot():
    """The queue is closed while 80 loop and 80 thread requests join, wait, leave at random and
    release: each either ran, left, or was refused with the close's error, once; the slots
    held then all come back, and nobody waits."""
    queue = Watched(3, 1000)
    plan = plan_of(random.Random(99), 80, cancelled=0.3, within=0.01)
    ledger = crowd(queue, plan, 8, close_after=0.04)

    assert ledger.errors == [] and sorted(ledger.outcomes) == sorted(plan)
    assert queue.free == 3 and queue.waiting == 0 and ledger.held == 0
    assert {"refused", "ran", "cancelled"} <= set(ledger.outcomes.values())
    with pytest.raises(Closed):
        queue.take_in_thread(1, threading.Event())
    check_fifo(queue)


class Finished(Exception):
    pass


class Brief:
    """A generation that runs a moment (or until cancelled), then ends; its runs are counted."""

    def __init__(self, name: str, hold: float, ledger: Ledger):
        self.request_id, self.prompt_ids, self.hold, self.ledger = name, [1], hold, ledger
        self.go = threading.Event()

    def run(self):
        self.ledger.hold(1)
        try:
            self.go.wait(self.hold)
        finally:
            self.ledger.unhold(1)
        raise Finished
        yield  # a generator, as GenerationRequest.run is

    def cancel(self):
        self.go.set()


def test_the_service_shut_down_amid_queued_cancelled_and_running_requests_frees_every_slot():
    """Service.start_all under load: 150 requests of 1 or 2 choices for 3 slots and a queue of
    40, a quarter of them cancelled (their clients gone) as they wait or run, and the service
    shut down half-way.  Each request runs, is refused (queue full, shutting down) or is
    cancelled, once; afterwards every slot is free, nobody waits, and no stream is live."""
    rng = random.Random(7)
    ledger = Ledger(3)
    service = Service(engine=None, tokenizer=None, model_id="x",
                      limits=LimitsConfig(max_concurrent_requests=3, max_queued_requests=40))
    streams_started: list = []

    async def one(i: int) -> None:
        n = rng.choice([1, 1, 2])
        requests = [Brief(f"r{i}.{c}", rng.uniform(0, 0.004), ledger) for c in range(n)]
        try:
            streams = await service.start_all(requests, per_prompt=n)
        except asyncio.CancelledError:
            return ledger.end(i, "cancelled")
        except Overloaded:
            return ledger.end(i, "overloaded")
        except ShuttingDown:
            return ledger.end(i, "shutting down")
        ledger.end(i, "ran")
        streams_started.extend(streams)
        for stream in streams:
            try:
                async for _ in stream:
                    pass
            except (Finished, ShuttingDown):
                pass

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        tasks = []
        for i in range(150):
            tasks.append(asyncio.ensure_future(one(i)))
            if rng.random() < 0.25:
                loop.call_later(rng.uniform(0, 0.01), tasks[-1].cancel)
            if i == 75:
                loop.call_later(0.005, service.shut_down)
            if i % 5 == 0:
                await asyncio.sleep(0.001)
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 8)

    asyncio.run(scenario())
    for stream in streams_started:
        assert stream.finished.wait(5), "a generation's thread never ended"
    assert ledger.errors == [] and sorted(ledger.outcomes) == list(range(150))
    outcomes = list(ledger.outcomes.values())
    assert {"ran", "shutting down"} <= set(outcomes)
    assert service._slots.free == 3 and service._slots.waiting == 0 and ledger.held == 0
    assert service._live == set()


class CallContext:
    """A gRPC call's context, as `GenerationServicer._slot` uses it: `end()` ends the call
    (cancelled, past its deadline), running its callbacks; later ones are refused."""

    def __init__(self):
        self.callbacks, self.over, self._lock = [], False, threading.Lock()

    def add_callback(self, callback) -> bool:
        with self._lock:
            if self.over:
                return False
            self.callbacks.append(callback)
            return True

    def end(self) -> None:
        with self._lock:
            self.over, callbacks = True, list(self.callbacks)
        for callback in callbacks:
            callback()


def test_grpc_calls_that_end_at_random_as_the_service_shuts_down_give_every_slot_back():
    """The gRPC servicer's slots (`_slot`): 90 calls in 30 threads for 2 slots, a third of them
    ended at a random moment as they wait or run, the service shut down half-way.  Each call
    ran, left, or was refused (shutting down, line full), once; every slot comes back."""
    from rayspec.engine.interfaces import ShutdownSignal
    from rayspec.engine.interfaces import ShuttingDown as Down
    from rayspec.models.cancellation import GenerationCancelled
    from rayspec.rpc.coordinator import GenerationServicer
    from rayspec.engine.slots import QueueFull

    rng = random.Random(5)
    down = ShutdownSignal()  # as the service's: setting it closes the servicer's line too
    servicer = GenerationServicer(None, None, max_concurrent_requests=2, max_queued_requests=20, shutting_down=down)
    ledger = Ledger(2)
    plan = [(rng.random() < 0.33, rng.uniform(0, 0.01), rng.uniform(0, 0.003)) for _ in range(90)]

    def call(i: int) -> None:
        ends, after, hold = plan[i]
        context = CallContext()
        if ends:
            threading.Timer(after, context.end).start()
        try:
            with servicer._slot(context):
                ledger.hold(1)
                time.sleep(hold)
                ledger.unhold(1)
        except GenerationCancelled:
            return ledger.end(i, "left")
        except Down:
            return ledger.end(i, "shutting down")
        except QueueFull:
            return ledger.end(i, "line full")
        ledger.end(i, "ran")

    def caller(first: int) -> None:
        for i in range(first, 90, 30):
            call(i)

    threads = [threading.Thread(target=caller, args=(first,), daemon=True) for first in range(30)]
    for thread in threads:
        thread.start()
    threading.Timer(0.02, down.set).start()
    deadline = time.monotonic() + 8
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))

    assert not any(thread.is_alive() for thread in threads), "a call never left the line"
    assert ledger.errors == [] and sorted(ledger.outcomes) == list(range(90)) and ledger.held == 0
    assert {"ran", "shutting down"} <= set(ledger.outcomes.values())
    assert servicer._slots.free == 2 and servicer._slots.waiting == 0
