"""vLLM's sampling extensions — min_p, min_tokens, stop token ids, ignore_eos,
allowed_token_ids and bad_words — in the laws (`rayspec.verify.processing`) and through the
engine.

min_tokens bans the stop tokens from the laws of a completion's first positions, so the
target's law at a tree node depends on how many tokens the node's path adds: exactness is
checked against HF's own `generate(min_new_tokens=...)`, and sampled sequences against the
law enumerated by hand (chi-square, fixed seeds)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.verify import available_verifiers
from rayspec.verify.processing import SamplingParams, TokenHistory, adjust_logits, logits_to_probs
from tests.engine.test_engine import VERIFIER_TREES
from tests.stats import assert_frequencies_match
from tests.tiny_models import noisy_copy, tiny_llama

# ------------------------------------------------------------------ the laws


def _min_p_by_hand(row: torch.Tensor, temperature: float, min_p: float) -> torch.Tensor:
    """Nguyen et al.'s min-p on one row, in float64: the law at the temperature, without the
    tokens less likely than min_p times the most likely, renormalised."""
    p = torch.softmax(row.double() / temperature, -1)
    p = torch.where(p >= min_p * p.max(), p, torch.zeros_like(p))
    return p / p.sum()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
@pytest.mark.parametrize("min_p", [0.05, 0.3, 1.0])
def test_min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_most_likely(temperature, min_p):
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(2)) * 3
    probs = logits_to_probs(logits, SamplingParams(temperature, min_p=min_p))
    for row, law in zip(logits, probs):
        expected = _min_p_by_hand(row, temperature, min_p)
        assert torch.equal(law > 0, expected > 0)
        assert torch.allclose(law.double(), expected, atol=1e-6)
    kept = (probs > 0).sum(-1)
    assert (kept < 40).all() and (kept >= 1).all()
    if min_p == 1.0:
        assert (kept == 1).all()  # no ties in random logits: only the most likely token stays


def test_min_p_comes_before_top_p_as_in_vllm():
    """p = (.5, .3, .12, .08): min-p 0.2 drops .08; top-p 0.85 over the renormalised rest then
    keeps two tokens.  The other order keeps three (mass .8 before the third is short of .85)."""
    logits = torch.tensor([[0.5, 0.3, 0.12, 0.08]]).log()
    probs = logits_to_probs(logits, SamplingParams(1.0, top_p=0.85, min_p=0.2))
    assert torch.allclose(probs, torch.tensor([[0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]]))
    assert (logits_to_probs(logits, SamplingParams(1.0, top_p=0.85)) > 0).sum() == 3


def test_min_tokens_bans_the_stop_tokens_from_the_rows_before_it_and_only_those():
    logits = torch.randn(4, 12, generator=torch.Generator().manual_seed(3)) * 2
    logits[:, 9] = 10.0  # a stop token is every row's argmax
    history = TokenHistory([1, 2])
    history.extend([3, 4])  # two completion tokens: the rows sit at positions 2, 3, 4 and 5
    rows = history.rows([[], [5], [5, 6], [5, 6, 7]])
    assert rows.positions.tolist() == [2, 3, 4, 5]
    params = SamplingParams(0.8, min_tokens=4, stop_token_ids=(9, 0))
    assert params.stop_token_ids == (0, 9) and params.uses_history
    probs = logits_to_probs(logits, params, history=rows)
    banned = logits.clone()
    banned[:, [0, 9]] = float("-inf")
    assert torch.allclose(probs[:2], torch.softmax(banned[:2] / 0.8, -1))
    assert (probs[:2, [0, 9]] == 0).all()
    assert torch.allclose(probs[2:], torch.softmax(logits[2:] / 0.8, -1))
    greedy = logits_to_probs(logits, SamplingParams(0.0, min_tokens=4, stop_token_ids=(0, 9)), history=rows)
    assert greedy.argmax(-1).tolist() == [*banned[:2].argmax(-1).tolist(), 9, 9]


def test_min_tokens_without_stop_tokens_changes_nothing():
    params = SamplingParams(min_tokens=5)
    assert not params.bans_stops and not params.uses_history
    logits = torch.randn(2, 8)
    assert torch.equal(logits_to_probs(logits, params), logits_to_probs(logits, SamplingParams()))


@pytest.mark.parametrize("fields, message", [
    (dict(min_p=1.5), r"min_p must be in \[0, 1\] \(0 disables it\), got 1.5"),
    (dict(min_p=-0.1), r"min_p must be in \[0, 1\]"),
    (dict(min_p=float("nan")), r"min_p must be in \[0, 1\]"),
    (dict(min_tokens=-1), r"min_tokens must be in \[0, 2\^31\), got -1"),
    (dict(min_tokens=2.5), "min_tokens must be an integer, got 2.5"),
    (dict(stop_token_ids=(1.5,)), "stop_token_ids must be a list of token ids"),
    (dict(stop_token_ids=(3, -1)), "stop_token_ids: token ids are >= 0, got -1"),
    (dict(stop_token_ids=("a",)), "stop_token_ids must be a list of token ids"),
    (dict(allowed_token_ids=(2, -4)), "allowed_token_ids: token ids are >= 0, got -4"),
    (dict(allowed_token_ids=(0.5,)), "allowed_token_ids must be a list of token ids"),
])
def test_bad_values_are_refused_with_the_field_named(fields, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**fields)


def test_stop_tokens_outside_the_vocabulary_or_banning_all_of_it_are_refused():
    with pytest.raises(ValueError, match="stop_token_ids names token 12, outside the vocabulary of 12 tokens"):
        SamplingParams(min_tokens=2, stop_token_ids=(3, 12)).check_vocabulary(12)
    with pytest.raises(ValueError, match="min_tokens would ban every token of the vocabulary"):
        SamplingParams(min_tokens=2, stop_token_ids=(0, 1, 2)).check_vocabulary(3)
    SamplingParams(min_tokens=2, stop_token_ids=(0, 1)).check_vocabulary(3)
    with pytest.raises(ValueError, match="allowed_token_ids names token 3, outside the vocabulary of 3 tokens"):
        SamplingParams(allowed_token_ids=(3, 0)).check_vocabulary(3)
    with pytest.raises(ValueError, match=r"min_tokens would ban every token that allowed_token_ids allows: all are stop tokens \(EOS or"):
        SamplingParams(min_tokens=2, stop_token_ids=(0, 1), allowed_token_ids=(1, 0)).check_vocabulary(5)
    SamplingParams(min_tokens=2, stop_token_ids=(0, 1), allowed_token_ids=(1, 4)).check_vocabulary(5)


def test_allowed_token_ids_restrict_the_law_to_them_after_the_bias_and_the_stop_ban():
    logits = torch.randn(4, 20, generator=torch.Generator().manual_seed(5)) * 2
    logits[:, 5] = 9.0  # every row's argmax, and not allowed
    allowed = [3, 7, 11, 19]
    history = TokenHistory([1, 2])
    rows = history.rows([[], [3], [3, 7], [3, 7, 11]])  # positions 0 to 3
    params = SamplingParams(0.7, logit_bias={7: 2.0, 5: 50.0}, min_tokens=2, stop_token_ids=(11,),
                            allowed_token_ids=(19, 3, 11, 7))
    assert params.allowed_token_ids == (3, 7, 11, 19) and params.adjusts_logits
    by_hand = torch.full_like(logits, float("-inf"))
    by_hand[:, allowed] = logits[:, allowed]
    by_hand[:, 7] += 2.0
    by_hand[:2, 11] = float("-inf")  # rows before min_tokens
    probs = logits_to_probs(logits, params, history=rows)
    assert torch.allclose(probs, torch.softmax(by_hand / 0.7, -1))
    assert (probs[:, [i for i in range(20) if i not in allowed]] == 0).all() and (probs[2:, 11] > 0).all()
    greedy = logits_to_probs(logits, SamplingParams(0.0, allowed_token_ids=allowed))
    assert greedy.argmax(-1).tolist() == [allowed[i] for i in logits[:, allowed].argmax(-1).tolist()]
    assert not SamplingParams(allowed_token_ids=()).adjusts_logits


def _ban_bad_words_by_hand(row: torch.Tensor, words, completion: list[int], lift: bool = True) -> torch.Tensor:
    """vLLM's rule, one word at a time: a word's last token is banned where the completion
    ends in its other tokens; the ban is lifted if it would leave no token (with `lift`)."""
    banned = row.clone()
    for word in words:
        prefix = list(word[:-1])
        if len(prefix) <= len(completion) and completion[len(completion) - len(prefix):] == prefix:
            banned[word[-1]] = -math.inf
    return row if lift and torch.isinf(banned).all() else banned


def test_bad_words_ban_the_token_completing_a_word_after_each_rows_path():
    """Random words, completions, tree paths and allowed tokens against the rule applied word
    by word (after allowed_token_ids, whose few tokens make empty laws, and so the lifting,
    frequent)."""
    rng, generator = random.Random(0), torch.Generator().manual_seed(0)
    lifted = 0
    for trial in range(300):
        vocab = 6
        words = [tuple(rng.randrange(vocab) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 5))]
        allowed = sorted(rng.sample(range(vocab), 2)) if trial % 2 else []
        completion = [rng.choice(allowed or range(vocab)) for _ in range(rng.randint(0, 5))]
        paths = [[rng.choice(allowed or range(vocab)) for _ in range(rng.randint(0, 3))] for _ in range(7)]
        history = TokenHistory([0, 1, 2])  # the prompt: never part of a word
        history.extend(completion)
        params = SamplingParams(bad_words_ids=words, allowed_token_ids=allowed)
        logits = torch.randn(7, vocab, generator=generator)
        restricted = logits.clone()
        if allowed:
            restricted[:, [t for t in range(vocab) if t not in allowed]] = -math.inf
        rows = history.rows(paths, params.bad_word_context) if params.uses_history else None
        expected = torch.stack([_ban_bad_words_by_hand(restricted[r], words, completion + path)
                                for r, path in enumerate(paths)])
        assert torch.equal(adjust_logits(logits, params, rows), expected), (words, completion, paths)
        lifted += sum(bool(torch.isinf(_ban_bad_words_by_hand(restricted[r], words, completion + path,
                                                              lift=False)).all()) for r, path in enumerate(paths))
    assert lifted >= 10, "laws with every token banned must occur, so that the lifting rule is tested"


def test_bad_words_see_the_completion_only_and_shared_last_tokens():
    history = TokenHistory([4, 5])  # the prompt ends in 4 5
    params = SamplingParams(0.0, bad_words_ids=[(5, 6), (4, 5, 7), (2, 6), (3,)])
    assert params.bad_word_context == 2 and params.uses_history
    logits = torch.zeros(4, 8)
    logits[:, 6], logits[:, 7], logits[:, 3] = 3.0, 2.0, 5.0
    rows = history.rows([[], [5], [4, 5], [2]], params.bad_word_context)
    assert rows.tails.tolist() == [[-1, -1], [-1, 5], [4, 5], [-1, 2]]
    banned = torch.isinf(adjust_logits(logits, params, rows))
    # 3 always; 6 after 5 or after 2 (two words ending in it); 7 after 4 5, not after the prompt's
    assert banned.nonzero().tolist() == [[0, 3], [1, 3], [1, 6], [2, 3], [2, 6], [2, 7], [3, 3], [3, 6]]
    assert logits_to_probs(logits, params, history=rows).argmax(-1).tolist() == [6, 7, 0, 7]
    assert not SamplingParams(bad_words_ids=[(3,)]).uses_history and SamplingParams(bad_words_ids=[(3,)]).adjusts_logits


@pytest.mark.parametrize("words, message", [
    ([()], "a bad word has no tokens"),
    ([(1, -2)], "token ids are >= 0, got -2"),
    ([5], "must be a list of token id sequences"),
    ([(1.5,)], "must be a list of token id sequences"),
])
def test_bad_bad_words_are_refused(words, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(bad_words_ids=words)


def test_bad_words_outside_the_vocabulary_are_refused():
    with pytest.raises(ValueError, match="bad_words names token 9, outside the vocabulary of 9 tokens"):
        SamplingParams(bad_words_ids=[(1, 9)]).check_vocabulary(9)
    SamplingParams(bad_words_ids=[(1, 8)]).check_vocabulary(9)


# ------------------------------------------------------------------ greedy, through the engine

PROMPT = [3, 1, 4, 1, 5]


@pytest.fixture(scope="module")
def eos_pair():
    """The tiny pair with, as EOS, a token the target's greedy output reaches early (so that
    generation stops early, and min_tokens has something to change)."""
    plain = SpeculativeEngine(LocalTarget(tiny_llama(vocab=64, seed=0))).run(PROMPT, max_new_tokens=8, temperature=0)
    eos = next(t for t in plain.tokens[1:] if t not in plain.tokens[:1])
    target = tiny_llama(vocab=64, seed=0, eos=eos)  # the same weights: only the config differs
    return target, noisy_copy(target, noise=0.05), eos


def _hf_greedy(model, length: int, eos: int | None, **kwargs) -> list[int]:
    """HF's greedy completion up to its first EOS (not included)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=length, do_sample=False, pad_token_id=0,
                             eos_token_id=eos, **kwargs)[0, len(PROMPT):].tolist()
    return out[: out.index(eos)] if eos in out else out


