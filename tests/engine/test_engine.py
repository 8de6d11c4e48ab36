"""The speculative engine on tiny random models: exactness at T = 0 for every verifier,
seeded reproducibility, the law of the emitted tokens end to end, tree construction by the
drafter, and clear errors for bad requests."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import torch

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.engine import GenerationStats
from rayspec.engine.interfaces import GenerationCancelled, SequenceSpec
from rayspec.engine.policy import TreePolicy
from rayspec.tree.structure import TreeShape
from rayspec.verify import available_verifiers, get_verifier
from rayspec.verify.processing import SamplingParams
from tests.drafters import WatchedDrafter
from tests.stats import assert_frequencies_match
from tests.tiny_models import SLIDING_WINDOW_ARCHITECTURES, noisy_copy, tiny_llama, tiny_sliding_window

VERIFIER_TREES = {
    "greedy": "kary:3x3", "sps": "chain:4", "rrs": "kary:3x2", "rrsw": "kary:2x3", "spectr": "kary:2x3",
    "spechub": "kary:2x3", "is": "kary:2x2", "is-weighted": "kary:2x2", "gumbel": "kary:2x3",
    "minhash": "kary:2x2", "mentored": "chain:3", "topk": "kary:3x3",
}
assert set(VERIFIER_TREES) == set(available_verifiers())


@pytest.fixture(scope="module")
def pair():
    target = tiny_llama(vocab=64, seed=0)
    return target, noisy_copy(target, noise=0.05)


@pytest.fixture(scope="module")
def greedy_reference(pair):
    engine = SpeculativeEngine(LocalTarget(pair[0]))
    prompts = [[1, 2, 3], [5, 9, 14, 20, 33], [60], [7, 7, 7, 7]]
    return prompts, [engine.run(p, max_new_tokens=24, temperature=0).tokens for p in prompts]


def test_target_only_greedy_equals_hf_generate(pair):
    target = pair[0]
    engine = SpeculativeEngine(LocalTarget(target))
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        hf = target.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert engine.run(prompt, max_new_tokens=20, temperature=0).tokens == hf[0, len(prompt):].tolist()


@pytest.mark.parametrize("architecture", SLIDING_WINDOW_ARCHITECTURES)
def test_a_sliding_window_pair_decodes_what_hf_generate_does_far_past_the_window(architecture):
    target = tiny_sliding_window(architecture, window=4)
    drafter = noisy_copy(target, noise=0.05)
    prompt = [3, 1, 4, 1, 5, 9]
    with torch.no_grad():
        hf = target.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False, pad_token_id=0,
                             eos_token_id=None)[0, len(prompt):].tolist()
    assert SpeculativeEngine(LocalTarget(target)).run(prompt, max_new_tokens=30, temperature=0,
                                                      ignore_eos=True).tokens == hf
    for verifier, tree in (("greedy", "kary:2x3"), ("rrsw", "chain:6"), ("topk", "dynamic:16")):
        engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=verifier, tree=tree)
        assert engine.run(prompt, max_new_tokens=30, temperature=0, ignore_eos=True).tokens == hf, verifier


@pytest.mark.parametrize("drafter_vocab", [72, 60])
def test_a_drafter_whose_vocabulary_size_differs_from_the_targets_is_refused_at_construction(pair, drafter_vocab):
    """Built, such a pair failed every request mid-stream (a row width mismatch, or an id the
    target has no embedding for: a device-side assert on a GPU)."""
    with pytest.raises(ValueError, match=rf"drafter's vocab_size \({drafter_vocab}\) differs from the target's \(64\)"):
        SpeculativeEngine(LocalTarget(pair[0]), LocalDrafter(tiny_llama(vocab=drafter_vocab, seed=3)))


@pytest.mark.parametrize("name", available_verifiers())
def test_temperature_zero_equals_target_greedy_for_every_verifier(pair, greedy_reference, name):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    prompts, references = greedy_reference
    steps = 0
    for prompt, reference in zip(prompts, references):
        out = engine.run(prompt, max_new_tokens=24, temperature=0)
        assert out.tokens == reference
        steps += len(out.stats.steps)
    assert steps < sum(map(len, references)), "no draft was ever accepted: the test would be vacuous"


@pytest.mark.parametrize("name", ["rrsw", "gumbel", "spechub", "mentored"])
def test_same_seed_same_tokens(pair, name):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=VERIFIER_TREES[name])
    runs = [engine.run([4, 8, 15], max_new_tokens=30, temperature=0.9, seed=seed).tokens for seed in (1, 1, 2)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize("name", ["rrsw", "gumbel"])
def test_a_seed_past_64_bits_is_refused_before_anything_opens(pair, name):
    """A worker's session and the couplings' keyed noise take an int64 seed: the in-process
    engine refuses what the distributed path cannot carry, not rrsw alone taking it (it hashes
    the seed) and gumbel failing with OverflowError after the prompt's prefill."""
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree="kary:2x2")
    for seed in (2**63, -2**63 - 1, 2**64 + 5):
        with pytest.raises(ValueError, match=f"seed must be a 64-bit signed integer, got {seed}"):
            engine.run([4, 8, 15], max_new_tokens=4, temperature=1.0, seed=seed)
    for seed in (2**63 - 1, -2**63):
        assert len(engine.run([4, 8, 15], max_new_tokens=4, temperature=1.0, seed=seed).tokens) == 4


