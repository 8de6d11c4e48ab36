"""A caller that gives up: how a long call learns that nobody waits for it any more.

A target's `open` prefills the prompt, the one call of a sequence that may take seconds, and
it may queue behind other sequences' prefills.  Its caller may leave meanwhile (a client past
its deadline), and neither the call nor the `Target` protocol carries that.  So the caller
says it in the context of the thread that makes the call (`watching_caller`), and what waits
or computes long inside it asks (`caller_left`):

- the engine watches its client while it opens the target;
- a remote target's Open is cancelled then (`rayspec.rpc.remote.call_while_wanted`);
- a worker watches its Open's RPC, and there a prefill still queued for the model leaves the
  queue (`ForwardBatcher.forward`), and a chunked prefill stops between chunks
  (`TreeLM.prefill`).

Outside a watch, nobody has left.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar


class GenerationCancelled(RuntimeError):
    """The generation's caller gave up on it (its client left, its RPC was cancelled) while the
    engine waited on a worker or a prefill: the wait ends there rather than at its deadline."""


_caller_left: ContextVar[Callable[[], bool] | None] = ContextVar("rayspec_caller_left", default=None)


@contextmanager
def watching_caller(left: Callable[[], bool] | None):
    """Within the block, in this thread, `caller_left()` is `left()` (None: the caller never
    leaves)."""
    token = _caller_left.set(left)
    try:
        yield
    finally:
        _caller_left.reset(token)


def caller_watch() -> Callable[[], bool] | None:
    """The watch `caller_left` asks, or None outside one."""
    return _caller_left.get()


def caller_left() -> bool:
    """Whether the caller of the call being made gave up on it (see `watching_caller`)."""
    left = _caller_left.get()
    return left is not None and left()


def stop_if_caller_left(when: str) -> None:
    """`GenerationCancelled` once the caller left (`caller_left`)."""
    if caller_left():
        raise GenerationCancelled(f"its caller left {when}")
