"""Tree verification: deterministic walks, one walk == batched walk, and the law of the
first emitted tokens through a depth-3 tree equals the target's for every lossless verifier."""

from __future__ import annotations

import pytest
import torch

from rayspec.coupling import KeyedNoise
from rayspec.tree.structure import DraftTree, TreeShape, graft_prediction
from rayspec.verify import available_verifiers, get_verifier
from rayspec.verify.chain import RejectionChain, SequentialVerifier, acceptance_ratio, gather_rows
from rayspec.verify.base import iid_draft_law, sample_iid
from tests.stats import assert_frequencies_match
from tests.verify.synthetic import TablePair, decode_first_tokens

LOSSLESS = [n for n in available_verifiers() if get_verifier(n).lossless]

#        0
#     1  2  3
#    4 5 6
#   7 8
WIDE = TreeShape((-1, 0, 0, 0, 1, 1, 2, 4, 4))


def one_hot_rows(argmaxes, vocab=6):
    return torch.nn.functional.one_hot(torch.tensor(argmaxes), vocab).double()


# ----------------------------------------------------------------- deterministic walks


@pytest.mark.parametrize(
    "target_argmax, expected_path, expected_tokens, expected_ranks",
    [
        # argmax of p at nodes 0..8; node tokens are (root), 1, 2, 3, 3, 4, 4, 0, 1
        ([1, 3, 0, 0, 5, 0, 0, 0, 0], [1, 4], [1, 3, 5], [1, 1, 0]),  # node 4's children rejected
        ([2, 0, 4, 0, 0, 0, 0, 0, 0], [2, 6], [2, 4, 0], [2, 1]),  # second sibling, then its child
        ([5, 0, 0, 0, 0, 0, 0, 0, 0], [], [5], [0]),  # first token rejected: correction only
        ([1, 4, 0, 0, 0, 2, 0, 0, 0], [1, 5], [1, 4, 2], [1, 2]),  # sibling 5 after 4; leaf bonus
        ([1, 3, 0, 0, 0, 0, 0, 2, 0], [1, 4, 7], [1, 3, 0, 2], [1, 1, 1]),  # full depth + bonus
    ],
)
def test_greedy_walk_tables(target_argmax, expected_path, expected_tokens, expected_ranks):
    tokens = torch.tensor([9, 1, 2, 3, 3, 4, 4, 0, 1]) % 6
    p_rows = one_hot_rows(target_argmax)
    verdict = get_verifier("greedy").verify_tree(DraftTree(WIDE, tokens), p_rows, None, None)
    assert verdict.path == expected_path
    assert verdict.tokens == expected_tokens
    assert verdict.ranks == expected_ranks


def test_membership_continues_into_the_matching_child():
    """A correction token equal to a drafted child's token descends into that child."""
    # Root: drafts (0, 1); p puts no mass on 0, q drafted 0 first.  sps-style residual after
    # rejecting 0 is p itself, which may emit 1 -> membership into node 2.
    shape = TreeShape((-1, 0, 0, 2))
    tokens = torch.tensor([3, 0, 1, 2])
    p_rows = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.25] * 4, [0.0, 0.0, 1.0, 0.0], [0.25] * 4], dtype=torch.float64)
    q_rows = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.25] * 4, [0.0, 0.0, 1.0, 0.0], [0.25] * 4], dtype=torch.float64)
    verdict = get_verifier("rrs").verify_tree(DraftTree(shape, tokens), p_rows, q_rows, torch.Generator().manual_seed(0))
    assert verdict.tokens[:2] == [1, 2] and verdict.path == [2, 3] and verdict.ranks[0] == 2


def draft_one_tree(verifier, shape, pair, context, randomness):
    """Tokens and rows of one tree drafted by the verifier's own scheme from `context`."""
    tokens = torch.zeros(shape.size, dtype=torch.long)
    previous = torch.zeros(shape.size, dtype=torch.long)
    previous[0], tokens[0] = context
    for node in shape.internal_nodes:
        children = list(shape.children[node])
        noise = randomness.shifted(shape.depth[node]) if isinstance(randomness, KeyedNoise) else randomness
        drafts = verifier.sample_drafts_batch(pair.q[previous[node], tokens[node]][None], len(children), noise)[0]
        tokens[children] = drafts
        previous[children] = tokens[node]
    return tokens, pair.p[previous, tokens], pair.q[previous, tokens]