def test_greedy_with_min_tokens_equals_hf_generate_with_min_new_tokens_for_every_verifier(eos_pair):
    target, drafter, eos = eos_pair
    plain = SpeculativeEngine(LocalTarget(target)).run(PROMPT, max_new_tokens=32, temperature=0)
    assert plain.finish_reason == "stop" and len(plain.tokens) < 4
    # the smallest min_tokens after which the output still stops at EOS, so both ends are tested
    min_tokens, expected = next((m, hf) for m in range(4, 20)
                                if len(hf := _hf_greedy(target, 32, eos, min_new_tokens=m)) < 32)
    assert len(expected) >= min_tokens
    for name in available_verifiers():
        engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
        out = engine.run(PROMPT, max_new_tokens=32, temperature=0, min_tokens=min_tokens)
        assert (out.tokens, out.finish_reason) == (expected, "stop"), name
        assert out.stats.tokens_per_step > 1.5, f"{name}: drafts should still be accepted under min_tokens"


def test_ignore_eos_decodes_on_as_if_the_model_had_no_eos(eos_pair):
    target, drafter, eos = eos_pair
    no_eos = tiny_llama(vocab=64, seed=0)
    expected = _hf_greedy(no_eos, 24, None)
    assert eos in expected
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="greedy", tree="kary:2x3")
    out = engine.run(PROMPT, max_new_tokens=24, temperature=0, ignore_eos=True)
    assert (out.tokens, out.finish_reason) == (expected, "length")
    # a stop token id still stops, and min_tokens bans it alone when EOS is ignored
    stop = expected[6]
    first = expected.index(stop)
    out = engine.run(PROMPT, max_new_tokens=24, temperature=0, ignore_eos=True, stop=[stop])
    assert (out.tokens, out.finish_reason) == (expected[:first], "stop")
    out = engine.run(PROMPT, max_new_tokens=24, temperature=0, ignore_eos=True, stop=[stop], min_tokens=first + 1)
    assert stop not in out.tokens[: first + 1] and eos in out.tokens and len(out.tokens) > first


