"""SpecHub: two drafts that share a hub (Sun, Zhou, Chen, Sun 2024, seed 003, §4 and App. B).

Drafting.  Let a = argmax q (the hub; lowest token id among ties).  X1 ~ q; if X1 != a then
X2 = a, otherwise X2 ~ q with a removed and renormalised.  The joint law is sparse: every
pair holds the hub once,

    Q(x, a) = q(x),    Q(a, x) = q(a) q(x) / (1 - q(a)),    x != a,

and the first draft's marginal is q, so a node with one child is plain speculative sampling.
When q is one-hot on a there is no second token: the node gets one draft (plain SS), as it
does for k = 1.

Verification is the sequential form of the transport plan of App. B.1 (writing
p'(x) = (p(x) - q(x))^+ for x != a):

    pair (x, a):  accept x w.p. min(1, p(x) / q(x));
                  else accept a w.p. min(1, p'(a) / S2),  p'(a) = (p(a) - S1)^+
    pair (a, x):  accept x w.p. min(1, p'(x) / Q(a, x))          <- the second child first
                  else accept a w.p. min(1, p(a) / S1)
    otherwise:    emit from norm((p - q - Q(a, .))^+), zero at a

    S1 = sum_{x!=a} (Q(a, x) - p'(x))^+,   S2 = sum_{x!=a} (q(x) - p(x))^+.

Token x != a is then emitted with min(p, q) + min(p', Q(a, x)) + (p' - Q(a, x))^+ = p(x);
the hub with min(p(a), S1) + min(p'(a), S2) = min(p(a), S1 + S2) = p(a), since
S1 + S2 >= sum_{x!=a} (q(x) + Q(a, x) - p(x)) = p(a) (Thm. 2, Cor. 1: the hub leaves only
through acceptance).  The acceptance is p(a) + sum_{x!=a} min(p(x), q(x) / (1 - q(a))), the
optimum of the paper's reduced LP for this Q; the residual never emits a drafted token, so
it is also the membership acceptance a tree walk sees.

Erratum not reproduced: the paper's Alg. 3 computes p'(a) only inside its `x(1) = a` branch,
so read literally a pair (x, a) tests the hub against the whole p(a) and over-emits it.  The
proof of Thm. 2 and the official code reduce p(a) by S1 unconditionally, as here.

Only k <= 2: the paper gives no scheme for more drafts (App. C.3 sketches an idea, no
algorithm), and none is claimed here.
"""

from __future__ import annotations

import torch

from rayspec.verify.base import draw_uniform, iid_draft_law, sample_from_weights
from rayspec.verify.chain import RejectionChain, SequentialVerifier, acceptance_ratio, gather_rows
from rayspec.verify.greedy import first_argmax


def hub_pair_law(q: torch.Tensor, hub: torch.Tensor) -> torch.Tensor:
    """Q(a, x) = q(a) q(x) / (1 - q(a)) for x != a, zero at the hub a; q [B, V], hub [B].

    1 - q(a) is summed over the other tokens, never subtracted: when q(a) is within float
    precision of 1 the subtraction would lose every digit.  q(x) / (1 - q(a)) is divided
    first, then scaled by q(a): the quotient q(a) / (1 - q(a)) overflows to inf when the other
    tokens' mass is below 1 / max (float32 subnormals, ~1.5e-5 in float16), and inf made every
    pair (a, x) emit the hub.  A one-hot q gives a zero row."""
    q_hub = q.gather(-1, hub.unsqueeze(-1))
    others = q.scatter(-1, hub.unsqueeze(-1), 0)
    rest = others.sum(-1, keepdim=True)
    return others.div_(torch.where(rest > 0, rest, torch.ones_like(rest))).mul_(q_hub)


