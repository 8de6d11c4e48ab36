"""Several drafters serving one target: a `Drafter` that hands each sequence to the next.

A sequence keeps its drafter for its whole life (the drafter holds its KV cache), so the
pool balances sequences, not steps: round robin — or, for a replayable (seeded) request, the
drafter its seed names (`open_by_seed`) — passing over a drafter that is unavailable
(`DrafterUnavailable`: lost, or resting after it was) or full (`DrafterBusy`) to the next.
When none can take the sequence, a full one's refusal stands (capacity is spent: 429), else
the loss (the sequence decodes without drafts).  Other errors are the request's, and end it.
"""

from __future__ import annotations

import itertools
import threading

from rayspec.engine.interfaces import DrafterBusy, DrafterUnavailable, SequenceSpec


class DrafterPool:
    def __init__(self, drafters: list):
        if not drafters:
            raise ValueError("a drafter pool needs at least one drafter")
        # Each is checked against the target by the engine (`check_shared_tokenizer`): drafters
        # padded to different sizes may share a pool, each fitting its laws to the target's.
        self.drafters = list(drafters)
        self.vocab_size = drafters[0].vocab_size  # (one of them: each drafts at the target's width)
        self.context_length = min(d.context_length for d in drafters)
        self._next = itertools.cycle(range(len(drafters)))
        self._lock = threading.Lock()

    def open(self, spec: SequenceSpec):
        """A session on the next drafter in turn that can take the sequence."""
        with self._lock:
            first = next(self._next)
        return self._open_from(first, spec)

    def open_by_seed(self, spec: SequenceSpec):
        """A session on the drafter the sequence's seed names (seed mod the pool's size), or the
        next that can take it.  A seed's tokens depend on the drafts (with every verifier but the
        couplings), so a replayable request must not depend on which requests came before it
        (round robin gave a seed one drafter's tokens, then the other's), nor on which of the
        service's coordinators serves it; choice i of a request, seeded seed + i, drafts as a
        request with that seed does, and its choices still spread over the drafters."""
        return self._open_from(spec.seed % len(self.drafters), spec)

    def _open_from(self, first: int, spec: SequenceSpec):
        refusals = []
        for turn in range(len(self.drafters)):
            try:
                return self.drafters[(first + turn) % len(self.drafters)].open(spec)
            except (DrafterUnavailable, DrafterBusy) as error:
                refusals.append(error)
        raise next((e for e in refusals if isinstance(e, DrafterBusy)), refusals[-1])
