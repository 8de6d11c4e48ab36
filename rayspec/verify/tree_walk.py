"""Verification of whole draft trees: the walk from the root (SpecInfer, Sequoia, seed 001
Alg. 3).

At a node with children, the verifier emits one token given the children's drafts.
Whenever the emitted token equals a child's token the walk descends into that child —
also when the token came from the residual rather than an accepted draft ("membership"
continuation; valid because the child's own subtree was drafted from q(.|path, token)
independently of this node's randomness).  The walk stops at the first emitted token that
matches no child, or at a leaf, where it emits a bonus token drawn from p.  Every emitted
token follows the target's law given the tokens before it, so their concatenation does too.

A tree with a predicted chain (`TreeShape.predicted`, OpenAI's Predicted Outputs) has, under
its root, the chain's head x — a token fixed by the committed tokens, a draw from the point
mass on x — beside the drafter's children, drawn from q.  The root is verified in two stages
(`_predicted_root`): x is accepted with probability p(x), as rejection sampling with q = δ_x
accepts it; else the drafter's children are verified by the verifier's own rule against the
residual p' = p without x, renormalised.  The emitted token is x with probability p(x), and
otherwise follows p', so it follows p; and p' is a law like any other for the second stage,
which is exact for every law (or, for a lossy verifier, keeps its bound: a mixture's KL is
at most the mixed KL).  A verifier whose emitted token is the target's own sample whatever
the drafts (`token_only`: greedy, the couplings) simply descends into whichever child, the
chain's first, holds that token — drafter invariance is kept.  Below the root the chain's
nodes are single drafts whose q rows are point masses, verified as any node is.

`walk_trees` walks B trees of one shape level by level, each level one batched call of the
verifier; `walk_tree` is the same walk for one tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify.base import draw_uniform, positive_part_normalized


@dataclass
class TreeVerdict:
    """The outcome of one tree walk.

    path    accepted node indices, root excluded, from the top down
    tokens  the emitted tokens: the accepted nodes' tokens, then one correction or bonus
            token; len(tokens) == len(path) + 1
    ranks   for each visited node that has children, the 1-based draw rank of the child
            the walk descended into, 0 where it descended into none
    """

    path: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)

    @property
    def num_accepted(self) -> int:
        return len(self.path)


@dataclass
class TreeWalkBatch:
    """Outcomes of B walks over trees of one shape (-1 pads every ragged row).

    tokens [B, D+1]  emitted tokens; row b holds num_accepted[b] + 1 of them
    path   [B, D]    accepted nodes
    ranks  [B, D+1]  rank of the child descended into at each visited internal node (0: none)
    """

    tokens: torch.Tensor
    path: torch.Tensor
    ranks: torch.Tensor
    num_accepted: torch.Tensor

    def verdict(self, b: int) -> TreeVerdict:
        n = int(self.num_accepted[b])
        ranks = [int(r) for r in self.ranks[b] if r >= 0]
        return TreeVerdict(self.path[b, :n].tolist(), self.tokens[b, : n + 1].tolist(), ranks)


_HALF = (torch.float16, torch.bfloat16)


def as_law(rows: torch.Tensor | None) -> torch.Tensor | None:
    """Half-precision rows as float32 laws: each row over its own mass; other rows as they are.

    Every verifier's rule assumes a row of mass 1 (SpS's min(1, p/q), a residual
    norm((p - q)^+) whose mass is taken as 1 - sum min(p, q)), and in exact arithmetic its
    law is off from the row's own law p / sum(p) by about |1 - sum(p)| in absolute terms, all
    of it on the tokens the residual holds.  A float16 row sums to 1 within ~1e-3, a
    bfloat16 one within ~4e-3 and cannot be renormalised in its own precision; the bonus
    token at a leaf, drawn by inverse CDF over the row's total, follows p / sum(p) already.
    (bfloat16 (0.99, 0.006, 0.004) against q = (0.999, 5e-4, 5e-4): SpS emitted token 1
    with 0.0077 for its 0.0060.)  Float32 rows, what the engine scores, sum to 1 within
    ~1e-6 and are passed on untouched, with no pass over them."""
    if rows is None or rows.dtype not in _HALF:
        return rows
    return positive_part_normalized(rows.float())  # a probability row's positive part is itself


def _select(randomness, rows: torch.Tensor, batch: int):
    """The randomness of a subset of rows (a generator serves any subset as it is)."""
    if hasattr(randomness, "select") and rows.numel() != batch:
        return randomness.select(rows)
    return randomness


def _descend(drafts: torch.Tensor, token: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The column of the child the walk descends into, -1 for none: the accepted draft, or
    (membership) the first child holding a residual token."""
    hit = (drafts == token.unsqueeze(-1)) & (drafts >= 0)
    first_hit = torch.where(hit.any(-1), hit.to(torch.int8).argmax(-1), -1)
    return torch.where(index >= 0, index, first_hit)


