"""Drafter invariance (seed 000, §5) of the two coupling verifiers, at a node and along a
whole decoded sequence: what the target emits depends on (seed, position, p) only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayspec.coupling.noise import KeyedNoise
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify import get_verifier
from rayspec.verify.base import sample_without_replacement
from tests.cases import adversarial_pairs, random_law

NAMES = ["gumbel", "minhash"]
F64 = torch.float64


@pytest.mark.parametrize("name", NAMES)
def test_contract_attributes(name):
    verifier = get_verifier(name)
    assert verifier.drafter_invariant and verifier.lossless and not verifier.needs_draft_probs
    p = torch.tensor([0.2, 0.3, 0.5], dtype=F64)
    with pytest.raises(NotImplementedError):
        verifier.output_law(p, p, [0])
    noise, generator = KeyedNoise(3, 10), torch.Generator()
    assert torch.equal(verifier.tree_randomness(noise, 4).uniform(1, 8), KeyedNoise(3, 14).uniform(1, 8))
    assert verifier.tree_randomness(generator, 4) is generator
    # verification never reads q: a tree walk may pass none
    tokens, _ = verifier.verify_batch(p.unsqueeze(0), None, torch.tensor([[2, 1]]), noise)
    assert int(tokens[0]) == verifier.sample_target(p, noise)


@pytest.mark.parametrize("name", NAMES)
def test_emitted_token_ignores_q_and_the_drafts(name):
    verifier = get_verifier(name)
    rng = np.random.default_rng(1)
    for trial in range(30):
        size = int(rng.integers(2, 12))
        p = random_law(rng, size)
        noise = KeyedNoise(int(rng.integers(0, 2**62)), int(rng.integers(0, 10**6)))
        target_only = verifier.sample_target(p, noise)
        qs = [random_law(rng, size) for _ in range(20)] + [p.clone(), torch.full((size,), 1 / size, dtype=F64)]
        qs.append(torch.zeros(size, dtype=F64).index_fill_(0, torch.tensor([size - 1]), 1.0))
        q = torch.stack(qs)
        k = min(3, size)
        coupled = verifier.sample_drafts_batch(q, k, noise)
        arbitrary = torch.tensor(rng.integers(0, size, (len(qs), k)))
        none = torch.full((len(qs), k), -1)
        for drafts in (coupled, arbitrary, none):
            tokens, index = verifier.verify_batch(p.expand(len(qs), -1), q, drafts, noise)
            assert (tokens == target_only).all(), f"trial {trial}: the emitted token moved with q/drafts"
            hit = index >= 0
            assert torch.equal(drafts[hit, index[hit]], tokens[hit])
            assert not (drafts[~hit] == tokens[~hit, None]).any()
        # the same p in float32 (exactly representable values) gives the same token
        p32 = p.to(torch.float32)
        assert verifier.sample_target(p32, noise) == verifier.sample_target(p32.to(F64), noise)


@pytest.mark.parametrize("name", NAMES)
def test_emitted_token_moves_with_seed_and_position(name):
    verifier = get_verifier(name)
    p = torch.full((8,), 1 / 8, dtype=F64)
    by_seed = {verifier.sample_target(p, KeyedNoise(seed, 5)) for seed in range(40)}
    by_position = {verifier.sample_target(p, KeyedNoise(9, position)) for position in range(40)}
    assert len(by_seed) > 3 and len(by_position) > 3
    # per-row keys: row b sees exactly the noise of its own key
    seeds, positions = np.arange(40), np.arange(40) * 3
    rows = verifier.sample_target_batch(p.expand(40, -1), KeyedNoise(seeds, positions))
    assert rows.tolist() == [verifier.sample_target(p, KeyedNoise(int(s), int(t))) for s, t in zip(seeds, positions)]


@pytest.mark.parametrize("name", NAMES)
def test_no_nan_or_ruled_out_token_with_keyed_noise(name):
    verifier = get_verifier(name)
    for dtype in (torch.float32, F64):
        for label, p, q in adversarial_pairs():
            p, q = p.to(dtype), q.to(dtype)
            noise = KeyedNoise(np.arange(200), 7)
            drafts = verifier.sample_drafts_batch(q.expand(200, -1), 3, noise)
            tokens, _ = verifier.verify_batch(p.expand(200, -1), q.expand(200, -1), drafts, noise)
            assert (p[tokens] > 0).all(), label
            drafted = drafts[drafts >= 0]
            assert (q[drafted] > 0).all(), label
            support = int((q > 0).sum())
            assert ((drafts >= 0).sum(-1) == min(3, support)).all(), label


# ------------------------------------------------------------------- whole sequences

VOCAB = 6
_rng = np.random.default_rng(2024)
_TARGET = _rng.dirichlet(np.full(VOCAB, 0.4), size=(VOCAB, VOCAB))  # p(. | second-to-last, last)
_TARGET[_TARGET < 0.02] = 0  # truncated tokens: p = 0 somewhere
_TARGET /= _TARGET.sum(-1, keepdims=True)
_OTHER = _rng.dirichlet(np.full(VOCAB, 1.0), size=(VOCAB, VOCAB))


def target_law(context) -> torch.Tensor:
    return torch.tensor(_TARGET[context[-2], context[-1]])


DRAFTERS = {
    # name: (the drafter's law given a context, whether it drafts with the shared noise)
    "unrelated table": (lambda c: torch.tensor(_OTHER[c[-1], c[-2]]), True),
    "close to the target": (lambda c: torch.tensor(0.8 * _TARGET[c[-2], c[-1]] + 0.2 * _OTHER[c[-2], c[-1]]), True),
    "uniform, private noise": (lambda c: torch.full((VOCAB,), 1 / VOCAB, dtype=F64), False),
}
SHAPES = [TreeShape.kary(2, 2), TreeShape.chain(3), TreeShape((-1, 0, 0, 0, 1, 1, 2, 4))]


def draft_tree(verifier, shape, context, drafter, coupled, seed, generator):
    """The drafter's tree after `context`: children of a node at depth d are drafted with
    the noise of position len(context) + d (or privately); returns (tree, p_rows, q_rows)."""
    tokens, contexts = [context[-1]] + [None] * (shape.size - 1), [tuple(context)] + [None] * (shape.size - 1)
    p_rows, q_rows = [], []
    for node in range(shape.size):
        q = drafter(contexts[node])
        p_rows.append(target_law(contexts[node]))
        q_rows.append(q)
        children = shape.children[node]
        if children:
            if coupled:
                drafts = verifier.sample_drafts(q, len(children), KeyedNoise(seed, len(context) + shape.depth[node]))
            else:
                drafts = sample_without_replacement(q.unsqueeze(0), len(children), generator)[0]
            for child, token in zip(children, drafts.tolist()):
                tokens[child] = token
                contexts[child] = contexts[node] + (token,)
    return DraftTree(shape, torch.tensor(tokens)), torch.stack(p_rows), torch.stack(q_rows)


def speculative_decode(verifier, drafter, coupled, seed, prompt=(0, 1), length=20):
    context, accepted, generator = list(prompt), 0, torch.Generator().manual_seed(seed)
    while len(context) < len(prompt) + length:
        shape = SHAPES[len(context) % len(SHAPES)]
        tree, p_rows, q_rows = draft_tree(verifier, shape, context, drafter, coupled, seed, generator)
        verdict = verifier.verify_tree(tree, p_rows, q_rows, KeyedNoise(seed, len(context)))
        context += verdict.tokens
        accepted += verdict.num_accepted
    return context[len(prompt) : len(prompt) + length], accepted


def target_only_decode(verifier, seed, prompt=(0, 1), length=20):
    context = list(prompt)
    for _ in range(length):
        context.append(verifier.sample_target(target_law(context), KeyedNoise(seed, len(context))))
    return context[len(prompt) :]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_decoding_is_target_only_decoding_for_every_drafter(name, seed):
    verifier = get_verifier(name)
    reference = target_only_decode(verifier, seed)
    accepted = {}
    for label, (drafter, coupled) in DRAFTERS.items():
        tokens, accepted[label] = speculative_decode(verifier, drafter, coupled, seed)
        assert tokens == reference, f"{label}: {tokens} != target-only {reference}"
    assert accepted["close to the target"] > 0, "no draft was ever accepted: the test would be vacuous"


@pytest.mark.parametrize("name", NAMES)
def test_decoded_sequences_differ_across_seeds(name):
    verifier = get_verifier(name)
    assert len({tuple(target_only_decode(verifier, seed)) for seed in range(5)}) > 1


@pytest.mark.parametrize("name", NAMES)
def test_batched_walks_with_per_request_keys_equal_single_walks(name):
    verifier = get_verifier(name)
    drafter, _ = DRAFTERS["close to the target"]
    shape = SHAPES[0]
    seeds, contexts = [11, 12, 13], [[0, 1, 2], [3, 4], [5, 5, 1, 0]]
    trees = [draft_tree(verifier, shape, c, drafter, True, s, None) for c, s in zip(contexts, seeds)]
    noise = KeyedNoise(np.array(seeds), np.array([len(c) for c in contexts]))
    batch = verifier.verify_trees(
        shape, torch.stack([t.tokens for t, _, _ in trees]), torch.stack([p for _, p, _ in trees]),
        torch.stack([q for _, _, q in trees]), noise,
    )
    for b, ((tree, p_rows, q_rows), seed, context) in enumerate(zip(trees, seeds, contexts)):
        single = verifier.verify_tree(tree, p_rows, q_rows, KeyedNoise(seed, len(context)))
        assert batch.verdict(b) == single
