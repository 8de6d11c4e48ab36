"""Fixtures of the gRPC tests that run servers in their own process."""

import pytest

from tests.tiny_models import noisy_copy, tiny_llama

TINY_VOCAB = 64


@pytest.fixture(scope="module")
def pair():
    """A tiny random target over `TINY_VOCAB` tokens and a noisy copy of it as its drafter."""
    target = tiny_llama(vocab=TINY_VOCAB, seed=0)
    return target, noisy_copy(target, noise=0.3)
