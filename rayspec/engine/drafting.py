"""One sequence's side of its drafter, for the engine's loop (`rayspec.engine.engine`).

The drafter is an accelerator, not a dependency: a sequence whose drafter is lost decodes on
target-only, with the target's law all the same, and tries the drafter again now and then
(`Comeback`); a draft that is late may be left behind (`rayspec.engine.hedge`).  Either way
the drafter is told, with its next draft, the steps it did not draft (`Outcome.then`).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from rayspec.engine.hedge import DraftHedge
from rayspec.engine.interfaces import Draft, Drafter, DrafterBusy, DrafterUnavailable, Outcome, SequenceSpec
from rayspec.engine.pool import DrafterPool
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import TreeShape

log = logging.getLogger(__name__)


class Comeback:
    """When a sequence that lost its drafter tries it again: at its next step (a restarted
    worker that lost the session, or a pool's other drafter, takes it at once), then 1, 2, 4
    ... up to `MAX_WAIT` seconds after each failed try.  A remote drafter that is still down
    refuses at once without a call (`rayspec.rpc.remote.RemoteDrafter`), so a try costs the
    step little; the waits keep a drafter that never comes back from being asked at every
    step all the same."""

    FIRST_WAIT, MAX_WAIT = 1.0, 30.0

    def __init__(self):
        self.wait: float | None = None  # after the last failed try (None: none yet)
        self.at = 0.0

    def failed(self) -> None:
        self.wait = 0.0 if self.wait is None else min(max(2 * self.wait, self.FIRST_WAIT), self.MAX_WAIT)
        self.at = time.monotonic() + self.wait

    def due(self) -> bool:
        return time.monotonic() >= self.at


def check_drafted_tokens(draft: Draft, vocab_size: int) -> None:
    """RuntimeError when a draft names a token outside the target's vocabulary: a drafter of
    one's own that breaks the `Drafter` contract is named, rather than failing as an IndexError
    deep in the target's embedding (a remote drafter's ids are checked as they are decoded)."""
    tokens = draft.tree.tokens
    if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < vocab_size:
        bad = tokens[(tokens < 0) | (tokens >= vocab_size)][:5].tolist()
        raise RuntimeError(f"the drafter proposed token ids outside the target's vocabulary of {vocab_size} tokens: "
                           f"{bad}")


class SequenceDrafting:
    """A sequence's drafter session — opened at the first step that drafts, closed with this
    (a context manager) — and what it has not been told.  Each step: `may_draft`, then `draft`
    if the step drafts with it, then `tell` the step's outcome.

    stats: the sequence's `GenerationStats`, whose `drafter_lost`, `drafter_comebacks` and
    `hedged_steps` this keeps.  hedge: (factor, threads) when late drafts are left behind
    (`DraftHedge`), None to wait for every draft.  replayable: the sequence's seed must give
    its tokens again, so a pool gives it the drafter its seed names (`DrafterPool.open_by_seed`)."""

    def __init__(self, drafter: Drafter | None, spec: SequenceSpec, stats,
                 hedge: tuple[float, ThreadPoolExecutor] | None = None, replayable: bool = False):
        self.drafter, self.spec, self.stats, self.hedge_setting = drafter, spec, stats, hedge
        self._open = drafter.open_by_seed if replayable and isinstance(drafter, DrafterPool) else getattr(
            drafter, "open", None)
        self._session_stack = ExitStack()
        self.session = None
        self.hedge: DraftHedge | None = None  # the open session's
        self.unseen: Outcome | None = None  # what the drafter has not been told since it last drafted
        self.comeback: Comeback | None = None  # while the drafter is lost: when to try it again
        self.active = False  # whether this step may draft, and so the drafter hears of it

    def __enter__(self) -> SequenceDrafting:
        return self

    def __exit__(self, *exc) -> None:
        self._close_session()

    def may_draft(self, fits: bool, produced: list[int]) -> bool:
        """Whether this step may draft: the sequence still `fits` the drafter's context, and a
        lost drafter is due to be tried again (a new session is then told `produced`).  A
        session that may not draft is closed: past the context, for good."""
        active = self.drafter is not None and fits
        if active and self.comeback is not None:
            active = self.comeback.due()
            if active and self.unseen is None:  # a new session knows the prompt only
                self.unseen = Outcome(list(produced), [], []) if produced else None
        if not active:
            self._close_session()
        self.active = active
        return active

    def draft(self, shape: TreeShape | DynamicPlan, produced: int) -> Draft | None:
        """The step's draft of (at most) `shape`, None when the step goes on without one: the
        drafter lost (`DrafterUnavailable`: tried again later), or the draft late (hedged).
        `produced`: the tokens decoded so far.  `DrafterBusy` before the first token is raised:
        the service's capacity answer; after it (a drafter first opened at a later step: a
        prediction's chain drafted until then, or a Sequoia plan's probe step), the stream is
        under way and the sequence decodes on without drafts, as with a drafter lost."""
        try:
            if self.session is None:
                self.session = self._open(self.spec)
                self._session_stack.callback(self.session.close)
                if self.hedge_setting is not None:
                    self.hedge = DraftHedge(*self.hedge_setting)
            if self.hedge is None:
                drafted, told = self.session.draft(shape, self.unseen), True
            else:
                drafted, told = self.hedge.draft(self.session, shape, self.unseen)
        except (DrafterUnavailable, DrafterBusy) as error:
            self._lost(error, produced)
            return None
        if told:
            self.unseen = None
        if drafted is None:
            self.stats.hedged_steps += 1
        elif self.comeback is not None:
            log.info("drafter back after %d tokens: the sequence drafts again", produced)
            self.stats.drafter_comebacks += 1
            self.comeback = None
        return drafted

    def _lost(self, error: Exception, produced: int) -> None:
        if self.comeback is None:
            if isinstance(error, DrafterBusy) and not produced:
                raise error  # no room for a new request: the service's capacity answer
            log.warning("drafter lost after %d tokens (%s): the sequence decodes on without drafts "
                        "until it answers again", produced, error)
            self.stats.drafter_lost = str(error)
            self.comeback = Comeback()
        else:
            log.debug("drafter still unavailable after %d tokens: %s", produced, error)
        self.comeback.failed()  # target-only until the next try, this step included
        self._close_session()
        self.active = False

    def tell(self, outcome: Outcome, drafted: bool, placed: tuple[int, ...] | None = None) -> None:
        """The step's outcome, for the drafter's next draft.  drafted: whether the step's tree
        holds a draft of this drafter's; placed: with a grafted prediction, the node each of
        its nodes became (it keeps the nodes of its own trees only)."""
        if not self.active:
            return
        if not drafted:
            told = Outcome(outcome.tokens, [], [])
        else:
            told = outcome if placed is None else Outcome(outcome.tokens, _own_path(outcome.path, placed), [])
        self.unseen = told if self.unseen is None else self.unseen.then(told)

    def _close_session(self) -> None:
        late = None if self.hedge is None else self.hedge.pending
        if late is not None and not late.done():
            # Closed once the late draft is in, not under it: its call keeps its own deadline,
            # so that a drafter that hangs is found out (and not tried for a while), and the
            # sequence waits for neither.
            closing = self._session_stack.pop_all()
            late.add_done_callback(lambda _: closing.close())
        else:
            self._session_stack.close()
        self.session = self.hedge = self.unseen = None


def _own_path(path: list[int], placed: tuple[int, ...]) -> list[int]:
    """A path through a tree with a grafted prediction as the drafter's own nodes: empty
    unless the walk went down the drafter's tree (`placed`: the node each of its nodes became)."""
    if not path:
        return []
    own = {node: index for index, node in enumerate(placed)}
    return [own[node] for node in path] if path[0] in own else []
