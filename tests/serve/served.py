"""What the HTTP tests share: the tiny model pair's names and settings, `Watched` (a test
double of our own `Target`/`Drafter` interfaces that counts sessions and can hold back or fail
steps), and the in-process engine's expected output."""

from __future__ import annotations

import threading
import time

MODEL = "tiny-pair"
PROMPT = "def add(a, b):"
SETTING = dict(verifier="rrsw", tree="kary:2x3")


class Watched:
    """A Target or Drafter whose sessions are counted; `permits` (a semaphore) holds each
    step until released, and `fail = (n, error)` raises `error` from the step after n."""

    def __init__(self, inner):
        self.inner = inner
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.open_sessions = self.opened = self.steps = self.most_open = 0
        self.permits: threading.Semaphore | None = None
        self.fail: tuple[int, Exception] | None = None

    def __getattr__(self, name):  # vocab_size, context_length, eos_token_ids
        return getattr(self.inner, name)

    def open(self, spec):
        session = self.inner.open(spec)
        with self.lock:
            self.open_sessions += 1
            self.most_open = max(self.most_open, self.open_sessions)
            self.opened += 1
        return _WatchedSession(self, session)

    def step(self):
        if self.permits is not None and not self.permits.acquire(timeout=30):
            raise RuntimeError("test double: no permit to step within 30 s")
        with self.lock:
            if self.fail is not None and self.steps >= self.fail[0]:
                raise self.fail[1]
            self.steps += 1


class _WatchedSession:
    def __init__(self, owner: Watched, inner):
        self.owner, self.inner, self.closed = owner, inner, False
        self.prompt_logprobs = getattr(inner, "prompt_logprobs", None)  # a target's, when asked for
        self.cached_tokens = getattr(inner, "cached_tokens", 0)

    def draft(self, shape, previous):
        self.owner.step()
        return self.inner.draft(shape, previous)

    def verify(self, draft):
        self.owner.step()
        return self.inner.verify(draft)

    def close(self):
        with self.owner.lock:
            if not self.closed:
                self.closed = True
                self.owner.open_sessions -= 1
        self.inner.close()


def eventually(condition, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def expected(reference, tokenizer, prompt: str, **kwargs) -> tuple[list[int], str, object]:
    """(tokens, text, stats) of the in-process engine for a text prompt."""
    out = reference.run(tokenizer.encode(prompt, add_special_tokens=False), **kwargs)
    # the service never shows a trailing unfinished UTF-8 character (decoded as U+FFFD)
    return out.tokens, tokenizer.decode(out.tokens, skip_special_tokens=True).rstrip("\ufffd"), out.stats


def chat_prompt(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