def _greedy_by_hand(model, length: int, pick) -> list[int]:
    """Greedy decoding after PROMPT, `pick(logits row, completion so far)` choosing each token."""
    completion = []
    with torch.no_grad():
        for _ in range(length):
            completion.append(pick(model(torch.tensor([PROMPT + completion])).logits[0, -1], completion))
    return completion


def _check_every_verifier_gives(eos_pair, expected: list[int], why: str, **kwargs) -> None:
    """Each verifier's greedy output (EOS ignored) is `expected`, with drafts accepted."""
    target, drafter, _ = eos_pair
    for name in available_verifiers():
        engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
        out = engine.run(PROMPT, max_new_tokens=len(expected), temperature=0, ignore_eos=True, **kwargs)
        assert out.tokens == expected, name
        assert out.stats.tokens_per_step > 1.5, f"{name}: {why}"


def test_greedy_with_allowed_token_ids_is_the_argmax_over_them_for_every_verifier(eos_pair):
    target = eos_pair[0]
    plain = SpeculativeEngine(LocalTarget(target)).run(PROMPT, max_new_tokens=12, temperature=0, ignore_eos=True)
    allowed = [t for t in range(64) if t % 3 and t not in plain.tokens[:2]]
    expected = _greedy_by_hand(target, 12, lambda row, _: allowed[int(row[allowed].argmax())])
    assert expected != plain.tokens
    _check_every_verifier_gives(eos_pair, expected, "the drafter restricted too, its drafts are accepted",
                                allowed_token_ids=allowed)


