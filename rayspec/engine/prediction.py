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
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

import torch

from rayspec.engine.interfaces import Draft, SequenceSpec
from rayspec.engine.trees import parse_tree_spec
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify import verifier_class

MIN_MATCH = 2  # tokens of the completion's end that must recur in the prediction to resume there
MAX_MATCH = 8
DEFAULT_LOOKAHEAD = 8  # drafted tokens per step: `chain:8`, unless the request gives a chain


class Prediction:
    """Where one completion stands in its prediction, and the chain to draft from there."""

    def __init__(self, prediction: Sequence[int], spec: SequenceSpec, vocab_size: int):
        self.prediction = [int(t) for t in prediction]
        if not self.prediction:
            raise ValueError("the prediction must hold at least one token")
        outside = [t for t in self.prediction if not 0 <= t < vocab_size]
        if outside:
            raise ValueError(f"prediction token ids out of the vocabulary [0, {vocab_size}): {outside[:5]}")
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
    position)."""
    if tree is None:
        return TreeShape.chain(DEFAULT_LOOKAHEAD)
    shape = tree if isinstance(tree, TreeShape) else parse_tree_spec(tree) if str(tree).startswith("chain:") else None
    if shape is None or shape.size - 1 != shape.max_depth:
        raise ValueError(f"with a prediction the tree is a chain of predicted tokens: give chain:N or no tree, "
                         f"not {tree!r}")
    return shape
