"""The request field (`param`) of each refusal whose message does not open with the field's
name: the engine's errors carry their field (`RequestFieldError`), so a reworded message keeps
it.  Over the HTTP app, as `test_http.py`'s refusals."""

from __future__ import annotations

import json
import pickle

import pytest

from rayspec.engine.interfaces import RequestFieldError
from rayspec.engine.policy import PlanTooBig
from rayspec.serve.errors import error_body
from rayspec.serve.service import ChatRenderError
from rayspec.serve.tools import ToolError

PREDICTION = {"type": "content", "content": "x"}
HI = [{"role": "user", "content": "hi"}]

# (path, body, the message's opening, param): one per kind of refusal, each endpoint that reaches it
REFUSALS = [
    # a prediction's tree that is no chain: the tree is what the client changes
    ("/v1/completions", {"prompt": "x", "prediction": PREDICTION, "rayspec": {"tree": "kary:2x2"}},
     "with a prediction the tree is a chain of predicted tokens", "rayspec.tree"),
    ("/v1/completions", {"prompt": ["x", "y"], "prediction": PREDICTION, "rayspec": {"tree": "chain:0"}},
     "with a prediction the tree is a chain of predicted tokens", "rayspec.tree"),
    ("/v1/chat/completions", {"messages": HI, "prediction": PREDICTION, "rayspec": {"tree": "dynamic:8"}},
     "with a prediction the tree is a chain of predicted tokens", "rayspec.tree"),
    # the verifier's name
    ("/v1/completions", {"prompt": "x", "rayspec": {"verifier": "nope"}}, "unknown verifier 'nope'",
     "rayspec.verifier"),
    ("/v1/completions", {"prompt": ["x", "y"], "rayspec": {"verifier": "nope"}}, "unknown verifier 'nope'",
     "rayspec.verifier"),
    ("/v1/completions", {"prompt": "x", "rayspec": {"verifier": "nope", "tree": "chain:2"}},
     "unknown verifier 'nope'", "rayspec.verifier"),
    ("/v1/chat/completions", {"messages": HI, "rayspec": {"verifier": "nope"}}, "unknown verifier 'nope'",
     "rayspec.verifier"),
    ("/v1/responses", {"input": "hi", "rayspec": {"verifier": "nope"}}, "unknown verifier 'nope'",
     "rayspec.verifier"),
    # the verifier's parameters: unknown, mistyped
    ("/v1/completions", {"prompt": "x", "rayspec": {"verifier_params": {"zz": 1}}},
     "verifier 'rrsw' takes no parameter(s) zz", "rayspec.verifier_params"),
    ("/v1/completions", {"prompt": ["x", "y"], "rayspec": {"verifier_params": {"zz": 1}}},
     "verifier 'rrsw' takes no parameter(s) zz", "rayspec.verifier_params"),
    ("/v1/completions", {"prompt": "x", "rayspec": {"verifier": "mentored", "tree": "chain:2",
                                                     "verifier_params": {"kl_budget": "x"}}},
     "verifier 'mentored': kl_budget must be float", "rayspec.verifier_params"),
    # a verifier's own refusal of a parameter's value: param was null while read from the message
    ("/v1/completions", {"prompt": "x", "rayspec": {"verifier": "mentored", "tree": "chain:2",
                                                     "verifier_params": {"kl_budget": -1.0}}},
     "mentored: kl_budget must be a non-negative number of nats", "rayspec.verifier_params"),
    ("/v1/chat/completions", {"messages": HI, "rayspec": {"verifier_params": {"zz": 1}}},
     "verifier 'rrsw' takes no parameter(s) zz", "rayspec.verifier_params"),
    ("/v1/responses", {"input": "hi", "rayspec": {"verifier_params": {"zz": 1}}},
     "verifier 'rrsw' takes no parameter(s) zz", "rayspec.verifier_params"),
    # a Sequoia tree too big to plan per request (`PlanTooBig`)
    ("/v1/completions", {"prompt": "x", "rayspec": {"tree": "sequoia:1024x10"}},
     "rayspec.tree: tree spec 'sequoia:1024x10' is too big to plan per request", "rayspec.tree"),
    ("/v1/completions", {"prompt": ["x", "y"], "rayspec": {"tree": "sequoia:1024x10"}},
     "rayspec.tree: tree spec 'sequoia:1024x10' is too big to plan per request", "rayspec.tree"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path, body, opening, param", REFUSALS)
def test_a_refusal_names_its_field_in_param(http, path, body, opening, param, stream):
    reply = http.post(path, content=json.dumps({**body, "stream": stream}),
                      headers={"Content-Type": "application/json"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["message"].startswith(opening), error
    assert (error["param"], error["type"], error["code"]) == (param, "invalid_request_error", None)


@pytest.mark.parametrize("error, message, param", [
    (RequestFieldError("a message in any words", "verifier"), "a message in any words", "rayspec.verifier"),
    (RequestFieldError("a message in any words", "verifier_params"), "a message in any words",
     "rayspec.verifier_params"),
    (RequestFieldError("a message in any words", "prediction"), "a message in any words", "prediction"),
    (PlanTooBig("a message in any words"), "rayspec.tree: a message in any words", "rayspec.tree"),
    # the front end's own, one kind of error with them
    (ToolError("two tools define $defs differently", "tools"), "two tools define $defs differently", "tools"),
    (ChatRenderError("a message in any words", "messages"), "a message in any words", "messages"),
])
def test_a_refusals_param_is_its_field_whatever_its_words(error, message, param):
    answer = (400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}})
    assert error_body(error) == answer
    assert error_body(pickle.loads(pickle.dumps(error))) == answer  # as it crosses to another process
