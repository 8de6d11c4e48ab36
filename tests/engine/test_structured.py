"""Structured output: the token automaton's masks against a brute-force reading of the
vocabulary, the law of constrained speculative sampling against constrained autoregressive
sampling (enumerated exactly), JSON that parses, and the refusals."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
import regex
import torch
from transformers import AutoTokenizer

from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import SpeculativeEngine
from rayspec.engine.local import LocalDrafter, LocalTarget
from rayspec.engine.structured import (
    GrammarCursor, StructuredOutput, compiled_index, token_bytes, vocabulary_of,
)
from rayspec.models import load_causal_lm
from rayspec.verify.processing import RowHistory, SamplingParams, TokenHistory, logits_to_probs
from tests.faults import LosesItsFirstSession
from tests.stats import assert_frequencies_match
from tests.tiny_models import noisy_copy, tiny_llama

CHOICES = ["cat", "dog", "horse", "cow"]
PROMPT = [40, 50, 60, 70]
EOS = 0  # the demo tokenizer's <|endoftext|>


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TARGET_PATH)


@pytest.fixture(scope="module")
def tiny_pair(tokenizer):
    target = tiny_llama(vocab=len(tokenizer), hidden=32, layers=2, context=256, eos=EOS)
    return target, noisy_copy(target, noise=0.3)


def test_token_bytes_spell_the_text_back(tokenizer):
    table = token_bytes(tokenizer)
    assert EOS not in table  # a special token adds no text
    for text in ["Hello, world!", "  two spaces\nand a line", "naïve café — 東京 🙂", '{"a": [1, 2.5e-3]}']:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert b"".join(table[t] for t in ids) == text.encode("utf-8")


class _PieceTokenizer:
    """A SentencePiece-style vocabulary: "▁" for a space, "<0xNN>" for a byte."""

    all_special_ids = [0]
    eos_token_id = 0
    pieces = ["</s>", "▁the", "<0x0A>", "é", "<0xC3>", "x"]

    def __len__(self):
        return len(self.pieces)

    def convert_ids_to_tokens(self, ids):
        return [self.pieces[i] for i in ids]


def test_an_added_token_reads_as_its_text_and_leaves_the_byte_alphabet_alone():
    tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)
    tokenizer.add_tokens(["<call▁é>"])
    [added] = tokenizer.encode("<call▁é>", add_special_tokens=False)
    table = token_bytes(tokenizer)
    assert table[added] == "<call▁é>".encode()
    ids = tokenizer.encode("naïve café", add_special_tokens=False)
    assert b"".join(table[t] for t in ids) == "naïve café".encode()  # still read as byte-level BPE


def test_a_match_ends_at_the_models_eos_where_it_differs_from_the_tokenizers(tokenizer):
    vocabulary = vocabulary_of(tokenizer)
    cursor = GrammarCursor("(cat|dog)", vocabulary, len(tokenizer), [5])
    [whole] = cursor.masks([tokenizer.encode("cat", add_special_tokens=False)])
    assert set(whole.nonzero().flatten().tolist()) == {5}  # the engine stops on 5, not on the tokenizer's 0
    [start] = cursor.masks([[]])
    assert not bool(start[0]) and not bool(start[5])


def test_choices_with_punctuation_are_matched_literally(tokenizer):
    choices = ['say "hi", ok?', "a+b=(c)*[d]", "50% {x} | y^z $ \\ .", "<b>x</b> -> y"]
    cursor = GrammarCursor(StructuredOutput(choice=choices).to_regex(), vocabulary_of(tokenizer), len(tokenizer),
                           [EOS])
    for choice in choices:
        ids = tokenizer.encode(choice, add_special_tokens=False)
        masks = cursor.masks([ids[:i] for i in range(len(ids) + 1)])
        assert all(bool(mask[token]) for mask, token in zip(masks, ids)) and bool(masks[-1][EOS])
    [other] = cursor.masks([tokenizer.encode("a+b=(c)*[e", add_special_tokens=False)])
    assert bool(other.all())  # a text no choice begins with leads nowhere


def test_a_choice_that_begins_with_another_can_be_drawn(tokenizer):
    choices = ["no", "none", "yes", "yes please"]  # leftmost-first: "no" first would end every match there
    cursor = GrammarCursor(StructuredOutput(choice=choices).to_regex(), vocabulary_of(tokenizer), len(tokenizer),
                           [EOS])
    for choice in choices:
        ids = tokenizer.encode(choice, add_special_tokens=False)
        masks = cursor.masks([ids[:i] for i in range(len(ids) + 1)])
        assert all(bool(mask[token]) for mask, token in zip(masks, ids)) and bool(masks[-1][EOS]), choice


def test_token_bytes_read_sentencepiece_pieces():
    assert token_bytes(_PieceTokenizer()) == {1: b" the", 2: b"\n", 3: "é".encode(), 4: b"\xc3", 5: b"x"}


def _allowed_by_brute_force(table: dict[int, bytes], done: bytes, vocab_size: int) -> set[int]:
    """The tokens after which the text `done` is still a prefix of a choice; EOS where it is
    one."""
    words = [c.encode() for c in CHOICES]
    allowed = {t for t, b in table.items() if b and any(w.startswith(done + b) for w in words)}
    return allowed | ({EOS} if done in words else set())


def test_the_cursors_masks_are_the_tokens_that_keep_a_choice_possible(tokenizer):
    vocabulary = vocabulary_of(tokenizer)
    regex = StructuredOutput(choice=CHOICES).to_regex()
    cursor = GrammarCursor(regex, vocabulary, len(tokenizer), [EOS])
    table = token_bytes(tokenizer)
    ho, rse = tokenizer.encode("ho", add_special_tokens=False), tokenizer.encode("rse", add_special_tokens=False)
    cat = tokenizer.encode("cat", add_special_tokens=False)
    paths = [[], ho, ho + rse, cat, [tokenizer.encode("z", add_special_tokens=False)[0]]]
    masks = cursor.masks(paths)
    assert masks.shape == (5, len(tokenizer)) and masks.dtype == torch.bool
    for path, mask in zip(paths[:4], masks):
        done = b"".join(table[t] for t in path)
        assert set(mask.nonzero().flatten().tolist()) == _allowed_by_brute_force(table, done, len(tokenizer)), done
    assert set(masks[3].nonzero().flatten().tolist()) == {EOS}  # "cat" is whole and extends to nothing
    assert bool(masks[4].all())  # below a forbidden token: unreachable, any token
    cursor.advance(ho)  # committed tokens move where the paths start
    assert torch.equal(cursor.masks([rse])[0], masks[2])


def test_a_regex_mask_is_applied_and_lifts_the_other_bans_where_they_leave_nothing():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]])
    allowed = torch.tensor([[False, True, True, False], [True, False, False, False]])
    history = TokenHistory([1]).rows([[], []])._replace(allowed=allowed)
    params = SamplingParams(regex="x", min_tokens=5, stop_token_ids=(0,))
    probs = logits_to_probs(logits, params, history=history)
    expected = torch.softmax(torch.tensor([1.0, 2.0]), -1)
    assert torch.allclose(probs[0, 1:3], expected) and probs[0, [0, 3]].sum() == 0
    # min_tokens bans the stop token, which is all the expression allows: the ban is lifted
    assert probs[1].tolist() == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="a regex needs the tokens it allows after each law"):
        logits_to_probs(logits, params, history=RowHistory(*history[:5]))


def constrained_law(model, cursor_factory, prompt, temperature=1.0) -> dict[tuple[int, ...], float]:
    """Every completion's probability under constrained autoregressive sampling, enumerated:
    at each prefix, the target's softmax restricted to the tokens the expression allows."""
    law = {}

    def walk(prefix: tuple[int, ...], probability: float):
        cursor = cursor_factory()
        cursor.advance(prefix)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + list(prefix)])).logits[0, -1].float()
        mask = cursor.masks([[]])[0]
        probs = torch.softmax((logits / temperature).masked_fill(~mask, float("-inf")), -1)
        for token in mask.nonzero().flatten().tolist():
            p = probability * float(probs[token])
            if p < 1e-9:
                continue
            if token == EOS:
                law[prefix] = law.get(prefix, 0.0) + p
            else:
                walk(prefix + (token,), p)

    walk((), 1.0)
    return law


