"""Requests made up by hypothesis, valid and not, sent to the HTTP endpoints and to gRPC
Generation: each gets an answer, or a 4xx / INVALID_ARGUMENT whose message says what is wrong —
never a 5xx or another status; a stream ends with [DONE] or an error event that is not an
internal error; and the service serves on afterwards, its sessions released.

Each request is a valid one with a few fields replaced by values near the valid ones (a tree
spec of the wrong size, a verifier parameter of the wrong type) or by any JSON at all; the
runs are derandomized, so a failure repeats.  `RAYSPEC_FUZZ_EXAMPLES` sets how many requests
the mixed tests send (60 by default; a tenth of it per field), and `RAYSPEC_FUZZ_EXPLORE=1`
draws new ones at every run (`--hypothesis-seed` to repeat one)."""

from __future__ import annotations

import json

import grpc
import httpx
import msgpack
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rayspec.rpc.generated import generation_pb2 as pb
from rayspec.rpc.generated import generation_pb2_grpc
from rayspec.verify import available_verifiers
from tests.fuzzing import EXAMPLES, fuzz_settings
from tests.serve.served import MODEL, eventually

FIELD_EXAMPLES = max(EXAMPLES // 10, 1)  # per field, with the field made up
FUZZ = fuzz_settings(EXAMPLES, HealthCheck.filter_too_much)

# --------------------------------------------------------------------------- values

integers = st.one_of(st.integers(-3, 40), st.integers(-2**65, 2**65), st.sampled_from([0, 1, 8191, 8192, 2**31, 2**63]))
# and the floats float32 cannot hold: 1e-300 and 5e-324 are 0 there, 1e300 infinite
floats = st.one_of(st.floats(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, 1.0, -0.0, 1e-300, 5e-324, 1e-46, 1e300, 3.5e38]))
texts = st.one_of(st.text(max_size=12),
                  st.sampled_from(["", " ", "\x00", "\ud7ff", "def", "</s>", "<|im_end|>", "a" * 300]))
scalars = st.one_of(st.none(), st.booleans(), integers, floats, texts)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=8)

token_ids = st.lists(st.integers(-2, 8200), min_size=0, max_size=12)
tree_specs = st.one_of(
    st.builds("chain:{}".format, st.integers(0, 2000)),
    st.builds("kary:{}x{}".format, st.integers(0, 40), st.integers(0, 40)),
    st.builds("dynamic:{}".format, st.integers(0, 3000)),
    st.builds("dynamic:{}x{}x{}".format, st.integers(0, 64), st.integers(0, 64), st.integers(0, 64)),
    st.builds("sequoia:{}".format, st.integers(0, 3000)),
    st.builds("sequoia:{}x{}".format, st.integers(0, 600), st.integers(0, 80)),
    st.sampled_from(["sequoia:auto", "none", "file:/etc/passwd", "kary:", "chain:-1", " chain:2 "]),
    texts,
)
parameter_names = st.sampled_from(["kl_budget", "alphabet_size", "free_tokens", "within_target_support", "k",
                                   "temperature", "x"])
verifier_params = st.dictionaries(parameter_names, scalars, max_size=3)
# what msgpack can hold (gRPC's verifier_params are msgpack): integers within 64 bits
packable_params = st.dictionaries(
    parameter_names, st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), floats, texts), max_size=3)
rayspec_options = st.fixed_dictionaries({}, optional={
    "verifier": st.one_of(st.sampled_from(available_verifiers()), texts),
    "tree": tree_specs,
    "verifier_params": st.one_of(verifier_params, anything),
})
schemas = st.one_of(
    st.just({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
    st.just({"type": "string", "maxLength": 3}),
    st.just({"enum": ["x", "y"]}),
    st.dictionaries(st.sampled_from(["type", "properties", "items", "enum", "minLength", "pattern", "$ref"]),
                    anything, max_size=3),
)
response_formats = st.one_of(
    st.just({"type": "text"}), st.just({"type": "json_object"}),
    st.builds(lambda s: {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}, schemas),
    anything,
)
simple_regex = st.text(alphabet="ab01.*+?|()[]{}^$\\-", max_size=10)
content_parts = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]),
                                                "text": texts}), max_size=3)
messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "function", "robot"]),
     "content": st.one_of(texts, content_parts, st.none(), anything)},
    optional={"name": texts, "tool_call_id": texts, "tool_calls": anything}), min_size=0, max_size=3)
tools = st.lists(st.one_of(
    st.builds(lambda name, params: {"type": "function", "function": {"name": name, "parameters": params}},
              st.sampled_from(["get", "x y", ""]), schemas),
    anything), max_size=2)

# Fields both endpoints take, each with values near the valid ones and, as often, anything at all.
COMMON = {
    "model": st.sampled_from([MODEL, "other"]),
    "max_tokens": integers,
    "temperature": floats,
    "top_p": floats,
    "top_k": integers,
    "min_p": floats,
    "seed": integers,
    "stop": st.one_of(texts, st.lists(texts, max_size=5)),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans(),
                                                          "continuous_usage_stats": st.booleans()}),
    "n": integers,
    "presence_penalty": floats,
    "frequency_penalty": floats,
    "repetition_penalty": floats,
    "logit_bias": st.one_of(st.dictionaries(st.integers(0, 8191).map(str), st.floats(-100, 100), max_size=3),
                            st.dictionaries(st.one_of(st.integers(-5, 9000).map(str), texts), floats, max_size=3)),
    "min_tokens": integers,
    "stop_token_ids": token_ids,
    "allowed_token_ids": token_ids,
    "bad_words": st.one_of(texts, st.lists(texts, max_size=3)),
    "ignore_eos": st.booleans(),
    "truncate_prompt_tokens": integers,
    "prompt_logprobs": integers,
    "include_stop_str_in_output": st.booleans(),
    "skip_special_tokens": st.booleans(),
    "return_tokens_as_token_ids": st.booleans(),
    "prediction": st.one_of(st.builds(lambda t: {"type": "content", "content": t}, texts), anything),
    "response_format": response_formats,
    "guided_json": st.one_of(schemas, texts),
    "guided_regex": simple_regex,
    "guided_choice": st.lists(texts, max_size=3),
    "structured_outputs": st.one_of(st.builds(lambda r: {"regex": r}, simple_regex),
                                    st.builds(lambda c: {"choice": c}, st.lists(texts, max_size=3)), anything),
    "rayspec": st.one_of(rayspec_options, anything),
}
COMPLETIONS = {
    **COMMON,
    "prompt": st.one_of(texts, token_ids, st.lists(texts, max_size=3), st.lists(token_ids, max_size=3), anything),
    "echo": st.booleans(),
    "logprobs": integers,
    "best_of": integers,
    "suffix": texts,
}
CHAT = {
    **COMMON,
    "messages": st.one_of(messages, anything),
    "max_completion_tokens": integers,
    "logprobs": st.booleans(),
    "top_logprobs": integers,
    "tools": st.one_of(tools, anything),
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]),
                             st.builds(lambda n: {"type": "function", "function": {"name": n}}, texts), anything),
    "add_generation_prompt": st.booleans(),
    "continue_final_message": st.booleans(),
    "chat_template_kwargs": anything,
}
RESPONSES = {
    "model": COMMON["model"], "max_output_tokens": integers, "temperature": floats, "top_p": floats,
    "seed": integers, "stream": st.booleans(), "rayspec": COMMON["rayspec"],
    "input": st.one_of(texts, messages, anything),
    "instructions": texts,
    "text": st.one_of(st.builds(lambda f: {"format": f}, response_formats), anything),
    "tools": st.one_of(tools, anything),
}

BASES = {
    "/v1/completions": ({"prompt": "def add(a, b):", "max_tokens": 4}, COMPLETIONS),
    "/v1/chat/completions": ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, CHAT),
    "/v1/responses": ({"input": "hi", "max_output_tokens": 4}, RESPONSES),
}


