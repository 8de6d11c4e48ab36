"""Steps that stop waiting for a late draft and go on target-only.

A drafter far from the target (`rayspec.rpc`), or one queueing many sequences' drafts, is
sometimes late: a network stall, a garbage collection, a burst of prefills.  Waiting holds the
whole sequence up; but a step needs no draft to be exact — a target-only step (a 1-node tree)
draws its token from the target's law — so a sequence whose draft is much later than its
drafter's recent drafts verifies without it, and each later step does the same until the late
draft is in.  The draft, when it comes, is dropped, and the drafter is told the steps it missed
with its next draft (`Outcome.then`: none of the late tree accepted, the tokens decoded since),
as a drafter that skipped steps always is.  A drafter that never answers fails its call at the
draft deadline (`rayspec.rpc.remote.RemoteDrafter`), and the sequence then loses it as before;
a sequence that ends first does not wait for it: its session closes once the call ends
(`rayspec.engine.drafting.SequenceDrafting`).

The law is the target's whatever the hedge does.  Which steps draft depends on timing, so for
the verifiers whose tokens depend on the drafts, a seed's tokens do too: the engine hedges
only requests that need not replay (no seed), and the drafter-invariant ones
(`Verifier.drafter_invariant`: Gumbel and Weighted-MinHash coupling), whose tokens for a seed
are the same with or without a draft — so hedged or not.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from rayspec.engine.interfaces import Draft, DrafterSession, Outcome
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import TreeShape


def check_hedge_factor(factor, name: str = "draft_hedge") -> None:
    """A clear error for a hedge factor that is not a number above 1 (or None: off), naming the
    setting `name`: a command-line flag's ("--draft-hedge") is off when left out, not null."""
    if factor is None:
        return
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 1 or factor == float("inf"):
        off = "left out" if name.startswith("--") else "null"
        raise ValueError(f"{name} must be a number above 1 (times a draft's recent median time), or {off} "
                         f"to wait for every draft; got {factor!r}")


class DraftHedge:
    """One sequence's drafts, each waited for at most `factor` times the median of its
    drafter's last `WINDOW` draft times (at least `MIN_SLACK` seconds more than it), counted
    from `MIN_DRAFTS` drafts on: before that a draft is simply waited for.  The first draft,
    which prefills the prompt, is not counted.  A draft that comes late still counts, so a
    drafter grown slower for good is soon waited for again: the late drafts' times fill the
    window and raise the median, rather than every step being hedged from then on."""

    WINDOW, MIN_DRAFTS = 16, 4
    MIN_SLACK = 0.005  # seconds: below that, a late draft is a scheduler's hiccup, not a stall

    def __init__(self, factor: float, executor: ThreadPoolExecutor):
        check_hedge_factor(factor)
        self.factor, self.executor = float(factor), executor
        self.seconds: deque[float] = deque(maxlen=self.WINDOW)
        self.pending: Future | None = None  # the late draft, until it is in
        self.first = True

    def deadline(self) -> float | None:
        """Seconds a draft is waited for (None: to the end)."""
        if len(self.seconds) < self.MIN_DRAFTS:
            return None
        median = statistics.median(self.seconds)
        return max(self.factor * median, median + self.MIN_SLACK)

    def draft(self, session: DrafterSession, shape: TreeShape | DynamicPlan,
              previous: Outcome | None) -> tuple[Draft | None, bool]:
        """(the step's draft, or None when it goes on without one; whether `previous` was
        sent).  A late draft still out: None, not sent.  A late draft that is in is dropped
        here — or raises what its call raised (`DrafterUnavailable`: the drafter is lost)."""
        if self.pending is not None:
            if not self.pending.done():
                return None, False
            late, self.pending = self.pending, None
            late.result()
        wait = self.deadline()
        if wait is None:
            return self._timed(session, shape, previous), True
        call = self.executor.submit(self._timed, session, shape, previous)
        try:
            return call.result(timeout=wait), True
        except TimeoutError:
            self.pending = call
            return None, True

    def _timed(self, session: DrafterSession, shape, previous) -> Draft:
        started = time.perf_counter()
        draft = session.draft(shape, previous)
        if self.first:
            self.first = False
        else:
            self.seconds.append(time.perf_counter() - started)
        return draft
