"""Text out of tokens: stop strings never streamed in part (multi-byte ones included), the
space a SentencePiece completion begins with, and the engine's finish reason and usage when a
stop string or max_tokens cuts a step."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rayspec.demo import TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import Outcome
from rayspec.engine.requests import GenerationRequest, Limits
from rayspec.engine.text import CONTEXT_TOKENS, IncrementalDecoder, StopFinder, StopStrings, TextAssembler
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


@pytest.fixture(scope="module")
def byte_fallback_tokenizer():
    """A Llama-2-style tokenizer with SentencePiece's byte fallback: a character out of its
    vocabulary (here emoji, CJK, accents) is a token per UTF-8 byte, "<0xF0>" and the like, and
    its decoder (Llama 2's: ByteFallback) shows a run of such tokens that is not whole UTF-8 as
    one U+FFFD per token, the run's whole characters included."""
    return _byte_fallback_tokenizer()


def _byte_fallback_tokenizer(decoder=None):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for character in "▁" + "".join(sorted(set("Hello, world! The end.".replace(" ", "")))):
        vocab[character] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.decoder = decoder or decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                                      decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@pytest.mark.parametrize("stop", [None, "🙂", "日本", "é 🙂", "本語", "end"])
def test_a_run_of_byte_fallback_tokens_streams_no_u_fffd_its_last_byte_would_turn_into_text(
        byte_fallback_tokenizer, stop):
    tokenizer = byte_fallback_tokenizer
    prompt = tokenizer.encode("Hello", add_special_tokens=False)
    ids = tokenizer.encode("Hello world 🙂🙂 日本語 thé 🙂 The end", add_special_tokens=False)[len(prompt):]
    emoji = tokenizer.convert_ids_to_tokens(ids).index("<0xF0>")
    assert tokenizer.decode(ids[emoji:emoji + 4]) == "🙂"
    assert tokenizer.decode(ids[emoji:emoji + 6]) == "\ufffd" * 6  # the trap: a whole emoji shown as U+FFFD
    text = tokenizer.decode(prompt + ids, skip_special_tokens=True)[len("Hello"):]
    expected = text[:text.find(stop)] if stop else text
    rng = random.Random(0)
    for _ in range(60):
        cuts = sorted(rng.sample(range(1, len(ids)), rng.randint(0, len(ids) - 1)))
        bounds = [0, *cuts, len(ids)]
        assembler, finder, sent = TextAssembler(tokenizer, [stop] if stop else [], prompt), StopFinder(
            tokenizer, [stop] if stop else [], prompt), ""
        for a, b in zip(bounds, bounds[1:]):
            cut = finder.cut(ids[a:b])
            delta = assembler.push(ids[a:b] if cut is None else ids[a:a + cut[0]])
            assert "\ufffd" not in delta and expected.startswith(sent + delta), (stop, cuts, sent, delta)
            sent += delta
            if cut is not None:
                assert assembler.stopped and cut[1] == stop
                break
        sent += assembler.finish()
        assert sent == assembler.text == expected, (stop, cuts)


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


def _whole_decode(tokenizer, prompt, ids, skip=True):
    """The completion's text by decoding it whole after the prompt's last tokens (the oracle)."""
    context = list(prompt)[-CONTEXT_TOKENS:]
    head = tokenizer.decode(context, skip_special_tokens=skip) if context else ""
    if head.endswith("\ufffd"):
        context, head = [], ""
    whole = tokenizer.decode(context + list(ids), skip_special_tokens=skip)
    return whole[len(head):] if whole.startswith(head) else tokenizer.decode(list(ids), skip_special_tokens=skip)


class _CountingTokenizer:
    """Passes decode through and records how many tokens each call decoded."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def decode(self, ids, **kwargs):
        self.lengths.append(len(ids))
        return self.tokenizer.decode(ids, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


class _CleaningUpTokenizer:
    """The demo tokenizer with WordPiece's clean-up of spaces before punctuation (what
    `clean_up_tokenization_spaces` does): a decoding that rewrites across tokens."""

    def __init__(self, tokenizer):
        self.tokenizer, self.vocab_size, self.encode = tokenizer, tokenizer.vocab_size, tokenizer.encode

    def decode(self, ids, **kwargs):
        text = self.tokenizer.decode(ids, **kwargs)
        for spaced, tight in ((" .", "."), (" ,", ","), (" !", "!"), (" ?", "?"), (" n't", "n't")):
            text = text.replace(spaced, tight)
        return text


def _token_soup(tokenizer, rng, n):
    """Text tokens with random ids among them: half characters, lone bytes, special tokens."""
    text = tokenizer.encode(TEXT * 4, add_special_tokens=False)
    return [rng.choice(text) if rng.random() < 0.7 else rng.randrange(tokenizer.vocab_size) for _ in range(n)]


@pytest.mark.parametrize("which", ["demo", "sentencepiece", "demo_cleanup"])
def test_the_incremental_decoder_reads_as_the_whole_completion_decoded(which, demo_tokenizer,
                                                                       sentencepiece_tokenizer):
    """Pushed in chunks of any size, the text is the whole completion decoded after the prompt
    (byte-level BPE, SentencePiece, and a decoder that cleans up spaces across tokens), and
    peeking at tokens gives the text pushing them would, changing nothing."""
    if which == "demo_cleanup":
        tokenizer = _CleaningUpTokenizer(demo_tokenizer)
        assert tokenizer.decode(tokenizer.encode("a .", add_special_tokens=False)) == "a."  # decoding rewrites
    else:
        tokenizer = demo_tokenizer if which == "demo" else sentencepiece_tokenizer
    rng, windowed = random.Random(3), []
    for trial in range(40):
        prompt = _token_soup(tokenizer, rng, rng.randint(0, 6))
        ids = _token_soup(tokenizer, rng, rng.randint(1, 60))
        decoder, pushed = IncrementalDecoder(tokenizer, prompt), []
        while len(pushed) < len(ids):
            chunk = ids[len(pushed):len(pushed) + rng.randint(1, 5)]
            peeked, before = decoder.peek(chunk), decoder.text
            assert peeked == _whole_decode(tokenizer, prompt, pushed + chunk), (trial, pushed, chunk)
            if pushed:
                assert decoder.text == before == _whole_decode(tokenizer, prompt, pushed)
            pushed += chunk
            assert decoder.push(chunk) == decoder.text == _whole_decode(tokenizer, prompt, pushed), (trial, pushed)
        windowed.append(decoder.windowed)
    assert all(windowed)  # the oracle is met by decoding windows (each token's clean-up stays in it)


def test_a_decoding_that_rewrites_across_chunks_falls_back_to_whole_decodes(demo_tokenizer):
    tokenizer = _CleaningUpTokenizer(demo_tokenizer)
    chunks = [tokenizer.encode(piece, add_special_tokens=False) for piece in ("Hello world", " ", ".", " Bye", " ,")]
    assert [len(c) for c in chunks[1:3]] == [1, 1]  # the space and the full stop are tokens of their own
    decoder, pushed = IncrementalDecoder(tokenizer), []
    for chunk in chunks:
        pushed += chunk
        assert decoder.push(chunk) == _whole_decode(tokenizer, [], pushed)
    assert decoder.text == "Hello world. Bye," and not decoder.windowed


def test_a_stop_string_that_a_rewrite_across_chunks_completes_is_found(demo_tokenizer):
    """"world " searched, then the full stop's clean-up makes it "world.": the stop string
    begins before the searched text's end, so the search goes back to where the text changed."""
    tokenizer = _CleaningUpTokenizer(demo_tokenizer)
    chunks = [tokenizer.encode(piece, add_special_tokens=False) for piece in ("Hello world", " ", ".", " Bye")]
    finder = StopFinder(tokenizer, ["world."])
    assert [finder.cut(chunk) for chunk in chunks[:3]] == [None, None, (1, "world.")]
    assembler = TextAssembler(tokenizer, ["world."], include_stop=True)
    for chunk in chunks:
        assembler.push(chunk)
    assert (assembler.text, assembler.stopped) == ("Hello world.", True)


