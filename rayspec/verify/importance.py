"""Importance-weighted multi-draft speculative sampling (Khisti et al. 2024, seed 002).

The drafts X_1..X_k are i.i.d. from q.  Verification has two steps (the paper's canonical
decomposition, Thm. 1):

1. *Selection* (Definition 1): pick one draft Y_I among the drafts by a rule
   beta_y(x) = P(Y_I = y | X = x), and compute p_I, the exact law of Y_I over the drafts
   and the selection together.
2. *Single-draft speculative sampling* of Y_I against the target with p_I as its draft law:
   accept Y_I w.p. min(1, p(Y_I) / p_I(Y_I)), else emit from norm((p - p_I)^+).

Step 2 is lossless for *any* selection rule, provided p_I is the law of Y_I exactly; every
approximation below (truncated LP, pairwise stages, truncated alphabet) changes only the
rule, never the exactness of p_I.

Selection works pairwise (Remark 4): the first two drafts are combined into Y_12 with law
p_12, then (Y_12, X_3) -- independent inputs with laws (p_12, q) -- into Y_123, and so on,
so p_I costs O(k M^2).  A stage with inputs A ~ a, B ~ b keeps A w.p. S[A, B] (App. G,
eq. 187 in our notation):

    c(y) = sum_j a(y) b(j) S[y, j] + sum_i a(i) b(y) (1 - S[i, y])         (`pair_law`)

The two verifiers differ only in S:
    "is"           classical self-normalised importance sampling, S[i, j] = w_a(i) /
                   (w_a(i) + w_b(j)) with w = p / (input law); at k = 2 that is choosing a
                   draft with probability proportional to p/q.
    "is-weighted"  the weights maximising sum_y min(p(y), c(y)) (Thm. 1; §4 eqs. 10-11 for
                   k = 2, App. G for non-identical inputs), the paper's LP solved as the
                   maximum flow it is, with the truncated LP of Alg. 1 (eq. 12).  At k = 2
                   untruncated, its acceptance is the optimum over all valid schemes,
                   min_S {p(S) + 1 - q(S)^2} (Thm. 3).

Large vocabularies use the *truncated alphabet* of §4: Omega_0 = the top-M tokens of p,
gamma = p(Omega_0).  The drafts outside Omega_0 are dropped; given how many are left, those
left are i.i.d. from q restricted to Omega_0 and renormalised (q~), so the scheme runs on
(p~ = p|Omega_0 / gamma, q~) with the drafts left: none -> a token from p~, one -> plain
speculative sampling against q~, two or more -> the pairwise scheme.  Its output Y' follows
p~ whatever the number of drafts left; it is kept w.p. gamma, independently of everything
else, otherwise a token is drawn from p restricted to the complement of Omega_0.  The
emitted token then follows gamma p~ + p|Omega_0^c = p exactly.  With V <= M nothing is
truncated.

The small M-sized computations run in float64 whatever the input dtype: the rules need it
and they are cheap; the vocabulary-sized work (top-M, tail mass, tail sampling) stays in the
input dtype.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from math import comb

import numpy as np
import torch
from scipy.sparse import csr_array
from scipy.sparse.csgraph import maximum_flow

from rayspec.verify.base import IIDDrafts, Verifier, draw_uniform, sample_categorical
from rayspec.verify.chain import acceptance_ratio
from rayspec.verify.sps import SpeculativeSampling

F64 = torch.float64


# --------------------------------------------------------------------------- selection rules


def pair_law(a: torch.Tensor, b: torch.Tensor, rule: torch.Tensor) -> torch.Tensor:
    """Law of the token kept by a pairwise stage (App. G eq. 187; eq. 11 when a = b).

    a, b [..., m] laws of the two independent inputs; rule [..., m, m] with rule[i, j] =
    P(keep the first input | inputs (i, j)).  The diagonal does not matter: both inputs are
    the same token there."""
    pair = a.unsqueeze(-1) * b.unsqueeze(-2)
    return (pair * rule).sum(-1) + (pair * (1 - rule)).sum(-2)


def importance_rule(p: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Self-normalised importance sampling between two inputs: keep the first w.p.
    w_a(i) / (w_a(i) + w_b(j)), w_a = p / a, w_b = p / b; [U, m] -> [U, m, m].

    A token of zero input mass is never an input of that side, so its weight is arbitrary (0);
    two zero weights split evenly.

    Computed as p(i) b(j) / (p(i) b(j) + p(j) a(i)): both weights multiplied by a(i) b(j), a zero
    mass counted as 1 there (any positive factor common to both leaves the ratio as it is).
    p / a itself overflows to inf where a(i) < p(i) / 1.8e308 (a float64 subnormal), and
    inf / inf is NaN; these products are at most 1."""
    a_or_1 = torch.where(a > 0, a, 1).unsqueeze(-1)
    b_or_1 = torch.where(b > 0, b, 1).unsqueeze(-2)
    weighted_a = torch.where(a > 0, p, 0).unsqueeze(-1) * b_or_1  # w_a(i) a(i) b(j)
    weighted_b = torch.where(b > 0, p, 0).unsqueeze(-2) * a_or_1  # w_b(j) a(i) b(j)
    total = weighted_a + weighted_b
    rule = torch.where(total > 0, weighted_a / torch.where(total > 0, total, 1), 0.5)
    return _keep_first_on_ties(rule)