def _fill(draw, body: dict, fields: dict, focus: str | None, others: list[int]) -> dict:
    """`body` with the `focus` field (if any) and `others` more fields, drawn from `fields`,
    replaced by made-up values: near the valid ones three times in four, else any JSON."""
    count = draw(st.sampled_from(others))
    names = [focus] if focus else []
    names += draw(st.lists(st.sampled_from(sorted(set(fields) - set(names))), min_size=count, max_size=count,
                           unique=True))
    for name in names:
        body[name] = draw(anything if draw(st.integers(0, 3)) == 0 else fields[name])
    return body


@st.composite
def bodies(draw, path: str, focus: str | None = None):
    """A valid body of `path` with the field `focus` made up, sometimes a few more too; without
    a focus, mostly one field or two, sometimes an unknown field, and (rarely) not a JSON
    object at all."""
    base, fields = BASES[path]
    if focus is None and draw(st.integers(0, 19)) == 0:
        return draw(st.one_of(anything, st.binary(max_size=20)))
    body = _fill(draw, dict(base), fields, focus, [0, 0, 1, 2] if focus else [0, 1, 1, 1, 1, 2, 2, 3, 4])
    if focus is None and draw(st.integers(0, 9)) == 0:
        body[draw(st.text(min_size=1, max_size=6))] = draw(anything)
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if type(body.get(name)) is int and body[name] > 8:
            body[name] = 8  # long completions only slow the run
    return body


def _send(http: httpx.Client, path: str, body) -> httpx.Response:
    if isinstance(body, bytes):
        return http.post(path, content=body, headers={"content-type": "application/json"})
    return http.post(path, content=json.dumps(body, allow_nan=True), headers={"content-type": "application/json"})


def _check(response: httpx.Response, path: str, body) -> None:
    where = f"{path} {body!r:.600}"
    event(f"HTTP {response.status_code}")
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:600]}"
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"], str) and error["message"], where
        return
    assert response.status_code == 200, where
    if response.headers["content-type"].startswith("text/event-stream"):
        datas = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert datas, where
        for data in datas:
            if data != "[DONE]":
                parsed = json.loads(data)
                assert "error" not in parsed or parsed["error"].get("message"), where
                assert not (isinstance(parsed.get("error"), dict)
                            and parsed["error"].get("type") == "internal_error"), f"{where}: {data}"
    else:
        answer = response.json()
        assert ("choices" in answer) or ("output" in answer), where


@pytest.mark.parametrize("path, field", [(path, field) for path, (_, fields) in BASES.items() for field in fields])
def test_a_made_up_field_gets_an_answer_or_a_4xx_never_a_5xx(server, path, field):
    """Each field of each endpoint in turn: a bug that only one field's values reach is not
    left to the luck of a random walk over forty fields."""

    @settings(FUZZ, max_examples=FIELD_EXAMPLES)
    @given(body=bodies(path, field))
    def check(body):
        with httpx.Client(base_url=server["url"], timeout=120) as http:
            _check(_send(http, path, body), path, body)

    check()


@FUZZ
@given(data=st.data(), path=st.sampled_from(sorted(BASES)))
def test_made_up_bodies_get_an_answer_or_a_4xx_never_a_5xx(server, data, path):
    body = data.draw(bodies(path))
    with httpx.Client(base_url=server["url"], timeout=120) as http:
        _check(_send(http, path, body), path, body)


# --------------------------------------------------------------------------- gRPC Generation

int32s = st.one_of(st.integers(-3, 40), st.integers(-2**31, 2**31 - 1))
int64s = st.one_of(st.integers(-3, 40), st.integers(-2**63, 2**63 - 1))
float32s = st.one_of(st.floats(-3.0, 3.0, width=32), st.floats(width=32, allow_nan=True, allow_infinity=True),
                     st.sampled_from([1e-45, 1.17549435e-38, 3.4028234e38]))
