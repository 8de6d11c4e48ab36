"""Stand-ins for workers that fail in the ways a service meets: a target whose session goes
with its worker's process, and which may take a while to come back; a drafter late now and
then."""

from __future__ import annotations

import threading
import time

from rayspec.engine.interfaces import DrafterUnavailable, TargetUnavailable


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


class LateDrafter:
    """A drafter whose sessions' `late` draft calls (1 the first, which prefills) take `delay`
    seconds more, and whose late calls fail instead with `fails` (a drafter lost meanwhile).
    `calls`: (session, call, 'drafted' | 'closed') in the order they happened; `told`: the
    tokens each session was told it had missed, in order."""

    def __init__(self, drafter, late=(), fails: bool = False, delay: float = 0.4):
        self.drafter, self.late, self.fails, self.delay = drafter, set(late), fails, delay
        self.calls, self.told, self._lock = [], {}, threading.Lock()

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def open(self, spec):
        session, number, count = self.drafter.open(spec), len({c[0] for c in self.calls}), [0]
        draft, close = session.draft, session.close

        def late_draft(shape, previous):
            count[0] += 1
            call = count[0]
            self.told.setdefault(number, []).extend(previous.tokens if previous else [])
            if call in self.late:
                time.sleep(self.delay)
                if self.fails:
                    raise DrafterUnavailable("DEADLINE_EXCEEDED: the drafter did not answer")
            result = draft(shape, previous)
            with self._lock:
                self.calls.append((number, call, "drafted"))
            return result

        def closed():
            with self._lock:
                self.calls.append((number, count[0], "closed"))
            close()

        session.draft, session.close = late_draft, closed
        return session