# sps on a chain in `make test-all` only, to keep `make test` short
@pytest.mark.parametrize("verifier, tree", [("rrsw", "kary:3x2"), pytest.param("sps", "chain:3", marks=pytest.mark.slow),
                                           ("gumbel", "kary:2x2")])
def test_constrained_speculative_sampling_follows_the_constrained_law(tokenizer, tiny_pair, verifier, tree):
    target, drafter = tiny_pair
    output = StructuredOutput(choice=CHOICES)
    vocabulary = vocabulary_of(tokenizer)
    law = constrained_law(target, lambda: GrammarCursor(output.to_regex(), vocabulary, len(tokenizer), [EOS]), PROMPT)
    assert abs(sum(law.values()) - 1) < 1e-4 and len(law) >= 4
    engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer), verifier=verifier,
                               tree=tree)
    samples, drafted = [], 0
    for seed in range(1200):
        result = engine.run(PROMPT, max_new_tokens=8, temperature=1.0, seed=seed, structured_output=output)
        assert result.finish_reason == "stop"
        samples.append(tuple(result.tokens))
        drafted += sum(step.accepted for step in result.stats.steps)
    assert drafted > 300  # the drafts are taken, not just the target's samples
    assert_frequencies_match(samples, law, what=f"{verifier} choices")
    assert {tokenizer.decode(s) for s in samples} == set(CHOICES)


def test_greedy_is_the_constrained_argmax(tokenizer, tiny_pair):
    target, drafter = tiny_pair
    output = StructuredOutput(regex=r"[a-z]{2,6}( [a-z]{2,6}){2}\.")
    vocabulary = vocabulary_of(tokenizer)
    cursor = GrammarCursor(output.to_regex(), vocabulary, len(tokenizer), [EOS])
    expected = []
    while True:
        with torch.no_grad():
            logits = target(torch.tensor([PROMPT + expected])).logits[0, -1]
        token = int(logits.masked_fill(~cursor.masks([[]])[0], float("-inf")).argmax())
        if token == EOS:
            break
        expected.append(token)
        cursor.advance([token])
    for verifier, tree in (("greedy", "kary:3x3"), ("rrsw", "kary:2x3"), ("topk", "dynamic:8x3x2")):
        engine = SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, tokenizer),
                                   verifier=verifier, tree=tree)
        result = engine.run(PROMPT, max_new_tokens=40, temperature=0, seed=1, structured_output=output)
        assert (result.tokens, result.finish_reason) == (expected, "stop"), verifier


@pytest.fixture(scope="module")
def demo_engine():
    target, tokenizer = load_causal_lm(TARGET_PATH, "cpu", "float32")
    drafter, drafter_tokenizer = load_causal_lm(DRAFTER_PATH, "cpu", "float32")
    return SpeculativeEngine(LocalTarget(target, tokenizer), LocalDrafter(drafter, drafter_tokenizer),
                             tokenizer=tokenizer, verifier="rrsw", tree="kary:2x2"), tokenizer


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 16}, "rainy": {"type": "boolean"},
                   "level": {"type": "integer", "enum": list(range(10))}},
    "required": ["city", "rainy", "level"],
}


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_json_schemas_completions_parse_and_follow_it(demo_engine, temperature):
    engine, tokenizer = demo_engine
    prompt = tokenizer.encode("The weather report:", add_special_tokens=False)
    for seed in range(3):
        result = engine.run(prompt, max_new_tokens=60, temperature=temperature, seed=seed,
                            structured_output=StructuredOutput(json_schema=SCHEMA))
        assert result.finish_reason == "stop"
        value = json.loads(tokenizer.decode(result.tokens))
        assert set(value) == {"city", "rainy", "level"}
        assert isinstance(value["city"], str) and len(value["city"]) <= 16
        assert isinstance(value["rainy"], bool) and value["level"] in range(10)


def test_json_object_gives_objects(demo_engine):
    engine, tokenizer = demo_engine
    prompt = tokenizer.encode("config = ", add_special_tokens=False)
    objects = []
    for seed in range(6):
        result = engine.run(prompt, max_new_tokens=80, temperature=0.8, seed=seed,
                            structured_output=StructuredOutput(json_object=True))
        assert result.finish_reason == "stop"
        objects.append(json.loads(tokenizer.decode(result.tokens)))
    assert all(isinstance(value, dict) for value in objects) and any(objects)


def test_a_prediction_the_expression_forbids_is_never_accepted(demo_engine):
    engine, tokenizer = demo_engine
    prompt = tokenizer.encode("Answer:", add_special_tokens=False)
    prediction = tokenizer.encode("maybe later", add_special_tokens=False)
    output = StructuredOutput(choice=["yes", "no"])
    for temperature in (0.0, 0.7):
        result = engine.run(prompt, max_new_tokens=8, temperature=temperature, seed=4, prediction=prediction,
                            structured_output=output)
        assert tokenizer.decode(result.tokens) in ("yes", "no")
    plain = engine.run(prompt, max_new_tokens=8, temperature=0, structured_output=output)
    assert result.tokens == plain.tokens or temperature  # at T = 0 the prediction changes nothing


CAT = {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
       "required": ["kind", "lives"]}
DOG = {"type": "object", "properties": {"kind": {"enum": ["dog", "puppy"]}, "good": {"type": "boolean"}},
       "required": ["kind", "good"]}


@pytest.mark.parametrize("one_of, where", [
    ([{"type": "integer"}, {"type": "number"}], "oneOf"),  # 5 is both
    ([{"enum": ["a", "b"]}, {"enum": ["b", "c"]}], "oneOf"),
    ([{"const": 1}, {"const": 1.0}], "oneOf"),  # one number in JSON
    ([{"const": {"a": [1.0]}}, {"const": {"a": [1]}}], "oneOf"),  # at any depth
    ([{"const": "x"}, {"type": "string"}], "oneOf"),
    ([{"type": "object", "properties": {"a": {"type": "string"}}},
      {"type": "object", "properties": {"b": {"type": "string"}}}], "oneOf"),  # {} is both
    ([{**CAT, "required": ["lives"]}, DOG], "oneOf"),  # a tag one branch does not require tells nothing
    ([{"type": "string"}, {"type": "number", "oneOf": [{"type": "integer"}, {"type": "number"}]}],
     "oneOf[1].oneOf"),
])
def test_a_one_of_whose_branches_may_overlap_is_refused_naming_where(one_of, where):
    """outlines-core builds oneOf as anyOf: a value matching two branches, which oneOf forbids,
    would pass.  Refused, as the keywords it does not enforce are, rather than followed in part."""
    schema = {"type": "object", "properties": {"pet": {"oneOf": one_of}}, "required": ["pet"], "$defs": {"Cat": CAT}}
    with pytest.raises(ValueError, match=rf"json_schema's properties\.pet\.{re.escape(where)} has branches one value "
                                         rf"could match two of.*use anyOf, or make the branches exclusive"):
        StructuredOutput(json_schema=schema).to_regex()
    as_any_of = json.loads(json.dumps(schema).replace('"oneOf"', '"anyOf"'))
    assert StructuredOutput(json_schema=as_any_of).to_regex()  # what the schema's author can send instead


