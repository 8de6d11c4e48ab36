"""The client's prediction of the completion (OpenAI's Predicted Outputs, `prediction: {"type":
"content", "content": ...}`) as drafts: a chain of its next tokens wherever the completion
follows it, the drafter's trees elsewhere.

When most of the output is known in advance — a file regenerated with a few edits, a
document reformatted — the prediction is a far better draft than a small model's: each step
proposes the prediction's next tokens from where the completion has reached in it, and the
target verifies them in one forward, so a step emits as many tokens as the completion keeps
following the prediction.  A draft that is a fixed function of the tokens committed so far
is a draw from the point mass on it (its q row is one-hot), so every verifier's exactness
argument holds unchanged: the output follows the target's law whatever the prediction; a
wrong prediction costs speed only, never correctness.

Where the completion leaves the prediction (an edit), the engine's drafter drafts (a step
drafts nothing when there is none), and the chain resumes after the longest suffix of the
completion (at least `MIN_MATCH` tokens, at most `MAX_MATCH`) found in the prediction — the
earliest such place at or after where it left, else the earliest anywhere — as prompt-lookup
and n-gram proposers do.

At T = 0 the chain is the step's whole tree: the target's token either is the predicted one
or the completion has reached an edit.  At T > 0 a sample may leave the prediction at any
token, so the chain is grafted beside the drafter's tree (`graft_draft`): the target scores
both in one forward, the chain's head is taken with probability p(head), and otherwise the
drafter's tree is verified against the rest of p (`rayspec.verify.tree_walk`) — a step that
leaves the prediction still gains what the drafter's tree gives.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Sequence

import torch

from rayspec.engine.interfaces import Draft, RequestFieldError, SequenceSpec
from rayspec.engine.trees import parse_tree_spec
from rayspec.tree.structure import DraftTree, TreeShape, graft_prediction
from rayspec.verify import verifier_class

MIN_MATCH = 2  # tokens of the completion's end that must recur in the prediction to resume there
MAX_MATCH = 8
DEFAULT_LOOKAHEAD = 8  # drafted tokens per step: `chain:8`, unless the request gives a chain


def check_prediction(prediction: Sequence[int], vocab_size: int, context: int | None = None) -> list[int]:
    """A prediction's token ids, refused when empty, outside the vocabulary, or longer than the
    model's `context` (None: not checked) holds, as a prompt is: no completion could follow the
    rest, and a client's millions of ids were each checked and indexed for nothing."""
    if context is not None and len(prediction) > context:
        raise ValueError(f"the prediction has {len(prediction)} tokens, more than the model's context of {context} "
                         f"tokens can hold")
    tokens = [int(t) for t in prediction]
    if not tokens:
        raise ValueError("the prediction must hold at least one token")
    outside = [t for t in tokens if not 0 <= t < vocab_size]
    if outside:
        raise ValueError(f"prediction token ids out of the vocabulary [0, {vocab_size}): {outside[:5]}")
    return tokens