@pytest.mark.parametrize("tree", ["dynamic:16", "dynamic:24x5x4", "dynamic:6x2x1"])
def test_dynamic_trees_are_exact_at_temperature_zero(pair, greedy_reference, tree):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="topk", tree=tree)
    prompts, references = greedy_reference
    for prompt, reference in zip(prompts, references):
        out = engine.run(prompt, max_new_tokens=24, temperature=0)
        assert out.tokens == reference
        assert all(s.drafted <= int(tree.split(":")[1].split("x")[0]) - 1 for s in out.stats.steps)


def test_coupling_output_does_not_depend_on_the_drafter(pair):
    target, drafter = pair
    other = noisy_copy(target, noise=0.5, seed=7)
    outputs = []
    for draft_model, tree in [(drafter, "kary:2x3"), (other, "kary:3x2"), (None, None)]:
        engine = SpeculativeEngine(LocalTarget(target), draft_model and LocalDrafter(draft_model),
                                   verifier="gumbel", tree=tree or "none")
        outputs.append(engine.run([2, 7, 1, 8], max_new_tokens=40, temperature=1.0, seed=11).tokens)
    assert outputs[0] == outputs[1] == outputs[2]


# ---------------------------------------------------------------- law of emitted tokens


def exact_law_of_first_tokens(model, prompt, length):
    law = {}
    for tokens in itertools.product(range(model.config.vocab_size), repeat=length):
        prob = 1.0
        for i, token in enumerate(tokens):
            with torch.no_grad():
                logits = model(torch.tensor([list(prompt) + list(tokens[:i])])).logits[0, -1]
            prob *= float(torch.softmax(logits.double(), -1)[token])
        law[tokens] = prob
    return law


@pytest.fixture(scope="module")
def context_pair():
    target = tiny_llama(vocab=4, hidden=16, layers=1, seed=3)
    return target, noisy_copy(target, noise=0.8), exact_law_of_first_tokens(target, [0, 1, 2], 3)


def _first_three(context_pair, name, samples, tree=None, draft_top_k=0):
    target, drafter, law = context_pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter, draft_top_k=draft_top_k), verifier=name,
                               tree=tree or VERIFIER_TREES[name])
    outs = [engine.run([0, 1, 2], max_new_tokens=3, temperature=1.0, seed=seed) for seed in range(samples)]
    steps = [step for out in outs for step in out.stats.steps]
    paths = {
        "two or more accepted": sum(s.accepted >= 2 for s in steps),
        "a later sibling accepted": sum(any(r >= 2 for r in s.ranks) for s in steps),
        "all drafts of a node rejected": sum(0 in s.ranks for s in steps),
    }
    return [tuple(o.tokens) for o in outs], law, paths


# One sampling verifier and the dynamic tree's in `make test`: the engine treats the others
# alike, every verifier's law through trees is tested on a table model
# (tests/verify/test_tree_walk.py), and a coupling's tokens are target-only decoding's
# (`test_coupling_output_does_not_depend_on_the_drafter`); `make test-all` runs them all here.
@pytest.mark.parametrize("name, tree", [("rrsw", None), pytest.param("gumbel", None, marks=pytest.mark.slow),
                                        ("topk", "dynamic:8x3x2"),
                                        pytest.param("spechub", None, marks=pytest.mark.slow),
                                        pytest.param("spectr", None, marks=pytest.mark.slow)])