def test_a_push_decodes_a_few_tokens_however_long_the_completion():
    """The decoder's cost per push does not grow with the completion: a decode call covers the
    last settled chunk and the chunks since (more than one while characters are unfinished),
    where decoding the whole completion at every step made a request quadratic in its length."""
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    ids = tokenizer.encode(TEXT * 40, add_special_tokens=False)
    counting = _CountingTokenizer(tokenizer)
    decoder = IncrementalDecoder(counting, ids[:4])
    for start in range(4, len(ids), 3):
        decoder.peek(ids[start:start + 3])
        decoder.push(ids[start:start + 3])
    assert len(ids) > 1000 and decoder.text == _whole_decode(tokenizer, ids[:4], ids[4:])
    assert decoder.windowed and max(counting.lengths) <= 12, max(counting.lengths)


def _byte_soup(tokenizer, rng, n):
    """Byte fallback tokens as a model may sample them: runs of whole characters (1 to 4 bytes),
    characters cut short, stray continuation and lead bytes, bytes of spaces and letters; among
    text tokens, special tokens and an id out of the vocabulary (both decode to nothing when
    special tokens are skipped, so that a run of bytes goes on across them)."""
    byte = {b: tokenizer.convert_tokens_to_ids(f"<0x{b:02X}>") for b in range(256)}
    text = tokenizer.encode("Hello, world! The end.", add_special_tokens=False)
    specials = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id, 10**6]
    ids = []
    while len(ids) < n:
        draw = rng.random()
        if draw < 0.45:
            character = rng.choice("é日本語🙂😀👍 A\u2581\ufffd")
            encoded = character.encode()
            ids += [byte[b] for b in (encoded[:rng.randrange(1, len(encoded))] if len(encoded) > 1 and rng.random() < 0.15
                                      else encoded)]
        elif draw < 0.55:
            ids.append(byte[rng.choice([0x80, 0xBF, 0xC0, 0xE0, 0xED, 0xF0, 0xF4, 0xF8, 0xFF, 0x20])])
        elif draw < 0.65:
            ids.append(rng.choice(specials))
        else:
            ids.append(rng.choice(text))
    return ids[:n]