def _keep_first_on_ties(rule: torch.Tensor) -> torch.Tensor:
    # Equal tokens: keeping the incumbent reports the earliest matching draft.
    return rule.masked_fill(torch.eye(rule.shape[-1], dtype=torch.bool, device=rule.device), 1.0)


def optimal_rules(p: np.ndarray, a: np.ndarray, b: np.ndarray, free_tokens: int | None) -> np.ndarray:
    """The pairwise rules maximising sum_y min(p(y), c(y)), c = `pair_law(a, b, rule)`.

    p, a, b [U, m] -> rules [U, m, m].  Seed 002 Thm. 1 for two drafts: the LP of §4
    eqs. 10-11 (a = b) and App. G (a != b), solved as the maximum flow it is.  One weight w
    per unordered pair i < j: rule[i, j] = w and rule[j, i] = 1 - w, so of the pair's mass
    a(i) b(j) + a(j) b(i) a share w goes to token i and the rest to j.  That is the paper's
    LP for a = b; for a != b (App. G has one variable per ordered pair) it loses nothing,
    since c depends only on how the pair's mass is split between its two tokens.  Splitting
    masses so as to maximise sum_y min(p(y), c(y)) is a flow: source -> pair (its mass) ->
    either token -> sink (what p(y) still lacks after the fixed pairs).  By max-flow min-cut
    its value is a minimum over token sets, which at a = b untruncated is Thm. 3's
    min_S {p(S) + 1 - q(S)^2}.

    Truncated LP (Alg. 1, eq. 12): tokens ranked by decreasing p - a b; only pairs touching
    the top `free_tokens` are free, the others keep the higher-ranked token (the one whose
    target deficit is larger).  For a != b the paper fixes one mixed case to a constant
    lost in the seed; here every pair touching the top tokens is free, which can only help.

    The U problems are independent, so they are one flow network.  Any split is a valid
    rule and p_I is recomputed from the rule, so the flow's rounding (~1e-13) costs
    acceptance, never exactness.
    """
    count, m = p.shape
    pair = a[:, :, None] * b[:, None, :]
    rank = np.argsort(np.argsort(-(p - a * b), axis=-1, kind="stable"), axis=-1, kind="stable")
    rule = (rank[:, :, None] < rank[:, None, :]).astype(np.float64)
    rule[:, np.eye(m, dtype=bool)] = 1.0
    top = m if free_tokens is None else free_tokens
    both = pair + pair.transpose(0, 2, 1)
    upper = np.triu(np.ones((m, m), dtype=bool), 1)
    free = ((rank[:, :, None] < top) | (rank[:, None, :] < top)) & (both > 0) & upper
    block, first, second = np.nonzero(free)
    if block.size == 0:
        return rule
    mass = both[free]
    # The fixed part of c: the law with every free pair's mass on its second token, less that.
    rule[block, first, second], rule[block, second, first] = 0.0, 1.0
    fixed = _pair_law_np(pair, rule)
    np.subtract.at(fixed, (block, second), mass)
    lacking = np.clip(p - fixed, 0.0, None)
    to_first = _split_pair_masses(mass, block * m + first, block * m + second, lacking.ravel())
    w = np.clip(to_first / mass, 0.0, 1.0)
    rule[block, first, second], rule[block, second, first] = w, 1.0 - w
    return rule


_FLOW_UNITS = float(2**30)  # scipy's flows are int32; every capacity here is a mass, at most 1