@pytest.mark.parametrize("one_of", [
    [{"type": "integer"}, {"type": "boolean"}, {"type": "string"}],
    [{"enum": ["a", "b"]}, {"enum": ["c"]}, {"const": None}],
    [{"const": True}, {"const": 1}],  # true is no number in JSON
    [{"const": "x"}, {"type": "integer"}],
    [{"$ref": "#/$defs/Cat"}, DOG],  # a discriminated union: the required tag's values differ
])
def test_a_one_of_whose_branches_are_exclusive_is_compiled(one_of):
    schema = {"type": "object", "properties": {"pet": {"oneOf": one_of}}, "required": ["pet"], "$defs": {"Cat": CAT}}
    assert StructuredOutput(json_schema=schema).to_regex()


def test_a_one_of_of_many_branches_is_told_apart_by_a_shared_tag_or_refused_past_the_pairwise_bound():
    """A tagged union of 2,000 branches is checked by its tag at once; branches that only
    pairwise comparison could tell apart are compared up to MAX_ONE_OF_BRANCHES of them, and
    more are refused rather than compared for seconds."""
    from rayspec.engine.structured import MAX_ONE_OF_BRANCHES, _overlapping_one_ofs

    tagged = {"oneOf": [{"type": "object", "properties": {"kind": {"const": f"k{i}"}}, "required": ["kind"]}
                        for i in range(2000)]}
    assert _overlapping_one_ofs(tagged) == []
    listed = {"oneOf": [{"enum": [f"v{i}", f"w{i}"]} for i in range(2000)]}
    assert _overlapping_one_ofs(listed) == []
    mixed = {"oneOf": [{"const": f"v{i}"} for i in range(MAX_ONE_OF_BRANCHES)] + [{"type": "integer"}]}
    with pytest.raises(ValueError, match=rf"json_schema's oneOf has {MAX_ONE_OF_BRANCHES + 1} branches: more than "
                                         rf"{MAX_ONE_OF_BRANCHES} are told apart only by a property they all require "
                                         rf"with distinct const values \(a tag\)"):
        _overlapping_one_ofs(mixed)
    assert _overlapping_one_ofs({"oneOf": mixed["oneOf"][1:]}) == []  # as many as the bound: compared pairwise


def test_pydantics_discriminated_union_is_a_one_of_that_compiles_and_its_plain_union_an_any_of():
    from typing import Annotated, Literal, Union

    from pydantic import BaseModel, Field, TypeAdapter

    class Cat(BaseModel):
        kind: Literal["cat"]
        lives: int

    class Dog(BaseModel):
        kind: Literal["dog"]
        good: bool

    tagged = TypeAdapter(Annotated[Union[Cat, Dog], Field(discriminator="kind")]).json_schema()
    assert "oneOf" in tagged
    text = StructuredOutput(json_schema=tagged).to_regex()
    assert re.fullmatch(text, '{"kind":"cat","lives":9}') and re.fullmatch(text, '{"kind":"dog","good":true}')
    assert not re.fullmatch(text, '{"kind":"cat","good":true}')
    assert StructuredOutput(json_schema=TypeAdapter(Union[Cat, Dog]).json_schema()).to_regex()


def test_bad_structured_outputs_are_refused_with_a_message(tokenizer, tiny_pair, demo_engine):
    with pytest.raises(ValueError, match="exactly one of json_schema, json_object, regex and choice; got regex, choice"):
        StructuredOutput(regex="a", choice=["a"])
    with pytest.raises(ValueError, match="choice must be a non-empty list"):
        StructuredOutput(choice=["a", ""])
    for not_a_list in ({"a": 1}, {"a"}, 5):  # a mapping was read as its keys
        with pytest.raises(ValueError, match="choice must be a non-empty list"):
            StructuredOutput(choice=not_a_list)
    with pytest.raises(ValueError, match="json_schema is not valid JSON"):
        StructuredOutput(json_schema="{").to_regex()
    bounded = {**SCHEMA, "properties": {**SCHEMA["properties"], "level": {"type": "integer", "maximum": 9},
                                        "minimum": {"type": "string"}}}
    with pytest.raises(ValueError, match=r"json_schema uses properties\.level\.maximum, which structured output cannot "
                                         r"enforce"):
        StructuredOutput(json_schema=bounded).to_regex()
    # keywords outlines-core compiles past, the text then breaking them: refused, not followed in part
    for keyword, value in [("not", {"const": "a"}), ("minProperties", 1), ("contains", {"const": 5}),
                           ("propertyNames", {"pattern": "^a"}), ("dependentRequired", {"city": ["level"]})]:
        with pytest.raises(ValueError, match=f"json_schema uses {keyword}, which structured output cannot enforce"):
            StructuredOutput(json_schema={**SCHEMA, keyword: value}).to_regex()
    with pytest.raises(ValueError, match="json_schema cannot be compiled: Unsupported type: nothing"):
        StructuredOutput(json_schema={"type": "nothing"}).to_regex()
    vocabulary = vocabulary_of(tokenizer)
    with pytest.raises(ValueError, match=r"the regular expression '\(\(\(' cannot be used"):
        compiled_index("(((", vocabulary)
    engine, _ = demo_engine
    with pytest.raises(ValueError, match="ignore_eos cannot be combined with structured output"):
        engine.run([1, 2], max_new_tokens=4, ignore_eos=True, structured_output="a+")
    no_tokenizer = SpeculativeEngine(LocalTarget(tiny_pair[0]))
    with pytest.raises(ValueError, match="structured output needs the model's tokenizer"):
        no_tokenizer.run(PROMPT, max_new_tokens=4, structured_output="a+")
    no_eos = SpeculativeEngine(LocalTarget(tiny_llama(vocab=len(tokenizer)), tokenizer))
    with pytest.raises(ValueError, match="structured output ends the completion at the model's EOS token, and this "
                                         "target declares none"):
        no_eos.run(PROMPT, max_new_tokens=4, structured_output="a+")


def test_a_json_schema_that_could_never_end_is_refused_before_its_expression_is_built(tokenizer, demo_engine,
                                                                                     monkeypatch):
    """The engine's runs and the checked requests (the gRPC coordinator's) refuse ignore_eos, or
    a target declaring no EOS, before the schema's expression is built in a compiler process,
    which can take COMPILE_SECONDS."""
    from rayspec.engine import structured
    from rayspec.engine.requests import GenerationRequest, Limits

    built = []
    monkeypatch.setattr(structured, "_in_compiler", lambda job, *args: built.append(job) or "a")
    monkeypatch.setattr(structured, "_schema_regex", structured._build_schema_regex)  # uncached: each is built
    schema = {"type": "object", "properties": {"never_ends": {"type": "boolean"}}, "required": ["never_ends"]}
    engine, demo_tokenizer = demo_engine
    no_eos = SpeculativeEngine(LocalTarget(tiny_llama(vocab=len(tokenizer)), tokenizer))
    refusals = [(engine, demo_tokenizer, True, "ignore_eos cannot be combined with structured output"),
                (no_eos, tokenizer, False, "structured output ends the completion at the model's EOS token")]
    for runner, its_tokenizer, ignore_eos, words in refusals:
        output = StructuredOutput(json_schema=schema)
        with pytest.raises(ValueError, match=words):
            runner.run(PROMPT, max_new_tokens=4, ignore_eos=ignore_eos, structured_output=output)
        with pytest.raises(ValueError, match=words):
            GenerationRequest(runner, its_tokenizer, Limits(), prompt_ids=PROMPT, max_tokens=4, ignore_eos=ignore_eos,
                              structured_output=output)
    assert built == []