def test_first_three_tokens_follow_the_target_end_to_end(context_pair, name, tree):
    samples, law, paths = _first_three(context_pair, name, 2500, tree)
    assert min(paths.values()) >= 40, f"every kind of walk must occur often enough to be tested: {paths}"
    assert_frequencies_match(samples, law, what=f"{name}: first 3 tokens through the engine")


# the truncation is the drafter's: one verifier in `make test`, the others in `make test-all`
@pytest.mark.parametrize("name", ["rrsw", pytest.param("spectr", marks=pytest.mark.slow),
                                  pytest.param("is", marks=pytest.mark.slow)])
def test_a_drafter_kept_to_its_two_likeliest_tokens_leaves_the_output_law_exact(context_pair, name):
    """Of a vocabulary of 4, the drafter drafts from its 2 likeliest tokens only: the verifier
    checks against that law, so the emitted tokens still follow the target's."""
    samples, law, paths = _first_three(context_pair, name, 2500, draft_top_k=2)
    assert paths["all drafts of a node rejected"] >= 40, paths  # the residual carries the rest
    assert_frequencies_match(samples, law, what=f"{name}, draft_top_k 2: first 3 tokens through the engine")


def test_a_truncated_drafter_drafts_only_its_likeliest_tokens_and_a_bad_k_is_refused(pair):
    """kary:4x2 asks 4 children of each node; a drafter kept to 3 tokens drafts 3, each within
    its parent's shipped row, which holds 3 tokens."""
    drafter = pair[1]
    session = LocalDrafter(drafter, draft_top_k=3).open(SequenceSpec((3, 1, 4, 1, 5), SamplingParams(1.0), seed=2,
                                                                      verifier="rrsw"))
    draft = session.draft(TreeShape.kary(4, 2), None)
    shape, tokens = draft.tree.shape, draft.tree.tokens.tolist()
    assert [len(kids) for kids in shape.children if kids] == [3, 3, 3, 3]
    for row, node in enumerate(shape.internal_nodes):
        assert int((draft.q_rows[row] > 0).sum()) == 3
        assert all(draft.q_rows[row, tokens[child]] > 0 for child in shape.children[node])
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="draft_top_k must be a whole number, 0 \\(off\\) or more"):
            LocalDrafter(drafter, draft_top_k=bad)


def test_coupling_output_does_not_depend_on_a_truncated_drafter_either(pair):
    target, drafter = pair
    outputs = [SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter, draft_top_k=k), verifier="gumbel",
                                 tree="kary:2x3").run([2, 7, 1, 8], max_new_tokens=40, temperature=1.0, seed=11).tokens
               for k in (0, 1, 4)]
    assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in available_verifiers() if get_verifier(n).lossless])
def test_first_three_tokens_follow_the_target_end_to_end_long(context_pair, name):
    samples, law, _ = _first_three(context_pair, name, 20_000)
    assert_frequencies_match(samples, law, what=f"{name}: first 3 tokens through the engine")


# ------------------------------------------------------------------------ the drafter


