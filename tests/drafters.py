"""A drafter wrapper for tests that look at what a drafter is asked and what it drafts."""

from __future__ import annotations


class WatchedDrafter:
    """A drafter that answers as `drafter` and, after each tree one of its sessions drafts,
    calls `on_draft(session, shape, draft)`: the inner session (its committed `tokens`), the
    shape or plan the engine asked for, and the draft it got."""

    def __init__(self, drafter, on_draft):
        self.drafter, self.on_draft = drafter, on_draft

    def __getattr__(self, name):  # vocab_size, context_length, ...
        return getattr(self.drafter, name)

    def open(self, spec):
        session = self.drafter.open(spec)
        draft = session.draft

        def watched(shape, previous):
            drafted = draft(shape, previous)
            self.on_draft(session, shape, drafted)
            return drafted

        session.draft = watched
        return session