def test_min_tokens_cannot_hold_open_a_completion_the_expression_has_closed(demo_engine):
    """min_tokens bans EOS from the first tokens; where the expression allows only EOS, the ban
    is lifted (`SamplingParams`), so the completion ends at its match."""
    engine, tokenizer = demo_engine
    prompt = tokenizer.encode("Answer:", add_special_tokens=False)
    for seed in range(3):
        result = engine.run(prompt, max_new_tokens=12, temperature=1.0, seed=seed, min_tokens=8,
                            structured_output=StructuredOutput(choice=["yes", "no"]))
        assert result.finish_reason == "stop" and tokenizer.decode(result.tokens) in ("yes", "no")
    eager = dict(max_new_tokens=12, temperature=0, logit_bias={EOS: 100.0}, structured_output=r"[a-c]{1,6}")
    assert len(engine.run(prompt, **eager).tokens) == 1  # EOS as soon as the expression allows it
    held = engine.run(prompt, min_tokens=3, **eager)
    assert held.finish_reason == "stop" and len(held.tokens) == 3  # the ban holds where the expression goes on


def test_an_expression_asked_for_at_once_by_several_requests_is_compiled_once(tokenizer, monkeypatch):
    import threading
    import time

    from rayspec.engine import structured

    compiled, compile_once = [], structured._compile

    def slow_compile(regex, vocabulary):
        compiled.append(regex)
        time.sleep(0.2)  # long enough for every thread to ask while the first compiles
        return compile_once(regex, vocabulary)

    monkeypatch.setattr(structured, "_compile", slow_compile)
    vocabulary = vocabulary_of(tokenizer)
    indexes = []
    threads = [threading.Thread(target=lambda regex=regex: indexes.append(compiled_index(regex, vocabulary)))
               for regex in ["(cat|dog)+ [0-9]{1,5}"] * 4 + ["(cow|hen)+ [0-9]{1,5}"] * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(compiled) == ["(cat|dog)+ [0-9]{1,5}", "(cow|hen)+ [0-9]{1,5}"]  # once each, not six times
    assert len({id(index) for index in indexes}) == 2


def test_the_mask_cache_holds_what_its_byte_bound_allows_whatever_the_expressions_length(tokenizer, monkeypatch):
    """The allowed-token rows kept across requests are bounded in bytes: a row's key must not
    hold its expression's text (a client's, up to the request size, or a schema's of megabytes,
    uncounted), and each row counts what keeping it costs beyond its own bytes."""
    import sys

    from rayspec.engine import structured

    cache = structured._MaskCache(256 << 10)
    monkeypatch.setattr(structured, "_MASKS", cache)
    vocabulary = vocabulary_of(tokenizer)
    index = compiled_index("(cat|dog)+", vocabulary)  # shared: the keys are what this test is about
    monkeypatch.setattr(structured, "compiled_index", lambda regex, vocabulary: index)
    for request in range(300):
        long_expression = f"(cat|dog)+|x{request}" + "|(cow)" * 4000  # 24 kB
        structured.GrammarCursor(long_expression, vocabulary, 64, [EOS]).masks([[]])
    held, seen = 0, set()
    for key, row in cache.rows.items():
        held += row.numel() * row.element_size()
        for part in key:
            if isinstance(part, (str, bytes)) and id(part) not in seen:
                seen.add(id(part))
                held += sys.getsizeof(part)
    assert held <= cache.max_bytes
    assert len(cache.rows) * structured._MaskCache.ROW_OVERHEAD_BYTES <= cache.max_bytes


def test_the_schemas_expressions_kept_do_not_keep_the_schemas_texts(monkeypatch):
    """A schema's expression is kept for the schemas asked for again, but not by the schema's
    text: that is the client's, as long as a request (32 MB), and 64 of them would be kept."""
    import tracemalloc

    from rayspec.engine import structured

    monkeypatch.setattr(structured, "_in_compiler", lambda job, *args: '"[a-z]*"')  # no compiler process
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for request in range(80):
            described = {"type": "string", "description": f"{request} " + "words " * (200 << 10)}  # 1.2 MB
            assert structured._schema_regex(json.dumps(described)) == '"[a-z]*"'
        del described
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1 << 20


EXPONENTIAL = "[ab]*a[ab]{22}"  # 2^22 states: hours to compile over the demo's vocabulary


def _children(monkeypatch) -> list:
    """The compiler processes started from now on."""
    import subprocess

    from rayspec.engine import structured

    started, popen = [], subprocess.Popen

    def recorded(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(structured.subprocess, "Popen", recorded)
    return started


def test_an_expression_too_large_to_compile_in_time_is_refused_and_its_compiler_killed(tokenizer, monkeypatch):
    """An automaton that grows exponentially with its expression would hold a thread and a CPU
    for hours and could take the machine's memory; its compilation is given COMPILE_SECONDS in
    a child process, which is then killed, and the request refused saying why."""
    import time

    from rayspec.engine import structured

    monkeypatch.setattr(structured, "COMPILE_SECONDS", 1.5)
    children = _children(monkeypatch)
    began = time.monotonic()
    with pytest.raises(ValueError, match=r"did not compile within 1.5 s: its automaton is too large"):
        compiled_index(EXPONENTIAL, vocabulary_of(tokenizer))
    assert time.monotonic() - began < 10
    assert len(children) == 1 and children[0].returncode is not None  # killed, and reaped
    with pytest.raises(ValueError, match="did not compile within"):  # not cached as compiled, nor stuck
        compiled_index(EXPONENTIAL, vocabulary_of(tokenizer))


@pytest.mark.parametrize("ending, error, message", [
    ("import os; os.abort()", ValueError,  # Rust's answer to a failed allocation
     r"could not be compiled within 4 GiB of memory \(the compiler exited with -6"),
    ("raise MemoryError", ValueError, r"could not be compiled within 4 GiB of memory \(the compiler exited with 1: "
                                      r".*MemoryError"),
    ("import no_such_module_here", RuntimeError,  # the server's fault, not the request's: a 500
     r"the structured-output compiler failed \(exit 1\): .*No module named 'no_such_module_here'"),
])
def test_a_compiler_that_dies_is_the_expressions_fault_only_when_out_of_memory(tokenizer, monkeypatch, ending,
                                                                               error, message):
    from rayspec.engine import structured

    monkeypatch.setattr(structured, "_COMPILER", structured._COMPILER.replace(
        "from outlines_core import Index", f"{ending}\nfrom outlines_core import Index"))
    with pytest.raises(error, match=message):
        compiled_index("(fox|owl)+ [0-9]{2}", vocabulary_of(tokenizer))


def test_waiting_past_its_time_for_a_compiler_is_the_servers_capacity_and_a_freed_compiler_is_taken(tokenizer,
                                                                                                   monkeypatch):
    """Every compiler busy for COMPILE_SECONDS is the server's limit, not the expression's
    fault: `AtCapacity` (a 429 / RESOURCE_EXHAUSTED), not the ValueError of bad input; a
    compiler freed while a request waits is taken, and its expression compiled."""
    import threading

    from rayspec.engine import structured
    from rayspec.engine.interfaces import AtCapacity

    compilers = threading.BoundedSemaphore(1)
    monkeypatch.setattr(structured, "_COMPILERS", compilers)
    monkeypatch.setattr(structured, "MAX_COMPILERS", 1)
    monkeypatch.setattr(structured, "COMPILE_SECONDS", 0.5)
    compilers.acquire()  # another expression's compilation, holding the only compiler
    with pytest.raises(AtCapacity, match=r"waited 0.5 s for one of the 1 compilers, all busy with other "
                                         r"expressions; ask again later") as refused:
        compiled_index("(elk|yak)+ [0-9]{2}", vocabulary_of(tokenizer))
    assert not isinstance(refused.value, ValueError)
    monkeypatch.setattr(structured, "COMPILE_SECONDS", 30.0)
    threading.Timer(0.3, compilers.release).start()
    index = compiled_index("(elk|yak)+ [0-9]{2}", vocabulary_of(tokenizer))
    assert index.get_allowed_tokens(index.get_initial_state())
    assert compilers.acquire(blocking=False)  # given back after compiling


def test_a_caller_that_leaves_stops_its_compilation_and_its_wait_for_a_compiler(tokenizer, monkeypatch):
    """A caller that gives up (`watching_caller`: a client gone, an RPC cancelled) while its
    expression compiles has its compiler killed and its place freed at once, and one waiting
    for a compiler stops waiting: GenerationCancelled, not a compiler held (or a wait) of up
    to COMPILE_SECONDS for nobody."""
    import threading
    import time

    from rayspec.engine import structured
    from rayspec.models.cancellation import GenerationCancelled, watching_caller

    monkeypatch.setattr(structured, "COMPILE_SECONDS", 60.0)
    children = _children(monkeypatch)
    left = threading.Event()
    threading.Timer(1.0, left.set).start()
    began = time.monotonic()
    with watching_caller(left.is_set), pytest.raises(GenerationCancelled):
        compiled_index(EXPONENTIAL, vocabulary_of(tokenizer))
    assert time.monotonic() - began < 30  # of the 60 it compiled for before
    assert len(children) == 1 and children[0].returncode is not None  # killed, and reaped
    compilers = structured._COMPILERS
    assert all(compilers.acquire(blocking=False) for _ in range(structured.MAX_COMPILERS))  # every place free
    try:  # every compiler busy: the wait for one stops too
        left.clear()
        threading.Timer(0.5, left.set).start()
        with watching_caller(left.is_set), pytest.raises(GenerationCancelled, match="waited for a structured-output"):
            compiled_index("(elk|owl)+ [0-9]{3}", vocabulary_of(tokenizer))
        assert time.monotonic() - began < 50
    finally:
        for _ in range(structured.MAX_COMPILERS):
            compilers.release()


def test_callers_of_one_new_expression_share_its_compilation_until_the_last_leaves(tokenizer, monkeypatch):
    """Two requests asking for the same new expression wait for one compilation.  The first
    one's client leaving gave the compilation up (its compiler killed) and the second compiled
    it all over again; now it goes on for the one still waiting, and is one compilation.  A
    waiting caller who leaves stops waiting within the poll, while the compilation goes on for
    the one who builds it (it waited, unable to leave, until the build ended)."""
    import threading
    import time

    from rayspec.models.cancellation import GenerationCancelled, watching_caller

    children = _children(monkeypatch)
    vocabulary = vocabulary_of(tokenizer)
    expression = "(moose )?[ab]*a[ab]{13}"  # new to this process: about 2 s to compile here
    first_left, answers = threading.Event(), {}

    def ask(name: str, left=None) -> None:
        with watching_caller(left):
            try:
                answers[name] = compiled_index(expression, vocabulary)
            except GenerationCancelled as error:
                answers[name] = error

    first = threading.Thread(target=ask, args=("first", first_left.is_set))
    first.start()
    time.sleep(0.3)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    time.sleep(0.3)
    first_left.set()
    first.join(60)
    second.join(60)
    assert len(children) == 1, "the compilation was given up and started again"
    index = answers["second"]
    assert not isinstance(index, Exception) and index.get_allowed_tokens(index.get_initial_state())

    waiter_left, answers = threading.Event(), {}
    expression = "(elk )?[ab]*a[ab]{13}"
    builder = threading.Thread(target=ask, args=("builder",))
    builder.start()
    time.sleep(0.3)
    waiter = threading.Thread(target=ask, args=("waiter", waiter_left.is_set))
    waiter.start()
    time.sleep(0.2)
    waiter_left.set()
    left_at = time.monotonic()
    waiter.join(60)
    stopped_within = time.monotonic() - left_at
    builder.join(60)
    assert isinstance(answers["waiter"], GenerationCancelled) and stopped_within < 1.0, (answers, stopped_within)
    assert "waited for another request's compilation" in str(answers["waiter"])
    assert not isinstance(answers["builder"], Exception) and len(children) == 2


def _arrays_nested(depth: int) -> dict:
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.mark.parametrize("depth, message", [
    (21, r"json_schema cannot be compiled: it expands to an expression of \d+ characters, more than the 2097152 "
         r"enforced: nest arrays and alternatives less deeply"),
    # 1 kB of schema asking for gigabytes: outlines-core aborts the process whose allocation fails
    (40, r"json_schema could not be compiled within 4 GiB of memory \(the compiler exited with -\d+.*\); its "
         r"expression is too large \(each level of nested arrays doubles it\)"),
])
def test_a_schema_whose_expression_explodes_is_refused_and_this_process_lives_on(depth, message):
    """A schema's expression doubles with each level of nested arrays; it is built in the
    bounded compiler process, which dies in this one's stead."""
    with pytest.raises(ValueError, match=message):
        StructuredOutput(json_schema=_arrays_nested(depth)).to_regex()
    assert StructuredOutput(json_schema=_arrays_nested(3)).to_regex()


def test_the_address_space_limit_is_the_compilers(tokenizer, monkeypatch):
    """COMPILE_MEMORY_BYTES bounds the child: too little for even its imports, and it fails (as
    an ImportError, a MemoryError or a signal, depending on where its memory runs out)."""
    from rayspec.engine import structured

    monkeypatch.setattr(structured, "COMPILE_MEMORY_BYTES", 1 << 20)
    with pytest.raises((RuntimeError, ValueError), match=r"compiler (failed|exited)"):
        compiled_index("(fox|owl)+ [0-9]{3}", vocabulary_of(tokenizer))


def test_an_expression_compiled_in_the_child_process_gives_the_masks_of_one_compiled_here(tokenizer):
    """The automaton that comes back from the compiler process is outlines-core's own: the same
    allowed tokens, state by state along a text, as one built in this process."""
    from outlines_core import Index

    vocabulary = vocabulary_of(tokenizer)
    regex = "(cat|dog)s? [0-9]{1,3}!"
    remote, local = compiled_index(regex, vocabulary), Index(regex, vocabulary.outlines)
    states = [remote.get_initial_state(), local.get_initial_state()]
    for token in tokenizer.encode("dogs 42!", add_special_tokens=False):
        assert sorted(remote.get_allowed_tokens(states[0])) == sorted(local.get_allowed_tokens(states[1]))
        states = [remote.get_next_state(states[0], token), local.get_next_state(states[1], token)]
    assert remote.is_final_state(states[0]) and local.is_final_state(states[1])


def test_a_resumed_sequence_goes_on_from_where_the_expression_stands(demo_engine):
    """The resumed session's automaton is advanced over the completion so far: gumbel gives
    the very tokens of an uninterrupted sequence, which the constraint shapes at every step."""
    engine, tokenizer = demo_engine
    prompt = tokenizer.encode("The weather report:", add_special_tokens=False)
    request = dict(max_new_tokens=60, temperature=0.8, seed=4, structured_output=StructuredOutput(json_schema=SCHEMA))
    setting = dict(tokenizer=tokenizer, verifier="gumbel", tree="kary:2x2")
    whole = SpeculativeEngine(engine.target, engine.drafter, **setting).run(prompt, **request)
    target = LosesItsFirstSession(engine.target)
    resumed = SpeculativeEngine(target, engine.drafter, **setting).run(prompt, **request)
    assert resumed.stats.target_resumes == 1 and len(target.opened[1].completion_ids) > 0
    assert resumed.tokens == whole.tokens and json.loads(tokenizer.decode(resumed.tokens))["level"] in range(10)


@pytest.mark.parametrize("schema, message", [
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]},
     'top level requires "b", which it gives no schema for in its properties'),
    ({"type": "string", "enum": ["a", 1]}, 'top level lists 1, which its type "string" does not admit'),
    ({"type": "object", "properties": {"n": {"type": "integer", "const": 2.5}}, "required": ["n"]},
     'properties.n lists 2.5, which its type "integer" does not admit'),
    ({"type": "string", "pattern": "^x+$", "maxLength": 3},
     "top level combines a length and a pattern, of which only the length would be enforced"),
    ({"anyOf": [{"type": "integer"}], "enum": ["q"]}, "top level combines anyOf, enum, of which only anyOf would"),
    ({"type": "array", "items": {"allOf": [{"type": "string"}, {"type": "string"}]}},
     "items.allOf has 2 branches, which would be written one after another"),
    ({"type": "object", "properties": {"a": {"const": 1}}, "if": {"properties": {"a": {"const": 1}}},
      "then": {"required": ["b"]}}, "json_schema uses if, then, which structured output cannot enforce"),
    ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
     "json_schema uses patternProperties, which structured output cannot enforce"),
])
def test_a_schema_outlines_core_would_compile_in_part_is_refused_naming_where(schema, message):
    """outlines-core compiles these to text that breaks them ({"a": 1} lacking b, the string
    "1", ...), reading past what it does not follow; each is refused before it is compiled."""
    with pytest.raises(ValueError, match=re.escape(message)):
        StructuredOutput(json_schema=schema).to_regex()


