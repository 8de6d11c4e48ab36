"""Cross-request batching of one model's forwards (`rayspec.models.batching`): a batch gives
each sequence the logits and cache rows it gets alone, calls that wait while a forward runs
go together as the next, in arrival order and within the limits, and a failed batch is undone
and run call by call."""

from __future__ import annotations

import functools
import threading
import time

import pytest
import torch

from rayspec.models.batching import ForwardBatcher, _Call, forward_batch
from rayspec.models.tree_lm import TreeLM
from rayspec.tree.structure import TreeShape
from tests.tiny_models import tiny_llama

VOCAB = 96
TOLERANCE = 1e-5  # float32 rounding of a forward of another shape; measured 5e-7


@pytest.fixture
def model():
    return tiny_llama(vocab=VOCAB, layers=3, seed=11)


def _sequence(model, prefix_length: int, seed: int, batcher=None) -> TreeLM:
    """A sequence with `prefix_length` committed tokens, prefilled alone."""
    lm = TreeLM(model)
    if prefix_length:
        lm.prefill(torch.randint(VOCAB, (prefix_length,), generator=torch.Generator().manual_seed(seed)).tolist())
    lm.batcher = batcher
    return lm


def _tree_call(shape: TreeShape, seed: int, last=None) -> dict:
    tokens = torch.randint(VOCAB, (shape.size,), generator=torch.Generator().manual_seed(100 + seed)).tolist()
    return dict(tokens=tokens, parents=list(shape.parents), offsets=list(shape.depth), last=last)


# Sequences of different lengths, trees of different widths, a fresh cache whose first call is
# a prefill, and a drafter's second level, which sees rows appended earlier in its step.
CASES = [
    (12, _tree_call(TreeShape.kary(2, 2), 0)),
    (31, _tree_call(TreeShape.chain(4), 1)),
    (0, _tree_call(TreeShape.chain(6), 2, last=1)),
    (5, _tree_call(TreeShape((-1, 0, 0, 1, 2)), 3, last=2)),
]
LEVEL_BEFORE = dict(tokens=[7, 8], parents=[-1, -1], offsets=[0, 0])
SECOND_LEVEL = dict(tokens=[9, 10, 11], parents=[-1, -1, -1], offsets=[1, 1, 1],
                    visible_slots=[[True, False], [True, False], [False, True]])


def _built(model):
    """The CASES' sequences and calls, plus the drafter-level one, ready to forward."""
    lms = [_sequence(model, length, i) for i, (length, _) in enumerate(CASES)]
    calls = [dict(call) for _, call in CASES]
    level = _sequence(model, 9, 99)
    level.forward_alone(**LEVEL_BEFORE)
    return lms + [level], calls + [SECOND_LEVEL]


def _cache_rows(lm: TreeLM) -> list[torch.Tensor]:
    return [torch.cat([layer.keys, layer.values], -1) for layer in lm.cache.layers]


def test_a_batch_gives_each_sequence_the_logits_and_cache_rows_it_gets_alone(model):
    alone_lms, calls = _built(model)
    expected = [lm.forward_alone(**call) for lm, call in zip(alone_lms, calls)]
    batch_lms, calls = _built(model)
    got = forward_batch([_Call(lm, **call) for lm, call in zip(batch_lms, calls)])
    for i, (want, have, lm_alone, lm_batched) in enumerate(zip(expected, got, alone_lms, batch_lms)):
        assert have.shape == want.shape and have.dtype == torch.float32, f"sequence {i}"
        assert float((have - want).abs().max()) <= TOLERANCE, f"sequence {i}: logits differ"
        assert (lm_batched.cached, lm_batched.committed) == (lm_alone.cached, lm_alone.committed)
        for mine, theirs in zip(_cache_rows(lm_batched), _cache_rows(lm_alone)):
            assert float((mine - theirs).abs().max()) <= TOLERANCE, f"sequence {i}: cache rows differ"
    # The rows written are the sequences' own: committing a path and going on alone gives the
    # logits a sequence that never shared a forward gets.
    for lm in alone_lms[:1] + batch_lms[:1]:
        lm.keep([lm.committed, lm.committed + 1])
    follow = dict(tokens=[3, 4], parents=[-1, 0], offsets=[0, 1])
    assert torch.allclose(batch_lms[0].forward_alone(**follow), alone_lms[0].forward_alone(**follow), atol=TOLERANCE)