ids32 = st.lists(st.one_of(st.integers(-2, 8200), int32s), max_size=12)
structured = st.one_of(
    st.builds(lambda s: pb.StructuredOutput(json_schema=s), st.one_of(schemas.map(json.dumps), texts)),
    st.builds(lambda b: pb.StructuredOutput(json_object=b), st.booleans()),
    st.builds(lambda r: pb.StructuredOutput(regex=r), simple_regex),
    st.builds(lambda c: pb.StructuredOutput(choice=pb.Choices(options=c)), st.lists(texts, max_size=3)),
)
GENERATE = {
    "prompt": texts, "prompt_ids": ids32, "max_tokens": int32s, "temperature": float32s, "top_p": float32s,
    "top_k": int32s, "seed": int64s, "stop": st.lists(texts, max_size=3),
    "verifier": st.one_of(st.sampled_from(available_verifiers()), texts), "tree": tree_specs,
    "verifier_params": st.one_of(st.builds(msgpack.packb, packable_params), st.binary(max_size=12)),
    "request_id": texts, "logprobs": int32s, "prompt_logprobs": int32s, "presence_penalty": float32s,
    "frequency_penalty": float32s, "repetition_penalty": float32s,
    "logit_bias": st.dictionaries(int32s, float32s, max_size=3), "min_p": float32s, "min_tokens": int32s,
    "stop_token_ids": ids32, "ignore_eos": st.booleans(), "include_stop_str_in_output": st.booleans(),
    "skip_special_tokens": st.booleans(), "allowed_token_ids": ids32, "bad_words": st.lists(texts, max_size=3),
    "add_special_tokens": st.booleans(), "truncate_prompt_tokens": int32s, "prediction": texts,
    "prediction_ids": ids32, "structured_output": structured,
}


@st.composite
def generate_requests(draw, focus: str | None = None):
    """(a GenerateRequest, whether to stream it): a valid request with the field `focus` made
    up, sometimes a few more too; without a focus, one field to four."""
    message = pb.GenerateRequest(prompt="def add(a, b):", max_tokens=4)
    count = draw(st.sampled_from([0, 0, 1, 2] if focus else [1, 1, 2, 3, 4]))
    names = [focus] if focus else []
    names += draw(st.lists(st.sampled_from(sorted(set(GENERATE) - set(names))), min_size=count, max_size=count,
                           unique=True))
    for name in names:
        value = draw(GENERATE[name])
        if name == "max_tokens":
            value = min(value, 8)  # long completions only slow the run
        if isinstance(value, dict):
            getattr(message, name).update(value)
        elif isinstance(value, list):
            getattr(message, name).extend(value)
        elif isinstance(value, pb.StructuredOutput):
            message.structured_output.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message, draw(st.booleans())


@pytest.fixture(scope="module")
def generation(server):
    service = server["service"]
    grpc_server, port = service.serve_generation_api("127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield generation_pb2_grpc.GenerationStub(channel)
    channel.close()
    grpc_server.stop(None)


def _generate(generation, message: pb.GenerateRequest, streamed: bool) -> None:
    """Send the request; it must be answered, or refused INVALID_ARGUMENT with a message."""
    try:
        if streamed:
            assert list(generation.GenerateStream(message, timeout=120))
        else:
            generation.Generate(message, timeout=120)
        event("OK")
    except grpc.RpcError as error:
        event(str(error.code()))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{message}: {error.code()} {error.details()}"
        assert error.details(), message


@pytest.mark.parametrize("field", sorted(GENERATE))
def test_a_made_up_generate_field_gets_an_answer_or_invalid_argument(generation, field):

    @settings(FUZZ, max_examples=FIELD_EXAMPLES)
    @given(request=generate_requests(field))
    def check(request):
        _generate(generation, *request)

    check()


@FUZZ
@given(request=generate_requests())
def test_made_up_generate_requests_get_an_answer_or_invalid_argument(generation, request):
    _generate(generation, *request)


def test_the_service_serves_on_after_the_made_up_requests(server):
    with httpx.Client(base_url=server["url"], timeout=120) as http:
        reply = http.post("/v1/completions", json={"prompt": "def add(a, b):", "max_tokens": 4, "seed": 1})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 4
    for watched in (server["target"], server["drafter"]):
        eventually(lambda: watched.open_sessions == 0, what="sessions released after the made-up bodies")
