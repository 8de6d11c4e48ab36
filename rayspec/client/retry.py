"""When the client replays a failed call, and how long it waits first.

Only idempotent calls are replayed, and only after UNAVAILABLE (the server could not be
reached or dropped the connection):

- health checks always: they have no effect on the server;
- `generate` / `stream` only when the request carries a seed.  The server's output is a
  function of (request, seed), so a replay returns exactly the completion the failed attempt
  would have returned: the caller cannot tell that a retry happened.  Without a seed each
  attempt is a fresh random draw, and the server may already have produced (and reported
  the seed of) a completion the caller never sees; such failures surface as
  `UnavailableError` for the caller to decide.  Pass a seed to make a request retryable.
- a stream only until its first message arrives: after that the caller has seen chunks,
  and a replay would hand them out twice.

Never retried: DEADLINE_EXCEEDED (the time is spent), INVALID_ARGUMENT (the same request
fails the same way), RESOURCE_EXHAUSTED (replays would add to the overload), and every
other code.  Every attempt shares the one deadline of the call: a retry whose pause would
not end before the deadline is not made, and the last error is raised instead.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import grpc


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: the n-th retry waits min(max_backoff, initial_backoff *
    multiplier**(n-1)) seconds, shortened by up to `jitter` of itself at random so that
    clients failed by the same outage do not return in lockstep."""

    max_retries: int = 3
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self):
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not (0 < self.initial_backoff <= self.max_backoff):
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    @classmethod
    def coerce(cls, retries: int | RetryPolicy) -> RetryPolicy:
        """`Client(retries=3)` is shorthand for the default policy with three retries."""
        return retries if isinstance(retries, RetryPolicy) else cls(max_retries=int(retries))

    def backoff(self, retry: int) -> float:
        """The pause before retry number `retry` (1, 2, ...)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        return base * (1.0 - self.jitter * random.random())

    def pause(self, retries_done: int, code: grpc.StatusCode, deadline: Deadline) -> float | None:
        """Seconds to wait before replaying an idempotent call that failed with `code`, or
        None when it must not be replayed."""
        if code != grpc.StatusCode.UNAVAILABLE or retries_done >= self.max_retries:
            return None
        pause = self.backoff(retries_done + 1)
        return pause if pause < deadline.remaining() else None


class Deadline:
    """The one deadline of a call, shared by all its attempts."""

    def __init__(self, seconds: float):
        self._at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(self._at - time.monotonic(), 0.0)
