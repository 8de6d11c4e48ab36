"""Text out of tokens: stop strings never streamed in part (multi-byte ones included), the
space a SentencePiece completion begins with, and the engine's finish reason and usage when a
stop string or max_tokens cuts a step."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rayspec.demo import TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import Outcome
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.engine.text import TextAssembler
from tests.tiny_models import noisy_copy, tiny_llama

TEXT = "Le menu: un café crème, deux thés. 日本語のメニュー 🙂🙂 fin."


@pytest.fixture(scope="module")
def demo_tokenizer():
    return AutoTokenizer.from_pretrained(TARGET_PATH)


@pytest.fixture(scope="module")
def sentencepiece_tokenizer():
    """A Llama-2-style tokenizer (Metaspace, "▁" for spaces, no "▁" before a sequence's first
    word when decoding), trained here on a few words: no hub, no download."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.train_from_iterator(["Hello, world! The world is big. Hello world"] * 20,
                                  trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


@pytest.mark.parametrize("stop", ["café", "thés", "crème", "日本語", "🙂🙂", "é c", "deux", "nowhere"])
def test_no_part_of_a_stop_string_is_ever_streamed(demo_tokenizer, stop):
    ids = demo_tokenizer.encode(TEXT, add_special_tokens=False)
    expected = TEXT[:TEXT.find(stop)] if stop in TEXT else TEXT
    rng = random.Random(0)
    for _ in range(60):
        cuts = sorted(rng.sample(range(1, len(ids)), rng.randint(0, len(ids) - 1)))
        assembler = TextAssembler(demo_tokenizer, [stop])
        bounds = [0, *cuts, len(ids)]
        sent = ""
        for a, b in zip(bounds, bounds[1:]):
            sent += assembler.push(ids[a:b])
            assert expected.startswith(sent), (stop, cuts, sent)
        sent += assembler.finish()
        assert sent == assembler.text == expected, (stop, cuts)


def test_a_sentencepiece_completion_keeps_the_space_before_its_first_word(sentencepiece_tokenizer):
    tokenizer = sentencepiece_tokenizer
    full = tokenizer.encode("Hello, world is big", add_special_tokens=False)
    prompt, completion = full[:1], full[1:]
    assert tokenizer.decode(prompt) == "Hello," and tokenizer.decode(completion).startswith("world")  # the trap
    assembler = TextAssembler(tokenizer, (), prompt)
    streamed = "".join(assembler.push([token]) for token in completion) + assembler.finish()
    assert streamed == assembler.text == " world is big"


class _ScriptedTarget:
    """A target that emits `script`, one token per step, then its EOS (token 0)."""

    vocab_size, context_length, eos_token_ids = 8192, 1024, [0]

    def __init__(self, script):
        self.script = script

    def open(self, spec):
        script = iter(self.script)

        class Session:
            def verify(self, draft):
                return Outcome([next(script, 0)], [], [])

            def close(self):
                pass

        return Session()


def test_a_stop_string_completed_by_the_last_allowed_token_stops(demo_tokenizer):
    script = demo_tokenizer.encode("alpha beta gamma delta", add_special_tokens=False)
    stop_ends = len(demo_tokenizer.encode("alpha beta gamma", add_special_tokens=False))
    engine = SpeculativeEngine(_ScriptedTarget(script), None, tokenizer=demo_tokenizer)
    for max_tokens in (stop_ends, stop_ends + 1, len(script)):
        out = engine.run([5], max_new_tokens=max_tokens, stop=[" gamma"])
        assert (out.tokens, out.finish_reason) == (script[:stop_ends], "stop"), max_tokens
    out = engine.run([5], max_new_tokens=stop_ends - 1, stop=[" gamma"])
    assert (out.tokens, out.finish_reason) == (script[:stop_ends - 1], "length")


def test_a_stop_string_after_the_prompt_is_found_as_the_completion_reads(sentencepiece_tokenizer):
    tokenizer = sentencepiece_tokenizer
    full = tokenizer.encode("Hello, world is big", add_special_tokens=False)
    engine = SpeculativeEngine(_ScriptedTarget(full[1:]), None, tokenizer=tokenizer)
    out = engine.run(full[:1], max_new_tokens=len(full) - 1, stop=[" world"])
    assert (out.tokens, out.finish_reason) == (full[1:2], "stop")  # the tokens that complete it are yielded


def test_accepted_drafts_a_cut_step_did_not_emit_count_as_rejected(demo_tokenizer):
    target = tiny_llama(vocab=64, seed=0)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target, noise=0.01)),
                               verifier="greedy", tree="chain:4")
    cut = 0
    for max_tokens in (1, 2, 3, 5, 8):
        request = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[1, 2, 3], max_tokens=max_tokens,
                                    temperature=0, seed=0)
        list(request.run())
        usage, steps = request.usage(), request.stats.steps
        assert usage["completion_tokens"] == max_tokens == sum(s.emitted for s in steps)
        assert usage["accepted_draft_tokens"] == sum(min(s.accepted, s.emitted) for s in steps) <= max_tokens
        assert usage["accepted_draft_tokens"] + usage["rejected_draft_tokens"] == sum(s.drafted for s in steps)
        cut += steps[-1].accepted + 1 > steps[-1].emitted
    assert cut  # some last step accepted more drafts than max_tokens let through
