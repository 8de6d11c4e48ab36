"""Several drafters serving one target: a `Drafter` that hands each sequence to the next.

A sequence keeps its drafter for its whole life (the drafter holds its KV cache), so the
pool balances sequences, not steps: round robin, passing over a drafter that is unavailable
(`DrafterUnavailable`: lost, or resting after it was) to the next.  Other errors are the
request's, and end it.
"""

from __future__ import annotations

import itertools
import threading

from rayspec.engine.interfaces import DrafterUnavailable, SequenceSpec


class DrafterPool:
    def __init__(self, drafters: list):
        if not drafters:
            raise ValueError("a drafter pool needs at least one drafter")
        sizes = {d.vocab_size for d in drafters}
        if len(sizes) > 1:
            raise ValueError(f"drafters of one pool must share a vocabulary, got sizes {sorted(sizes)}")
        self.drafters = list(drafters)
        self.vocab_size = drafters[0].vocab_size
        self.context_length = min(d.context_length for d in drafters)
        self._next = itertools.cycle(range(len(drafters)))
        self._lock = threading.Lock()

    def open(self, spec: SequenceSpec):
        with self._lock:
            first = next(self._next)
        for turn in range(len(self.drafters)):
            try:
                return self.drafters[(first + turn) % len(self.drafters)].open(spec)
            except DrafterUnavailable:
                if turn == len(self.drafters) - 1:
                    raise  # every drafter is: the sequence decodes without
