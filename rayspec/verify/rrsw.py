"""Recursive rejection sampling without replacement (Sequoia; Jeon et al.; seed 003 Alg. 1).

The k drafts are drawn from q without replacement, q renormalised after each draw.  Draft i
is accepted with probability min(1, p_i(x_i)/q_i(x_i)) where q_i is the renormalised draft
law it was drawn from; after a rejection p_{i+1} = norm((p_i - q_i)^+) (with the q_i of the
rejected draft) and q_{i+1} = norm(q_i with x_i removed).  Needs k <= |supp q|; fewer drafts
are drawn when the support is smaller.
"""

from __future__ import annotations

from rayspec.verify.base import WithoutReplacementDrafts
from rayspec.verify.chain import SequentialVerifier
from rayspec.verify.rrs import RecursiveRejectionChain


class RecursiveRejectionSamplingWithoutReplacement(WithoutReplacementDrafts, SequentialVerifier):
    name = "rrsw"

    def chain(self, p, q, drafts):
        return RecursiveRejectionChain(p, q, drafts, without_replacement=True)
