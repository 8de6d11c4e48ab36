"""One forward pass for a whole tree: the logits of every node equal those of its
root-to-node path run alone, and after committing the accepted path decoding continues
exactly as if those tokens had been decoded one by one."""

from __future__ import annotations

import pytest
import torch

from rayspec.models import TreeLM
from rayspec.models import tree_lm
from rayspec.models.tree_lm import GrowingLayer, cache_keyword, leave_cudnn_attention_out, visible_beyond_prefix
from rayspec.tree.structure import TreeShape
from tests.tiny_models import SLIDING_WINDOW_ARCHITECTURES, tiny_llama, tiny_sliding_window

SHAPES = [TreeShape.chain(5), TreeShape.kary(3, 2), TreeShape((-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))]


def path_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0, -1].float()


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab=96, layers=3)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.size}-nodes")
def test_tree_logits_equal_path_logits(model, shape):
    generator = torch.Generator().manual_seed(shape.size)
    prefix = torch.randint(96, (9,), generator=generator).tolist()
    tokens = torch.randint(96, (shape.size,), generator=generator).tolist()
    tokens[0] = prefix[-1]
    lm = TreeLM(model)
    lm.prefill(prefix[:-1])
    logits = lm.forward(tokens, shape.parents, shape.depth)
    worst = max(
        float((logits[node] - path_logits(model, prefix[:-1] + [tokens[i] for i in [0, *shape.path_to(node)]])).abs().max())
        for node in range(shape.size)
    )
    assert worst <= 1e-4


def test_level_by_level_forwards_equal_one_tree_forward(model):
    """The drafter's pattern: a level at a time, each seeing its forwarded ancestors."""
    shape = TreeShape((-1, 0, 0, 1, 1, 2, 3, 3))
    tokens = [5, 11, 12, 21, 22, 23, 31, 32]
    prefix = [1, 2, 3, 4, 5]
    whole = TreeLM(model)
    whole.prefill(prefix)
    expected = whole.forward(tokens[1:], [-1, -1, 0, 0, 1, 2, 2], [d - 1 for d in shape.depth[1:]])
    levels = TreeLM(model)
    levels.prefill(prefix)
    got, slot = {}, {}
    for level in shape.levels[1:]:
        nodes = list(level)
        visible = torch.zeros(len(nodes), levels.cached - levels.committed, dtype=torch.bool)
        for i, node in enumerate(nodes):
            for ancestor in shape.path_to(node)[:-1]:
                visible[i, slot[ancestor] - levels.committed] = True
        first = levels.cached
        out = levels.forward([tokens[n] for n in nodes], [-1] * len(nodes), [shape.depth[n] - 1 for n in nodes], visible)
        for i, node in enumerate(nodes):
            got[node], slot[node] = out[i], first + i
    for node in range(1, shape.size):
        assert float((got[node] - expected[node - 1]).abs().max()) <= 1e-4


def test_commit_then_continue_equals_one_by_one_decoding(model):
    shape = TreeShape.kary(2, 3)
    prefix = [7, 8, 9, 10]
    tokens = [10, 40, 41, 50, 51, 52, 53, 60, 61, 62, 63, 64, 65, 66, 67]
    lm = TreeLM(model)
    lm.prefill(prefix[:-1])
    lm.forward(tokens, shape.parents, shape.depth)
    accepted = [0, 2, 5, 12]  # root, then a path 2 -> 5 -> 12
    assert accepted[1:] == shape.path_to(12)
    lm.keep([lm.committed + node for node in accepted])
    sequence = prefix[:-1] + [tokens[n] for n in accepted]
    assert lm.committed == len(sequence)
    continued = lm.forward([70, 71], [-1, 0], [0, 1])  # two more tokens, a chain
    for i, token_list in enumerate(([70], [70, 71])):
        assert float((continued[i] - path_logits(model, sequence + token_list)).abs().max()) <= 1e-4
    # and the kept cache is the one a fresh one-by-one prefill builds
    fresh = TreeLM(model)
    for token in sequence:
        fresh.prefill([token])
    for mine, theirs in zip(lm.cache.layers, fresh.cache.layers):
        assert torch.allclose(mine.keys[..., : len(sequence), :], theirs.keys, atol=1e-5)
        assert torch.allclose(mine.values[..., : len(sequence), :], theirs.values, atol=1e-5)