@pytest.mark.parametrize("decoder", ["llama", "gemma"])
@pytest.mark.parametrize("skip", [True, False])
def test_the_incremental_decoder_reads_byte_fallback_runs_as_the_whole_completion_decoded(decoder, skip):
    """Runs of byte fallback tokens, whole, unfinished or never UTF-8, spanning chunks, the
    prompt's end and skipped special tokens: after every push and peek the text is the whole
    completion decoded after the prompt (Llama 2's decoder, and Gemma's, which strips no space
    from the text's start), and the decoder never falls back to whole decodes."""
    tokenizer = _byte_fallback_tokenizer(None if decoder == "llama" else decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]))
    rng = random.Random(7)
    for trial in range(150):
        prompt = _byte_soup(tokenizer, rng, rng.randint(0, 6))
        ids = _byte_soup(tokenizer, rng, rng.randint(1, 50))
        decoder, pushed = IncrementalDecoder(tokenizer, prompt, skip_special_tokens=skip), []
        while len(pushed) < len(ids):
            chunk = ids[len(pushed):len(pushed) + rng.randint(1, 4)]
            if rng.random() < 0.5:
                peeked = decoder.peek(chunk)
                assert peeked == _whole_decode(tokenizer, prompt, pushed + chunk, skip), (trial, pushed, chunk)
                assert decoder.text == _whole_decode(tokenizer, prompt, pushed, skip), (trial, pushed)
            pushed += chunk
            assert decoder.push(chunk) == _whole_decode(tokenizer, prompt, pushed, skip), (trial, prompt, pushed)
        assert decoder.windowed, (trial, prompt, ids)


EMOJI = "🙂".encode()


@pytest.mark.parametrize("prompt", [["Hello", EMOJI], [b" "], ["Hello", b"A"]])
@pytest.mark.parametrize("completion", [[EMOJI[:2], EMOJI[2:], " The"], [EMOJI[:2], " The"],
                                        [b"\x80", "é".encode(), " The"]])
def test_a_completion_going_on_with_the_byte_run_its_prompt_ends_in_reads_as_decoded_whole(
        byte_fallback_tokenizer, prompt, completion):
    """A run of bytes the prompt ends in, which the completion's bytes go on, shows as U+FFFD
    from the prompt's text on: where the prompt's text is still a prefix ("" for a lone space
    the decoder strips) the completion's text begins with the run's U+FFFD past it, and else
    the completion is read on its own, its own bytes' U+FFFD (as `_whole_decode` reads it)."""
    tokenizer = byte_fallback_tokenizer

    def tokens(pieces):  # bytes as byte fallback tokens, text as the tokenizer encodes it
        return [token for piece in pieces for token in (
            [tokenizer.convert_tokens_to_ids(f"<0x{b:02X}>") for b in piece] if isinstance(piece, bytes)
            else tokenizer.encode(piece, add_special_tokens=False))]

    prompt, ids = tokens(prompt), tokens(completion)
    decoder, pushed = IncrementalDecoder(tokenizer, prompt), []
    for token in ids:
        pushed.append(token)
        assert decoder.push([token]) == _whole_decode(tokenizer, prompt, pushed), (prompt, pushed)
    assert decoder.windowed


def test_a_byte_fallback_completion_decodes_a_few_tokens_a_push_however_long():
    """Emoji and CJK out of the vocabulary are runs of byte tokens, which a character left
    unfinished shows as U+FFFD all along: such a run once made the decoder fall back to decoding
    the whole completion at every push, O(length²) a request (4000 tokens decoded a push at 8000)."""
    tokenizer = _byte_fallback_tokenizer()
    rng = random.Random(1)
    words = ["Hello", "world", "The", "end.", "🙂", "🙂🙂", "日本語", "thé", "😀👍🙂日本"]
    ids = tokenizer.encode(" ".join(rng.choice(words) for _ in range(800)), add_special_tokens=False)
    counting = _CountingTokenizer(tokenizer)
    decoder, start, per_push = IncrementalDecoder(counting, ids[:4]), 4, []
    while start < len(ids):
        chunk = ids[start:start + rng.randint(1, 4)]
        before = sum(counting.lengths)
        decoder.peek(chunk)
        decoder.push(chunk)
        per_push.append(sum(counting.lengths) - before)
        start += len(chunk)
    assert len(ids) > 3000 and decoder.text == _whole_decode(tokenizer, ids[:4], ids[4:])
    # a push of up to 4 tokens decodes the chunk settled before it and its own tokens, a few times
    assert decoder.windowed and max(per_push) <= 40, max(per_push)


