"""Stand-ins for workers that fail in the ways a service meets: a target whose session goes
with its worker's process."""

from __future__ import annotations

from rayspec.engine.interfaces import TargetUnavailable


class LosesItsFirstSession:
    """A target whose first session is lost at its `at_step`-th step, as to a restarted worker
    (NOT_FOUND: no such session); it answers as `target` otherwise.  `opened`: the specs of
    the sessions opened."""

    def __init__(self, target, at_step: int = 3):
        self.target, self.at_step, self.opened = target, at_step, []

    def __getattr__(self, name):
        return getattr(self.target, name)

    def open(self, spec):
        self.opened.append(spec)
        session = self.target.open(spec)
        if len(self.opened) == 1:
            verify, steps = session.verify, []

            def lost_at_its_step(draft):
                steps.append(draft)
                if len(steps) == self.at_step:
                    raise TargetUnavailable("NOT_FOUND: no such session (the worker restarted)")
                return verify(draft)

            session.verify = lost_at_its_step
        return session