def test_greedy_with_bad_words_is_the_argmax_without_them_for_every_verifier(eos_pair):
    target = eos_pair[0]
    plain = SpeculativeEngine(LocalTarget(target)).run(PROMPT, max_new_tokens=12, temperature=0, ignore_eos=True)
    # a pair the plain output has, a single token of it, and a pair across the prompt's end
    words = [tuple(plain.tokens[2:4]), (plain.tokens[7],), (PROMPT[-1], plain.tokens[0])]
    expected = _greedy_by_hand(target, 12, lambda row, done: int(_ban_bad_words_by_hand(row, words, done).argmax()))
    assert expected[:3] == plain.tokens[:3] and expected != plain.tokens  # the prompt is not part of a word
    assert plain.tokens[7] not in expected
    _check_every_verifier_gives(eos_pair, expected, "the drafter bans the words too, its drafts are accepted",
                                bad_words=words)


def test_bad_words_as_text_need_a_tokenizer(eos_pair):
    engine = SpeculativeEngine(LocalTarget(eos_pair[0]))
    with pytest.raises(ValueError, match="bad words given as text need a tokenizer"):
        list(engine.generate(PROMPT, max_new_tokens=4, bad_words=["hello"]))
    with pytest.raises(ValueError, match="bad_words names token 64, outside the vocabulary of 64 tokens"):
        list(engine.generate(PROMPT, max_new_tokens=4, bad_words=[(3, 64)]))