@pytest.mark.parametrize("unbalanced", [False, True], ids=["kary", "unbalanced"])
@pytest.mark.parametrize("name", available_verifiers())
def test_single_walk_equals_batched_walk(name, unbalanced):
    verifier = get_verifier(name)
    width = min(3, verifier.max_drafts or 3)
    shape = TreeShape.kary(width, 3) if width > 1 else TreeShape.chain(4)
    if unbalanced and width > 1:  # nodes of 1 to `width` children, as Sequoia's trees have
        shape = WIDE if width == 3 else TreeShape((-1, 0, 0, 1, 3, 4))
    pair = TablePair(vocab=7, seed=3)
    for trial in range(20):
        if verifier.drafter_invariant:
            draft, single, batched = (KeyedNoise(trial, 40) for _ in range(3))
        else:
            draft, single, batched = (torch.Generator().manual_seed(trial + i) for i in (100, 0, 0))
        tokens, p_rows, q_rows = draft_one_tree(verifier, shape, pair, (trial % 7, 2), draft)
        one = verifier.verify_tree(DraftTree(shape, tokens), p_rows, q_rows, single)
        many = verifier.verify_trees(shape, tokens[None], p_rows[None], q_rows[None], batched).verdict(0)
        assert one == many


# ------------------------------------------------------------ statistical law of a walk


def tree_for(verifier) -> TreeShape:
    if verifier.max_drafts == 1:
        return TreeShape.chain(3)
    if verifier.max_drafts == 2:
        return TreeShape((-1, 0, 0, 1, 1, 2, 3, 3, 4, 5))
    return TreeShape((-1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 6))


def first_three_tokens(verifier, samples: int, seed: int = 0):
    pair = TablePair(vocab=5, seed=0)
    first = decode_first_tokens(verifier, pair, tree_for(verifier), (0, 1), samples, 3, seed=seed)
    return [tuple(row) for row in first.tolist()], pair.law_of_continuation((0, 1), 3)


@pytest.mark.parametrize("name", LOSSLESS)
def test_first_three_tokens_through_a_depth3_tree_follow_the_target(name):
    verifier = get_verifier(name)
    assert tree_for(verifier).max_depth == 3
    samples, law = first_three_tokens(verifier, 200_000)
    assert_frequencies_match(samples, law, what=f"{name}: first 3 tokens")


class _NaiveMultiDraft(SequentialVerifier):
    """Seed 001 §4's invalid scheme: test each i.i.d. draft against p without updating p."""

    name = "naive"

    class _Chain(RejectionChain):
        def __init__(self, p, q, drafts):
            super().__init__(p, q, drafts)
            self.n_steps = drafts.shape[-1]

        def accept_prob(self, j):
            x = self.drafts[:, j]
            return acceptance_ratio(gather_rows(self.p, x), gather_rows(self.q, x)) * self.valid[:, j]

        def reject(self, j):
            pass

        def residual(self):
            return (self.p - self.q).clamp_min(0)

    def sample_drafts_batch(self, q, k, generator):
        return sample_iid(q, k, generator)

    def draft_law(self, q, k):
        return iid_draft_law(q, k)

    def chain(self, p, q, drafts):
        return self._Chain(p, q, drafts)


def test_the_statistical_check_catches_a_biased_verifier():
    samples, law = first_three_tokens(_NaiveMultiDraft(), 50_000)
    with pytest.raises(AssertionError, match="chi-square p-value"):
        assert_frequencies_match(samples, law)


# ------------------------------------------------------- trees with a predicted chain


def predicted_shape(verifier, chain: int = 2) -> TreeShape:
    """`tree_for(verifier)` (the drafter's tree) with a predicted chain beside it."""
    drafter = tree_for(verifier)
    return graft_prediction(DraftTree(drafter, torch.zeros(drafter.size, dtype=torch.long)), [0] * chain)[0].shape