def _split_pair_masses(mass, first, second, lacking) -> np.ndarray:
    """How much of each pair's mass to send to its first token so as to cover as much as
    possible of what the tokens lack: a maximum flow, source -> pair -> token -> sink.

    mass [n] of each pair; first, second [n] its tokens' indices into lacking [t].

    scipy's maximum flow takes integer capacities.  A first flow runs on capacities rounded
    down to 2^-30, so it is feasible.  Rounding moved each edge's capacity by less than a
    unit, hence every cut's capacity by less than a unit per edge, so the real maximum flow
    exceeds the first by at most that.  A second flow, on the residual network and at the
    resolution that bound allows, finds the rest; its augmenting paths may return part of
    the first flow from a token to its pair."""
    n, tokens = mass.size, lacking.size
    pairs = 2 + np.arange(n)  # node 0 is the source, node 1 the sink, then pairs, then tokens
    token_nodes = 2 + n + np.arange(tokens)
    tails = np.concatenate([np.zeros(n, dtype=np.int64), pairs, pairs, token_nodes])
    heads = np.concatenate([pairs, token_nodes[first], token_nodes[second], np.ones(tokens, dtype=np.int64)])
    capacity = np.concatenate([mass, mass, mass, lacking])
    nodes = 2 + n + tokens
    flow = _max_flow(tails, heads, capacity, nodes, _FLOW_UNITS)
    left = capacity - flow
    if left.max() > 0:
        bound = tails.size / _FLOW_UNITS
        to_tokens = slice(n, 3 * n)
        more = _max_flow(
            np.concatenate([tails, heads[to_tokens]]),
            np.concatenate([heads, tails[to_tokens]]),
            np.minimum(np.concatenate([left, flow[to_tokens]]), bound),
            nodes,
            _FLOW_UNITS / bound,
        )
        flow = flow + more[: tails.size]  # net flows: pair -> token less token -> pair
    return flow[n : 2 * n]


def _max_flow(tails, heads, capacity, nodes, units) -> np.ndarray:
    """The net flow along each edge of a maximum flow from node 0 to node 1, capacities
    rounded down to multiples of 1/units.  No two edges join the same ordered nodes."""
    graph = csr_array((np.floor(capacity * units).astype(np.int32), (tails, heads)), shape=(nodes, nodes))
    return np.asarray(maximum_flow(graph, 0, 1).flow[tails, heads]).ravel() / units


def _pair_law_np(pair: np.ndarray, rule: np.ndarray) -> np.ndarray:
    return (pair * rule).sum(-1) + (pair * (1 - rule)).sum(-2)


def stage_rules_and_laws(rule_fn, p: torch.Tensor, q: torch.Tensor, stages: int):
    """The pairwise stages of Remark 4 for U (p~, q~) pairs [U, m] (float64).

    Returns (rules [U, stages, m, m], laws [U, stages + 1, m]).  laws[:, n - 1] is the exact
    law of the draft selected among n drafts (laws[:, 0] = q); stage t (from 0) pits that
    selection among the first t + 1 drafts (law laws[:, t]) against draft t + 2 (law q)."""
    laws, rules = [q], []
    for _ in range(stages):
        rule = rule_fn(p, laws[-1], q)
        rules.append(rule)
        laws.append(pair_law(laws[-1], q, rule))
    m = q.shape[-1]
    stacked = torch.stack(rules, 1) if rules else q.new_zeros(q.shape[0], 0, m, m)
    return stacked, torch.stack(laws, 1)


# --------------------------------------------------------------------------- batch state