def test_keep_refuses_committed_or_unordered_rows(model):
    lm = TreeLM(model)
    lm.prefill([1, 2, 3])
    lm.forward([4, 5, 6], [-1, 0, 0], [0, 1, 1])
    with pytest.raises(ValueError, match="increasing, uncommitted"):
        lm.keep([1])
    with pytest.raises(ValueError, match="increasing, uncommitted"):
        lm.keep([5, 4])
    lm.keep([3, 5])
    assert lm.committed == lm.cached == 5


def test_a_prefill_that_keeps_its_last_rows_gives_those_rows_and_the_same_cache(model):
    """`last` spares the vocabulary projection of the other rows, and changes nothing else."""
    prefix = [3, 14, 15, 92, 65, 35, 89, 79]
    whole, last_one, last_three = TreeLM(model), TreeLM(model), TreeLM(model)
    logits = whole.prefill(prefix)
    assert last_one.keeps_last_logits  # a HF Llama: the model projects only what is kept
    # a product of fewer rows may round differently in the last bit
    assert torch.allclose(last_one.prefill(prefix, last=1), logits[-1:], atol=1e-6)
    assert torch.allclose(last_three.prefill(prefix, last=3), logits[-3:], atol=1e-6)
    for lm in (last_one, last_three):
        assert lm.committed == whole.committed == len(prefix)
        for layer, reference in zip(lm.cache.layers, whole.cache.layers):
            assert torch.equal(layer.keys, reference.keys) and torch.equal(layer.values, reference.values)
    # what comes next is the same
    step = [prefix[-1], 7, 8]
    assert torch.allclose(last_one.forward(step, [-1, 0, 0], [0, 1, 1]), whole.forward(step, [-1, 0, 0], [0, 1, 1]),
                          atol=1e-6)


def test_a_model_without_logits_to_keep_still_gives_the_last_rows(model):
    class Plain(torch.nn.Module):
        """A causal LM whose forward takes no `logits_to_keep` (older or custom models)."""

        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              **{cache_keyword(self.inner): past_key_values}, use_cache=use_cache)

    prefix = [3, 14, 15, 92, 65]
    plain = TreeLM(Plain(model))
    assert not plain.keeps_last_logits
    assert torch.equal(plain.prefill(prefix, last=2), TreeLM(model).prefill(prefix)[-2:])


def reference_visibility(parents, pending: int, visible_slots) -> torch.Tensor:
    """By walking each node's ancestors: its own and its ancestors' new rows, and every
    pending row granted to any of them."""
    n = len(parents)
    visible = torch.zeros(n, pending + n, dtype=torch.bool)
    for i in range(n):
        node = i
        while node >= 0:
            visible[i, pending + node] = True
            if visible_slots is not None and pending:
                visible[i, :pending] |= visible_slots[node]
            node = parents[node]
    return visible


@pytest.mark.parametrize("pending", [0, 3])
@pytest.mark.parametrize("parents", [*(s.parents for s in SHAPES), (-1, -1, 0, 1, 1, -1, 5), (-1, -1, -1, -1)],
                         ids=["chain", "kary", "tree", "forest", "level"])
def test_each_node_sees_its_ancestors_and_the_pending_rows_they_were_granted(parents, pending):
    n = len(parents)
    generator = torch.Generator().manual_seed(n + pending)
    slots = torch.rand(n, pending, generator=generator) < 0.5 if pending else None
    expected = reference_visibility(parents, pending, slots)
    assert torch.equal(visible_beyond_prefix(parents, pending, slots), expected)
    if pending:  # rows appended earlier but granted to nobody stay hidden
        assert not visible_beyond_prefix(parents, pending)[:, :pending].any()


@pytest.mark.parametrize("seed", range(40))
def test_random_forests_see_what_walking_their_ancestors_gives(seed):
    """Forests of up to 40 nodes, each node's parent any earlier node or none, with and without
    pending rows granted at random: the indexed construction against the walk."""
    generator = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 41, (1,), generator=generator))
    parents = [int(torch.randint(-1, i, (1,), generator=generator)) if i else -1 for i in range(n)]
    pending = int(torch.randint(0, 6, (1,), generator=generator))
    slots = torch.rand(n, pending, generator=generator) < 0.3
    for granted in (slots, None):
        assert torch.equal(visible_beyond_prefix(parents, pending, granted),
                           reference_visibility(parents, pending, granted)), (parents, pending)