def _start(stops: StopStrings, text: str) -> int:
    match = stops.find(text)
    return -1 if match is None else match.start


def test_stop_strings_search_only_the_new_text_and_what_a_stop_string_could_begin_in():
    stops = StopStrings(["abc", "xy"])
    assert stops.find("zzab") is None
    stops.searched("zzab")
    assert stops.find("zzabc") == (2, "abc")  # begun in the text already searched
    stops = StopStrings(["abc", "xy"])
    stops.searched("xyzzz")  # searched text is trusted: only its last len(longest) - 1 characters are read again
    assert _start(stops, "xyzzzz") == -1 and stops.find("xyzzzxy") == (5, "xy")
    stops = StopStrings(["é!"])
    stops.searched("caf\ufffd")  # an unfinished character is not searched text: it may become a stop string
    assert _start(stops, "café!") == 3


def test_a_stop_string_is_not_matched_against_an_unfinished_characters_stand_in():
    """U+FFFD at the end stands in for a character the next token may finish ("\\xc2" then
    "\\xa1" is "¡"): only a U+FFFD that stays in the text can be a stop string's."""
    stops = StopStrings(["\ufffd", "a\ufffd"])
    assert stops.find("xa\ufffd") is None and stops.find("xa\ufffd\ufffd") is None
    stops.searched("xa\ufffd")
    assert stops.find("xa¡") is None
    assert stops.find("xa\ufffdb") == (1, "a\ufffd")  # it stayed: a character of the text
    # A run longer than a character's pending bytes (3) holds U+FFFD that no token can change.
    assert StopStrings(["\ufffd"]).find("\ufffd" * 3) is None
    assert StopStrings(["\ufffd"]).find("\ufffd" * 4) == (0, "\ufffd")


def test_a_completion_ending_in_lead_bytes_keeps_the_u_fffd_it_streamed_and_drops_the_unfinished_one(demo_tokenizer):
    """Five lone lead bytes: the first two, before the 3 U+FFFD a character may still be waiting
    on, are the text's and streamed; the last three are dropped at the end, and the non-streamed
    text is what was streamed (it dropped all five)."""
    lead = 127  # "\xc2" in the demo's byte-level vocabulary
    assembler = TextAssembler(demo_tokenizer, [], demo_tokenizer.encode("x"))
    streamed = "".join(assembler.push([lead]) for _ in range(5)) + assembler.finish()
    assert demo_tokenizer.decode([lead] * 5) == "\ufffd" * 5
    assert streamed == assembler.text == "\ufffd" * 2  # finished_length holds the last 3 while it may grow


def test_a_stop_string_on_an_unfinished_character_stops_a_seed_alike_whatever_the_tree(demo_tokenizer):
    """A completion of "\\xc2"-like lead bytes and their continuations under stop "\ufffd":
    target-only steps (one token each) and drafted steps (several) give the same tokens."""
    tokenizer = demo_tokenizer
    target = tiny_llama(vocab=len(tokenizer), hidden=32, layers=2, context=256, eos=0)
    drafter = noisy_copy(target, noise=0.05)
    lead, continuation = 127, 95  # "\xc2", "\xa1" in the demo's byte-level vocabulary
    assert tokenizer.decode([lead]) == "\ufffd" and tokenizer.decode([lead, continuation]) == "¡"
    request = dict(max_new_tokens=40, temperature=1.0, stop=["\ufffd"], allowed_token_ids=[lead, continuation, 50, 51],
                   logit_bias={lead: 3.0, continuation: 3.0})
    prompt = tokenizer.encode("def fibonacci(n):")
    alone = SpeculativeEngine(LocalTarget(target, tokenizer), None, verifier="gumbel", tree="none", tokenizer=tokenizer)
    drafted = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), verifier="gumbel",
                                tree="kary:2x3", tokenizer=tokenizer)
    multi_token_steps, endings = 0, set()
    for seed in range(12):
        one, other = alone.run(prompt, seed=seed, **request), drafted.run(prompt, seed=seed, **request)
        endings.add(one.finish_reason)
        assert (one.tokens, one.finish_reason, one.stop_reason) == (other.tokens, other.finish_reason,
                                                                   other.stop_reason), seed
        if one.finish_reason == "stop":  # on a U+FFFD the text keeps, not on a "¡" in the making
            assert "\ufffd" in tokenizer.decode(one.tokens + [50])
        multi_token_steps += sum(step.emitted > 1 for step in other.stats.steps)
    assert multi_token_steps and "stop" in endings  # the stop string was met, and steps ended within characters
    # Lead bytes alone: the fourth settles the first U+FFFD (no character has 4 pending bytes),
    # and the completion stops there, whatever the tree — not at max_tokens holding the stop.
    for engine in (alone, drafted):
        leads = engine.run(prompt, seed=0, max_new_tokens=6, stop=["\ufffd"], allowed_token_ids=[lead])
        assert (leads.tokens, leads.finish_reason) == ([lead] * 4, "stop")


