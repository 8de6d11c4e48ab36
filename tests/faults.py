"""Stand-ins for workers that fail in the ways a service meets: a target whose session goes
with its worker's process, and which may take a while to come back."""

from __future__ import annotations

import threading
import time

from rayspec.engine.interfaces import TargetUnavailable


class LosesItsFirstSession:
    """A target whose first session is lost at its `at_step`-th step, as to a restarted worker
    (NOT_FOUND: no such session), and which then refuses to open any (UNAVAILABLE) for `down`
    seconds, as a worker still restarting; it answers as `target` otherwise.  `opened`: the
    specs of the sessions opened; `lost`: set at the loss."""

    def __init__(self, target, at_step: int = 3, down: float = 0.0):
        self.target, self.at_step, self.down, self.opened = target, at_step, down, []
        self.lost = threading.Event()
        self._back_at = 0.0

    def __getattr__(self, name):
        return getattr(self.target, name)

    def open(self, spec):
        if time.monotonic() < self._back_at:
            raise TargetUnavailable("UNAVAILABLE: the target worker is restarting")
        self.opened.append(spec)
        session = self.target.open(spec)
        if len(self.opened) == 1:
            verify, steps = session.verify, []

            def lost_at_its_step(draft):
                steps.append(draft)
                if len(steps) == self.at_step:
                    self._back_at = time.monotonic() + self.down
                    self.lost.set()
                    raise TargetUnavailable("NOT_FOUND: no such session (the worker restarted)")
                return verify(draft)

            session.verify = lost_at_its_step
        return session