def test_drafted_trees_follow_the_planned_shape_and_ship_internal_rows(pair):
    target, drafter = pair
    planned = TreeShape((-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree=planned)
    seen = []
    original = engine.target.open

    def spy(spec):
        session = original(spec)
        verify = session.verify

        def record(draft):
            seen.append(draft)
            return verify(draft)

        session.verify = record
        return session

    engine.target.open = spy
    engine.run([1, 2, 3], max_new_tokens=20, temperature=1.0, seed=0)
    assert seen
    for draft in seen:
        shape = draft.tree.shape
        assert shape.size <= planned.size and shape.max_depth <= planned.max_depth
        assert all(len(kids) <= 3 for kids in shape.children)
        assert draft.q_rows.shape == (len(shape.internal_nodes), 64)
        assert torch.allclose(draft.q_rows.sum(-1), torch.ones(len(shape.internal_nodes)), atol=1e-5)
    assert any(d.tree.shape.size == planned.size for d in seen)


def test_top_k_one_turns_a_without_replacement_tree_into_a_chain(pair):
    """q's support has one token: the drafter draws fewer children than planned."""
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:3x3")
    out = engine.run([1, 2, 3], max_new_tokens=20, temperature=1.0, top_k=1, seed=0)
    reference = SpeculativeEngine(LocalTarget(target)).run([1, 2, 3], max_new_tokens=20, temperature=0).tokens
    assert out.tokens == reference  # top-k = 1 is greedy
    assert all(s.drafted <= 3 for s in out.stats.steps)


def test_drafter_cache_equals_a_fresh_prefill_after_many_steps(pair):
    target, drafter = pair
    spec_engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrs", tree="kary:3x2")
    spec = SequenceSpec((1, 2, 3), SamplingParams(0.8), seed=4, verifier="rrs")
    drafter_session = spec_engine.drafter.open(spec)
    target_session = spec_engine.target.open(spec)
    outcome = None
    for _ in range(6):
        draft = drafter_session.draft(TreeShape.kary(3, 2), outcome)
        outcome = target_session.verify(draft)
    drafter_session.draft(TreeShape.chain(1), outcome)  # commits the last outcome
    lm = drafter_session.lm
    committed = drafter_session.tokens[: lm.committed]
    with torch.no_grad():
        fresh = drafter(torch.tensor([committed]), use_cache=True).past_key_values
    for mine, theirs in zip(lm.cache.layers, fresh.layers):
        assert torch.allclose(mine.keys[..., : lm.committed, :], theirs.keys, atol=1e-5)


# ---------------------------------------------------------------------- bad requests


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prompt_ids": []}, "at least one token"),
        ({"prompt_ids": [1] * 200}, "maximum context length is 128 tokens"),
        ({"prompt_ids": [1, 999]}, "out of the vocabulary"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a whole number, 1 or more, got 0"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be a whole number, 1 or more, got 2.5"),
        ({"max_new_tokens": True}, "max_new_tokens must be a whole number, 1 or more, got True"),
        ({"max_new_tokens": "5"}, "max_new_tokens must be a whole number, 1 or more, got '5'"),
        ({"temperature": -1}, "temperature must be >= 0"),
        ({"top_p": 1.5}, "top_p must be in"),
        ({"verifier": "nope"}, "unknown verifier"),
        ({"tree": "kary:3"}, "bad tree spec"),
        ({"verifier": "spechub", "tree": "kary:3x2"}, "at most 2 draft"),
        ({"stop": ["\n"]}, "stop strings need a tokenizer"),
        ({"verifier": "mentored", "tree": "chain:2", "verifier_params": {"kl_budget": -1}}, "kl_budget"),
        ({"verifier": "rrsw", "tree": "dynamic:16"}, "verify dynamic trees with topk"),
    ],
)
def test_bad_requests_get_clear_errors(pair, kwargs, message):
    engine = SpeculativeEngine(LocalTarget(pair[0]), LocalDrafter(pair[1]), verifier="rrsw", tree="kary:2x2")
    request = {"prompt_ids": [1, 2], "max_new_tokens": 5, **kwargs}
    with pytest.raises(ValueError, match=message):
        list(engine.generate(**request))


def test_a_target_only_engine_refuses_a_bad_tree_it_would_not_draft(pair):
    """It was ignored: a coordinator with no drafter started with `--tree kary:3`."""
    with pytest.raises(ValueError, match="bad tree spec"):
        SpeculativeEngine(LocalTarget(pair[0]), tree="kary:3")
    engine = SpeculativeEngine(LocalTarget(pair[0]), tree="sequoia:auto")  # nothing to calibrate without a drafter
    with pytest.raises(ValueError, match="bad tree spec"):
        list(engine.generate([1, 2], max_new_tokens=3, tree="kary:3"))
    assert len(engine.run([1, 2], max_new_tokens=3, tree="kary:2x2", seed=1).tokens) == 3


def test_generation_stops_at_the_end_of_the_context(pair):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x4")
    out = engine.run([1] * 120, max_new_tokens=50, temperature=1.0, seed=3)
    assert out.finish_reason == "length" and len(out.tokens) == 8


def test_eos_and_stop_ids_end_generation_without_being_emitted():
    target = tiny_llama(vocab=64, seed=0, eos=None)
    reference = SpeculativeEngine(LocalTarget(target)).run([1, 2, 3], max_new_tokens=24, temperature=0).tokens
    stop_at = reference[10]
    first = reference.index(stop_at)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(noisy_copy(target)), verifier="rrsw", tree="kary:2x3")
    out = engine.run([1, 2, 3], max_new_tokens=24, temperature=0, stop=[stop_at])
    assert out.tokens == reference[:first] and out.finish_reason == "stop"