def test_the_stop_string_found_is_the_one_beginning_first_then_the_first_listed():
    assert StopStrings(["cd", "bcd", "b"]).find("abcd") == (1, "bcd")
    match = StopStrings(["xyz", "xy", "q"]).find("wxyzq")
    assert match == (1, "xyz") and match.end == 4


def test_a_stop_string_in_searched_text_is_not_found_again_whatever_its_length():
    """Text searched without a stop (min_tokens) may hold a short stop string: each stop string
    is looked for only where it could end in new text."""
    stops = StopStrings(["a", "xyz"])
    stops.searched("qqa")
    assert _start(stops, "qqab") == -1 and _start(stops, "qqaba") == 4 and _start(stops, "qqaxyz") == 3


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


def test_a_bare_stop_string_or_bad_word_is_one_entry_not_its_characters(demo_tokenizer):
    """As OpenAI and vLLM read `stop`: "alpha beta gamma" stopped at the first " " once."""
    script = demo_tokenizer.encode("alpha beta gamma delta", add_special_tokens=False)
    stop_ends = len(demo_tokenizer.encode("alpha beta gamma", add_special_tokens=False))
    engine = SpeculativeEngine(_ScriptedTarget(script), None, tokenizer=demo_tokenizer)
    out = engine.run([5], max_new_tokens=len(script), stop=" gamma")
    assert (out.tokens, out.finish_reason, out.stop_reason) == (script[:stop_ends], "stop", " gamma")
    opened = []
    recording = _ScriptedTarget(script)
    recording.open = lambda spec, open=recording.open: opened.append(spec) or open(spec)
    engine = SpeculativeEngine(recording, None, tokenizer=demo_tokenizer)
    for bad_words in ("alpha beta", ["alpha beta"]):
        engine.run([5], max_new_tokens=2, bad_words=bad_words)
    assert opened[0].params.bad_words_ids == opened[1].params.bad_words_ids
    assert len(opened[0].params.bad_words_ids) == 2  # "alpha beta" and " alpha beta", as vLLM tokenizes them


def test_a_stop_string_after_the_prompt_is_found_as_the_completion_reads(sentencepiece_tokenizer):
    tokenizer = sentencepiece_tokenizer
    full = tokenizer.encode("Hello, world is big", add_special_tokens=False)
    engine = SpeculativeEngine(_ScriptedTarget(full[1:]), None, tokenizer=tokenizer)
    out = engine.run(full[:1], max_new_tokens=len(full) - 1, stop=[" world"])
    assert (out.tokens, out.finish_reason) == (full[1:2], "stop")  # the tokens that complete it are yielded