@pytest.mark.parametrize("schema, message", [
    ({"enum": []}, "json_schema is malformed: enum is empty, so no value matches"),
    ({"type": "object", "properties": {"a": {"anyOf": []}}, "required": ["a"]},
     "properties.a.anyOf is empty, so no value matches"),
    ({"type": []}, "type is empty, so no value matches"),
    ({"type": "string", "maxLength": "5"}, 'maxLength must be a non-negative integer, not "5"'),
    ({"type": "string", "minLength": -1}, "minLength must be a non-negative integer, not -1"),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 2.5},
     "maxItems must be a non-negative integer, not 2.5"),
    ({"type": "string", "pattern": 5}, "pattern must be a string, not 5"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": "a"},
     'required must be a list of property names, not "a"'),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": [["a"]]},
     'required must be a list of property names, not [["a"]]'),
])
def test_a_keyword_outlines_core_would_read_past_or_compile_to_nothing_is_refused(schema, message):
    """outlines-core compiles an empty enum, anyOf or type to the empty expression (the
    completion "", finishing "stop", which no JSON reader parses) and reads past a count or a
    pattern it cannot read as one, enforcing no bound (minLength -1 let "" through, required
    "a" the object {})."""
    with pytest.raises(ValueError, match=re.escape(message)):
        StructuredOutput(json_schema=schema).to_regex()


