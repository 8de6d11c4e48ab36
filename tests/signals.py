"""Python source for a test's child process: a second signal arriving while the first one's
handler is under way, at its worst moment.  `NESTED_SIGNALS` defines `nest_signals()`, which
traces the calling thread so that every line a SIGTERM handler runs (and every line of what it
calls) meets another SIGTERM, handled there, nested (the nested handlers run untraced), up to
50 in all.  A handler that takes a lock (`threading.Event.set`) waits for ever in the nested
one for the lock its outer call holds."""

NESTED_SIGNALS = r'''
import signal as _signal
import sys as _sys

_more = [50]


def _again(frame, event, arg):
    handler = _signal.getsignal(_signal.SIGTERM)
    code, inside = getattr(handler, "__code__", None), frame
    while inside is not None and inside.f_code is not code:
        inside = inside.f_back
    if event == "line" and inside is not None and _more[0]:
        _more[0] -= 1
        _signal.raise_signal(_signal.SIGTERM)  # handled here, within the handler under way
    return _again


def nest_signals():
    _sys.settrace(_again)
'''
