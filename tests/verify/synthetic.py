"""A table-lookup language pair for statistical tests of tree verification.

Target and drafter are tables p[a, b] and q[a, b] over a vocabulary of V tokens, indexed by
the last two tokens of the context: small enough that the target's law of any continuation
is known exactly, context-dependent enough that a walk mixing up nodes would show.
`decode_first_tokens` runs speculative decoding with a given tree shape for many independent
samples at once (drafts drawn by the verifier's own scheme, one batched call per tree node),
and returns each sample's first emitted tokens.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from rayspec.coupling import KeyedNoise
from rayspec.tree.structure import TreeShape


class TablePair:
    def __init__(self, vocab: int = 5, seed: int = 0, draft_quality: float = 0.6):
        rng = np.random.default_rng(seed)
        target = rng.dirichlet(np.full(vocab, 0.7), size=(vocab, vocab))
        noise = rng.dirichlet(np.full(vocab, 1.0), size=(vocab, vocab))
        self.vocab = vocab
        self.p = torch.tensor(target)
        self.q = torch.tensor(draft_quality * target + (1 - draft_quality) * noise)

    def law_of_continuation(self, context: tuple[int, int], length: int) -> dict:
        """Exact law of the next `length` tokens under the target."""
        law = {}
        for tokens in itertools.product(range(self.vocab), repeat=length):
            prob, (a, b) = 1.0, context
            for t in tokens:
                prob *= float(self.p[a, b, t])
                a, b = b, t
            law[tokens] = prob
        return law


def decode_first_tokens(verifier, pair: TablePair, shape: TreeShape, context, samples: int, length: int, seed: int = 0,
                        predict=None):
    """[samples, length] first tokens emitted by tree speculative decoding from `context`.

    With a shape that has a predicted chain, `predict(before, last)` gives each chain node's
    token from the two tokens before it (a fixed function of the context, as a client's
    prediction is), and the chain's internal nodes get point-mass q rows."""
    coupled = verifier.drafter_invariant
    draft_generator = torch.Generator().manual_seed(seed)
    verify_generator = torch.Generator().manual_seed(seed + 1)
    sample_ids = torch.arange(samples) + seed * samples
    sequences = torch.zeros(samples, 2 + length + shape.max_depth + 1, dtype=torch.long)
    sequences[:, :2] = torch.tensor(context)
    lengths = torch.full((samples,), 2)
    while True:
        rows = torch.nonzero(lengths < 2 + length).flatten()
        if not rows.numel():
            return sequences[:, 2 : 2 + length]
        count = rows.numel()
        before = sequences[rows, lengths[rows] - 2]
        tokens = torch.zeros(count, shape.size, dtype=torch.long)
        tokens[:, 0] = sequences[rows, lengths[rows] - 1]
        previous = torch.zeros(count, shape.size, dtype=torch.long)  # token before each node's
        previous[:, 0] = before
        for node in shape.predicted_chain:  # level by level: a chain node's parent is filled first
            parent = shape.parents[node]
            before = previous[:, parent]
            tokens[:, node] = predict(before, tokens[:, parent])
            previous[:, node] = tokens[:, parent]
        for node in shape.internal_nodes:
            children = [c for c in shape.children[node] if c not in shape.predicted_chain]
            if not children:
                continue
            q_node = pair.q[previous[:, node], tokens[:, node]]
            if coupled:  # the children are candidates for this absolute position
                randomness = KeyedNoise(sample_ids[rows], lengths[rows] + shape.depth[node])
            else:
                randomness = draft_generator
            drafts = verifier.sample_drafts_batch(q_node, len(children), randomness)
            assert (drafts >= 0).all(), "the tables have full support"
            tokens[:, children] = drafts
            previous[:, children] = tokens[:, node : node + 1]
        p_rows = pair.p[previous, tokens]
        q_rows = pair.q[previous, tokens]
        for node in shape.predicted_chain[:-1]:  # the chain's drafts are point masses
            q_rows[:, node] = torch.nn.functional.one_hot(tokens[:, shape.children[node][0]], pair.vocab)
        randomness = KeyedNoise(sample_ids[rows], lengths[rows]) if coupled else verify_generator
        walk = verifier.verify_trees(shape, tokens, p_rows, q_rows, randomness)
        emitted = walk.num_accepted + 1
        offsets = torch.arange(walk.tokens.shape[1])
        keep = offsets < emitted.unsqueeze(-1)
        target_rows = rows.unsqueeze(-1).expand_as(keep)[keep]
        target_cols = (lengths[rows].unsqueeze(-1) + offsets)[keep]
        sequences[target_rows, target_cols] = walk.tokens[keep]
        lengths[rows] += emitted