def test_a_count_written_as_an_integral_float_is_enforced():
    """maxLength 2.0 is the integer 2 to JSON Schema; outlines-core read past it (any length)."""
    regex = StructuredOutput(json_schema={"type": "string", "minLength": 1.0, "maxLength": 2.0}).to_regex()
    assert re.fullmatch(regex, '"ab"') and not re.fullmatch(regex, '"abc"') and not re.fullmatch(regex, '""')


def test_a_schema_as_pydantic_writes_it_is_not_refused_for_what_it_combines():
    from rayspec.engine.structured import _compiled_in_part

    schema = {"$defs": {"Kind": {"enum": ["a", "b"], "title": "Kind", "type": "string"}}, "title": "M",
              "type": "object", "required": ["kind", "literal"],
              "properties": {"kind": {"$ref": "#/$defs/Kind"}, "literal": {"const": "x", "type": "string"},
                             "name": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}],
                                      "default": None, "title": "Name"},
                             "ratio": {"type": "number", "enum": [1, 2.5]},
                             "only": {"allOf": [{"$ref": "#/$defs/Kind"}]},
                             "pair": {"type": "array", "prefixItems": [{"type": "integer"}], "items": False}}}
    assert _compiled_in_part(schema) == []


def test_a_property_name_json_must_escape_is_written_escaped():
    schema = {"type": "object", "properties": {'q"x\\': {"type": "integer"}, "tab\there": {"const": "é"},
                                               "a.b+": {"type": "boolean"}},
              "required": ['q"x\\', "tab\there", "a.b+"]}
    regex = StructuredOutput(json_schema=schema).to_regex()
    text = json.dumps({'q"x\\': 7, "tab\there": "é", "a.b+": True}, ensure_ascii=False)
    assert re.fullmatch(regex, text) and json.loads(text)
    assert not re.fullmatch(regex, '{"q"x\\": 7, "tab\there": "é", "a.b+": true}')  # the names unescaped
    assert not re.fullmatch(regex, '{"q\\"x\\\\": 7, "tab\\there": "é", "aXbb": true}')  # "." and "+" as written


@pytest.mark.parametrize("format_, good, bad", [
    ("time", "12:00:00.25Z", '12:00:00\\ 5'),  # a backslash escaping a space: no JSON
    ("date", "2024-01-31", "٢٠٢٤-01-31"),  # Arabic-Indic digits
    ("email", "ada.l+x@mail.example.org", '"a"@b.co'),  # a quoted local part: raw quotes in the string
    ("uri", "https://example.org/a/b?c=d#e", 'http://example.org/x"y'),
])
def test_a_string_formats_text_is_a_json_string_of_that_format(format_, good, bad):
    regex = StructuredOutput(json_schema={"type": "string", "format": format_}).to_regex()
    assert re.fullmatch(regex, json.dumps(good, ensure_ascii=False))
    assert not re.fullmatch(regex, bad.join('""'))


def test_a_patterns_alternatives_stay_between_the_quotes():
    regex = StructuredOutput(json_schema={"type": "string", "pattern": "^cat|dog$"}).to_regex()
    matched = [bool(re.fullmatch(regex, text)) for text in ('"cat"', '"dog"', '"cat', 'dog"')]
    assert matched == [True, True, False, False]
    escaped = StructuredOutput(json_schema={"type": "string", "pattern": "^a\\$"}).to_regex()  # ends in a literal $
    assert re.fullmatch(escaped, '"a$"') and not re.fullmatch(escaped, '"a"')