class _Gate:
    """Holds the model's first forward until `open()`, so that the calls made meanwhile queue;
    records each forward's batch size.  `fail_batches`: the last layer of a forward of several
    sequences raises, after the layers before it wrote their rows into the caches."""

    def __init__(self, model, fail_batches: bool = False):
        self.sizes: list[int] = []
        self.shapes: list[tuple[int, int]] = []  # (sequences, widest call's tokens) of each forward
        self.entered, self.released = threading.Event(), threading.Event()
        inner = model.forward

        @functools.wraps(inner)  # keeps the signature TreeLM reads its arguments' names from
        def forward(*args, **kwargs):
            self.sizes.append(kwargs["input_ids"].shape[0])
            self.shapes.append(tuple(kwargs["input_ids"].shape))
            self.entered.set()
            self.released.wait(10)
            return inner(*args, **kwargs)

        model.forward = forward
        if fail_batches:
            last_layer = model.model.layers[-1]
            layer_forward = last_layer.forward

            def failing(hidden_states, *args, **kwargs):
                if hidden_states.shape[0] > 1:
                    raise RuntimeError("out of memory (a stand-in)")
                return layer_forward(hidden_states, *args, **kwargs)

            last_layer.forward = failing

    def open(self):
        self.released.set()


def _forward_concurrently(batcher, lms, calls, model, before_opening=lambda: None, **gate):
    """The first call forwards alone, held by a gate; the others are made one after another
    while it runs, each once the one before is queued; then `before_opening()`, and the gate
    opens.  Returns (results, the gate)."""
    gate = _Gate(model, **gate)
    results: list = [None] * len(lms)

    def forward(i):
        try:
            results[i] = lms[i].forward(**calls[i])
        except Exception as error:  # noqa: BLE001 — what some tests look for
            results[i] = error

    threads = [threading.Thread(target=forward, args=(i,)) for i in range(len(lms))]
    threads[0].start()
    assert gate.entered.wait(10)
    for i, thread in enumerate(threads[1:], 1):
        thread.start()
        deadline = time.monotonic() + 10
        while batcher.waiting < i and time.monotonic() < deadline:
            time.sleep(0.001)
        assert batcher.waiting == i
    before_opening()
    gate.open()
    for thread in threads:
        thread.join(30)
    return results, gate


def test_calls_that_wait_while_a_forward_runs_go_together_as_the_next(model):
    expected_lms, calls = _built(model)
    expected = [lm.forward_alone(**call) for lm, call in zip(expected_lms, calls)]
    batcher = ForwardBatcher(max_sequences=16, max_tokens=256)
    lms, calls = _built(model)
    for lm in lms:
        lm.batcher = batcher
    results, gate = _forward_concurrently(batcher, lms, calls, model)
    assert gate.sizes == [1, len(lms) - 1]
    assert batcher.stats.sizes == {1: 1, len(lms) - 1: 1} and batcher.stats.calls == len(lms)
    for i, (have, want) in enumerate(zip(results, expected)):
        assert float((have - want).abs().max()) <= TOLERANCE, f"call {i}"


