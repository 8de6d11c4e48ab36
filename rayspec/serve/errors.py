"""OpenAI-shaped errors of the HTTP front end: `ApiError`, and the status and body
`{"error": {"message", "type", "param", "code"}}` of any exception raised while answering
(`error_body`), a body that failed validation included (`validation_error`)."""

from __future__ import annotations

import logging
import re

from fastapi.exceptions import RequestValidationError

from rayspec.engine.interfaces import AtCapacity, ContextLengthExceeded, RequestFieldError, ShuttingDown
from rayspec.engine.policy import PlanTooBig
from rayspec.rpc.remote import RemoteError
from rayspec.serve.service import Overloaded

log = logging.getLogger("rayspec.serve")

# nginx's status for a request whose client left before the answer: never read, but logged and
# counted as what it was.
CLIENT_CLOSED_REQUEST = 499


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


def openai_error(status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> tuple[int, dict]:
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_body(error: BaseException) -> tuple[int, dict]:
    """(HTTP status, OpenAI error body) for an exception raised while answering."""
    if isinstance(error, ApiError):
        return openai_error(error.status, error.message, error.param, error.code)
    if isinstance(error, PlanTooBig):  # past the body's checks of the tree, and worded as theirs are
        return openai_error(400, f"{param_of(error.field)}: {error}", param_of(error.field))
    if isinstance(error, RequestFieldError):
        return openai_error(400, str(error), param_of(error.field))
    if isinstance(error, ContextLengthExceeded):
        return openai_error(400, str(error), code="context_length_exceeded")
    if isinstance(error, ValueError):  # the engine's and GenerationRequest's word for bad input
        return openai_error(400, str(error), field_named(str(error)))
    if isinstance(error, ShuttingDown):
        return openai_error(503, str(error), kind="service_unavailable")
    if isinstance(error, (Overloaded, AtCapacity)):
        return openai_error(429, str(error), code="too_many_requests", kind="rate_limit_error")
    if isinstance(error, RemoteError) and error.worker_full:
        return openai_error(429, f"a model worker is full: {error}", code="too_many_requests", kind="rate_limit_error")
    if isinstance(error, RemoteError) and error.worker_fault:
        log.error("worker failure: %s", error)
        return openai_error(500, f"a model worker failed: {error}", kind="internal_error")
    if isinstance(error, RemoteError):
        log.error("worker failure: %s", error)
        return openai_error(503, f"a model worker failed or cannot be reached: {error}", kind="service_unavailable")
    log.error("internal error", exc_info=error)
    return openai_error(500, f"internal error: {type(error).__name__}: {error}", kind="internal_error")


def field_named(message: str) -> str | None:
    """The request field an engine's refusal is about, when it opens with its name ("temperature
    must be ...", "logit_bias: ...", "allowed_token_ids names ...", "the prompt is ...", "the
    prediction has ...", "prompt token ids ..."); else None.  Refusals that open with other
    words carry their field (`RequestFieldError`)."""
    match = _FIELD_FIRST.match(message)
    if match is None:
        return None
    from rayspec.serve.bodies import ChatBody, CompletionBody  # here: they build on this module
    from rayspec.serve.responses import ResponsesBody

    fields = {*ChatBody.model_fields, *CompletionBody.model_fields, *ResponsesBody.model_fields}
    return match.group(1) if match.group(1) in fields else None


_FIELD_FIRST = re.compile(r"(?:the )?([a-z][a-z_]*)(?::| must | names | is | has | token ids )")


def param_of(field: str) -> str:
    """The body's name of a `GenerationRequest` keyword: the `rayspec` options' under "rayspec."
    ("rayspec.tree"), as the body's own checks of them name them."""
    from rayspec.serve.bodies import RayspecOptions  # here: it builds on this module

    return f"rayspec.{field}" if field in RayspecOptions.model_fields else field


def validation_error(error: RequestValidationError) -> ApiError:
    """The first problem of a body that failed validation, in words."""
    problem = error.errors()[0]
    where = [str(part) for part in problem["loc"][1:]]  # loc[0] is "body"
    if problem["type"] == "json_invalid":
        return bad_request(f"malformed JSON body: {problem.get('ctx', {}).get('error', problem['msg'])}")
    if not where:
        return bad_request(f"the request body must be a JSON object (Content-Type: application/json): {problem['msg']}")
    if problem["type"] == "extra_forbidden":
        return bad_request(f"unrecognized request argument: {'.'.join(where)}", where[0])
    where, message = _without_union_tags(where, problem["msg"], error.errors())
    # a `rayspec` option is named as the engine's refusals of it name it ("rayspec.tree")
    return bad_request(f"{'.'.join(where)}: {message}", ".".join(where[:2]) if where[0] == "rayspec" else where[0])


def _is_union_tag(part: str) -> bool:
    """Whether a location part is pydantic's name of one type of a union ("str", "list[str]")
    rather than a field name or an index."""
    return part.split("[")[0] in ("str", "int", "float", "bool", "list", "dict") or part[:1].isupper()


def _without_union_tags(where: list[str], message: str, problems: list[dict]) -> tuple[list[str], str]:
    """The place and message of a problem with a field that takes several types (`stop`: a
    string or a list of strings) as a client reads them: pydantic reports one problem per type,
    each under the type's name ("stop.str", "stop.list[str].0").  When the input got inside
    one type (a list holding a number), that type's problem, its name dropped ("stop.0: Input
    should be a valid string"); else the types it could have been ("stop: Input should be str
    or list[str]")."""
    tags = [i for i, part in enumerate(where) if _is_union_tag(part)]
    if not tags:
        return where, message
    field = where[:tags[0]]
    branches = [[str(part) for part in p["loc"][1:]] + [p["msg"]] for p in problems]
    branches = [b for b in branches if b[:len(field)] == field and len(b) > len(field) + 1]
    deepest = max(branches, key=len)
    if len(deepest) > len(field) + 2:  # the field's name, the type's, then a place inside it
        inside = [part for part in deepest[len(field) + 1:-1] if not _is_union_tag(part)]
        return field + inside, deepest[-1]
    kinds = list(dict.fromkeys(b[len(field)] for b in branches))
    return field, f"Input should be {' or '.join(kinds)}"