# A pattern matches a string's value; outlines-core matches it against the string's JSON text.
@pytest.mark.parametrize("pattern, kept, left_out", [
    ("^a.*$", ["a", "ab c", "a\u00e9"], ['a"', "a\\", "a\n", 'a"b"']),
    ("^[^x]+$", ["abc", "a b"], ['"', "a\tb", "\\"]),
    (r"^\S+$", ["a-b", "(x)"], ['a"b', "a\\b"]),
    (r"^\W+$", ["?!", "é"], ['"', "\\", "a", "_"]),  # ECMA-262's \W: all but ASCII's word characters
    (r"^\d{4}$", ["2024"], ["٢٠٢٤", "20x4"]),  # ECMA-262's \d: ASCII's digits (the regex crate's: Unicode's)
    (r"^[\w-]+$", ["a_b-9"], ["é", "a b"]),
    (r"^[^\D]+$", ["12"], ["٢"]),
    ("^[ -~]{1,12}$", ["hello world"], ['say "hi"', "a\\b"]),
    (r'^say "(hi|yo)"$', ['say "hi"', 'say "yo"'], ["say hi"]),
    (r"^a\\b+$", ["a\\b", "a\\bb"], ["ab", "a\bb"]),
    (r"^x\ty\u0001$", ["x\ty\u0001"], ["x y\u0001", "x\\ty\u0001"]),
])
def test_a_patterns_strings_are_matched_as_json_writes_them(pattern, kept, left_out):
    """A quote, backslash or control character a pattern gives literally is matched as JSON
    escapes it; a class or `.` keeps to characters JSON writes as themselves (a string holding
    another there is left out).  Before, such characters were matched raw: text no JSON reader
    parses (`"a"b"` for ^a.*$) or a string other than the pattern's (a\bb for ^a\\b+$)."""
    expression = StructuredOutput(json_schema={"type": "string", "pattern": pattern}).to_regex()
    for text in kept:  # the regex crate's class intersection (&&) is the regex module's V1
        assert regex.fullmatch(expression, json.dumps(text, ensure_ascii=False), flags=regex.V1), (pattern, text)
    for text in left_out:
        assert not regex.fullmatch(expression, json.dumps(text, ensure_ascii=False), flags=regex.V1), (pattern, text)
        assert not regex.fullmatch(expression, f'"{text}"', flags=regex.V1), (pattern, text)  # nor raw


def test_every_text_a_patterns_automaton_ends_is_json_of_a_matching_string(tokenizer):
    """Random walks through the compiled automaton over the demo vocabulary, half of their
    tokens chosen among those holding a quote, a backslash or a control character: each text
    ending in a final state parses, and its string matches the pattern (87 of 100 walks gave
    text that did not parse before)."""
    pattern = "^a.*$"
    texts = _ended_walks(StructuredOutput(json_schema={"type": "string", "pattern": pattern}), tokenizer)
    for text in texts:
        assert re.fullmatch(pattern, json.loads(text)), text
    assert len(texts) >= 30


def _ended_walks(output: StructuredOutput, tokenizer, walks: int = 60, tokens: int = 40) -> list[str]:
    """The texts of random walks through `output`'s automaton over `tokenizer`'s vocabulary
    that ended in a final state, half their tokens drawn among those holding a quote, a
    backslash or a control character."""
    vocabulary, table = vocabulary_of(tokenizer), token_bytes(tokenizer)
    index = compiled_index(output.to_regex(), vocabulary)
    rng, ended = random.Random(0), []
    for _ in range(walks):
        state, text = index.get_initial_state(), b""
        for _ in range(tokens):
            allowed = [t for t in index.get_allowed_tokens(state) if t != vocabulary.eos_token_id]
            if index.is_final_state(state) and (not allowed or rng.random() < 0.3):
                ended.append(text.decode())
                break
            odd = [t for t in allowed if any(c in table[t] for c in b'"\\\n\t') or table[t][:1] < b" "]
            token = rng.choice(odd if odd and rng.random() < 0.5 else allowed)
            text, state = text + table[token], index.get_next_state(state, token)
    return ended


@pytest.mark.parametrize("pattern", ["[a-", r"\x{FFFFFFFFFFFFFFFFFFFFFF}", r"\u12", "a\\", r"\p{L"])
def test_a_pattern_that_is_no_expression_is_a_value_error(tokenizer, pattern):
    """The rewrite over JSON text leaves what it cannot read for the compiler to refuse (a 400),
    rather than failing itself otherwise (a code point past any, read as one, was an
    OverflowError: a 500) or making a broken pattern valid."""
    with pytest.raises(ValueError):
        expression = StructuredOutput(json_schema={"type": "string", "pattern": pattern}).to_regex()
        compiled_index(expression, vocabulary_of(tokenizer))


def test_more_items_required_than_allowed_is_refused_naming_the_keywords():
    """Before, the 400 quoted the expression compiler's error over outlines-core's {2,0}."""
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 1}
    with pytest.raises(ValueError, match=r"minItems 3 is above maxItems 1, so no array matches"):
        StructuredOutput(json_schema=schema).to_regex()