class TruncatedNodes:
    """B verification nodes on their truncated alphabets, with their selection stages.

    tokens [B, m]   Omega_0 of each row: the top-m tokens of p (all tokens when V <= M)
    p, q   [B, m]   p~ and q~, float64
    head   [B]      p(Omega_0); tail [B]: p outside it (exactly 0 when nothing is truncated)
    local  [B, k]   each draft's position in Omega_0, -1 where dropped or padding
    kept   [B]      how many drafts are left
    """

    def __init__(self, verifier: "PairwiseImportanceSampling", p, q, drafts):
        vocab = p.shape[-1]
        m = vocab if verifier.alphabet_size is None else min(verifier.alphabet_size, vocab)
        if m == vocab:
            self.tokens = torch.arange(vocab, device=p.device).expand(p.shape[0], vocab)
            self.local = drafts
            tail = torch.zeros(p.shape[0], dtype=F64, device=p.device)
        else:
            self.tokens = torch.topk(p, m, dim=-1).indices
            match = drafts.unsqueeze(-1) == self.tokens.unsqueeze(-2)
            self.local = torch.where(match.any(-1), match.to(torch.int8).argmax(-1), -1)
            tail = p.scatter(-1, self.tokens, 0).sum(-1).to(F64)
        p_head = p.gather(-1, self.tokens).to(F64)
        q_head = q.gather(-1, self.tokens).to(F64)
        self.head, self.tail = p_head.sum(-1), tail
        self.p = _normalized(p_head)
        self.q = _normalized(q_head)
        self.kept = (self.local >= 0).sum(-1)
        # Rows sharing (p~, q~) share their rules: one LP per distinct pair, not per row.
        distinct, self.inverse = torch.unique(torch.cat([self.p, self.q], -1), dim=0, return_inverse=True)
        stages = max(int(self.kept.max()) - 1, 0) if self.kept.numel() else 0
        self.rules, self.laws = stage_rules_and_laws(
            verifier.stage_rule, distinct[:, :m].contiguous(), distinct[:, m:].contiguous(), stages
        )

    def selection_law(self) -> torch.Tensor:
        """p_I [B, m]: the law of the selected draft given how many are left (0 if none)."""
        law = self.laws[self.inverse, (self.kept - 1).clamp_min(0)]
        return law * (self.kept > 0).unsqueeze(-1)

    def _keep_prob(self, stage, incumbent, challenger):
        """P(stage keeps the incumbent | tokens); arguments [B] or [B, j] (local positions)."""
        row = self.inverse.view(-1, *([1] * (stage.dim() - 1)))
        # Rows that are not challenging here may point past the last stage: clamp, unused.
        stage = stage.clamp(0, self.rules.shape[1] - 1)
        return self.rules[row, stage, incumbent.clamp_min(0), challenger.clamp_min(0)]

    def select(self, u: torch.Tensor) -> torch.Tensor:
        """The column of the selected draft per row (-1 if none is left); u [B, k-1] uniforms."""
        column = torch.full_like(self.kept, -1)
        seen = torch.zeros_like(self.kept)
        for j in range(self.local.shape[-1]):
            loc = self.local[:, j]
            take = (loc >= 0) & (seen == 0)
            challenger = (loc >= 0) & (seen > 0)
            if bool(challenger.any()):
                stage = seen - 1
                keep = self._keep_prob(stage, _at(self.local, column), loc)
                take |= challenger & (_at(u, stage) >= keep)
            column = torch.where(take, j, column)
            seen = seen + (loc >= 0)
        return column

    def selection_probs(self) -> torch.Tensor:
        """P(the selected draft is column j | drafts) [B, k] (float64)."""
        batch, k = self.local.shape
        probs = torch.zeros(batch, k, dtype=F64, device=self.local.device)
        seen = torch.zeros_like(self.kept)
        for j in range(k):
            loc = self.local[:, j]
            challenger = ((loc >= 0) & (seen > 0)).unsqueeze(-1)
            if bool(challenger.any()):
                earlier = self.local[:, :j]
                stage = (seen - 1).unsqueeze(-1).expand_as(earlier)
                keep = self._keep_prob(stage, earlier, loc.unsqueeze(-1).expand_as(earlier))
                probs[:, j] = torch.where(challenger, probs[:, :j] * (1 - keep), 0).sum(-1)
                probs[:, :j] = torch.where(challenger, probs[:, :j] * keep, probs[:, :j])
            probs[:, j] = torch.where((loc >= 0) & (seen == 0), 1.0, probs[:, j])
            seen = seen + (loc >= 0)
        return probs


def _normalized(x: torch.Tensor) -> torch.Tensor:
    total = x.sum(-1, keepdim=True)
    return torch.where(total > 0, x / torch.where(total > 0, total, 1), 0)


# --------------------------------------------------------------------------- verifiers


