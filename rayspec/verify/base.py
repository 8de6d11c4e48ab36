"""The verifier interface: one contract for every token-level verification scheme.

Notation, fixed across the package whatever letters a paper uses:

    p        the target's next-token distribution at a tree node, after temperature, top-k
             and top-p: the law the output must follow                               [V]
    q        the drafter's distribution at that node: the law the drafts are drawn from [V]
    drafts   the tokens drafted at the node (its children), in draw order              [k]
    emitted  what verification outputs at a node: an accepted draft, or a *correction*
             token drawn from a residual law once every draft is rejected.
    bonus    the token drawn from p at a leaf, where no draft is left to check.

A verifier owns its drafting scheme (`sample_drafts`), because losslessness is a property of
the pair (draft law, selection rule), not of the selection rule alone.

Randomness is explicit.  `generator` is a CPU `torch.Generator` for the verifiers whose
randomness is private (every uniform is drawn on the CPU and moved to the data's device, so
a seed means the same numbers on any device); the coupling verifiers also accept a
`rayspec.coupling.KeyedNoise`, the randomness shared by drafter and target and keyed by
(seed, absolute position).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from typing import ClassVar, Union

import torch

from rayspec.tree.structure import DraftTree

Randomness = Union[torch.Generator, "rayspec.coupling.KeyedNoise"]  # noqa: F821


class Verifier(ABC):
    """Base class of all verifiers.

    Per-node API (used by tests and by checks outside the package; names are stable):
        sample_drafts(q, k, generator) -> LongTensor[<=k]
        draft_law(q, k)                -> [(draft tuple, probability)], exact, small V
        output_law(p, q, drafts)       -> Tensor[V], exact law of the emitted token
        verify(p, q, drafts, generator)-> (token, index of the accepted draft or -1)
        lossless                       -> bool

    Batched forms take a leading batch dimension over independent nodes; missing drafts
    are padded with -1.  `verify_tree` walks a whole draft tree from its root.
    """

    name: ClassVar[str]
    lossless: ClassVar[bool] = True
    max_drafts: ClassVar[int | None] = None  # None: any number of drafts per node
    drafter_invariant: ClassVar[bool] = False  # output independent of the drafter (coupling)
    needs_draft_probs: ClassVar[bool] = True  # whether verification reads q (data placement)
    # Whether the emitted token is the target's own sample from p alone (argmax, a coupled
    # sample), whatever the drafts: the target then ships token ids, no probability rows.
    token_only: ClassVar[bool] = False
    # Parameters that make a lossy verifier exact; the engine applies them at temperature 0,
    # where the request asks for the target's greedy output.
    exact_params: ClassVar[dict | None] = None
    # Whether drafts chosen deterministically by the drafter (dynamic trees) keep it lossless.
    deterministic_drafts: ClassVar[bool] = False

    # ----------------------------------------------------------------- drafting
    @abstractmethod
    def sample_drafts_batch(self, q: torch.Tensor, k: int, generator: Randomness) -> torch.Tensor:
        """Draw up to k drafts per row of q [B, V]; returns [B, k], -1 where a row has fewer.

        Every scheme here is sequential, so the first j columns are a valid j-draft sample:
        a tree node with fewer children than k takes a prefix."""

    def sample_drafts(self, q: torch.Tensor, k: int, generator: Randomness) -> torch.Tensor:
        self._check_k(k)
        drafts = self.sample_drafts_batch(q.unsqueeze(0), k, generator)[0]
        return drafts[drafts >= 0]

    @abstractmethod
    def draft_law(self, q: torch.Tensor, k: int) -> list[tuple[tuple[int, ...], float]]:
        """The exact law of the draft tuple, in draw order (enumerates; small V only)."""

    # ------------------------------------------------------------- verification
    @abstractmethod
    def verify_batch(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: Randomness
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Verify B independent nodes: p, q [B, V], drafts [B, k] (-1 padded).

        Returns (tokens [B], accepted draft index [B] or -1)."""

    def verify(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: Randomness
    ) -> tuple[int, int]:
        drafts = torch.as_tensor(drafts, dtype=torch.long, device=p.device).reshape(1, -1)
        tokens, index = self.verify_batch(p.unsqueeze(0), q.unsqueeze(0), drafts, generator)
        return int(tokens[0]), int(index[0])

    def output_law(self, p: torch.Tensor, q: torch.Tensor, drafts) -> torch.Tensor:
        """Exact law of the emitted token given the drafts (in the dtype of p)."""
        drafts = torch.as_tensor(drafts, dtype=torch.long, device=p.device).reshape(1, -1)
        return self.output_law_batch(p.unsqueeze(0), q.unsqueeze(0), drafts)[0]

    def output_law_batch(self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
        """`output_law` for B nodes: p, q [B, V], drafts [B, k] (-1 padded) -> [B, V]."""
        raise NotImplementedError(
            f"{self.name}: the emitted token has no law given the drafts alone "
            "(its randomness is shared with the drafter)"
        )

    def sample_target(self, p: torch.Tensor, generator: Randomness) -> int:
        """A token from p alone: the bonus token at a leaf, and target-only decoding."""
        return int(self.sample_target_batch(p.unsqueeze(0), generator)[0])

    def sample_target_batch(self, p: torch.Tensor, generator: Randomness) -> torch.Tensor:
        """`sample_target` for the rows of p [B, V] -> [B]."""
        u = draw_uniform(generator, (p.shape[0],), p.device)
        return sample_categorical(p, u, p)

    # -------------------------------------------------------------------- trees
    def verify_tree(
        self, tree: DraftTree, p_rows: torch.Tensor, q_rows: torch.Tensor | None, generator: Randomness
    ):
        """Walk `tree` from its root -> `TreeVerdict`; see `rayspec.verify.tree_walk`."""
        from rayspec.verify.tree_walk import walk_tree

        return walk_tree(self, tree, p_rows, q_rows, generator)

    def verify_trees(self, shape, tokens, p_rows, q_rows, generator):
        """Walk B trees of one shape at once -> `TreeWalkBatch`; see `rayspec.verify.tree_walk`."""
        from rayspec.verify.tree_walk import walk_trees

        return walk_trees(self, shape, tokens, p_rows, q_rows, generator)

    def tree_randomness(self, generator: Randomness, depth: int) -> Randomness:
        """The randomness to verify a node at `depth` below the root.

        Private-randomness verifiers draw from one stream as the walk goes; the coupling
        verifiers override this to key their noise by position."""
        return generator

    # ------------------------------------------------------------------ helpers
    def _check_k(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"{self.name}: need at least one draft, got k={k}")
        if self.max_drafts is not None and k > self.max_drafts:
            raise ValueError(
                f"{self.name}: at most {self.max_drafts} draft(s) per node, got k={k}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --------------------------------------------------------------------------- shared maths


def draw_uniform(generator: torch.Generator, shape, device=None) -> torch.Tensor:
    """Uniforms in [0, 1), float64, drawn on the generator's device and moved to `device`.

    Drawing on one device (the CPU, for the engine's generators) keeps a seed's numbers
    the same wherever the probability rows live."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64, device=generator.device)
    return u if device is None else u.to(device)


def sample_from_weights(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws from non-negative, unnormalised weights, one per uniform.

    weights [B, V]; u [B] or [B, m] uniforms in [0, 1); returns indices shaped like u.
    A zero-weight entry is never returned; a row whose weights sum to zero gives -1, and
    the caller decides the fallback.
    """
    squeeze = u.dim() == 1
    u = u.unsqueeze(-1) if squeeze else u
    # In float64: a float32 running sum over a large vocabulary is off by ~1e-4 in total
    # variation (and never reaches tokens of tiny mass after a large one), and a float32
    # threshold rounds u in [1 - 2^-25, 1) up to 1.
    cdf = torch.cumsum(weights, dim=-1, dtype=torch.float64)
    total = cdf[:, -1:].contiguous()  # searched for below: a strided view would be copied each time
    # right=True: the first index whose cumulative mass exceeds the threshold, which can
    # only be an index of positive weight (u = 0 must not pick a leading zero).
    index = torch.searchsorted(cdf, u.to(torch.float64) * total, right=True)
    # u * total may still round to total: that draw goes to the first index whose cumulative
    # mass reaches the total, which has positive weight (a search, not another pass over V).
    index = torch.minimum(index, torch.searchsorted(cdf, total))
    ok = (total > 0) & (weights.gather(-1, index) > 0)
    index = torch.where(ok, index, torch.full_like(index, -1))
    return index.squeeze(-1) if squeeze else index


def sample_categorical(weights: torch.Tensor, u: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """`sample_from_weights`, falling back to the rows of `fallback` where weights vanish.

    A residual of zero mass is reached with probability zero in exact arithmetic; in floating
    point it can appear after cancellation.  The target row is the safe fallback there."""
    index = sample_from_weights(weights, u)
    bad = index < 0
    if bool(bad.any()):
        index[bad] = sample_from_weights(fallback[bad], u[bad])
    return index


def positive_part_normalized(x: torch.Tensor) -> torch.Tensor:
    """norm((x)^+) along the last dimension; rows of zero mass stay zero (no NaN)."""
    x = x.clamp_min(0)
    total = x.sum(-1, keepdim=True)
    # Divided by the total itself whenever it is positive: a mass below the dtype's smallest
    # normal number (float32 subnormals, float16's 6e-5 — what sampling without replacement
    # leaves of a peaked q) is still a law's total, and a floor there left the row summing
    # to far less than 1.  A row of zero mass stays all zeros.
    return x / torch.where(total > 0, total, torch.ones_like(total))


def iid_draft_law(q: torch.Tensor, k: int) -> list[tuple[tuple[int, ...], float]]:
    """k i.i.d. draws from q."""
    support = [int(i) for i in torch.nonzero(q > 0).flatten()]
    law = []
    for tup in itertools.product(support, repeat=k):
        prob = 1.0
        for x in tup:
            prob *= float(q[x])
        law.append((tup, prob))
    return law


def without_replacement_draft_law(q: torch.Tensor, k: int) -> list[tuple[tuple[int, ...], float]]:
    """Ordered draws without replacement from q, renormalised after each draw.

    Fewer than k draws when q's support is smaller."""
    support = [int(i) for i in torch.nonzero(q > 0).flatten()]
    k = min(k, len(support))
    mass = {x: float(q[x]) for x in support}
    law = []
    for tup in itertools.permutations(support, k):
        prob, drawn = 1.0, set()
        for x in tup:
            # The mass left is summed, not obtained by subtraction: 1 - (1 - 1e-12) would
            # lose every digit of a 1e-12 remainder.
            prob *= mass[x] / sum(m for y, m in mass.items() if y not in drawn)
            drawn.add(x)
        law.append((tup, prob))
    return law


def sample_iid(q: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """k i.i.d. draws per row of q [B, V] by inverse CDF (device-agnostic randomness)."""
    return sample_from_weights(q, draw_uniform(generator, (q.shape[0], k), q.device))


def sample_without_replacement(q: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """Up to k ordered draws per row without replacement, q renormalised after each draw.

    Rows whose support is smaller than k are padded with -1.

    Each draw is `sample_from_weights`'s inverse CDF over what is left, with the same uniforms
    and arithmetic (the same tokens), in half its operations: a draw always lands on an entry
    of positive weight while any is left (a search with right=True passes over zero-weight
    entries), so which draws are real is read once at the end, from the mass each one saw.
    Per node and level this loop was ~20 host operations a draw; on a GPU each is a launch."""
    u = draw_uniform(generator, (q.shape[0], k), q.device)
    if k == 0:
        return torch.empty((q.shape[0], 0), dtype=torch.long, device=q.device)
    left = q.clone()
    indices, masses = [], []
    for j in range(k):
        cdf = torch.cumsum(left, dim=-1, dtype=torch.float64)
        total = cdf[:, -1:].contiguous()
        index = torch.searchsorted(cdf, u[:, j : j + 1] * total, right=True)
        # u * total rounded up to total: the first index whose cumulative mass reaches it.
        # With nothing left (total 0) that is entry 0, already zero, so zeroing it is harmless.
        index = torch.minimum(index, torch.searchsorted(cdf, total))
        left.scatter_(-1, index, 0)
        indices.append(index)
        masses.append(total)
    drafts = torch.cat(indices, dim=-1)
    return drafts.masked_fill_(torch.cat(masses, dim=-1) <= 0, -1)


class IIDDrafts:
    """Drafting for verifiers that take k i.i.d. draws from q."""

    def sample_drafts_batch(self, q, k, generator):
        self._check_k(k)
        return sample_iid(q, k, generator)

    def draft_law(self, q, k):
        self._check_k(k)
        return iid_draft_law(q, k)


class WithoutReplacementDrafts:
    """Drafting for verifiers that draw from q without replacement, renormalising."""

    def sample_drafts_batch(self, q, k, generator):
        self._check_k(k)
        return sample_without_replacement(q, k, generator)

    def draft_law(self, q, k):
        self._check_k(k)
        return without_replacement_draft_law(q, k)