# A tree whose nodes require their children: the recursion ends only at an empty list.
TREE = {"$defs": {"Node": {"type": "object", "required": ["v", "kids"],
                           "properties": {"v": {"type": "integer"},
                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}},
        "$ref": "#/$defs/Node"}


def _tree(levels: int) -> dict:
    return {"v": levels, "kids": [_tree(levels - 1)] if levels > 1 else []}


def test_a_recursive_schema_whose_recursion_is_required_closes_it_as_json_the_schema_admits():
    """outlines-core writes a definition out four times, the fourth without its recursive
    property even where required, comma kept: {"v": 1,} closed the tree, which no JSON reader
    parses, and a fourth level with its "kids": [] was refused."""
    regex_ = StructuredOutput(json_schema=TREE).to_regex()
    validator = jsonschema.Draft202012Validator(TREE)
    for levels in (1, 2, 3, 4):
        validator.validate(_tree(levels))
        assert regex.fullmatch(regex_, json.dumps(_tree(levels))), levels
    assert not regex.fullmatch(regex_, json.dumps(_tree(5)))  # written out four times only
    cut = json.dumps(_tree(4)).replace(', "kids": []', ",")
    assert cut.endswith('{"v": 1,}]}]}]}') and not regex.fullmatch(regex_, cut)


def test_a_recursion_that_may_end_anywhere_is_written_out_four_times():
    """Four levels, as outlines-core writes a definition (a recursion through the root "#" it
    wrote five times)."""
    chain = {"type": "object", "required": ["v"], "properties": {"v": {"type": "integer"}, "next": {"$ref": "#"}}}
    or_null = {"type": "object", "required": ["v", "next"],
               "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}
    for schema, last in ((chain, {}), (or_null, {"next": None})):
        regex_ = StructuredOutput(json_schema=schema).to_regex()
        texts = [json.dumps(_chain(levels, last)) for levels in (1, 4, 5)]
        assert [bool(regex.fullmatch(regex_, text)) for text in texts] == [True, True, False], texts


def _chain(levels: int, last: dict) -> dict:
    return {"v": levels, "next": _chain(levels - 1, last)} if levels > 1 else {"v": 1, **last}


@pytest.mark.parametrize("schema, message", [
    ({"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#"}}},
     "json_schema has no finite value: its recursion never ends"),
    ({"$defs": {"A": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/A"}}}, "$ref": "#/$defs/A"},
     "json_schema has no finite value: its recursion never ends"),
    # each of 30 definitions refers to the next twice: 2**30 schemas written out
    ({"$defs": {**{f"A{i}": {"anyOf": [{"$ref": f"#/$defs/A{i + 1}"},
                                       {"type": "array", "items": {"$ref": f"#/$defs/A{i + 1}"}}]} for i in range(30)},
                "A30": {"type": "integer"}}, "$ref": "#/$defs/A0"},
     "json_schema cannot be compiled: its references write out into more than 50000 schemas"),
])
def test_a_schema_whose_references_cannot_be_written_out_is_refused(schema, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        StructuredOutput(json_schema=schema).to_regex()


# Pydantic's dict, Dict[str, Any], Any, List[Any] and Optional[dict] fields.
FREE_FORM = {"type": "object", "required": ["meta", "data", "rows", "extra"],
             "properties": {"meta": {"type": "object", "additionalProperties": True}, "data": {},
                            "rows": {"type": "array", "items": {}},
                            "extra": {"anyOf": [{"type": "object"}, {"type": "null"}]}}}


def _nesting(value) -> int:
    """How many levels of arrays and objects `value` nests (a scalar: 0)."""
    if not isinstance(value, (dict, list)):
        return 0
    return 1 + max(map(_nesting, value.values() if isinstance(value, dict) else value), default=0)


@pytest.mark.parametrize("schema, admitted, too_deep", [
    ({"type": "object"}, {"a": {"b": 1}, "c": [1, "x"], "d": None}, {"a": {"b": {"c": 1}}}),
    ({"type": "object", "additionalProperties": {}}, {"a": [1, "x"], "b": {}}, {"a": [[1]]}),
    ({"type": "array"}, [1, {"a": 2}, [3]], [[[1]]]),
    ({"type": "array", "items": {}}, [1, {"a": 2}, [3]], [1, {"a": [2]}]),
    ({}, {"a": [1, "x"]}, {"a": {"b": {}}}),
])
def test_a_free_form_value_nests_as_json_objects_do_and_compiles(tokenizer, schema, admitted, too_deep):
    """outlines-core nests a free-form object, array or value one level deeper than json_object,
    whose automaton took 9 to 31 s ({"type": "object"}) or past the 60 s given (an array of `{}`
    items) over the demo's vocabulary: now two levels, as json_object's."""
    expression = StructuredOutput(json_schema=schema).to_regex()
    jsonschema.validate(admitted, schema)
    assert regex.fullmatch(expression, json.dumps(admitted))
    assert not regex.fullmatch(expression, json.dumps(too_deep))
    assert compiled_index(expression, vocabulary_of(tokenizer))


def test_every_text_a_free_form_fields_automaton_ends_is_json_the_schema_admits(tokenizer):
    """Random walks through the automaton of a model's free-form fields, leaning to tokens that
    close a string, an array or an object: each ends in JSON the schema admits, each field
    nesting two levels at most."""
    vocabulary, table = vocabulary_of(tokenizer), token_bytes(tokenizer)
    index = compiled_index(StructuredOutput(json_schema=FREE_FORM).to_regex(), vocabulary)
    rng, validator = random.Random(0), jsonschema.Draft202012Validator(FREE_FORM)
    for _ in range(20):
        state, text = index.get_initial_state(), b""
        while not index.is_final_state(state):
            allowed = [t for t in index.get_allowed_tokens(state) if t != vocabulary.eos_token_id]
            closing = [t for t in allowed if set(table[t]) & set(b'"]}')]
            token = rng.choice(closing if closing and rng.random() < 0.6 else allowed)
            text, state = text + table[token], index.get_next_state(state, token)
            assert len(text) < 4000
        value = json.loads(text.decode())
        validator.validate(value)
        assert all(_nesting(field) <= 2 for field in value.values()), text


@pytest.mark.parametrize("bounds, where", [
    ({"maxLength": 40}, "the whole completion"), ({"minLength": 20}, "the whole completion"),
    ({"minLength": 2, "maxLength": 30}, "the whole completion"), ({"minLength": 2, "maxLength": 30}, "a property"),
])
def test_a_strings_length_bounds_compile_and_every_walk_ends_in_a_string_within_them(tokenizer, monkeypatch, bounds,
                                                                                    where):
    """Under a count, outlines-core's automaton of a string character escaping the quote \\"
    grows exponentially with the count where the string begins the text (maxLength 20 did not
    compile in 60 s over the demo's vocabulary, 14 took 1.5 s): it escapes the quote \\u0022
    under a count, the same string (maxLength 500: 0.8 s)."""
    from rayspec.engine import structured

    monkeypatch.setattr(structured, "COMPILE_SECONDS", 20)  # a second or less; the exponential build, minutes
    string = {"type": "string", **bounds}
    schema = string if where == "the whole completion" else {"type": "object", "properties": {"s": string},
                                                              "required": ["s"]}
    output = StructuredOutput(json_schema=schema)
    texts = _ended_walks(output, tokenizer, tokens=60)
    for text in texts:
        jsonschema.validate(json.loads(text), schema)
    assert len(texts) >= 20
    value = 'say "hi"' + "x" * 20
    quoted = json.dumps(value if schema is string else {"s": value}).replace('\\"', "\\u0022")
    assert regex.fullmatch(output.to_regex(), quoted) and json.loads(quoted) in (value, {"s": value})


# Pydantic 2.14's schema of a model with Any, list[Any], dict[str, Any], tuple[Any, int] and
# Optional Any (default None) fields.
PYDANTIC_ANY = {"properties": {"x": {"title": "X"}, "y": {"items": {}, "title": "Y", "type": "array"},
                               "z": {"additionalProperties": True, "title": "Z", "type": "object"},
                               "t": {"maxItems": 2, "minItems": 2, "prefixItems": [{}, {"type": "integer"}],
                                     "title": "T", "type": "array"},
                               "o": {"default": None, "title": "O"}},
                "required": ["x", "y", "z", "t"], "title": "M", "type": "object"}


@pytest.mark.parametrize("schema, values", [
    (PYDANTIC_ANY, [{"x": 1, "y": ["a", {"b": None}], "z": {"k": [2.5]}, "t": [{"q": True}, 3], "o": "s"},
                    {"x": {"a": [1]}, "y": [], "z": {}, "t": [None, -1]}]),
    ({"title": "Data", "description": "anything"}, [1, "a", [True, {"b": None}], {"c": [1]}]),
    ({"type": "array", "items": True}, [[], [1, "a", {"b": 2}]]),
    ({"type": "object", "properties": {"a": True}, "required": ["a"]}, [{"a": 1}, {"a": [None]}]),
    ({"anyOf": [True, {"type": "null"}]}, [None, 1, {"a": "b"}]),
])
def test_a_schema_that_says_nothing_of_a_value_admits_any_as_an_empty_one_does(tokenizer, schema, values):
    """Pydantic writes an `Any` field {"title": "X"} (annotations alone) and a tuple with
    minItems = maxItems = its length; outlines-core refused the first and the schema `true`
    ("Unsupported JSON Schema structure"), and the tuple's counts were refused as read past,
    though the prefix outlines-core writes meets them."""
    output = StructuredOutput(json_schema=schema)
    for value in values:
        jsonschema.validate(value, schema)
        assert regex.fullmatch(output.to_regex(), json.dumps(value)), value
    assert compiled_index(output.to_regex(), vocabulary_of(tokenizer))


@pytest.mark.parametrize("bounds, keyword", [({"minItems": 3}, "minItems"), ({"maxItems": 1}, "maxItems")])
def test_a_tuples_counts_its_prefix_breaks_are_refused(bounds, keyword):
    schema = {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], **bounds}
    with pytest.raises(ValueError, match=f"top level combines prefixItems, {keyword}, of which only prefixItems"):
        StructuredOutput(json_schema=schema).to_regex()


@pytest.mark.parametrize("pattern, ascii_", [(r"^[\w-]{1,100}$", r"[A-Za-z0-9_-]{1,100}"),
                                             (r"^\d+(\.\d+)?$", r"[0-9]+(\.[0-9]+)?"), (r"^[^\D]+$", r"[0-9]+")])
def test_a_patterns_digit_and_word_classes_are_ecma_262s_in_the_compiled_automaton(tokenizer, pattern, ascii_):
    """JSON Schema's patterns are ECMA-262's, whose \\d and \\w are ASCII; the regex crate's
    are Unicode's, and its automaton of \\w{1,100} took 2.6 s to compile."""
    texts = _ended_walks(StructuredOutput(json_schema={"type": "string", "pattern": pattern}), tokenizer)
    for text in texts:
        assert re.fullmatch(ascii_, json.loads(text)), text
    assert len(texts) >= 20
