"""Tensors and probability rows on the wire: exact round trips, and clear refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rayspec.engine.interfaces import Draft, Outcome, SequenceSpec, TokenLogprobs
from rayspec.rpc import codec
from rayspec.rpc.generated import tensor_pb2, worker_pb2
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify.processing import SamplingParams, TokenHistory, half_precision, logits_to_probs
from rayspec.verify.tree_walk import as_law


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64])
def test_tensor_round_trip_is_bit_exact(dtype):
    tensor = (torch.randn(3, 5) * 100).to(dtype)
    back = codec.decode_tensor(codec.encode_tensor(tensor))
    assert back.dtype == dtype and back.shape == tensor.shape
    assert torch.equal(back.view(torch.int16) if dtype == torch.bfloat16 else back,
                       tensor.view(torch.int16) if dtype == torch.bfloat16 else tensor)


def test_dense_and_sparse_rows_round_trip_exactly():
    dense = torch.softmax(torch.randn(4, 100), -1)
    message = codec.encode_rows(dense)
    assert message.WhichOneof("rows") == "dense"
    assert torch.equal(codec.decode_rows(message, 4, 100), dense)
    truncated = dense.clone()
    truncated[:, 10:] = 0
    truncated /= truncated.sum(-1, keepdim=True)
    message = codec.encode_rows(truncated)
    assert message.WhichOneof("rows") == "sparse"
    assert torch.equal(codec.decode_rows(message, 4, 100), truncated)
    assert message.ByteSize() < codec.encode_tensor(truncated).ByteSize() / 3


@pytest.mark.parametrize("temperature", [0.05, 0.6, 1.0, 3.0])
def test_half_precision_rows_cross_as_half_the_bytes_and_decode_to_the_same_law_bit_for_bit(temperature):
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(6, 8192, generator=generator) * 4
    law, divisors = half_precision(torch.softmax(logits / temperature, -1))
    truncated, truncated_divisors = half_precision(torch.where(logits > 6, law, torch.zeros_like(law)))
    for rows, row_divisors in ((law, divisors), (truncated, truncated_divisors)):
        message = codec.encode_rows(rows, divisors=row_divisors)
        back = codec.decode_rows(tensor_pb2.ProbabilityRows.FromString(message.SerializeToString()), 6, 8192)
        assert torch.equal(back, rows)
    half, full = codec.encode_rows(law, divisors=divisors), codec.encode_tensor(law)  # full: dense float32
    # Sharp laws round most of their tail to 0 and go sparse: fewer bytes still.
    assert half.ByteSize() < 0.51 * full.ByteSize()
    if temperature >= 3:
        assert half.WhichOneof("rows") == "dense" and half.dense.dtype == "float16"
    assert codec.encode_rows(truncated, divisors=truncated_divisors).WhichOneof("rows") == "sparse"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sparse", [False, True])
def test_half_precision_rows_without_divisors_are_laws_over_their_own_mass(dtype, sparse):
    """A law rounded to bfloat16 sums to 1 within its rounding only: (0.99, 0.006, 0.004) is
    (0.98828, 0.00601, 0.00400), of mass 0.99829, and was refused as no law; rows that passed
    reached the verifiers as float32 rows of another mass than 1, whose walk then emitted another
    law.  They decode as the walk reads half-precision rows in process (`as_law`)."""
    rows = torch.tensor([[0.99, 0.006, 0.004], [0.5, 0.25, 0.25]]).to(dtype)
    if sparse:
        rows = torch.cat([rows, torch.zeros(2, 30, dtype=dtype)], dim=1)
    message = codec.encode_rows(rows)
    assert message.WhichOneof("rows") == ("sparse" if sparse else "dense")
    back = codec.decode_rows(tensor_pb2.ProbabilityRows.FromString(message.SerializeToString()), 2, rows.shape[1])
    assert back.dtype == torch.float32
    assert torch.equal(back, as_law(rows))
    with pytest.raises(codec.CodecError, match="each row must sum to 1"):  # rows of another mass are still refused
        codec.decode_rows(codec.encode_rows((rows.float() * 0.98).to(dtype)), 2, rows.shape[1])


def test_bad_divisors_are_refused():
    law, divisors = half_precision(torch.softmax(torch.randn(2, 8), -1))
    for bad in (-divisors, divisors[:1], divisors * float("nan")):
        message = codec.encode_rows(law, divisors=divisors)
        message.divisors.CopyFrom(codec.encode_tensor(bad))
        with pytest.raises(codec.CodecError, match="divisors must be 2 positive finite values"):
            codec.decode_rows(message, 2, 8)


@pytest.mark.parametrize(
    "message, match",
    [
        (tensor_pb2.Tensor(dtype="float64", shape=[2], data=b"\0" * 16), "unknown dtype"),
        (tensor_pb2.Tensor(dtype="float32", shape=[3], data=b"\0" * 8), "do not hold"),
        (tensor_pb2.Tensor(dtype="float32", shape=[-1], data=b""), "negative dimension"),
        (tensor_pb2.Tensor(dtype="float32", shape=[2**62, 2**62, 0], data=b""), "beyond 8 dimensions of at most"),
        (tensor_pb2.Tensor(dtype="float32", shape=[0] * 9, data=b""), "beyond 8 dimensions"),
        (tensor_pb2.Tensor(dtype="float32", shape=[0, 2**31 - 1, 2**31 - 1, 3], data=b""), "more than 2\\^63 - 1"),
    ],
)
def test_malformed_tensors_are_refused_with_a_message(message, match):
    with pytest.raises(codec.CodecError, match=match):
        codec.decode_tensor(message)


def test_rows_of_the_wrong_dtype_shape_or_content_are_refused():
    rows = torch.softmax(torch.randn(2, 8), -1)
    with pytest.raises(codec.CodecError, match="not allowed here"):
        codec.decode_rows(tensor_pb2.ProbabilityRows(dense=codec.encode_tensor(rows.to(torch.int32))), 2, 8)
    with pytest.raises(codec.CodecError, match="shape"):
        codec.decode_rows(codec.encode_rows(rows), 3, 8)
    for bad_values in (-rows, rows * float("nan"), rows + float("inf"), rows + 1):
        with pytest.raises(codec.CodecError, match=r"must lie in \[0, 1\]"):
            codec.decode_rows(codec.encode_rows(bad_values), 2, 8)
    for mass in (0.5, 0.99, 1.01):  # a row that is no law, which a verifier would turn into another law
        with pytest.raises(codec.CodecError, match=rf"each row must sum to 1 \(row 1 sums to {mass:g}\)"):
            codec.decode_rows(codec.encode_rows(rows * torch.tensor([[1.0], [mass]])), 2, 8)
    bad = codec.encode_rows(torch.tensor([[0.0, 0, 0, 1, 0, 0, 0, 0]] * 2))
    bad.sparse.indices.CopyFrom(codec.encode_tensor(torch.tensor([3, 99], dtype=torch.int32)))
    with pytest.raises(codec.CodecError, match="column indices outside"):
        codec.decode_rows(bad, 2, 8)


def test_verifier_params_must_be_a_msgpack_map():
    with pytest.raises(codec.CodecError, match="msgpack map"):
        codec.decode_msgpack_map(b"\xc1", "verifier_params")
    import msgpack

    with pytest.raises(codec.CodecError, match="expected a msgpack map"):
        codec.decode_msgpack_map(msgpack.packb([1, 2]), "verifier_params")
    assert codec.decode_msgpack_map(msgpack.packb({"kl_budget": 0.1}), "x") == {"kl_budget": 0.1}


def test_the_batch_sizes_a_step_reports_cross():
    from rayspec.rpc.remote import ReceivedDraft

    assert codec.decode_outcome(codec.encode_outcome(Outcome([4, 7], [1], [1], batch_size=6)), 50).batch_size == 6
    assert codec.decode_outcome(codec.encode_outcome(Outcome([4], [], [0])), 50).batch_size == 0  # not said
    tree = DraftTree(TreeShape.chain(1), torch.tensor([3, 4]))
    received = ReceivedDraft(codec.encode_draft(Draft(tree, None, batch_size=2.5)), 50, wire_bytes=0)
    assert received.batch_size == 2.5


def test_an_outcome_with_log_probabilities_round_trips_exactly():
    logits = torch.randn(3, 50)
    logprobs = TokenLogprobs.of(logits, [4, 7, 49], top=5)
    outcome = Outcome([4, 7, 49], [1, 3], [1, 2], logprobs=logprobs)
    decoded = codec.decode_outcome(codec.encode_outcome(outcome), vocab_size=50)
    assert decoded.logprobs == logprobs and decoded.logprobs.ranks == logprobs.ranks  # float32 values, as computed
    assert codec.decode_outcome(codec.encode_outcome(Outcome([4], [], [0])), 50).logprobs is None
    older = codec.encode_outcome(outcome)
    del older.logprobs.ranks[:]  # a worker from before ranks
    assert codec.decode_outcome(older, 50).logprobs == dataclasses.replace(logprobs, ranks=None)
    spec = SequenceSpec((1, 2), SamplingParams(), 3, "rrsw", logprobs=0)
    assert codec.decode_spec(codec.encode_spec(spec)).logprobs == 0
    assert codec.decode_spec(codec.encode_spec(dataclasses.replace(spec, logprobs=None))).logprobs is None
    assert codec.decode_spec(codec.encode_spec(spec)).prompt_logprobs is None
    assert codec.decode_spec(codec.encode_spec(dataclasses.replace(spec, prompt_logprobs=7))).prompt_logprobs == 7
    assert codec.decode_spec(codec.encode_spec(spec)).completion_ids == ()
    assert codec.decode_spec(codec.encode_spec(spec.resumed([4, 0, 9]))).completion_ids == (4, 0, 9)
    with pytest.raises(RuntimeError, match="the target worker at w:1 predates resuming a sequence"):
        codec.check_worker_features(spec.resumed([4]), frozenset({"penalties"}), "target worker at w:1")


def test_penalties_and_a_bias_round_trip_and_bad_ones_are_refused():
    # values float32 holds exactly: the wire carries float32, as for the temperature
    params = SamplingParams(0.75, 0.875, 5, presence_penalty=0.5, frequency_penalty=-1.25, repetition_penalty=1.5,
                            logit_bias={9: -100.0, 2: 0.5})
    spec = SequenceSpec((1, 2), params, 3, "rrsw")
    assert codec.decode_spec(codec.encode_spec(spec)).params == params
    plain = codec.encode_spec(dataclasses.replace(spec, params=SamplingParams()))
    assert not plain.params.HasField("repetition_penalty") and codec.decode_spec(plain).params == SamplingParams()
    for field, value, match in [("presence_penalty", 3.0, "presence_penalty must be in"),
                                ("repetition_penalty", -1.0, "repetition_penalty must be > 0")]:
        message = codec.encode_spec(spec)
        setattr(message.params, field, value)
        with pytest.raises(ValueError, match=match):
            codec.decode_spec(message)
    message = codec.encode_spec(spec)
    message.params.logit_bias[4] = 250.0
    with pytest.raises(ValueError, match="the bias of token 4 must be in"):
        codec.decode_spec(message)


@pytest.mark.parametrize("params", [SamplingParams(1e39), SamplingParams(0.7, 1e-50), SamplingParams(1e-50),
                                    SamplingParams(0.7, repetition_penalty=1e-50),
                                    SamplingParams(0.7, repetition_penalty=1e39)])
def test_values_past_float32s_range_cross_as_the_law_they_stand_for(params):
    """The wire's float fields are float32: 1e-50 would arrive as 0 and 1e39 as inf, which a
    worker refuses, though in-process they are valid.  They cross clamped to float32's
    finite normal numbers, where `logits_to_probs` clamps them too: the same law."""
    decoded = codec.decode_spec(codec.encode_spec(SequenceSpec((1, 2), params, 3, "rrsw"))).params
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 4
    history = TokenHistory([1, 2, 5]).rows([()] * 4)  # the penalty's tokens
    assert torch.equal(logits_to_probs(logits, decoded, history=history), logits_to_probs(logits, params, history=history))


def test_min_p_min_tokens_and_stop_ids_round_trip_and_bad_ones_are_refused():
    # min_p float32 holds exactly; the stop ids come back as SamplingParams keeps them (sorted, distinct)
    params = SamplingParams(0.75, 0.875, 5, min_p=0.125, min_tokens=7, stop_token_ids=(9, 2, 0, 9))
    assert params.stop_token_ids == (0, 2, 9)
    message = codec.encode_params(params)
    assert (message.min_p, message.min_tokens, list(message.stop_token_ids)) == (0.125, 7, [0, 2, 9])
    back = codec.decode_params(worker_pb2.SamplingParams.FromString(message.SerializeToString()))
    assert back == params and (back.min_p, back.min_tokens, back.stop_token_ids) == (0.125, 7, (0, 2, 9))
    spec = SequenceSpec((1, 2), params, 3, "rrsw")
    assert codec.decode_spec(codec.encode_spec(spec)).params == params
    plain = codec.encode_params(SamplingParams())
    assert (plain.min_p, plain.min_tokens, list(plain.stop_token_ids)) == (0.0, 0, [])
    unset = codec.decode_params(plain)
    assert unset == SamplingParams() and (unset.min_p, unset.min_tokens, unset.stop_token_ids) == (0.0, 0, ())
    for change, match in [(lambda m: setattr(m, "min_p", 1.5), r"min_p must be in \[0, 1\] \(0 disables it\), got 1.5"),
                          (lambda m: setattr(m, "min_p", -0.25), r"min_p must be in \[0, 1\]"),
                          (lambda m: setattr(m, "min_tokens", -2), r"min_tokens must be in \[0, 2\^31\), got -2"),
                          (lambda m: m.stop_token_ids.append(-3), "stop_token_ids")]:
        message = codec.encode_params(params)
        change(message)
        with pytest.raises(ValueError, match=match):
            codec.decode_params(message)
    with pytest.raises(ValueError, match="stop_token_ids names token 8192, outside the vocabulary of 8192 tokens"):
        SamplingParams(min_tokens=1, stop_token_ids=(3, 8192)).check_vocabulary(8192)


def test_a_spec_without_its_sampling_parameters_is_refused_as_such():
    """An Open whose spec (or the spec's params) is missing was refused as 'top_p must be in
    (0, 1], got 0.0': proto3's zeros read as parameters the caller never gave."""
    spec = codec.encode_spec(SequenceSpec((1, 2), SamplingParams(), 3, "rrsw"))
    assert codec.decode_spec(spec).params == SamplingParams()
    for message in (worker_pb2.OpenRequest(session_id="s").spec, worker_pb2.SequenceSpec(prompt_ids=[1, 2])):
        with pytest.raises(codec.CodecError, match=r"^the sequence's spec has no sampling parameters \(spec.params\)"):
            codec.decode_spec(message)


def test_allowed_token_ids_round_trip_and_an_older_target_is_refused_them():
    params = SamplingParams(0.5, allowed_token_ids=(40, 3, 3, 17))
    message = codec.encode_params(params)
    assert list(message.allowed_token_ids) == [3, 17, 40]
    back = codec.decode_params(worker_pb2.SamplingParams.FromString(message.SerializeToString()))
    assert back == params and back.allowed_token_ids == (3, 17, 40)
    assert codec.decode_params(codec.encode_params(SamplingParams())).allowed_token_ids == ()
    message.allowed_token_ids.append(-1)
    with pytest.raises(ValueError, match="allowed_token_ids: token ids are >= 0, got -1"):
        codec.decode_params(message)
    spec = SequenceSpec((1, 2), params, 3, "rrsw")
    before = frozenset({"penalties", "min_p", "min_tokens"})  # the release before allowed_token_ids
    with pytest.raises(RuntimeError, match=r"^the target worker at w:1 predates allowed_token_ids, and would ignore "
                                           r"them: upgrade it$"):
        codec.check_worker_features(spec, before, "target worker at w:1")
    codec.check_worker_features(SequenceSpec((1, 2), SamplingParams(0.5), 3, "rrsw"), before, "target worker at w:1")
    codec.check_worker_features(spec, frozenset(codec.WORKER_FEATURES), "target worker at w:1")


def test_bad_words_round_trip_and_an_older_target_is_refused_them():
    params = SamplingParams(0.5, bad_words_ids=[(7, 3), (9,), (7, 3), (1, 2, 3)])
    message = codec.encode_params(params)
    assert [list(word.ids) for word in message.bad_words] == [[1, 2, 3], [7, 3], [9]]
    back = codec.decode_params(worker_pb2.SamplingParams.FromString(message.SerializeToString()))
    assert back == params and back.bad_words_ids == ((1, 2, 3), (7, 3), (9,))
    assert codec.decode_params(codec.encode_params(SamplingParams())).bad_words_ids == ()
    message.bad_words.add()
    with pytest.raises(ValueError, match="bad_words_ids: a bad word has no tokens"):
        codec.decode_params(message)
    spec = SequenceSpec((1, 2), params, 3, "rrsw")
    before = frozenset({"penalties", "min_p", "min_tokens", "allowed_token_ids"})  # the release before bad words
    with pytest.raises(RuntimeError, match=r"^the target worker at w:1 predates bad_words, and would ignore them: "
                                           r"upgrade it$"):
        codec.check_worker_features(spec, before, "target worker at w:1")
    codec.check_worker_features(SequenceSpec((1, 2), SamplingParams(0.5), 3, "rrsw"), before, "target worker at w:1")
    codec.check_worker_features(spec, frozenset(codec.WORKER_FEATURES), "target worker at w:1")


def test_a_worker_without_min_p_or_min_tokens_is_refused_only_when_they_matter():
    old = frozenset({"penalties"})  # a worker of the release before min_p and min_tokens

    def check(features, **params):
        codec.check_worker_features(SequenceSpec((1, 2), SamplingParams(**params), 3, "rrsw"), features, "target worker at w:1")

    with pytest.raises(RuntimeError, match=r"^the target worker at w:1 predates min_p, and would ignore it: upgrade it$"):
        check(old, min_p=0.05)
    with pytest.raises(RuntimeError,
                       match=r"^the target worker at w:1 predates min_tokens, and would ignore it: upgrade it$"):
        check(old, min_tokens=3, stop_token_ids=(0, 7))
    with pytest.raises(RuntimeError, match="predates min_tokens"):
        check(frozenset({"penalties", "min_p"}), min_p=0.05, min_tokens=3, stop_token_ids=(7,))
    with pytest.raises(RuntimeError, match="predates penalties and logit_bias, and would ignore them"):
        check(frozenset({"min_p", "min_tokens"}), presence_penalty=0.5, min_tokens=3, stop_token_ids=(7,))
    # min_tokens with nothing to ban (no EOS, no stop ids) and stop ids without min_tokens change no law
    assert not SamplingParams(min_tokens=3).bans_stops and not SamplingParams(stop_token_ids=(7,)).bans_stops
    assert SamplingParams(min_tokens=3, stop_token_ids=(7,)).bans_stops
    check(old, min_tokens=3)
    check(old, stop_token_ids=(7,))
    check(frozenset(), min_tokens=3, temperature=0.5, top_k=4)
    check(frozenset(codec.WORKER_FEATURES), min_p=0.05, min_tokens=3, stop_token_ids=(7,), presence_penalty=0.5)
    assert {"penalties", "min_p", "min_tokens"} <= set(codec.WORKER_FEATURES)


@pytest.mark.parametrize("change, match", [
    (lambda m: m.chosen.append(-1.0), "log-probabilities of 2 tokens need 2 chosen values"),
    (lambda m: m.top_ids.pop(), "2 x 2 alternatives"),
    (lambda m: m.top_ids.__setitem__(0, 50), "outside the vocabulary"),
    (lambda m: m.top_values.__setitem__(1, 0.5), "must be <= 0"),
    (lambda m: m.chosen.__setitem__(0, float("nan")), "must be <= 0"),
    (lambda m: m.ranks.pop(), "need no ranks or 2 of them in \\[1, 50\\]"),
    (lambda m: m.ranks.__setitem__(0, 0), "need no ranks or 2 of them"),
    (lambda m: m.ranks.__setitem__(1, 51), "need no ranks or 2 of them"),
])
def test_malformed_log_probabilities_are_refused(change, match):
    message = codec.encode_outcome(Outcome([4, 7], [1], [1], logprobs=TokenLogprobs.of(torch.randn(2, 50), [4, 7], 2)))
    change(message.logprobs)
    with pytest.raises(codec.CodecError, match=match):
        codec.decode_outcome(message, vocab_size=50)


def test_a_predicted_chain_crosses_with_its_tree_and_a_malformed_one_is_refused():
    tree = DraftTree(TreeShape((-1, 0, 0, 1, 2, 3), predicted=3), torch.tensor([5, 6, 7, 8, 9, 10]))
    decoded = codec.decode_tree(codec.encode_tree(tree), vocab_size=16)
    assert decoded.shape == tree.shape and decoded.shape.predicted_chain == (1, 3, 5)
    assert codec.decode_tree(codec.encode_tree(DraftTree(TreeShape.chain(2), torch.tensor([1, 2, 3]))), 16).shape.predicted == 0
    message = worker_pb2.Tree(parents=[-1, 0, 0, 1, 1], tokens=[1, 2, 3, 4, 5], predicted=1)
    with pytest.raises(codec.CodecError, match="bad tree: the predicted chain of 1 nodes ends at node 1, which has children"):
        codec.decode_tree(message, vocab_size=16)


def test_a_structured_outputs_regex_crosses_and_an_older_target_is_refused_it():
    params = SamplingParams(0.5, regex=r'\{"a": [0-9]+\}')
    back = codec.decode_params(worker_pb2.SamplingParams.FromString(codec.encode_params(params).SerializeToString()))
    assert back == params and back.regex == r'\{"a": [0-9]+\}' and back.uses_history
    assert codec.decode_params(codec.encode_params(SamplingParams())).regex == ""
    spec = SequenceSpec((1, 2), params, 3, "rrsw")
    before = frozenset(set(codec.WORKER_FEATURES) - {"structured_output"})  # the release before it
    with pytest.raises(RuntimeError, match=r"^the target worker at w:1 predates structured output, and would ignore "
                                           r"it: upgrade it$"):
        codec.check_worker_features(spec, before, "target worker at w:1")
    codec.check_worker_features(spec, frozenset(codec.WORKER_FEATURES), "target worker at w:1")


@pytest.mark.parametrize("draft_top_k", [0, 16, 2048])
def test_the_planner_prices_q_rows_at_the_bytes_the_codec_writes(draft_top_k):
    from rayspec.tree.planner import q_row_bytes
    from rayspec.verify.processing import truncated_law

    vocab, rows = 8192, 12
    laws = torch.softmax(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3, -1)
    q, divisors = half_precision(truncated_law(laws, draft_top_k))
    written = codec.encode_rows(q, divisors=divisors).ByteSize()
    predicted = rows * q_row_bytes(vocab, draft_top_k)
    # The message's own framing (field tags, lengths, dtype names) is all the planner leaves out.
    assert predicted <= written <= predicted * 1.01 + 128