def test_a_stop_token_outside_the_vocabulary_is_refused(eos_pair):
    engine = SpeculativeEngine(LocalTarget(eos_pair[0]))
    with pytest.raises(ValueError, match="stop token 64 is outside the vocabulary of 64 tokens"):
        list(engine.generate(PROMPT, max_new_tokens=4, stop=[64]))


# ------------------------------------------------------------------ the law when sampling

SMALL_EOS = 2
SAMPLED = dict(temperature=1.2, min_p=0.4, min_tokens=2, allowed_token_ids=(0, 2, 3), bad_words=((0, 3), (1, 0)))


@pytest.fixture(scope="module")
def small_pair():
    """Four tokens, one of them EOS, so that min-p drops tokens and EOS is likely."""
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3, eos=SMALL_EOS)
    return target, noisy_copy(target, noise=0.8)


def law_of_completions(model, prompt: list[int], length: int, temperature: float, min_p: float = 0.0,
                       min_tokens: int = 0, allowed_token_ids=(), bad_words=()) -> dict:
    """The law of the completion (EOS ending it, not included) up to `length` tokens, by
    enumeration: EOS banned before min_tokens, the tokens not allowed and the bad words, then
    temperature and min-p, by hand."""
    law: dict[tuple, float] = {}

    def walk(completion: list[int], prob: float) -> None:
        if len(completion) == length:
            law[tuple(completion)] = law.get(tuple(completion), 0.0) + prob
            return
        with torch.no_grad():
            row = model(torch.tensor([prompt + completion])).logits[0, -1].double()
        if len(completion) < min_tokens:
            row[SMALL_EOS] = -math.inf
        if allowed_token_ids:
            row[[t for t in range(len(row)) if t not in allowed_token_ids]] = -math.inf
        row = _ban_bad_words_by_hand(row, bad_words, completion)
        for token, p in enumerate(_min_p_by_hand(row, temperature, min_p).tolist()):
            if p == 0:
                continue
            if token == SMALL_EOS:
                law[tuple(completion)] = law.get(tuple(completion), 0.0) + prob * p
            else:
                walk(completion + [token], prob * p)

    walk([], 1.0)
    return law