@pytest.mark.parametrize("template", ["<|endoftext|> $A", "<|endoftext|> $A <|endoftext|>"])
def test_a_truncated_text_prompt_keeps_its_special_tokens_as_vllms_tokenizer_does(demo_tokenizer, template):
    """vLLM's truncate_prompt_tokens cuts a text prompt with its tokenizer truncating from the
    left: the BOS (and any special token after the text) stays, the text's last tokens fill the
    rest; a prompt of token ids, or a text without special tokens, keeps its last k tokens."""
    backend = Tokenizer.from_str(demo_tokenizer.backend_tokenizer.to_str())
    backend.post_processor = processors.TemplateProcessing(single=template,
                                                           special_tokens=[("<|endoftext|>", 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>",
                                        eos_token="<|endoftext|>", truncation_side="left")
    engine = SpeculativeEngine(_ScriptedTarget([]), None, tokenizer=tokenizer)
    prompt = "def add(a, b):\n    return a + b"
    ids = tokenizer.encode(prompt)
    assert ids[0] == 0
    for keep in (2, 3, 5, len(ids), len(ids) + 1):
        request = GenerationRequest(engine, tokenizer, Limits(), prompt=prompt, truncate_prompt_tokens=keep)
        assert request.prompt_ids == tokenizer(prompt, truncation=True, max_length=keep)["input_ids"], keep
        assert GenerationRequest(engine, tokenizer, Limits(), prompt_ids=ids,
                                 truncate_prompt_tokens=keep).prompt_ids == ids[-keep:]
    bare = tokenizer.encode(prompt, add_special_tokens=False)
    assert GenerationRequest(engine, tokenizer, Limits(), prompt=prompt, add_special_tokens=False,
                             truncate_prompt_tokens=3).prompt_ids == bare[-3:]


@pytest.mark.parametrize("fields, message", [
    ({"max_tokens": 2.5}, "max_tokens must be an integer, got 2.5"), ({"top_k": 1.5}, "top_k must be an integer"),
    ({"min_tokens": 0.5}, "min_tokens must be an integer"), ({"prompt_ids": [1, 2.5]}, "a prompt token id must be"),
    ({"max_tokens": "4"}, "max_tokens must be an integer, got '4'"), ({"top_k": True}, "top_k must be an integer")])
def test_a_python_callers_fractional_or_text_counts_are_refused_not_rounded(demo_tokenizer, fields, message):
    engine = SpeculativeEngine(_ScriptedTarget([]), None, tokenizer=demo_tokenizer)
    with pytest.raises(ValueError, match=re.escape(message)):
        GenerationRequest(engine, demo_tokenizer, Limits(), **{"prompt_ids": [1, 2], **fields})
    whole = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[np.int64(1), torch.tensor(2)],
                              max_tokens=4.0, top_k=np.int32(3), min_tokens=1.0)
    assert whole.prompt_ids == [1, 2] and whole.kwargs["max_new_tokens"] == 4 and whole.kwargs["top_k"] == 3
    assert type(whole.kwargs["max_new_tokens"]) is int and whole.kwargs["min_tokens"] == 1


@pytest.mark.parametrize("fields, message", [
    ({"temperature": True}, "temperature must be a number, got True"),
    ({"presence_penalty": True}, "presence_penalty must be a number, got True"),
    ({"frequency_penalty": False}, "frequency_penalty must be a number, got False"),
    ({"top_p": "1"}, "top_p must be a number, got '1'"), ({"min_p": True}, "min_p must be a number, got True"),
    ({"repetition_penalty": True}, "repetition_penalty must be a number"), ({"top_k": False}, "top_k must be an"),
    ({"seed": 2.5}, "seed must be an integer, got 2.5"), ({"seed": True}, "seed must be an integer, got True")])
def test_a_python_callers_bool_text_or_fractional_sampling_values_are_refused_not_converted(demo_tokenizer, fields,
                                                                                           message):
    engine = SpeculativeEngine(_ScriptedTarget([]), None, tokenizer=demo_tokenizer)
    with pytest.raises(ValueError, match=re.escape(message)):
        GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[1, 2], **fields)
    exact = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[1, 2], temperature=np.float32(0.5),
                              presence_penalty=1, top_p=torch.tensor(0.5), seed=np.int64(3))
    assert (exact.kwargs["temperature"], exact.kwargs["presence_penalty"], exact.kwargs["top_p"]) == (0.5, 1.0, 0.5)
    assert exact.seed == 3 and type(exact.seed) is int
    assert GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[1, 2], seed=3.0).seed == 3
    for seed in (2.5, True):  # the engine's own callers too: 2.5 was read as seed 2
        with pytest.raises(ValueError, match=re.escape(f"seed must be a 64-bit signed integer, got {seed!r}")):
            engine.run([5], max_new_tokens=1, seed=seed)
    assert engine.run([5], max_new_tokens=3, seed=3.0).tokens == engine.run([5], max_new_tokens=3, seed=3).tokens


def test_accepted_drafts_a_cut_step_did_not_emit_count_as_rejected(demo_tokenizer):
    target = tiny_llama(vocab=64, seed=0)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target, noise=0.01)),
                               verifier="greedy", tree="chain:4")
    def usage(**fields):
        request = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[1, 2, 3], temperature=0, seed=0,
                                    **fields)
        completion = [token for chunk in request.run() for token in chunk.token_ids]
        usage, steps = request.usage(), request.stats.steps
        assert usage["completion_tokens"] == len(completion) == sum(s.emitted for s in steps)
        assert usage["accepted_draft_tokens"] == sum(min(s.accepted, s.emitted) for s in steps) <= len(completion)
        assert usage["accepted_draft_tokens"] + usage["rejected_draft_tokens"] == sum(s.drafted for s in steps)
        return completion, steps

    for max_tokens in (1, 2, 3, 5, 8):  # trees are cut to the tokens left: nothing accepted is lost
        completion, steps = usage(max_tokens=max_tokens)
        assert len(completion) == max_tokens and steps[-1].accepted < steps[-1].emitted
    reference, _ = usage(max_tokens=12)
    cut = 0
    for stop_at in (1, 2, 3, 5):
        if reference[stop_at] in reference[:stop_at]:
            continue
        completion, steps = usage(max_tokens=12, stop_token_ids=[reference[stop_at]])
        assert completion == reference[:stop_at]
        cut += steps[-1].accepted > steps[-1].emitted
    assert cut  # some last step accepted drafts past the stop token, which it did not emit


SCRIPT_TEXT = "alpha beta gamma delta gamma epsilon"


