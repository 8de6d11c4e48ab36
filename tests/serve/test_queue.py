"""The HTTP service's queue for generation slots (`rayspec.engine.slots.SlotQueue`), driven
through `Service.start_all` with stand-in requests that run until released: first come,
first served, a request's choices all or none, the queue's limit, and waiters that leave."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rayspec.engine.requests import StepText
from rayspec.serve.config import LimitsConfig
from rayspec.serve.service import Overloaded, Service


class Held:
    """A generation that runs (holding its slot) until `go` is set; its start is logged."""

    def __init__(self, name: str, started: list):
        self.request_id, self.prompt_ids = name, [1]
        self.started, self.go = started, threading.Event()

    def run(self):
        self.started.append(self.request_id)
        self.go.wait(30)
        raise RuntimeError("released")
        yield  # a generator, as GenerationRequest.run is

    def cancel(self):
        self.go.set()


def service_of(slots: int, queued: int) -> Service:
    return Service(engine=None, tokenizer=None, model_id="x",
                   limits=LimitsConfig(max_concurrent_requests=slots, max_queued_requests=queued))


async def ended(streams) -> None:
    for stream in streams:
        with pytest.raises(RuntimeError, match="released"):
            await asyncio.wait_for(anext(stream), 10)
        await asyncio.to_thread(stream.finished.wait, 10)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


async def until(condition, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within the time")


def test_requests_wait_first_come_first_served_and_a_request_of_n_choices_is_not_overtaken():
    """Two slots, both taken: a request of 2 choices then one of 1 wait.  A slot freed is kept
    for the head (2 choices), not given to the single request behind it, although one would
    fit; the head starts whole once both are free, then the single one."""
    service, started = service_of(2, 8), []

    async def scenario():
        a, b = Held("a", started), Held("b", started)
        c = [Held("c0", started), Held("c1", started)]
        d = Held("d", started)
        [sa] = await service.start_all([a])
        [sb] = await service.start_all([b])
        queued_c = asyncio.ensure_future(service.start_all(c, per_prompt=2))
        await settle()
        queued_d = asyncio.ensure_future(service.start_all([d]))
        await settle()
        assert service._slots.waiting == 2 and started == ["a", "b"]
        a.go.set()
        await ended([sa])
        await settle()
        # a slot is free and d would fit, but c came first
        assert service._slots.free == 1 and not queued_d.done() and started == ["a", "b"]
        b.go.set()
        await ended([sb])
        sc = await asyncio.wait_for(queued_c, 10)
        await asyncio.sleep(0.1)
        assert sorted(started[2:]) == ["c0", "c1"] and not queued_d.done()
        c[0].go.set()
        [sd] = await asyncio.wait_for(queued_d, 10)
        await asyncio.sleep(0.1)
        assert started[-1] == "d" and service._slots.waiting == 0
        c[1].go.set()
        d.go.set()
        await ended([*sc, sd])

    asyncio.run(scenario())
    assert service._slots.free == 2
    text = service.metrics.exposition().decode()
    assert "rayspec_request_queue_seconds_count 4.0" in text  # a, b, c and d: each request once


def test_a_full_queue_refuses_at_once_and_says_how_long_it_is():
    service, started = service_of(1, 2), []

    async def scenario():
        running = Held("running", started)
        [stream] = await service.start_all([running])
        waiting = [asyncio.ensure_future(service.start_all([Held(f"w{i}", started)])) for i in range(2)]
        await settle()
        assert "rayspec_requests_waiting 2.0" in service.metrics.exposition().decode()
        with pytest.raises(Overloaded) as refused:
            await service.start_all([Held("refused", started)])
        running.go.set()
        await ended([stream])
        for task in waiting:
            [s] = await asyncio.wait_for(task, 10)
            s.close()
            await ended([s])
        return str(refused.value)

    message = asyncio.run(scenario())
    assert message == ("the service runs 1 generation at once, all of its slots are taken, and its queue is full: "
                       "2 requests wait for them (limits.max_queued_requests: 2); retry later")
    assert "refused" not in started and service._slots.free == 1


def test_no_queue_refuses_at_once_as_before():
    service, started = service_of(1, 0), []

    async def scenario():
        running = Held("running", started)
        [stream] = await service.start_all([running])
        with pytest.raises(Overloaded, match=r"^the service runs 1 generation at once, all of its slots are taken, "
                                             r"and it queues no request \(limits.max_queued_requests: 0\); retry later$"):
            await service.start_all([Held("refused", started)])
        running.go.set()
        await ended([stream])

    asyncio.run(scenario())
    assert started == ["running"]


def test_a_waiter_cancelled_leaves_the_queue_holding_nothing_and_the_next_goes_on():
    """A request of 2 choices waits with one of its slots free; cancelled (its client gone),
    none of it starts, and the single request behind it takes the free slot at once."""
    service, started = service_of(2, 8), []

    async def scenario():
        a = Held("a", started)
        [sa] = await service.start_all([a])
        leaving = asyncio.ensure_future(service.start_all([Held("c0", started), Held("c1", started)], per_prompt=2))
        await settle()
        behind = asyncio.ensure_future(service.start_all([Held("d", started)]))
        await settle()
        assert not behind.done()
        leaving.cancel()
        [sd] = await asyncio.wait_for(behind, 10)
        with pytest.raises(asyncio.CancelledError):
            await leaving
        a.go.set()
        sd.close()
        await ended([sa, sd])

    asyncio.run(scenario())
    assert started == ["a", "d"] and service._slots.free == 2 and service._slots.waiting == 0


def test_a_waiter_cancelled_as_its_slots_are_granted_gives_them_back():
    service, started = service_of(1, 8), []

    async def scenario():
        a = Held("a", started)
        [sa] = await service.start_all([a])
        waiter = asyncio.ensure_future(service.start_all([Held("b", started)]))
        await settle()
        service._slots.release()  # as `a` would as it ends: granted to the waiter ...
        waiter.cancel()  # ... which is cancelled before it wakes up
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert service._slots.free == 1
        service._slots._free -= 1  # `a`'s slot, released above for it; its thread releases it again
        a.go.set()
        await ended([sa])

    asyncio.run(scenario())
    assert started == ["a"] and service._slots.free == 1


def test_the_queue_refuses_more_slots_at_once_than_it_has_rather_than_queue_them_for_ever():
    queue = service_of(2, 8)._slots
    with pytest.raises(ValueError, match=r"3 generations asked for at once, more than this service runs at once \(2\)"):
        asyncio.run(queue.take(3))


def test_more_choices_than_slots_run_that_many_at_a_time_each_ending_one_starting_the_next():
    """Five choices on two slots: the request takes both and starts two; each choice that
    ends hands its slot to the request's next, in order, not to a request waiting in line
    behind it, which gets a slot once the five have none left to start."""
    service, started = service_of(2, 8), []

    async def scenario():
        choices = [Held(f"c{i}", started) for i in range(5)]
        streams = await service.start_all(choices, per_prompt=5)
        behind = asyncio.ensure_future(service.start_all([Held("behind", started)]))
        await until(lambda: len(started) == 2 and service._slots.waiting == 1)
        assert sorted(started) == ["c0", "c1"] and service._slots.free == 0
        for done, now_started in ((0, "c2"), (1, "c3"), (2, "c4")):
            choices[done].go.set()
            await ended([streams[done]])
            await until(lambda: started[-1] == now_started)
            await settle()
            assert started[-1] == now_started and not behind.done()
        choices[3].go.set()  # none of the five left to start: its slot goes back, to the line
        await ended([streams[3]])
        [behind_stream] = await asyncio.wait_for(behind, 10)
        await until(lambda: started[-1] == "behind")
        assert sorted(started[:2]) == ["c0", "c1"] and started[2:] == ["c2", "c3", "c4", "behind"]
        choices[4].go.set()
        await ended([streams[4]])
        behind_stream.close()
        await asyncio.to_thread(behind_stream.finished.wait, 10)

    asyncio.run(scenario())
    assert service._slots.free == 2 and service._live == set()


@pytest.mark.parametrize("how", ["closed", "shut down"])
def test_choices_not_yet_started_never_run_once_their_request_is_closed_or_the_service_stops(how):
    """A client gone (every stream closed) or the service stopping while three of five
    choices wait for a slot: those three never run, each ends (closed: quietly; shut down:
    with ShuttingDown), and both slots come back."""
    from rayspec.engine.interfaces import ShuttingDown

    service, started = service_of(2, 8), []

    async def scenario():
        choices = [Held(f"c{i}", started) for i in range(5)]
        streams = await service.start_all(choices, per_prompt=5)
        await until(lambda: len(started) == 2)
        if how == "closed":
            for stream in streams:
                stream.close()
        else:
            service.shut_down()
            for stream in streams:  # each awaiting side gets the shutdown, the waiting ones' too
                with pytest.raises(ShuttingDown):
                    await asyncio.wait_for(anext(stream), 10)
        for stream in streams:
            assert await asyncio.to_thread(stream.finished.wait, 10)

    asyncio.run(scenario())
    assert sorted(started) == ["c0", "c1"] and service._slots.free == 2 and service._live == set()


def test_the_serve_replica_lets_the_queued_requests_reach_the_app():
    from rayspec.serve.app import HEADROOM, replica_request_limits

    limits = replica_request_limits(LimitsConfig(max_concurrent_requests=64, max_queued_requests=256))
    assert limits == {"max_ongoing_requests": 64 + 256 + HEADROOM, "max_queued_requests": 64 + 256 + HEADROOM}


@pytest.mark.parametrize("concurrent, queued", [(4, 256), (4, 0), (64, 256), (1, 0)])
def test_serve_does_not_drop_a_burst_the_replica_has_room_for(concurrent, queued):
    """Ray Serve's router counts every request it has not yet handed to a replica against the
    deployment's `max_queued_requests`, those arriving in the same instant included, and answers
    503 past it (ray.serve._private.router `wrap_request_assignment`).  Under locust, 16 users
    arriving together at a replica of 4 slots and a queue of 256 got 11 such 503s while Serve's
    queue was 4 long: a burst as large as the replica's room must fit in Serve's queue."""
    from rayspec.serve.app import replica_request_limits

    limits = replica_request_limits(LimitsConfig(max_concurrent_requests=concurrent, max_queued_requests=queued))
    burst = limits["max_ongoing_requests"]  # all pending assignment at once
    assert limits["max_queued_requests"] >= burst


def test_a_closed_queue_refuses_its_waiters_at_once_in_threads_and_on_the_loop():
    """`close` (the service shutting down) refuses whoever waits, a thread's waiter and an
    event loop's, with the error it is given, and every later request; slots still held are
    released as before."""
    from rayspec.engine.slots import SlotQueue

    class Closed(Exception):
        pass

    slots = SlotQueue(1, 4, Overloaded)
    assert slots.take_in_thread(1, threading.Event())
    outcome = []

    def wait_in_thread():
        try:
            outcome.append(slots.take_in_thread(1, threading.Event()))
        except Closed:
            outcome.append("refused")

    async def wait_on_loop():
        waiting = asyncio.ensure_future(slots.take(1))
        while slots.waiting < 2:
            await asyncio.sleep(0.01)
        slots.close(Closed)
        with pytest.raises(Closed):
            await asyncio.wait_for(waiting, 5)

    thread = threading.Thread(target=wait_in_thread)
    thread.start()
    while slots.waiting < 1:
        threading.Event().wait(0.01)
    asyncio.run(wait_on_loop())
    thread.join(5)
    assert outcome == ["refused"] and slots.waiting == 0
    with pytest.raises(Closed):
        slots.take_in_thread(1, threading.Event())
    slots.release()
    assert slots.free == 1


class CleanUpFails(Held):
    """A generation whose clean-up (its generator's close: sessions released) raises."""

    def run(self):
        self.started.append(self.request_id)
        try:
            while True:
                yield StepText("", [], None)  # a step of no tokens (`observe_step` is stubbed)
                self.go.wait(30)
        finally:
            raise RuntimeError("its clean-up failed")


def test_a_generation_whose_clean_up_fails_still_frees_its_slot_and_ends():
    """Closed mid-run (its client gone), a generation's generator raises as it is closed: the
    thread still frees its slot, leaves the live set and sets `finished`, and the next request
    in line runs."""
    from unittest import mock

    service, started = service_of(1, 4), []

    async def scenario():
        failing = CleanUpFails("failing", started)
        [stream] = await service.start_all([failing])
        behind = asyncio.ensure_future(service.start_all([Held("behind", started)]))
        assert (await asyncio.wait_for(anext(stream), 5)).token_ids == []
        await settle()
        stream.close()
        assert await asyncio.to_thread(stream.finished.wait, 5)
        [next_stream] = await asyncio.wait_for(behind, 5)
        next_stream.close()
        await ended([next_stream])

    with mock.patch.object(service.metrics, "observe_step"):
        asyncio.run(scenario())
    assert started == ["failing", "behind"] and service._slots.free == 1 and service._live == set()


def test_a_generation_whose_thread_cannot_start_is_not_left_live():
    """The second of a request's two threads fails to start: the request fails, the first one
    is closed, every slot comes back, and neither stays in the live set `shut_down` aborts."""
    from unittest import mock

    service, started = service_of(2, 4), []
    start, starts = threading.Thread.start, []

    def failing_second(thread):
        starts.append(thread)
        if len(starts) == 2:
            raise RuntimeError("can't start new thread")
        start(thread)

    async def scenario():
        choices = [Held("c0", started), Held("c1", started)]
        with mock.patch.object(threading.Thread, "start", failing_second), \
                pytest.raises(RuntimeError, match="can't start new thread"):
            await service.start_all(choices, per_prompt=2)
        await asyncio.to_thread(starts[0].join, 5)

    asyncio.run(scenario())
    assert started == ["c0"] and service._slots.free == 2 and service._live == set()


def test_generations_started_as_the_request_is_cancelled_are_closed_not_left_running():
    """`unless_client_leaves` cancelled (Serve cancelling the request) in the same turn as the
    slots' wait ends with its generations started: nobody will read them, so they are closed
    (`discard`) rather than run on to max_tokens for nobody."""
    from rayspec.serve.http import unless_client_leaves

    class Stays:  # a client that never leaves
        async def receive(self):
            await asyncio.Event().wait()

    async def scenario():
        discarded, go = [], asyncio.Event()

        async def started():
            await go.wait()
            return ["the streams"]

        outer = asyncio.ensure_future(unless_client_leaves(started(), Stays(), discarded.append))
        await asyncio.sleep(0.01)  # both waiting
        go.set()
        outer.cancel()  # in the same turn as the work's end
        with pytest.raises(asyncio.CancelledError):
            await outer
        await asyncio.sleep(0)  # the done callbacks
        return discarded

    assert asyncio.run(scenario()) == [["the streams"]]