def test_batches_keep_arrival_order_within_the_sequence_and_token_limits(model):
    """Eight calls queue behind a held one: 4-node chains, and a 21-token prefill among them.
    At most 3 sequences and 12 query rows (sequences x widest) per forward: the prefill runs
    alone, and no call overtakes an earlier one."""
    batcher = ForwardBatcher(max_sequences=3, max_tokens=12)
    lengths = [3, 3, 3, 3, 3, 20, 3, 3, 3]
    lms = [_sequence(model, 4 + i, i, batcher) for i in range(len(lengths))]
    calls = [_tree_call(TreeShape.chain(n), i) for i, n in enumerate(lengths)]
    results, gate = _forward_concurrently(batcher, lms, calls, model)
    # held [4] | three sequences [4 4 4] | [4], as [4 21] would be 2 x 21 rows | [21] | [4 4 4]
    assert gate.sizes == [1, 3, 1, 1, 3]
    assert [tuple(r.shape) for r in results] == [(n + 1, VOCAB) for n in lengths]


def test_a_batch_is_at_most_half_padding(model):
    """A 22-token prefill and 4-node chains queue behind a held call: the prefill takes one
    chain along (44 rows, 18 of them padding), not two (66 rows, 36 of them padding)."""
    batcher = ForwardBatcher(max_sequences=16, max_tokens=256)
    lengths = [3, 21, 3, 3, 3]
    lms = [_sequence(model, 4 + i, i, batcher) for i in range(len(lengths))]
    calls = [_tree_call(TreeShape.chain(n), i) for i, n in enumerate(lengths)]
    results, gate = _forward_concurrently(batcher, lms, calls, model)
    assert gate.sizes == [1, 2, 2]
    assert [tuple(r.shape) for r in results] == [(n + 1, VOCAB) for n in lengths]


def test_with_one_sequence_a_batch_each_call_runs_alone(model):
    batcher = ForwardBatcher(max_sequences=1)
    lms, calls = _built(model)
    for lm in lms:
        lm.batcher = batcher
    _, gate = _forward_concurrently(batcher, lms, calls, model)
    assert gate.sizes == [1] * len(lms)


def test_a_model_with_sliding_window_layers_forwards_alone():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=64, max_position_embeddings=128,
                           sliding_window=8)
    model = MistralForCausalLM(config).eval()
    batcher = ForwardBatcher()
    lms = [_sequence(model, 6 + i, i, batcher) for i in range(4)]
    assert not lms[0].reuses_prefixes
    _, gate = _forward_concurrently(batcher, lms, [_tree_call(TreeShape.kary(2, 1), i) for i in range(4)], model)
    assert gate.sizes == [1, 1, 1, 1]


def test_a_failed_batch_is_undone_and_its_calls_run_alone(model):
    expected_lms, calls = _built(model)
    expected = [lm.forward_alone(**call) for lm, call in zip(expected_lms, calls)]
    batcher = ForwardBatcher()
    lms, calls = _built(model)
    for lm in lms:
        lm.batcher = batcher
    results, gate = _forward_concurrently(batcher, lms, calls, model, fail_batches=True)
    assert gate.sizes == [1, len(lms) - 1] + [1] * (len(lms) - 1)
    assert batcher.stats.failed_batches == 1
    for i, (have, want, lm, lm_alone) in enumerate(zip(results, expected, lms, expected_lms)):
        assert float((have - want).abs().max()) <= TOLERANCE, f"call {i}"
        assert lm.cached == lm_alone.cached, f"call {i}: the failed batch's rows were not undone"


def test_a_call_that_fails_fails_alone_and_its_batch_goes_on(model):
    batcher = ForwardBatcher()
    lms = [_sequence(model, 5 + i, i, batcher) for i in range(4)]
    calls = [_tree_call(TreeShape.kary(2, 1), i) for i in range(4)]
    calls[2]["tokens"] = [VOCAB + 7] * 3  # no embedding: the model raises
    results, _ = _forward_concurrently(batcher, lms, calls, model)
    assert isinstance(results[2], IndexError)
    assert lms[2].cached == 5 + 2  # nothing of the failed call stays in its cache
    assert [r.shape for i, r in enumerate(results) if i != 2] == [(3, VOCAB)] * 3
    assert batcher.stats.failed_batches == 1