@pytest.mark.parametrize("min_tokens", [0, 1, 4, 5, 7, 8])
def test_stop_strings_completed_before_min_tokens_do_not_stop(demo_tokenizer, min_tokens):
    """vLLM's min_tokens: a stop string stops only when a token after the first min_tokens
    completes it (one begun before still counts)."""
    script = demo_tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False)
    first = len(demo_tokenizer.encode("alpha beta gamma", add_special_tokens=False))
    second = len(demo_tokenizer.encode("alpha beta gamma delta gamma", add_special_tokens=False))
    assert demo_tokenizer.decode(script[first - 1 : first]) != " gamma"  # the first gamma spans two tokens
    end = first if min_tokens < first else second if min_tokens < second else len(script)
    engine = SpeculativeEngine(_ScriptedTarget(script), None, tokenizer=demo_tokenizer)
    out = engine.run([5], max_new_tokens=len(script), stop=[" gamma"], min_tokens=min_tokens)
    assert (out.tokens, out.finish_reason) == (script[:end], "stop" if end < len(script) else "length")
    request = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[5], max_tokens=len(script),
                                stop=" gamma", min_tokens=min_tokens)
    texts = [step.text for step in request.run()]
    expected = demo_tokenizer.decode(script[:end])
    expected = expected[: expected.rindex(" gamma")] if end < len(script) else expected
    assert "".join(texts) == request.text == expected


def test_the_text_of_chunks_across_min_tokens_stops_at_the_first_stop_string_after_it(demo_tokenizer):
    script = demo_tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False)
    first = len(demo_tokenizer.encode("alpha beta gamma", add_special_tokens=False))
    assembler = TextAssembler(demo_tokenizer, [" gamma"], [5], min_tokens=first)
    text = assembler.push(script[: first + 1])  # the chunk crosses min_tokens after the first gamma
    text += assembler.push(script[first + 1 :])
    assert (text + assembler.finish(), assembler.stopped) == ("alpha beta gamma delta", True)


def test_a_long_stop_string_is_compared_where_the_text_could_begin_it_not_at_every_length(demo_tokenizer):
    """What to hold back of a text of 20k characters, for a stop string of 20k that could
    begin only where its first character is: read where it could begin (none here), not
    compared at each of 20k lengths per step (seconds a step for a client's long stop strings)."""

    class Read(str):
        reads = 0

        def __getitem__(self, key):
            Read.reads += 1
            return str.__getitem__(self, key)

    ids = demo_tokenizer.encode(TEXT * 300, add_special_tokens=False)
    assembler = TextAssembler(demo_tokenizer, [Read("#" * 20_000)])
    sent = assembler.push(ids[:-40])
    Read.reads = 0
    sent += "".join(assembler.push([token]) for token in ids[-40:]) + assembler.finish()
    assert sent == TEXT * 300
    assert Read.reads <= 40, Read.reads  # one look at its first character a step


@pytest.mark.parametrize("stop", ["café", "thés", "日本語", "🙂🙂", "é c", "nowhere"])
def test_with_include_stop_the_text_ends_after_the_stop_string_and_never_streams_past_it(demo_tokenizer, stop):
    ids = demo_tokenizer.encode(TEXT, add_special_tokens=False)
    expected = TEXT[:TEXT.find(stop) + len(stop)] if stop in TEXT else TEXT
    rng = random.Random(1)
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(ids)), rng.randint(0, len(ids) - 1)))
        assembler = TextAssembler(demo_tokenizer, [stop], include_stop=True)
        bounds = [0, *cuts, len(ids)]
        sent = ""
        for start, end in zip(bounds, bounds[1:]):
            sent += assembler.push(ids[start:end])
            assert expected.startswith(sent), (sent, cuts)
        assert sent + assembler.finish() == expected
        assert assembler.stopped == (stop in TEXT)


def test_the_stop_reason_names_the_stop_string_or_token_that_ended_the_completion(demo_tokenizer):
    """vLLM's stop_reason: the stop string or stop token id; None for EOS and for a length."""
    script = demo_tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False)
    beta_ends = len(demo_tokenizer.encode("alpha beta", add_special_tokens=False))
    engine = SpeculativeEngine(_ScriptedTarget(script), None, tokenizer=demo_tokenizer)

    def run(**kwargs):
        out = engine.run([5], **{"max_new_tokens": len(script) + 2, **kwargs})
        return len(out.tokens), out.finish_reason, out.stop_reason

    assert run(stop=[" delta", " beta"]) == (beta_ends, "stop", " beta")  # the first in the text
    assert run(stop=[script[3], " epsilon"]) == (3, "stop", script[3])
    assert run() == (len(script), "stop", None)
    assert run(stop=[0]) == (len(script), "stop", None)  # EOS listed as a stop token is still EOS
    assert run(max_new_tokens=3, stop=[" epsilon"]) == (3, "length", None)
    request = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[5], max_tokens=len(script),
                                stop=[" delta", " beta"], include_stop_str_in_output=True)
    list(request.run())
    assert (request.text, request.finish_reason, request.stop_reason) == ("alpha beta", "stop", " beta")