@pytest.mark.parametrize("name, tree", [("rrsw", "sequoia:24"), ("spechub", "sequoia:16x5"), ("sps", "sequoia:8")])
def test_sequoia_trees_are_exact_at_temperature_zero(pair, greedy_reference, name, tree):
    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=name, tree=tree)
    prompts, references = greedy_reference
    for prompt, reference in zip(prompts, references):
        assert engine.run(prompt, max_new_tokens=24, temperature=0).tokens == reference


class _Alternating(TreePolicy):
    """Draft a chain every other step, nothing in between (as a one-node plan that probes)."""

    def __init__(self):
        self.calls = 0

    def shape_for(self, verifier, temperature):
        return TreeShape.chain(3)

    def next_shape(self, verifier, temperature, sequences=1):
        self.calls += 1
        return TreeShape.chain(3) if self.calls % 2 == 0 else TreeShape.chain(0)


def test_a_drafter_that_skipped_steps_catches_up_with_every_emitted_token(pair, greedy_reference):
    # The drafter is the target itself: at T = 0 a drafter that knows every emitted token
    # drafts exactly the target's greedy continuation, so every drafted chain is accepted whole.
    target = pair[0]
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(target), verifier="greedy", tree=_Alternating())
    prompts, references = greedy_reference
    for prompt, reference in zip(prompts, references):
        out = engine.run(prompt, max_new_tokens=24, temperature=0)
        assert out.tokens == reference
        drafted = [step for step in out.stats.steps if step.drafted]
        assert drafted and all(step.accepted == step.drafted for step in drafted[:-1])


class _OverlapProbe:
    """Wraps a model's forward: counts how many run at once, each lasting a few ms, long
    enough that unserialised threads would overlap."""

    def __init__(self, model):
        self.running = self.most = 0
        self._lock = threading.Lock()
        self._forward = model.forward
        model.forward = self

    def __call__(self, *args, **kwargs):
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.003)
            return self._forward(*args, **kwargs)
        finally:
            with self._lock:
                self.running -= 1


def test_closing_a_session_waits_for_its_step_in_flight():
    target_model = tiny_llama(seed=5)
    drafter_model = noisy_copy(target_model, seed=6)
    target, drafter = LocalTarget(target_model), LocalDrafter(drafter_model)
    spec = SequenceSpec((3, 4, 5), SamplingParams(0.8), 1, "rrsw")
    target_session, drafter_session = target.open(spec), drafter.open(spec)
    draft = drafter_session.draft(TreeShape.kary(2, 2), None)
    probe = _OverlapProbe(target_model)  # each forward now lasts a few ms
    outcome, errors = [], []

    def verify():
        try:
            outcome.append(target_session.verify(draft))
        except Exception as error:  # noqa: BLE001 — what the test looks for
            errors.append(error)

    thread = threading.Thread(target=verify)
    thread.start()
    while not probe.running:  # the forward has started
        time.sleep(0.0005)
    target_session.close()
    thread.join()
    assert errors == [] and len(outcome) == 1 and outcome[0].tokens
    assert target_session.lm is None


def test_trees_named_by_requests_are_planned_once_per_tree_and_kept_within_a_bound(pair):
    from rayspec.engine.engine import MAX_REQUEST_POLICIES

    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="sequoia:16x4")
    own = engine.policy()
    assert engine.policy("sequoia:16x4") is own and engine.policy(" sequoia:016x4") is own
    sequoia = engine.policy("sequoia:32")
    assert engine.policy("sequoia:32x10") is sequoia  # the same tree, however spelled
    assert engine.policy("chain:3") is engine.policy("kary:1x3")
    recent = engine.policy("kary:2x2")
    for length in range(1, MAX_REQUEST_POLICIES + 8):  # requests naming ever new trees
        engine.policy(f"chain:{length}")
        engine.policy("kary:2x2")  # used all along: stays planned
    assert len(engine._policies) == MAX_REQUEST_POLICIES
    assert engine.policy("kary:2x2") is recent and engine.policy() is own
    rebuilt = engine.policy("sequoia:32")  # the least recently used went; naming it again rebuilds it
    assert rebuilt is not sequoia and rebuilt.shape_for("rrsw", 1.0) == sequoia.shape_for("rrsw", 1.0)
    out = engine.run([1, 2, 3], max_new_tokens=8, temperature=0, tree="sequoia:32x10")
    assert len(out.tokens) == 8