def _moved(law: dict, other: dict) -> float:
    return max(abs(law.get(o, 0.0) - other.get(o, 0.0)) for o in set(law) | set(other))


# a sampling verifier; a coupling (whose tokens are target-only decoding's, below) and spechub,
# which reads the same processed laws, in `make test-all`
@pytest.mark.parametrize("name", ["rrsw", pytest.param("gumbel", marks=pytest.mark.slow),
                                  pytest.param("spechub", marks=pytest.mark.slow)])
def test_sampled_completions_follow_the_law_with_vllms_sampling_extensions(small_pair, name):
    """min_p, min_tokens, allowed_token_ids and bad words at once, each shown to move the law."""
    target, drafter = small_pair
    prompt = [1, 3, 1]
    law = law_of_completions(target, prompt, 3, **SAMPLED)
    for left_out in ("min_p", "min_tokens", "allowed_token_ids", "bad_words"):
        without = {key: value for key, value in SAMPLED.items() if key != left_out}
        assert _moved(law, law_of_completions(target, prompt, 3, **without)) > 0.05, f"{left_out} must move the law"
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    outs = [engine.run(prompt, max_new_tokens=3, seed=seed, **SAMPLED) for seed in range(2000)]
    deep = sum(s.accepted >= 2 for out in outs for s in out.stats.steps)
    assert deep >= 40, f"paths through drafted nodes (whose laws min_tokens and bad words change) must occur often: {deep}"
    assert_frequencies_match([tuple(o.tokens) for o in outs], law, what=f"{name}: completions with vLLM's extensions")


@pytest.mark.parametrize("verifier", ["gumbel", "minhash"])
def test_with_min_tokens_a_couplings_output_still_does_not_depend_on_the_drafter(eos_pair, verifier):
    """A node's law depends on its depth under min_tokens, which is the emitted text's length
    when the walk gets there: a seed gives the same tokens whatever drafted."""
    target, drafter, _ = eos_pair
    other = noisy_copy(target, noise=0.5, seed=7)
    outputs = []
    for draft_model, tree in [(drafter, "kary:2x3"), (other, "kary:2x2"), (None, None)]:
        engine = SpeculativeEngine(LocalTarget(target), draft_model and LocalDrafter(draft_model),
                                   verifier=verifier, tree=tree or "none")
        outputs.append(engine.run(PROMPT, max_new_tokens=30, seed=11, min_p=0.05, min_tokens=20).tokens)
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) >= 20