class Prediction:
    """Where one completion stands in its prediction, and the chain to draft from there."""

    def __init__(self, prediction: Sequence[int], spec: SequenceSpec, vocab_size: int, context: int | None = None):
        self.prediction = check_prediction(prediction, vocab_size, context)
        self.vocab_size = vocab_size
        self.ships_q = verifier_class(spec.verifier).needs_draft_probs
        self.last = spec.prompt_ids[-1]  # the tree's root: the last committed token
        self.completion: list[int] = []
        self.at: int | None = 0  # where in the prediction the completion goes on; None: lost
        self.left = 0  # where it last followed the prediction
        self.places = defaultdict(list)  # token -> its positions in the prediction, ascending
        for position, token in enumerate(self.prediction):
            self.places[token].append(position)

    def draft(self, depth: int) -> Draft | None:
        """A chain of the prediction's next tokens (at most `depth`), None when there are none."""
        start = time.perf_counter()
        ahead = [] if self.at is None else self.prediction[self.at : self.at + depth]
        if not ahead:
            return None
        tree = DraftTree(TreeShape.chain(len(ahead)), torch.tensor([self.last, *ahead]))
        q_rows = None
        if self.ships_q:
            q_rows = torch.zeros(len(ahead), self.vocab_size)
            q_rows[torch.arange(len(ahead)), torch.tensor(ahead)] = 1.0
        return Draft(tree, q_rows, time.perf_counter() - start)

    def follow(self, tokens: list[int]) -> None:
        """Move along the prediction by a step's committed `tokens`, or find where to resume."""
        tokens = list(tokens)
        if not tokens:
            return
        self.completion += tokens
        self.last = self.completion[-1]
        if self.at is not None and self.prediction[self.at : self.at + len(tokens)] == tokens:
            self.at += len(tokens)
            self.left = self.at
        else:
            self.at = self._resume()

    def _resume(self) -> int | None:
        """The position after the longest recurrence of the completion's end, or None."""
        end = self.completion[-MAX_MATCH:]
        best, best_length = None, 0
        for position in self.places.get(end[-1], ()):
            length = 1
            while (length < len(end) and position - length >= 0
                   and self.prediction[position - length] == end[-1 - length]):
                length += 1
            after = position + 1
            if length < MIN_MATCH:
                continue
            if length > best_length or (length == best_length and best < self.left <= after):
                best, best_length = after, length
        return best


def prediction_chain(tree: str | TreeShape | None) -> TreeShape:
    """The tree a prediction is drafted into: `chain:N` when the request gives one, else
    `chain:DEFAULT_LOOKAHEAD`; any other tree is refused (a prediction has one draft per
    position), and so is `chain:0`, which names a chain of no predicted tokens: the request's
    prediction would never be drafted, while the drafter drafted the engine's own trees."""
    if tree is None:
        return TreeShape.chain(DEFAULT_LOOKAHEAD)
    shape = tree if isinstance(tree, TreeShape) else parse_tree_spec(tree) if str(tree).startswith("chain:") else None
    if shape is None or shape.size - 1 != shape.max_depth or shape.max_depth < 1:
        # the tree is what the client changes, the prediction being the point of the request
        raise RequestFieldError(f"with a prediction the tree is a chain of predicted tokens: give chain:N (N at least "
                                f"1) or no tree (chain:{DEFAULT_LOOKAHEAD}), not {tree!r}", "tree")
    return shape


def graft_draft(drafted: Draft, chain: Draft) -> tuple[Draft, tuple[int, ...]]:
    """The drafter's `drafted` tree with a prediction's `chain` grafted beside it
    (`graft_prediction`): (the draft, the node each of the drafter's nodes became).

    Its q rows, when the drafter's has them: the drafter's root row at the root (its children
    there were drawn from it; the chain's head is verified apart), the drafter's own rows at
    its nodes, and point masses along the chain."""
    tree, placed = graft_prediction(drafted.tree, chain.tree.tokens[1:].tolist())
    q_rows = divisors = None
    if drafted.q_rows is not None:
        shape, own = tree.shape, drafted.tree.shape
        vocab = drafted.q_rows.shape[1]
        q_rows = torch.zeros(len(shape.internal_nodes), vocab, dtype=drafted.q_rows.dtype, device=drafted.q_rows.device)
        divisors = torch.ones(len(shape.internal_nodes))
        drafter_rows = [(shape.internal_index[placed[node]], row) for row, node in enumerate(own.internal_nodes)]
        if drafter_rows:
            to, source = (torch.tensor(column) for column in zip(*drafter_rows))
            q_rows[to.to(q_rows.device)] = drafted.q_rows[source.to(q_rows.device)]
            if drafted.q_divisors is not None:
                divisors[to] = drafted.q_divisors.float().cpu()[source]
        points = [(node, shape.children[node][0]) for node in shape.predicted_chain[:-1]]
        if not own.num_children[0]:  # the chain's head is the root's only child
            points.append((0, shape.children[0][0]))
        for node, child in points:
            q_rows[shape.internal_index[node], int(tree.tokens[child])] = 1.0
        if drafted.q_divisors is None:
            divisors = None
    return Draft(tree, q_rows, drafted.seconds + chain.seconds, drafted.wire_bytes, divisors), placed