def _draft_width(shape: TreeShape) -> int:
    """How many draft columns each verifier call gets: the widest node's children, padded
    with -1 — not counting a predicted chain's head, verified apart (`_predicted_root`), so
    that a verifier taking at most k drafts is never handed more columns."""
    counts = list(shape.num_children)
    counts[0] -= 1 if shape.predicted else 0
    return max(*counts, 1)


def _predicted_root(verifier, p, q, drafts, randomness, select) -> tuple[torch.Tensor, torch.Tensor]:
    """The root of a tree with a predicted chain, B walkers: p [B, V], q [B, V] (the law the
    drafter's children were drawn from) or None, drafts [B, k] whose column 0 is the chain's
    head.  Returns (emitted token [B], column of the child to descend into or -1 [B]).

    `select(rows)` gives the randomness of a subset of the walkers: the second stage draws
    for the walkers that refused the head only."""
    head, others = drafts[:, 0], drafts[:, 1:]
    if verifier.token_only:  # the target's own sample, whatever the drafts
        token = (verifier.verify_batch(p, q, others, randomness)[0] if others.shape[1]
                 else verifier.sample_target_batch(p, randomness))
        column = _descend(others, token, torch.full_like(token, -1))
        return token, torch.where(token == head, 0, torch.where(column >= 0, column + 1, -1))
    chance = p.gather(-1, head.unsqueeze(-1)).squeeze(-1)
    kept = draw_uniform(randomness, (p.shape[0],), p.device) < chance
    token, column = head.clone(), torch.zeros_like(head)
    refused = torch.nonzero(~kept).flatten()
    if refused.numel():
        rest = positive_part_normalized(p[refused].scatter(-1, head[refused].unsqueeze(-1), 0.0))
        if others.shape[1]:
            found, index = verifier.verify_batch(rest, None if q is None else q[refused], others[refused],
                                                 select(refused))
            found_column = _descend(others[refused], found, index)
            column[refused] = torch.where(found_column >= 0, found_column + 1, -1)
        else:
            found = verifier.sample_target_batch(rest, select(refused))
            column[refused] = -1
        token[refused] = found
    return token, column


