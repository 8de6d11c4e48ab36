"""Several drafters serving one target: a `Drafter` that hands each sequence to the next.

A sequence keeps its drafter for its whole life (the drafter holds its KV cache), so the
pool balances sequences, not steps: round robin, passing over a drafter that is unavailable
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
        with self._lock:
            first = next(self._next)
        refusals = []
        for turn in range(len(self.drafters)):
            try:
                return self.drafters[(first + turn) % len(self.drafters)].open(spec)
            except (DrafterUnavailable, DrafterBusy) as error:
                refusals.append(error)
        raise next((e for e in refusals if isinstance(e, DrafterBusy)), refusals[-1])