class SpecHubChain(RejectionChain):
    """One or two steps per row: SS on a single draft, the hub plan on a pair."""

    def __init__(self, p, q, drafts):
        super().__init__(p, q, drafts)
        self.n_steps = drafts.shape[-1]
        no_pair = torch.zeros(self.batch, dtype=torch.bool, device=self.device)
        self.paired = self.valid[:, 1] if self.n_steps == 2 else no_pair
        self.hub_first = no_pair
        if self.n_steps == 2:
            self._plan_hub_pairs()

    def _plan_hub_pairs(self):
        p, q = self.p, self.q
        hub = first_argmax(q)
        self.hub_first = self.paired & (self.drafts[:, 0] == hub)
        hub_second = self.paired & (self.drafts[:, 1] == hub)
        if bool((self.paired & (self.hub_first == hub_second)).any()):
            raise ValueError(
                "spechub: each pair of drafts must hold the hub argmax(q) exactly once; "
                "draw the drafts with sample_drafts from the same q"
            )
        # In place where a temporary allows: at V = 32k each [B, V] buffer costs more to
        # allocate than to compute.
        at_hub = hub.unsqueeze(-1)
        self.pair_law = hub_pair_law(q, hub)
        # p'(x) = (p(x) - q(x))^+: what pairs (x, a) leave of p(x).
        self.excess = (p - q).clamp_min_(0).scatter_(-1, at_hub, 0)
        self.s1 = (self.pair_law - self.excess).clamp_min_(0).sum(-1)
        self.s2 = (q - p).clamp_min_(0).scatter_(-1, at_hub, 0).sum(-1)
        self.p_hub = gather_rows(p, hub)
        # p'(a) = (p(a) - S1)^+ in every row, whichever pair it drew: pairs (a, x) emit the
        # hub with total mass min(p(a), S1), so pairs (x, a) may only add what is left of
        # p(a) (the paper's Alg. 3 erratum, see the module docstring).
        self.hub_left = (self.p_hub - self.s1).clamp_min(0)

    def column(self, j):
        # In a pair (a, x) the non-hub child x is tested first: it has the first claim on
        # Q(a, x), and the hub takes only the mass x leaves, which is what makes the plan
        # optimal for this Q.
        first = torch.where(self.hub_first, 1, 0)
        return first if j == 0 else 1 - first

    def accept_prob(self, j):
        if j == 0:
            x = gather_rows(self.drafts, self.column(0))
            target, draft = gather_rows(self.p, x), gather_rows(self.q, x)
            if self.n_steps == 2:
                # x of a pair (a, x) gets what pairs (x, a) left of p(x), out of Q(a, x).
                target = torch.where(self.hub_first, gather_rows(self.excess, x), target)
                draft = torch.where(self.hub_first, gather_rows(self.pair_law, x), draft)
            return acceptance_ratio(target, draft) * self.valid[:, 0]
        target = torch.where(self.hub_first, self.p_hub, self.hub_left)
        draft = torch.where(self.hub_first, self.s1, self.s2)
        return acceptance_ratio(target, draft) * self.paired

    def reject(self, j):
        pass

    def residual(self):
        if self.n_steps == 1:
            return self._single_draft_residual(slice(None))
        # (p - q - Q(a, .))^+ off the hub, zero on it (Cor. 1).
        residual = (self.excess - self.pair_law).clamp_min_(0)
        single = ~self.paired
        if bool(single.any()):
            residual[single] = self._single_draft_residual(single)
        return residual

    def _single_draft_residual(self, rows):
        # SS's (p - q)^+; a row without any draft emits straight from p.
        p, q = self.p[rows], self.q[rows]
        return torch.where(self.valid[rows, :1], (p - q).clamp_min_(0), p)


class SpecHub(SequentialVerifier):
    name = "spechub"
    max_drafts = 2

    def sample_drafts_batch(self, q, k, generator):
        self._check_k(k)
        u = draw_uniform(generator, (q.shape[0], k), q.device)
        first = sample_from_weights(q, u[:, 0])
        if k == 1:
            return first.unsqueeze(-1)
        hub = first_argmax(q)
        # -1 where q is one-hot: no token besides the hub, the node keeps one draft.
        other = sample_from_weights(q.scatter(-1, hub.unsqueeze(-1), 0), u[:, 1])
        second = torch.where(first == hub, other, hub)
        second = torch.where(first >= 0, second, torch.full_like(second, -1))
        return torch.stack([first, second], dim=-1)

    def draft_law(self, q, k):
        self._check_k(k)
        if k == 1:
            return iid_draft_law(q, 1)
        hub = int(first_argmax(q))
        others = [int(x) for x in torch.nonzero(q > 0).flatten() if int(x) != hub]
        if not others:
            return [((hub,), 1.0)]
        mass = {x: float(q[x]) for x in others}
        rest = sum(mass.values())
        law = [((x, hub), mass[x]) for x in others]
        law += [((hub, x), float(q[hub]) * mass[x] / rest) for x in others]
        return law

    def chain(self, p, q, drafts):
        return SpecHubChain(p, q, drafts)