PREDICTORS = {
    # A client's prediction is any fixed function of the context: one the target mostly
    # agrees with (its most likely next token), and one it rarely does.
    "likely": lambda pair: (lambda before, last: pair.p[before, last].argmax(-1)),
    "unlikely": lambda pair: (lambda before, last: pair.p[before, last].argmin(-1)),
}


@pytest.mark.parametrize("name", available_verifiers())
def test_predicted_walk_single_equals_batched(name):
    verifier = get_verifier(name)
    shape = predicted_shape(verifier)
    assert shape.predicted == 2 and len(shape.children[0]) == 1 + len(tree_for(verifier).children[0])
    pair = TablePair(vocab=7, seed=3)
    predict = PREDICTORS["likely"](pair)
    roots = []  # the rank of the root's child each walk descended into: 1 is the chain's head
    for trial in range(20):
        coupled = verifier.drafter_invariant
        single, batched = (KeyedNoise(trial, 40) if coupled else torch.Generator().manual_seed(trial) for _ in range(2))
        context = (trial % 7, 2)
        tokens, previous = torch.zeros(shape.size, dtype=torch.long), torch.zeros(shape.size, dtype=torch.long)
        previous[0], tokens[0] = context
        draft_noise = KeyedNoise(trial, 40) if coupled else torch.Generator().manual_seed(100 + trial)
        for node in shape.predicted_chain:
            parent = shape.parents[node]
            tokens[node], previous[node] = predict(previous[parent], tokens[parent]), tokens[parent]
        for node in shape.internal_nodes:
            children = [c for c in shape.children[node] if c not in shape.predicted_chain]
            if children:
                noise = draft_noise.shifted(shape.depth[node]) if coupled else draft_noise
                q = pair.q[previous[node], tokens[node]][None]
                tokens[children] = verifier.sample_drafts_batch(q, len(children), noise)[0]
                previous[children] = tokens[node]
        p_rows, q_rows = pair.p[previous, tokens], pair.q[previous, tokens]
        one = verifier.verify_tree(DraftTree(shape, tokens), p_rows, q_rows, single)
        many = verifier.verify_trees(shape, tokens[None], p_rows[None], q_rows[None], batched).verdict(0)
        assert one == many
        roots.append(one.ranks[0])
    assert 1 in roots, roots
    # Greedy's token is the target's argmax: the prediction here, always taken.
    assert name == "greedy" or any(rank > 1 for rank in roots), roots


@pytest.mark.parametrize("predictor", sorted(PREDICTORS))
@pytest.mark.parametrize("name", LOSSLESS)
def test_first_three_tokens_through_a_predicted_chain_and_a_drafted_tree_follow_the_target(name, predictor):
    verifier = get_verifier(name)
    pair = TablePair(vocab=5, seed=0)
    shape = predicted_shape(verifier)
    first = decode_first_tokens(verifier, pair, shape, (0, 1), 100_000, 3, predict=PREDICTORS[predictor](pair))
    assert_frequencies_match([tuple(row) for row in first.tolist()], pair.law_of_continuation((0, 1), 3),
                             what=f"{name}, {predictor} prediction: first 3 tokens")


def test_the_statistical_check_catches_a_prediction_verified_as_a_drafted_child():
    """The same trees walked as if the chain's head had been drawn from q like its siblings
    (no `predicted` mark): the head is then accepted with min(1, p/q) instead of p, biased."""
    verifier = get_verifier("rrs")
    pair = TablePair(vocab=5, seed=0)
    shape = predicted_shape(verifier)
    unmarked = TreeShape(shape.parents)

    class Unmarked(type(verifier)):
        def verify_trees(self, shape, tokens, p_rows, q_rows, generator):
            return super().verify_trees(unmarked, tokens, p_rows, q_rows, generator)

    first = decode_first_tokens(Unmarked(), pair, shape, (0, 1), 100_000, 3, predict=PREDICTORS["likely"](pair))
    with pytest.raises(AssertionError, match="chi-square p-value"):
        assert_frequencies_match([tuple(row) for row in first.tolist()], pair.law_of_continuation((0, 1), 3))


