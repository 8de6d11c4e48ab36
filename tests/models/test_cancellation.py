"""A prefill whose caller left (`rayspec.models.cancellation`): it leaves the model's queue
rather than cost the sequences behind it a forward, and a chunked one stops between chunks;
a call already in a running forward, and every call outside a watch, runs as before."""

from __future__ import annotations

import threading

import pytest
import torch

from rayspec.models.batching import ForwardBatcher
from rayspec.models.cancellation import GenerationCancelled, caller_left, watching_caller
from rayspec.models.tree_lm import TreeLM
from tests.tiny_models import tiny_llama

VOCAB = 64
PROMPT = list(range(1, 13))


@pytest.fixture
def model():
    return tiny_llama(vocab=VOCAB, seed=5)


def test_outside_a_watch_nobody_has_left():
    assert not caller_left()
    with watching_caller(lambda: True):
        assert caller_left()
        with watching_caller(None):
            assert not caller_left()
        assert caller_left()
    assert not caller_left()


def test_a_watch_belongs_to_the_thread_that_set_it():
    seen = []
    with watching_caller(lambda: True):
        thread = threading.Thread(target=lambda: seen.append(caller_left()))
        thread.start()
        thread.join()
    assert seen == [False]


def test_a_queued_prefill_whose_caller_left_leaves_the_queue_and_the_others_run(model):
    batcher = ForwardBatcher(max_sequences=1)
    holder, leaver, waiter = (TreeLM(model, batcher=batcher) for _ in range(3))
    running, release = threading.Event(), threading.Event()
    forward, forwarded = holder.forward_alone, []

    def held_forward(*args, **kwargs):
        running.set()
        assert release.wait(30)
        return forward(*args, **kwargs)

    holder.forward_alone = held_forward
    for lm, name in ((leaver, "leaver"), (waiter, "waiter")):
        lm.forward_alone = (lambda f, n: lambda *a, **k: (forwarded.append(n), f(*a, **k))[1])(lm.forward_alone, name)

    left, outcomes = threading.Event(), {}

    def prefill(name, lm, watch=None):
        try:
            with watching_caller(watch):
                outcomes[name] = lm.prefill(PROMPT)
        except GenerationCancelled as error:
            outcomes[name] = error

    threads = [threading.Thread(target=prefill, args=("holder", holder))]
    threads[0].start()
    assert running.wait(30)
    threads.append(threading.Thread(target=prefill, args=("leaver", leaver, left.is_set)))
    threads[1].start()
    while len(batcher._queue) < 1:
        threading.Event().wait(0.01)
    threads.append(threading.Thread(target=prefill, args=("waiter", waiter)))
    threads[2].start()
    while len(batcher._queue) < 2:
        threading.Event().wait(0.01)
    left.set()
    release.set()
    for thread in threads:
        thread.join(30)

    assert isinstance(outcomes["leaver"], GenerationCancelled)
    assert str(outcomes["leaver"]) == "its caller left while its forward was queued"
    assert forwarded == ["waiter"]  # the leaver's forward never ran
    assert leaver.committed == 0 and waiter.committed == holder.committed == len(PROMPT)
    alone = TreeLM(model).prefill(PROMPT)
    torch.testing.assert_close(outcomes["waiter"], alone)
    assert not batcher._queue and not batcher._running


def test_a_call_already_running_finishes_though_its_caller_left(model):
    lm = TreeLM(model, batcher=ForwardBatcher(max_sequences=1))
    left = threading.Event()
    forward = lm.forward_alone

    def leaving_forward(*args, **kwargs):
        left.set()  # the caller leaves while its forward runs
        return forward(*args, **kwargs)

    lm.forward_alone = leaving_forward
    with watching_caller(left.is_set):
        logits = lm.prefill(PROMPT)
    torch.testing.assert_close(logits, TreeLM(model).prefill(PROMPT))


def test_a_chunked_prefill_stops_between_chunks_once_its_caller_left(model):
    lm = TreeLM(model, batcher=ForwardBatcher(prefill_chunk=4))
    chunks = []
    forward = lm.forward_alone
    lm.forward_alone = lambda *args, **kwargs: (chunks.append(len(args[0])), forward(*args, **kwargs))[1]
    with watching_caller(lambda: len(chunks) == 2), pytest.raises(
            GenerationCancelled, match="^its caller left after 8 tokens of its prompt's prefill$"):
        lm.prefill(PROMPT)
    assert chunks == [4, 4] and lm.committed == 8

    # A caller that left before the model took its prefill, found idle: no forward at all.
    for batcher in (None, ForwardBatcher(), ForwardBatcher(prefill_chunk=4)):
        idle = TreeLM(model, batcher=batcher)
        with watching_caller(lambda: True), pytest.raises(GenerationCancelled, match="before its prefill"):
            idle.prefill(PROMPT)
        assert idle.committed == 0 and idle.cached == 0

    whole = TreeLM(model, batcher=ForwardBatcher(prefill_chunk=4))
    with watching_caller(lambda: False):
        logits = whole.prefill(PROMPT)
    torch.testing.assert_close(logits, TreeLM(model).prefill(PROMPT), atol=1e-5, rtol=1e-5)


def test_a_queued_call_whose_caller_left_leaves_while_the_forward_ahead_of_it_still_runs(model):
    """It noticed only when a forward ended and woke the queue: behind a long prefill (here
    one that does not end until the test says so), its thread waited for nobody."""
    from rayspec.models.batching import LEFT_CHECK_SECONDS

    batcher = ForwardBatcher(max_sequences=1)
    holder, leaver = TreeLM(model, batcher=batcher), TreeLM(model, batcher=batcher)
    running, release = threading.Event(), threading.Event()
    forward = holder.forward_alone

    def held_forward(*args, **kwargs):
        running.set()
        assert release.wait(30)
        return forward(*args, **kwargs)

    holder.forward_alone = held_forward
    left, outcome = threading.Event(), []

    def prefill_leaving():
        try:
            with watching_caller(left.is_set):
                leaver.prefill(PROMPT)
        except GenerationCancelled as error:
            outcome.append(error)

    holding = threading.Thread(target=holder.prefill, args=(PROMPT,))
    holding.start()
    try:
        assert running.wait(30)
        leaving = threading.Thread(target=prefill_leaving)
        leaving.start()
        while not batcher._queue:
            threading.Event().wait(0.01)
        left.set()
        leaving.join(4 * LEFT_CHECK_SECONDS)
        assert not leaving.is_alive() and not release.is_set()  # gone while the holder's forward runs
        assert [str(error) for error in outcome] == ["its caller left while its forward was queued"]
        assert not batcher._queue and leaver.committed == 0
    finally:
        release.set()
        holding.join(30)
    assert holder.committed == len(PROMPT)