def test_an_engine_given_a_source_of_costs_fetches_them_once_when_a_request_first_names_sequoia_auto(pair):
    """How the HTTP coordinator plans from the gRPC coordinator's calibration: not at start-up
    when its own tree needs none, once for concurrent first requests, and then the trees and
    tokens of an engine given those costs outright."""
    from rayspec.engine.calibrate import Costs
    from rayspec.tree.planner import MeasuredTimes

    sizes = (1, 2, 4, 8, 16, 32)
    measured = Costs(MeasuredTimes(sizes, tuple(0.01 + 0.001 * n for n in sizes)), MeasuredTimes((1, 32), (0.002, 0.003)),
                     0.001)
    fetched = []

    def source():
        fetched.append(threading.current_thread().name)
        time.sleep(0.2)  # long enough for the other request to come asking
        return measured

    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x2", costs=source)
    assert engine.measured_costs is None and fetched == []
    kwargs = dict(max_new_tokens=12, temperature=0.8, seed=5, tree="sequoia:auto")
    outputs = [None, None]

    def request(i):
        outputs[i] = engine.run([1, 2, 3], **kwargs).tokens

    threads = [threading.Thread(target=request, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(fetched) == 1 and engine.measured_costs is measured and outputs[0] == outputs[1]
    given = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x2", costs=measured)
    assert given.policy("sequoia:auto").shape_for("rrsw", 0.8) == engine.policy("sequoia:auto").shape_for("rrsw", 0.8)
    assert given.run([1, 2, 3], **kwargs).tokens == outputs[0]
    # Seeded requests run no load trial; one made at 4 sequences is listed, from the requests' policy.
    assert engine.tree_trials() == []
    trial = engine.policy("sequoia:auto").trial("rrsw", 0.8, 4)
    assert trial is not None and engine.tree_trials() == [("rrsw", 0.8, trial.report())]


def test_past_a_shorter_drafters_context_steps_decode_target_only(pair):
    """A drafter of 24 positions for a target of 128: trees stop at the drafter's context
    (its session refuses any tree that reaches past it) and decoding goes on target-only,
    with exactly the target's greedy tokens."""
    target = pair[0]
    drafter = noisy_copy(tiny_llama(vocab=64, seed=0, context=24), noise=0.05)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="kary:2x3")
    target_only = SpeculativeEngine(LocalTarget(target))
    for prompt in ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], list(range(30, 60))):
        out = engine.run(prompt, max_new_tokens=40, temperature=0)
        assert out.tokens == target_only.run(prompt, max_new_tokens=40, temperature=0).tokens
        length, drafted_at = len(prompt), []
        for step in out.stats.steps:
            if step.drafted:
                drafted_at.append(length)
            length += step.emitted
        assert all(at + 1 < 24 for at in drafted_at)  # a drafted step ends within the drafter's context
        assert bool(drafted_at) == (len(prompt) < 23)  # a prompt past it is never drafted for


class _SessionCountingDrafter(LocalDrafter):
    """A drafter counting its sessions open now."""

    def __init__(self, model):
        super().__init__(model)
        self.open_sessions = 0

    def open(self, spec):
        session = super().open(spec)
        close = session.close

        def closing():
            self.open_sessions -= 1
            close()

        session.close = closing
        self.open_sessions += 1
        return session


def test_past_a_shorter_drafters_context_its_session_is_released_at_once(pair):
    """A sequence past the drafter's context never drafts again: its drafter session (and the
    outcomes it would have been told) goes then, not when the request ends."""
    target = pair[0]
    drafter = _SessionCountingDrafter(noisy_copy(tiny_llama(vocab=64, seed=0, context=24), noise=0.05))
    engine = SpeculativeEngine(LocalTarget(target), drafter, verifier="rrsw", tree="kary:2x3")
    prompt = list(range(1, 17))
    length, seen = len(prompt), []
    for chunk in engine.generate(prompt, max_new_tokens=40, temperature=0):
        seen.append((length, drafter.open_sessions))  # during the step that began at `length`
        length += len(chunk.tokens)
    assert length == len(prompt) + 40 and drafter.open_sessions == 0
    assert [open_ for _, open_ in seen] == [int(at + 1 < 24) for at, _ in seen]
    assert seen[0][1] == 1 and seen[-1][1] == 0