@pytest.mark.parametrize("name", [n for n in available_verifiers() if get_verifier(n).drafter_invariant])
def test_a_prediction_leaves_a_coupled_output_unchanged(name):
    """Drafter invariance (seed 000, §5) holds with a prediction beside the drafter's tree: the
    tokens are target-only sampling's under the same noise, whatever is predicted."""
    verifier = get_verifier(name)
    pair = TablePair(vocab=5, seed=1)
    shape = predicted_shape(verifier, chain=3)
    outputs = [decode_first_tokens(verifier, pair, shape, (2, 3), 2_000, 6, seed=4, predict=PREDICTORS[p](pair))
               for p in sorted(PREDICTORS)]
    alone = decode_first_tokens(verifier, pair, TreeShape.chain(0), (2, 3), 2_000, 6, seed=4)
    assert torch.equal(outputs[0], alone) and torch.equal(outputs[1], alone)


def test_a_predicted_chain_is_refused_unless_it_is_the_roots_first_line_of_only_children():
    with pytest.raises(ValueError, match="ends at node 1, which has children"):
        TreeShape((-1, 0, 0, 1, 1), predicted=1)
    with pytest.raises(ValueError, match="node 1 has 2 children"):
        TreeShape((-1, 0, 1, 1), predicted=2)
    with pytest.raises(ValueError, match="node 1 has 0 children"):
        TreeShape((-1, 0), predicted=2)
    assert TreeShape((-1, 0, 0, 1, 2, 3), predicted=3).predicted_chain == (1, 3, 5)


# ------------------------------------------------------------ rows in half precision
PRIVATE_LOSSLESS = [n for n in LOSSLESS if not get_verifier(n).drafter_invariant]


@pytest.mark.parametrize("name", PRIVATE_LOSSLESS)
def test_a_walk_over_bfloat16_rows_emits_each_rows_own_law(name):
    """bfloat16 rows sum to 1 only within its ~4e-3: (0.99, 0.006, 0.004) is
    (0.98828, 0.00601, 0.00400), of mass 0.99829, and q = (0.999, 5e-4, 5e-4) is (1.0, 5e-4,
    5e-4).  The rules assume a mass of 1 and the deficit fell on the residual's tokens: token 1,
    of law 0.0060, was emitted at the root with frequency 0.0072 by sps, 0.0079 by rrsw and
    spectr, 0.0070 by topk (whose arithmetic ran in bfloat16).  The walk reads half-precision
    rows as float32 laws over their own mass (`as_law`): the root's token follows p / sum(p),
    as a leaf's bonus token (drawn over the row's total) did already; 300k walks each."""
    verifier = get_verifier(name)
    k = min(2, verifier.max_drafts or 2)
    shape = TreeShape((-1,) + (0,) * k)  # a root and k drafted leaves
    walks = 300_000
    p = torch.tensor([0.99, 0.006, 0.004]).bfloat16()
    q = torch.tensor([0.999, 0.0005, 0.0005]).bfloat16()
    assert abs(float(p.double().sum()) - 1) > 1e-3 and abs(float(q.double().sum()) - 1) > 5e-4
    generator = torch.Generator().manual_seed(5)
    drafts = verifier.sample_drafts_batch(q.expand(walks, -1), k, generator)
    tokens = torch.cat([torch.zeros(walks, 1, dtype=torch.long), drafts], dim=1)
    p_rows = p.expand(walks, shape.size, -1).contiguous()
    q_rows = q.expand(walks, shape.size, -1).contiguous()
    walk = verifier.verify_trees(shape, tokens, p_rows, q_rows, generator)
    law = p.double() / p.double().sum()
    assert_frequencies_match(walk.tokens[:, 0].tolist(), {i: float(x) for i, x in enumerate(law)},
                             what=f"{name}: the root's token over bfloat16 rows")
    second = walk.tokens[walk.num_accepted == 1, 1]  # a leaf's bonus token, drawn from p
    assert_frequencies_match(second.tolist(), {i: float(x) for i, x in enumerate(law)},
                             what=f"{name}: a leaf's bonus token")