class PairwiseImportanceSampling(IIDDrafts, Verifier):
    """Shared machinery of "is" and "is-weighted"; subclasses give the pairwise rule.

    alphabet_size  M of the truncated alphabet (top-M tokens of the target); None: never
                   truncate (p_I then costs O(V^2) memory per node).
    """

    def __init__(self, alphabet_size: int | None = 40):
        if alphabet_size is not None and alphabet_size < 1:
            raise ValueError(f"{self.name}: alphabet_size must be >= 1, got {alphabet_size}")
        self.alphabet_size = alphabet_size

    @abstractmethod
    def stage_rule(self, p: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The pairwise rule [U, m, m] for inputs of laws a, b [U, m] and target p~ [U, m]."""

    def nodes(self, p, q, drafts) -> TruncatedNodes:
        """The truncated alphabets and selection stages of B nodes (p, q [B, V], drafts [B, k])."""
        drafts = torch.as_tensor(drafts, dtype=torch.long, device=p.device)
        self._check_k(drafts.shape[-1])
        return TruncatedNodes(self, p, q, drafts)

    # With one draft the selection is trivial (p_I = q), so step 2 is plain speculative sampling
    # over the whole vocabulary: exact, and optimal at 1 - TV.  The truncated alphabet would only
    # cost the tail mass 1 - gamma there (at T = 1 on the demo pair, ~40 % of a chain's tokens).
    # Decided per row: a node with one child in a tree walked with wider nodes has one draft
    # and -1 padding.
    _single_draft = SpeculativeSampling()

    def _by_draft_count(self, single_rule, truncated_rule, p, q, drafts):
        """`single_rule(p, q, draft [n, 1], column [n])` on the rows with exactly one draft,
        `truncated_rule(p, q, drafts)` on the others, each result's rows back in place."""
        drafts = torch.as_tensor(drafts, dtype=torch.long, device=p.device)
        valid = drafts >= 0
        single = valid.sum(-1) == 1
        if not bool(single.any()):
            return truncated_rule(p, q, drafts)
        column = valid.to(torch.int8).argmax(-1)
        draft = drafts.gather(-1, column.unsqueeze(-1))
        if bool(single.all()):
            return single_rule(p, q, draft, column)
        parts = []
        for rows, rule, args in ((single.nonzero().flatten(), single_rule, (draft, column)),
                                 ((~single).nonzero().flatten(), truncated_rule, (drafts,))):
            # index_select, not p[rows]: see tree_walk.rows_of
            pick = [x.index_select(0, rows) for x in (p, q, *args)]
            parts.append((rows, rule(*pick)))
        return _merge_rows(parts, p.shape[0])

    def verify_batch(self, p, q, drafts, generator):
        def single(p, q, draft, column):
            token, index = self._single_draft.verify_batch(p, q, draft, generator)
            return token, torch.where(index >= 0, column, -1)

        return self._by_draft_count(single, lambda p, q, d: self._verify_truncated(p, q, d, generator), p, q, drafts)

    def _verify_truncated(self, p, q, drafts, generator):
        nodes = self.nodes(p, q, drafts)
        batch, k = nodes.local.shape
        # Columns: k-1 selection stages, then acceptance, residual, gamma coin, tail draw.
        u = draw_uniform(generator, (batch, k + 3), p.device)
        column = nodes.select(u[:, : k - 1])
        loc = nodes.local.gather(-1, column.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        p_sel = nodes.selection_law()
        ratio = acceptance_ratio(_at(nodes.p, loc), _at(p_sel, loc))
        accepted = (column >= 0) & (u[:, k - 1] < ratio)
        # With no draft left p_sel is 0 and the residual is p~ itself.
        residual = (nodes.p - p_sel).clamp_min(0)
        local_token = torch.where(accepted, loc, sample_categorical(residual, u[:, k], nodes.p))
        token = nodes.tokens.gather(-1, local_token.unsqueeze(-1)).squeeze(-1)
        in_head = u[:, k + 1] * (nodes.head + nodes.tail) < nodes.head
        rows = torch.nonzero(~in_head).flatten()
        if rows.numel():
            p_rows = p.index_select(0, rows)  # not p[rows]: see tree_walk.rows_of
            outside = p_rows.scatter(-1, nodes.tokens.index_select(0, rows), 0)
            token = token.index_copy(0, rows, sample_categorical(outside, u[:, k + 2].index_select(0, rows), p_rows))
        index = torch.where(accepted & in_head, column, -1)
        return token, index

    def output_law_batch(self, p, q, drafts):
        def single(p, q, draft, column):
            return self._single_draft.output_law_batch(p, q, draft)

        return self._by_draft_count(single, self._truncated_law, p, q, drafts)

    def _truncated_law(self, p, q, drafts):
        nodes = self.nodes(p, q, drafts)
        p_sel = nodes.selection_law()
        probs = nodes.selection_probs()
        loc = nodes.local.clamp_min(0)
        accept = probs * acceptance_ratio(nodes.p.gather(-1, loc), p_sel.gather(-1, loc))
        law = torch.zeros_like(nodes.p).scatter_add_(-1, loc, accept)
        residual = _normalized((nodes.p - p_sel).clamp_min(0))
        residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, nodes.p)
        law = law + (1 - accept.sum(-1, keepdim=True)) * residual
        total = (nodes.head + nodes.tail).unsqueeze(-1)
        out = (p.to(F64) / total).scatter(-1, nodes.tokens, 0)
        out = out.scatter_add(-1, nodes.tokens, law * (nodes.head.unsqueeze(-1) / total))
        return out.to(p.dtype)

    def acceptance(self, p: torch.Tensor, q: torch.Tensor, k: int) -> float:
        """P(a draft is accepted) at one node with k i.i.d. drafts, exactly.

        gamma * sum_n Binomial(n; k, q(Omega_0)) * sum_y min(p~(y), p_I^(n)(y)): the
        "algorithmic" acceptance; the residual may still emit an unselected draft token, so
        membership acceptance (what a tree walk sees) can be slightly larger."""
        self._check_k(k)
        if k == 1:
            return float(torch.minimum(p, q).sum())
        no_drafts = torch.full((1, 1), -1, dtype=torch.long, device=p.device)
        nodes = self.nodes(p.unsqueeze(0), q.unsqueeze(0), no_drafts)
        _, laws = stage_rules_and_laws(self.stage_rule, nodes.p, nodes.q, k - 1)
        inside = float(q.gather(-1, nodes.tokens[0]).to(F64).sum() / q.to(F64).sum())
        rates = torch.minimum(nodes.p.unsqueeze(1), laws).sum(-1)[0]
        total = sum(
            comb(k, n) * inside**n * (1 - inside) ** (k - n) * float(rates[n - 1]) for n in range(1, k + 1)
        )
        return total * float(nodes.head[0] / (nodes.head[0] + nodes.tail[0]))


def _merge_rows(parts, batch: int):
    """Results (a tensor, or a tuple of tensors) of row subsets, back in one batch of `batch` rows:
    parts is [(rows, result)]."""
    first = parts[0][1]
    if isinstance(first, tuple):
        return tuple(_merge_rows([(rows, result[i]) for rows, result in parts], batch) for i in range(len(first)))
    out = first.new_empty((batch, *first.shape[1:]))
    for rows, result in parts:
        out.index_copy_(0, rows, result)
    return out


def _at(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return rows.gather(-1, index.clamp_min(0).unsqueeze(-1)).squeeze(-1)


class ImportanceSampling(PairwiseImportanceSampling):
    """Seed 002's IS scheme with classical importance weights p/q (Definition 1)."""

    name = "is"

    def stage_rule(self, p, a, b):
        return importance_rule(p, a, b)

    def __repr__(self):
        return f"ImportanceSampling(alphabet_size={self.alphabet_size})"


class WeightedImportanceSampling(PairwiseImportanceSampling):
    """Seed 002's IS scheme with LP-optimised weights (Thm. 1, §4, App. G).

    free_tokens  s of the truncated LP (Alg. 1): pairs among the other tokens follow the
                 rank rule; None solves the full LP (then optimal at k = 2, Thm. 3).

    Solved rules are remembered for the last CACHE_SIZE distinct (p~, input laws), so a node
    verified again -- or verified after its exact law was computed -- costs no LP.
    """

    name = "is-weighted"
    CACHE_SIZE = 512

    def __init__(self, alphabet_size: int | None = 40, free_tokens: int | None = 5):
        super().__init__(alphabet_size)
        if free_tokens is not None and free_tokens < 1:
            raise ValueError(f"{self.name}: free_tokens must be >= 1, got {free_tokens}")
        self.free_tokens = free_tokens
        self._solved: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()

    def stage_rule(self, p, a, b):
        device = p.device
        p, a, b = (x.cpu().numpy() for x in (p, a, b))
        keys = [b"".join(x.tobytes() for x in row) for row in zip(p, a, b)]
        with self._lock:
            rules = [self._solved.get(key) for key in keys]
        missing = [row for row, rule in enumerate(rules) if rule is None]
        if missing:
            solved = optimal_rules(p[missing], a[missing], b[missing], self.free_tokens)
            with self._lock:
                for row, rule in zip(missing, solved):
                    rules[row] = self._solved[keys[row]] = rule
                while len(self._solved) > self.CACHE_SIZE:
                    del self._solved[next(iter(self._solved))]
        return torch.from_numpy(np.stack(rules)).to(device)

    def __repr__(self):
        return (
            f"WeightedImportanceSampling(alphabet_size={self.alphabet_size}, "
            f"free_tokens={self.free_tokens})"
        )