def test_calls_of_a_forward_that_broke_off_get_an_error_not_nothing(model):
    batcher = ForwardBatcher()
    lms = [_sequence(model, 5 + i, i, batcher) for i in range(4)]
    calls = [_tree_call(TreeShape.kary(2, 1), i) for i in range(4)]

    def break_the_next_forward():
        def broken(batch):
            raise RuntimeError("the leader broke off")
        batcher._run = broken

    results, _ = _forward_concurrently(batcher, lms, calls, model, before_opening=break_the_next_forward)
    assert isinstance(results[0], torch.Tensor)  # the held call, run before the break
    assert str(results[1]) == "the leader broke off"
    assert [str(r) for r in results[2:]] == ["the model's forward was abandoned before this call ran"] * 2


@pytest.mark.parametrize("last", [None, 1, 3])
def test_a_long_prefill_goes_in_chunks_and_gives_the_logits_of_one_forward(model, last):
    prompt = torch.randint(VOCAB, (30,), generator=torch.Generator().manual_seed(5)).tolist()
    whole = TreeLM(model)
    expected = whole.prefill(prompt, last=last)
    assert TreeLM(model, ForwardBatcher(max_tokens=8)).prefill(prompt, last=last).shape == expected.shape
    chunked = TreeLM(model, ForwardBatcher(prefill_chunk=8))
    widths = []
    inner = chunked.forward_alone
    chunked.forward_alone = lambda tokens, *args, **kwargs: widths.append(len(tokens)) or inner(tokens, *args, **kwargs)
    got = chunked.prefill(prompt, last=last)
    assert widths == [8, 8, 8, 6]
    assert got.shape == expected.shape == (30 if last is None else last, VOCAB)
    assert float((got - expected).abs().max()) <= TOLERANCE
    assert chunked.committed == chunked.cached == whole.committed == 30
    for mine, theirs in zip(_cache_rows(chunked), _cache_rows(whole)):
        assert float((mine - theirs).abs().max()) <= TOLERANCE


def test_other_sequences_forwards_run_between_the_chunks_of_a_long_prefill(model):
    """A 30-token prefill in chunks of 8 (its first held by a gate) and a 3-node tree queued
    behind that first chunk: the tree is computed next — alone, or beside the second chunk —
    and the prefill's last chunk after it; whole, the prefill would have gone first."""
    batcher = ForwardBatcher(prefill_chunk=8)
    prefilling, other = TreeLM(model, batcher), _sequence(model, 6, 1, batcher)
    gate = _Gate(model)
    threads = [threading.Thread(target=lambda: prefilling.prefill(list(range(30)), last=1)),
               threading.Thread(target=lambda: other.forward(**_tree_call(TreeShape.kary(2, 1), 1)))]
    threads[0].start()
    assert gate.entered.wait(10)
    threads[1].start()
    deadline = time.monotonic() + 10
    while batcher.waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    gate.open()
    for thread in threads:
        thread.join(30)
    assert gate.shapes[0] == (1, 8) and gate.shapes[1] in [(1, 3), (2, 8)]
    assert gate.shapes[2:] in ([(1, 8), (1, 8), (1, 6)], [(1, 8), (1, 6)])
    assert prefilling.committed == 30 and other.cached == 6 + 3


@pytest.mark.parametrize("limits, message", [
    (dict(max_sequences=0), "max_batch_sequences must be a whole number, 1 or more, got 0"),
    (dict(max_tokens=2.5), "max_batch_tokens must be a whole number, 1 or more, got 2.5"),
    (dict(prefill_chunk=-1), "prefill_chunk_tokens must be a whole number, 0 or more, got -1"),
    (dict(max_sequences=True), "max_batch_sequences must be a whole number"),
])
def test_bad_limits_are_refused(limits, message):
    with pytest.raises(ValueError, match=message):
        ForwardBatcher(**limits)