def test_a_seeded_request_replays_exactly_after_the_trees_adapted(pair, tmp_path):
    """Adaptive Sequoia trees change with what was served; a request that gives a seed drafts
    the trees planned before serving, so it replays token for token (the SDK retries only
    such requests, on that promise), while unseeded requests draft the adapted trees."""
    import json

    from rayspec.engine.policy import AcceptanceLibrary, SequoiaSpec, SequoiaTrees, vector_file_name

    target = pair[0]
    (tmp_path / vector_file_name("rrsw", 1.0)).write_text(json.dumps(
        {"acceptance": [0.3, 0.3, 0.2], "setting": {"verifier": "rrsw", "temperature": 1.0}}))
    policy = SequoiaTrees(SequoiaSpec(16, 8), AcceptanceLibrary(tmp_path), replan_every=5,
                          min_samples=10, background_checks=False)
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(target), verifier="rrsw", tree=policy)
    request = dict(max_new_tokens=40, temperature=1.0, seed=7)
    first = engine.run([1, 2, 3], **request)
    for i in range(12):  # traffic that adapts (fixed seeds, for a test that runs the same each time):
        # the drafter is the target, so rank 1 is accepted far more often than the vector planned for
        engine.run([5, i + 1], max_new_tokens=30, temperature=1.0, seed=100 + i, replayable=False)
    planned = policy.first_shape("rrsw", 1.0)
    assert policy.history and policy.shape_for("rrsw", 1.0).max_depth > planned.max_depth
    again = engine.run([1, 2, 3], **request)
    assert again.tokens == first.tokens
    assert [s.ranks for s in again.stats.steps] == [s.ranks for s in first.stats.steps]
    drafted = []
    probe = SpeculativeEngine(LocalTarget(target), WatchedDrafter(LocalDrafter(target), lambda _, shape, __: drafted.append(shape)),
                              verifier="rrsw", tree=policy)
    adapted = policy.shape_for("rrsw", 1.0)
    probe.run([1, 2, 3], **request, replayable=False)
    assert drafted[0] == adapted
    drafted.clear()
    probe.run([1, 2, 3], **request)
    assert drafted and all(shape == planned for shape in drafted)


def test_the_engine_plans_each_step_for_the_generations_decoding_with_it(pair):
    """What load-aware trees are given: the generations between their first step and their
    end on this engine, this one included."""

    class Recording(TreePolicy):
        def __init__(self):
            self.loads, self.observed = [], []

        def shape_for(self, verifier, temperature):
            return TreeShape.chain(2)

        def next_shape(self, verifier, temperature, sequences=1):
            self.loads.append(sequences)
            return TreeShape.chain(2)

        def observe(self, verifier, temperature, shape, outcome):
            self.observed.append(len(outcome.tokens))

    target, drafter = pair
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier="rrsw", tree="chain:2")
    policy = Recording()
    first = engine.generate([1, 2, 3], max_new_tokens=40, temperature=0.8, tree=policy, ignore_eos=True)
    second = engine.generate([4, 5], max_new_tokens=40, temperature=0.8, tree=policy, ignore_eos=True)
    next(first)
    assert engine.decoding == 1 and policy.loads == [1]
    next(second)
    next(first)
    assert engine.decoding == 2 and policy.loads == [1, 2, 2] and len(policy.observed) == 3
    second.close()
    next(first)
    assert engine.decoding == 1 and policy.loads[-1] == 1
    first.close()
    assert engine.decoding == 0
    seeded = engine.generate([1, 2, 3], max_new_tokens=4, temperature=0.8, seed=3, tree=policy)
    list(seeded)
    assert policy.loads[-1] == 1 and engine.decoding == 0  # seeded requests draft first_shape


class _Counting:
    """A side that counts its opens, and runs `on_open` at each (a client leaving meanwhile)."""

    def __init__(self, side, on_open=lambda: None):
        self.side, self.on_open, self.opens = side, on_open, 0

    def __getattr__(self, name):  # vocab_size, context_length, eos_token_ids, ...
        return getattr(self.side, name)

    def open(self, spec):
        self.opens += 1
        session = self.side.open(spec)
        self.on_open()
        return session