GRAFT_MODES = ("auto", "always", "never")


def check_graft_mode(mode: str) -> None:
    if mode not in GRAFT_MODES:
        raise ValueError(f"graft_predictions must be one of {', '.join(GRAFT_MODES)}, got {mode!r}")


@functools.lru_cache(maxsize=64)
def _grafted_shape(chain: TreeShape, drafter: TreeShape) -> TreeShape:
    """The shape of `drafter` with `chain`'s line grafted beside it (`graft_prediction`),
    priced at every chain step: built once per pair of shapes."""
    return graft_prediction(DraftTree(drafter, torch.zeros(drafter.size, dtype=torch.long)),
                            [0] * chain.max_depth)[0].shape


class GraftChoice:
    """Whether a step above T = 0 grafts the drafter's tree beside the prediction's chain
    (`graft_draft`) or drafts the chain alone, for one request.

    Grafting gains only where the target refuses the chain's head: the drafter's tree then
    gives τ tokens instead of the one correction token; it costs the drafter's call and the
    target's larger tree at every step.  With a the rate at which the head is taken and L
    the tokens of a step that takes it, a step gives a·L + (1 - a) tokens alone and
    a·L + (1 - a)·τ grafted; "auto" grafts when that buys more tokens per second under the
    engine's measured step costs (`rayspec.engine.calibrate`, the same costs Sequoia plans
    trees with), or more tokens per step where there are none.  a, L and τ are this request's
    own running means (from a prior worth one step), so the choice is a function of the
    request's tokens and the engine's costs, never of timings taken while it runs: a seed
    gives the same tokens on every replay."""

    def __init__(self, mode: str = "auto", cost=None):
        """cost: a `rayspec.tree.planner.CostModel` of this deployment, or None."""
        check_graft_mode(mode)
        self.mode, self.cost = mode, cost
        self.taken, self.chain_steps = 1.0, 2.0  # the head taken in one of two steps
        self.taken_tokens = [2.0, 1.0]  # tokens of the steps that took the head: sum, count
        self.drafted_tokens = [2.0, 1.0]  # tokens of grafted steps that refused it: sum, count

    def grafts(self, chain: TreeShape, drafter: TreeShape) -> bool:
        if self.mode != "auto":
            return self.mode == "always"
        a = self.taken / self.chain_steps
        taken = a * self.taken_tokens[0] / self.taken_tokens[1]
        alone, grafted = taken + (1 - a), taken + (1 - a) * self.drafted_tokens[0] / self.drafted_tokens[1]
        if self.cost is None or not isinstance(drafter, TreeShape):
            return grafted > alone
        together = _grafted_shape(chain, drafter)
        target = self.cost.target  # `together` may outgrow the sizes measured: extrapolated
        alone_seconds = target(chain.size) + self.cost.network(chain)
        grafted_seconds = (self.cost.draft(drafter) + self.cost.overhead + target(together.size)
                           + self.cost.network(together))
        return grafted / grafted_seconds > alone / alone_seconds

    def observe(self, outcome, grafted: bool) -> None:
        """A step that drafted the chain, grafted or not: its head is node 1 either way."""
        self.chain_steps += 1
        if outcome.path and outcome.path[0] == 1:
            self.taken += 1
            self.taken_tokens[0] += len(outcome.tokens)
            self.taken_tokens[1] += 1
        elif grafted:
            self.drafted_tokens[0] += len(outcome.tokens)
            self.drafted_tokens[1] += 1