def test_special_tokens_have_text_when_asked_and_stop_strings_are_found_in_that_text(demo_tokenizer):
    """skip_special_tokens=False (vLLM's): the tokenizer's text of special tokens is in the
    completion, and the engine finds stop strings in the same text the user reads."""
    eos = demo_tokenizer.eos_token_id
    script = [*demo_tokenizer.encode("alpha", add_special_tokens=False), eos,
              *demo_tokenizer.encode(" beta", add_special_tokens=False)]
    engine = SpeculativeEngine(_ScriptedTarget(script), None, tokenizer=demo_tokenizer)

    def text(skip: bool, stop=None) -> tuple[str, list[int], str | None]:
        request = GenerationRequest(engine, demo_tokenizer, Limits(), prompt_ids=[5], max_tokens=len(script),
                                    ignore_eos=True, skip_special_tokens=skip, stop=stop)
        streamed = "".join(step.text for step in request.run())
        assert streamed == request.text
        return request.text, request.token_ids, request.stop_reason

    assert text(True) == ("alpha beta", script, None)
    assert text(False) == ("alpha<|endoftext|> beta", script, None)
    assert text(True, "<|endoftext|>") == ("alpha beta", script, None)
    assert text(False, "<|endoftext|>") == ("alpha", script[:script.index(eos) + 1], "<|endoftext|>")


def test_the_stop_found_in_a_chunk_is_the_one_its_first_stopping_token_completes(demo_tokenizer):
    """Of two stop strings in one chunk, the one completed first ends it, even where the other
    begins before it: the text the assembler shows then holds only that one."""
    script = demo_tokenizer.encode(SCRIPT_TEXT, add_special_tokens=False)
    beta_ends = len(demo_tokenizer.encode("alpha beta", add_special_tokens=False))
    finder = StopFinder(demo_tokenizer, ["alpha beta gamma", " beta"], [5])
    assert finder.cut(script) == (beta_ends, " beta")
    assembler = TextAssembler(demo_tokenizer, ["alpha beta gamma", " beta"], [5], include_stop=True)
    assert assembler.push(script[:beta_ends]) + assembler.finish() == "alpha beta"
    finder = StopFinder(demo_tokenizer, ["gamma"], [5], min_tokens=beta_ends + 1)
    assert finder.cut(script[:beta_ends]) is None
    assert finder.cut(script[beta_ends:])[1] == "gamma"


class _StepTarget(_ScriptedTarget):
    """A target that emits each of `steps` (lists of tokens) as one verification step."""

    def open(self, spec):
        steps = iter(self.script)

        class Session:
            def verify(self, draft):
                return Outcome(next(steps, [0]), [], [])

            def close(self):
                pass

        return Session()


@pytest.mark.parametrize("max_tokens, expected", [(2, ([7, 8], "length", None)), (3, ([7, 8], "stop", 9)),
                                                  (4, ([7, 8], "stop", 9))])
def test_a_stop_token_past_max_tokens_does_not_stop_the_completion_the_length_does(max_tokens, expected):
    """A step that verifies [7, 8, 9] with 9 a stop token: with room for two tokens, the
    completion ends for its length before 9 is drawn (as vLLM reports it); with room for
    three, 9 is the third token and stops it."""
    engine = SpeculativeEngine(_StepTarget([[7, 8, 9, 10]]), None)
    out = engine.run([5], max_new_tokens=max_tokens, stop=[9])
    assert (out.tokens, out.finish_reason, out.stop_reason) == expected


def test_a_stop_finder_decodes_a_step_without_a_stop_once(demo_tokenizer):
    """The search peeks at the step's text, and taking the tokens in reuses that decoding:
    a window's decode per step, and the new window's head when the text settles."""

    class Counting:
        def __init__(self, tokenizer):
            self.tokenizer, self.decodes = tokenizer, 0

        def decode(self, *args, **kwargs):
            self.decodes += 1
            return self.tokenizer.decode(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self.tokenizer, name)

    counting = Counting(demo_tokenizer)
    ids = demo_tokenizer.encode("def add(a, b):\n    return a + b\n\nprint(add(2, 3))", add_special_tokens=False)
    finder = StopFinder(counting, ["zzz"], [1, 2, 3])
    counting.decodes = 0
    steps = [ids[i:i + 3] for i in range(0, len(ids), 3)]
    for step in steps:
        assert finder.cut(step) is None
    assert counting.decodes <= 2 * len(steps)  # it was 3 per step: the peek's decoding was done again
    assert finder.decoder.text == demo_tokenizer.decode(ids)