def test_a_tree_lm_on_cuda_turns_cudnn_attention_off_for_its_process_and_on_a_cpu_leaves_it(model, monkeypatch):
    """cuDNN's attention plans a graph for every new shape: 7.8 ms of host time a call on an
    H100 (bench/results/profile_step_cuda.md at commit a65062c), and a decoding step's shapes are always new."""
    devices = []
    monkeypatch.setattr(tree_lm, "leave_cudnn_attention_out",
                        lambda device: devices.append(device) or leave_cudnn_attention_out(device))
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        TreeLM(model)
        assert devices == [torch.device("cpu")] and torch.backends.cuda.cudnn_sdp_enabled() == before
        torch.backends.cuda.enable_cudnn_sdp(True)
        leave_cudnn_attention_out(torch.device("cuda"))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_the_cache_grows_in_place_past_its_buffers_with_exact_logits(model, monkeypatch):
    """Hundreds of rows in chunks of 1..7, each chunk after two appended rows that are dropped
    (the next chunk writes over them): the logits stay those of the whole sequence run at
    once, and the buffers are reallocated a handful of times, not at every forward."""
    regrown = []
    original = tree_lm._regrown
    monkeypatch.setattr(tree_lm, "_regrown", lambda *args: regrown.append(args[2]) or original(*args))
    sequence = torch.randint(96, (420,), generator=torch.Generator().manual_seed(3)).tolist()
    lm = TreeLM(model)
    assert all(isinstance(layer, GrowingLayer) for layer in lm.cache.layers)
    done, worst, forwards = 0, 0.0, 0
    while done < len(sequence) - 8:
        lm.forward([sequence[done], 5], [-1, 0], [0, 1])
        lm.keep([])
        n = 1 + done % 7
        logits = lm.prefill(sequence[done : done + n], last=1)
        done, forwards = done + n, forwards + 2
        worst = max(worst, float((logits[-1] - path_logits(model, sequence[:done])).abs().max()))
    assert worst <= 1e-4
    per_tensor = len(regrown) / (2 * len(lm.cache.layers))
    assert per_tensor <= 5, f"{per_tensor:.0f} reallocations per keys/values tensor over {forwards} forwards"


@pytest.fixture(scope="module", params=SLIDING_WINDOW_ARCHITECTURES)
def sliding_model(request):
    return tiny_sliding_window(request.param, window=4, vocab=96)


def test_a_sliding_window_model_trees_past_the_window_equal_hf_forwards(sliding_model):
    """Window 4, a 13-token prefix and trees 7 deep, forwarded whole, then level by level
    (rows appended earlier in the step, some of them past the window of the deepest nodes),
    then committed and continued: every node's logits are those HF's own forward gives its
    path, which applies the window itself."""
    shape = TreeShape((-1, 0, 0, 1, 2, 3, 4, 5, 6, 6))
    generator = torch.Generator().manual_seed(5)
    prefix = torch.randint(96, (13,), generator=generator).tolist()
    tokens = torch.randint(96, (shape.size,), generator=generator).tolist()
    tokens[0] = prefix[-1]

    def path(node):
        return prefix[:-1] + [tokens[i] for i in [0, *shape.path_to(node)]]

    whole, levels = TreeLM(sliding_model), TreeLM(sliding_model)
    assert whole.sliding_window == 4
    whole.prefill(prefix[:-1])
    logits = whole.forward(tokens, shape.parents, shape.depth)
    levels.prefill(prefix[:-1])
    by_level, slot = {}, {}
    for level in shape.levels:
        nodes = list(level)
        visible = torch.zeros(len(nodes), levels.cached - levels.committed, dtype=torch.bool)
        for i, node in enumerate(nodes):
            for ancestor in [0, *shape.path_to(node)][:-1]:
                visible[i, slot[ancestor] - levels.committed] = True
        first = levels.cached
        out = levels.forward([tokens[n] for n in nodes], [-1] * len(nodes), [shape.depth[n] for n in nodes], visible)
        for i, node in enumerate(nodes):
            by_level[node], slot[node] = out[i], first + i
    for node in range(shape.size):
        expected = path_logits(sliding_model, path(node))
        assert float((logits[node] - expected).abs().max()) <= 1e-4, node
        assert float((by_level[node] - expected).abs().max()) <= 1e-4, node
    accepted = [0, *shape.path_to(9)]
    whole.keep([whole.committed + node for node in accepted])
    continued = whole.forward([70, 71], [-1, 0], [0, 1])
    assert float((continued[1] - path_logits(sliding_model, path(9) + [70, 71])).abs().max()) <= 1e-4


def test_a_sliding_window_model_keeps_every_row_and_forwards_alone(sliding_model):
    lm = TreeLM(sliding_model)
    lm.prefill(list(range(1, 11)))
    assert lm.cached == lm.committed == 10  # not the last window's rows only
    assert all(isinstance(layer, GrowingLayer) for layer in lm.cache.layers)
    assert not lm.reuses_prefixes  # the batched forward applies no window