def test_a_generation_whose_caller_left_during_its_prefill_opens_no_drafter_and_runs_no_step(pair):
    target_model, drafter_model = pair
    cancelled = threading.Event()
    target = _Counting(LocalTarget(target_model), on_open=cancelled.set)
    drafter = _Counting(LocalDrafter(drafter_model))
    engine = SpeculativeEngine(target, drafter, tree="kary:2x2")
    stats = GenerationStats()
    with pytest.raises(GenerationCancelled, match="^its caller left while its prompt was prefilled$"):
        list(engine.generate([1, 2, 3], max_new_tokens=8, cancelled=cancelled, stats=stats))
    assert (target.opens, drafter.opens, len(stats.steps), engine.decoding) == (1, 0, 0, 0)
    # One that leaves between steps ends before the next.
    cancelled.clear()
    target.on_open = lambda: None
    chunks = engine.generate([1, 2, 3], max_new_tokens=40, cancelled=cancelled, stats=(stats := GenerationStats()),
                             ignore_eos=True)
    next(chunks)
    cancelled.set()
    with pytest.raises(GenerationCancelled, match=r"^its caller left after \d+ tokens$"):
        next(chunks)
    assert len(stats.steps) == 1 and engine.decoding == 0
    # One that left before its prefill began (while its prompt was tokenized) opens nothing at all.
    with pytest.raises(GenerationCancelled, match="^its caller left before its prompt was prefilled$"):
        list(engine.generate([1, 2, 3], max_new_tokens=8, cancelled=cancelled))
    assert (target.opens, drafter.opens, engine.decoding) == (2, 1, 0)


def test_no_step_drafts_deeper_than_the_tokens_left_and_the_output_is_unchanged(pair, greedy_reference):
    target_model, drafter_model = pair
    engine = SpeculativeEngine(LocalTarget(target_model), LocalDrafter(drafter_model), tree="kary:2x3")
    prompts, references = greedy_reference
    for n in (1, 2, 3, 7):
        out = engine.run(prompts[0], max_new_tokens=n, temperature=0.0)
        assert out.tokens == references[0][:n]
        produced = 0
        for step in out.stats.steps:  # at most the nodes of kary:2x3 down to the depth the tokens left allow
            assert step.drafted <= TreeShape.kary(2, 3).truncated(n - produced - 1).size - 1, (n, produced, step)
            produced += step.emitted
    assert [s.drafted for s in engine.run(prompts[0], max_new_tokens=1, temperature=0.0).stats.steps] == [0]


class ProposesOutsideTheVocabulary:
    """A drafter of one's own that breaks the contract: its drafts (the root aside) are shifted
    past the vocabulary."""

    def __init__(self, drafter, shift):
        self.drafter, self.shift = drafter, shift
        self.vocab_size, self.context_length = drafter.vocab_size, drafter.context_length

    def open(self, spec):
        session, shift = self.drafter.open(spec), self.shift

        class Session:
            def draft(self, shape, previous):
                draft = session.draft(shape, previous)
                draft.tree.tokens = draft.tree.tokens.clone()
                draft.tree.tokens[1:] += shift
                return draft

            def close(self):
                session.close()

        return Session()


@pytest.mark.parametrize("shift", [10_000, -10_000])
@pytest.mark.parametrize("verifier", ["rrsw", "gumbel", "greedy"])
def test_a_drafter_proposing_ids_outside_the_vocabulary_is_named_not_an_index_error(verifier, shift):
    target = tiny_llama(vocab=64, hidden=32, layers=2, context=128)
    drafter = ProposesOutsideTheVocabulary(LocalDrafter(noisy_copy(target, noise=0.3)), shift)
    engine = SpeculativeEngine(LocalTarget(target), drafter, verifier=verifier, tree="kary:2x2")
    with pytest.raises(RuntimeError, match=r"the drafter proposed token ids outside the target's vocabulary of 64 "
                                           r"tokens: \[-?1?[0-9]{4}"):
        engine.run([1, 2, 3], max_new_tokens=5, temperature=0.0 if verifier == "greedy" else 0.7, seed=1)