def walk_trees(verifier, shape: TreeShape, tokens, p_rows, q_rows, generator) -> TreeWalkBatch:
    """Walk B trees of one shape.

    tokens [B, N] drafted tokens (column 0 the root's); p_rows [B, N, V] the target's law
    after each node's path; q_rows the law each node's children were drafted from, either
    [B, N, V] or, for internal nodes only, [B, I, V] in `shape.internal_nodes` order; None
    for verifiers that never read q.  Only the rows of visited nodes are read.
    """
    batch, depth_max = tokens.shape[0], shape.max_depth
    device = p_rows.device
    first_child = torch.tensor(shape.first_child, device=device)
    num_children = torch.tensor(shape.num_children, device=device)
    width = _draft_width(shape)
    columns = torch.arange(width + (1 if shape.predicted else 0), device=device)
    tokens = tokens.to(device)
    nodes = shape.size

    internal_row = torch.tensor(shape.internal_index, device=device)

    def rows_of(table, walkers, at):
        # index_select on flattened rows: advanced indexing with two index tensors into a
        # [B, N, V] tensor costs milliseconds on the CPU, this costs microseconds.
        width = table.shape[1]
        if width != nodes:  # rows for internal nodes only
            at = internal_row[at]
        return table.reshape(batch * width, -1).index_select(0, walkers * width + at)

    emitted = torch.full((batch, depth_max + 1), -1, dtype=torch.long, device=device)
    ranks = torch.full((batch, depth_max + 1), -1, dtype=torch.long, device=device)
    path = torch.full((batch, max(depth_max, 1)), -1, dtype=torch.long, device=device)
    num_accepted = torch.zeros(batch, dtype=torch.long, device=device)
    node = torch.zeros(batch, dtype=torch.long, device=device)
    walking = torch.arange(batch, device=device)

    for depth in range(depth_max + 1):
        randomness = verifier.tree_randomness(generator, depth)
        here = node[walking]
        is_leaf = num_children[here] == 0
        leaves, inner = walking[is_leaf], walking[~is_leaf]
        if leaves.numel():
            p_leaf = as_law(rows_of(p_rows, leaves, node[leaves]))
            emitted[leaves, depth] = verifier.sample_target_batch(p_leaf, _select(randomness, leaves, batch))
        if not inner.numel():
            break
        at = node[inner]
        child = first_child[at].unsqueeze(-1) + columns
        valid = columns < num_children[at].unsqueeze(-1)
        drafts = torch.where(valid, tokens[inner.unsqueeze(-1), child.clamp_max(shape.size - 1)], -1)
        if depth or not shape.predicted:
            drafts = drafts[:, :width]
        q = None if q_rows is None else as_law(rows_of(q_rows, inner, at))
        p = as_law(rows_of(p_rows, inner, at))
        if depth == 0 and shape.predicted:
            token, column = _predicted_root(verifier, p, q, drafts, _select(randomness, inner, batch),
                                            lambda rows: _select(randomness, inner[rows], batch))
        else:
            token, index = verifier.verify_batch(p, q, drafts, _select(randomness, inner, batch))
            column = _descend(drafts, token, index)  # membership: a residual token continues too
        emitted[inner, depth] = token
        went_down = column >= 0
        ranks[inner, depth] = column + 1  # 0 where the walk stops here
        down = inner[went_down]
        node[down] = first_child[at[went_down]] + column[went_down]
        if depth < depth_max:
            path[down, depth] = node[down]
        num_accepted[down] += 1
        walking = down
    return TreeWalkBatch(emitted, path[:, :depth_max], ranks, num_accepted)


def walk_tree(verifier, tree: DraftTree, p_rows, q_rows, generator) -> TreeVerdict:
    """Walk one tree: p_rows [N, V]; q_rows [N, V], [I, V] for the internal nodes only, or None.

    The same walk as `walk_trees` for B = 1 — same verifier calls with the same shapes (every
    node's drafts padded with -1 to the tree's widest node), so the same randomness and the
    same verdict — with the tree bookkeeping in Python integers: for one tree, tensor
    bookkeeping would cost more than the verification itself."""
    shape, tokens = tree.shape, tree.tokens.tolist()
    width = _draft_width(shape)
    verdict = TreeVerdict()
    node = 0
    while True:
        randomness = verifier.tree_randomness(generator, shape.depth[node])
        p = as_law(p_rows[node : node + 1])
        children = shape.children[node]
        if not children:
            verdict.tokens.append(int(verifier.sample_target_batch(p, randomness)[0]))
            return verdict
        padded = width + (1 if node == 0 and shape.predicted else 0)
        drafts = torch.tensor([[tokens[c] for c in children] + [-1] * (padded - len(children))], device=p.device)
        row = node if q_rows is None or q_rows.shape[0] == shape.size else shape.internal_index[node]
        q = None if q_rows is None else as_law(q_rows[row : row + 1])
        if node == 0 and shape.predicted:
            token, index = (int(x[0]) for x in _predicted_root(verifier, p, q, drafts, randomness,
                                                               lambda rows: randomness))
        else:
            token, index = (int(x[0]) for x in verifier.verify_batch(p, q, drafts, randomness))
            if index < 0:  # membership: a residual token equal to a draft continues too
                index = next((i for i, c in enumerate(children) if tokens[c] == token), -1)
        verdict.tokens.append(token)
        if index < 0:
            verdict.ranks.append(0)
            return verdict
        node = children[index]
        verdict.ranks.append(index + 1)
        verdict.path.append(node)
