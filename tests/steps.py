"""What a decode's steps did, as the tests read them (`rayspec.engine.engine.StepStats`)."""

from __future__ import annotations


def uncut_steps(steps, max_new_tokens: int, depth: int) -> list:
    """The steps of a decode whose trees (at most `depth` deep) were not cut to the tokens
    left: a step drafts no deeper than the tokens left allow."""
    uncut, produced = [], 0
    for step in steps:
        if max_new_tokens - produced > depth:
            uncut.append(step)
        produced += step.emitted
    return uncut


def drafted_steps(steps, max_new_tokens: int) -> list[bool]:
    """Whether each step drafted, leaving out a last one with one token left, which drafts
    nothing hedged or not."""
    return [step.drafted > 0 for step in uncut_steps(steps, max_new_tokens, depth=1)]
