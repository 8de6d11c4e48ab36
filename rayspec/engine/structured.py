"""Structured output (vLLM's guided decoding, OpenAI's `response_format`): the completion is a
match of a regular expression, then a stop token.  JSON schemas, JSON objects and choices are
compiled to one expression (`StructuredOutput.regex`); `SamplingParams.regex` carries it to
both models, and each side turns it into the tokens allowed after every law's path
(`GrammarCursor.masks`, applied by `rayspec.verify.processing.mask_to_regex`).

Speculative decoding stays exact because the drafter and the target restrict their laws with
the same masks: the target's law at a tree node is the law of constrained autoregressive
sampling after that node's path, which is all the verifiers need (the drafter's masks only
make its drafts acceptable).  A drafted token the expression forbids (a prediction's, or an
EAGLE-style draft's) has target probability 0 and is never accepted.

The expression is matched on the completion's bytes: each token's bytes come from its
tokenizer (`token_bytes`), and `outlines_core.Index` compiles the expression with them into a
token-level automaton once per (expression, vocabulary) in a process (`compiled_index`).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rayspec.engine.interfaces import AtCapacity
from rayspec.engine.text import built_once
from rayspec.models.cancellation import GenerationCancelled, caller_watch, stop_if_caller_left, watching_caller

# json_object's values nest this deep (objects and arrays of scalars inside the object): the
# automaton of a deeper generic JSON costs seconds per vocabulary (6 s at 8k tokens for
# depth 3 against 0.16 s).  A json_schema nests as deep as its schema says.
JSON_OBJECT_DEPTH = 2

_WHITESPACE = r"[ ]?"
_STRING = r'"([^"\\\x00-\x1F\x7F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_SCALAR = f"({_STRING}|{_NUMBER}|true|false|null)"


def _json_object_regex(depth: int) -> str:
    """Any JSON object whose values nest `depth` - 1 levels of arrays and objects below it."""
    value = _SCALAR
    for level in range(depth):
        array = rf"\[{_WHITESPACE}({value}({_WHITESPACE},{_WHITESPACE}{value})*)?{_WHITESPACE}\]"
        member = rf"{_STRING}{_WHITESPACE}:{_WHITESPACE}{value}"
        obj = rf"\{{{_WHITESPACE}({member}({_WHITESPACE},{_WHITESPACE}{member})*)?{_WHITESPACE}\}}"
        if level == depth - 1:
            return obj
        value = f"({_SCALAR}|{array}|{obj})"
    raise ValueError("depth must be at least 1")


@dataclass(frozen=True)
class StructuredOutput:
    """What a completion must be: exactly one of a JSON schema (a dict or its JSON text), any
    JSON object, a regular expression (Rust's `regex` syntax, as outlines-core reads it), or
    one of a list of strings."""

    json_schema: dict | str | None = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None

    def __post_init__(self):
        given = [name for name in ("json_schema", "regex", "choice") if getattr(self, name) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) != 1:
            raise ValueError("structured output takes exactly one of json_schema, json_object, regex and choice"
                             + (f"; got {', '.join(given)}" if given else ""))
        if self.choice is not None:
            # A list (or one string), never any iterable: a mapping's keys ({"a": 1} read as
            # ["a"]) or a set's arbitrary order were taken for choices the client never listed.
            choice = (self.choice,) if isinstance(self.choice, str) else (
                tuple(self.choice) if isinstance(self.choice, (list, tuple)) else ())
            if not choice or not all(isinstance(c, str) and c for c in choice):
                raise ValueError("choice must be a non-empty list of non-empty strings")
            object.__setattr__(self, "choice", choice)
        if self.regex is not None and not (isinstance(self.regex, str) and self.regex):
            raise ValueError("regex must be a non-empty string")
        if self.json_schema is not None and not isinstance(self.json_schema, (dict, str)):
            raise ValueError("json_schema must be a JSON schema: an object, or its JSON text")

    def to_regex(self) -> str:
        """The regular expression this output matches (a bad schema is a ValueError)."""
        if self.regex is not None:
            return self.regex
        if self.choice is not None:
            # Longest first: an alternation is leftmost-first, so once an earlier choice matched, a
            # later one it begins ("cat" before "category") could not be continued into.
            return "(" + "|".join(_escape(c) for c in sorted(self.choice, key=len, reverse=True)) + ")"
        if self.json_object:
            return _json_object_regex(JSON_OBJECT_DEPTH)
        return _schema_regex(self.json_schema if isinstance(self.json_schema, str) else json.dumps(self.json_schema))


def structured_regex(output: StructuredOutput | str | None) -> str:
    """The regular expression of a structured output ("" for none); a string is one already."""
    if _given(output) and isinstance(output, StructuredOutput):
        return output.to_regex()
    return output or ""


def _given(output: StructuredOutput | str | None) -> bool:
    """Whether a structured output is asked for (None and "" ask for none); ValueError for
    anything but a StructuredOutput or a regular expression."""
    if output is not None and not isinstance(output, (StructuredOutput, str)):
        raise ValueError(f"structured_output must be a StructuredOutput or a regular expression, got {output!r}")
    return bool(output)


def check_structured(output: StructuredOutput | str | None, ignore_eos: bool, eos_token_ids) -> None:
    """Refuse a structured output (or its regular expression) that could not end: with
    ignore_eos, or for a target with no EOS token (a match ends at one).  Decided without
    building its expression, so that such a request is refused before a JSON schema's build
    (up to COMPILE_SECONDS in a compiler process)."""
    given = _given(output)
    if given and ignore_eos:
        raise ValueError("ignore_eos cannot be combined with structured output: its text ends at a stop token")
    if given and not eos_token_ids:
        raise ValueError("structured output ends the completion at the model's EOS token, and this target "
                         "declares none (eos_token_id in its config)")


def _escape(text: str) -> str:
    """`text` as a literal of Rust's regex syntax: every non-alphanumeric ASCII character
    escaped (Python's `re.escape` escapes some that Rust refuses to, such as a space) but for
    `<` and `>`, which are no metacharacters, and whose escapes Rust reads as word boundaries."""
    return "".join(f"\\{c}" if c.isascii() and not c.isalnum() and c not in " _\n\t<>" else c for c in text)


# Keywords outlines-core reads past without enforcing them: a schema using one is refused
# rather than followed only in part.
UNENFORCED_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                                 "uniqueItems", "maxProperties", "minProperties", "not", "contains", "minContains",
                                 "maxContains", "propertyNames", "dependentRequired", "dependentSchemas",
                                 "dependencies", "if", "then", "else", "patternProperties", "unevaluatedProperties",
                                 "unevaluatedItems"})
# Keywords whose values are data or names, not schemas: nothing under them is a keyword.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "required", "title", "description"})
_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


def _keywords(schema):
    """(where, keyword, value) of each keyword of a schema and of its subschemas (`_subschemas`)
    — not of the data under `enum`, `const` and the like, nor the names under `properties`."""
    for where, node in _subschemas(schema):
        for key, value in node.items():
            yield (f"{where}.{key}" if where else key), key, value


def _unenforced(schema) -> list[str]:
    """Where a schema uses a keyword outlines-core does not enforce."""
    return [place for place, key, _ in _keywords(schema) if key in UNENFORCED_KEYWORDS]


def _overlapping_one_ofs(schema) -> list[str]:
    """Where a schema has a `oneOf` two of whose branches some value may match: outlines-core
    builds a oneOf as an anyOf (a value matching two branches passes), so only a oneOf whose
    branches are disjoint (`_exclusive`) is enforced as written."""
    return [place for place, key, branches in _keywords(schema)
            if key == "oneOf" and isinstance(branches, list) and not _exclusive(branches, schema, place)]


def _subschemas(schema, where: str = ""):
    """(where, schema) of a schema and of each object in it that stands where a schema does."""
    if isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from _subschemas(item, f"{where}[{i}]")
    elif isinstance(schema, dict):
        yield where, schema
        for key, value in schema.items():
            place = f"{where}.{key}" if where else key
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    yield from _subschemas(sub, f"{place}.{name}")
            elif key not in _DATA_KEYWORDS:
                yield from _subschemas(value, place)


# outlines-core compiles a schema object from one of these, the first it has (and `type` after
# them all), and reads past the others: an object with two is enforced in part.
_LEADING_KEYWORDS = ("properties", "allOf", "anyOf", "oneOf", "prefixItems", "enum", "const", "$ref")
# What only `type` reads: past a leading keyword, read past.
_TYPE_KEYWORDS = frozenset({"minLength", "maxLength", "pattern", "format", "items", "minItems", "maxItems"})


def _compiled_in_part(schema) -> list[str]:
    """Where outlines-core would compile a schema object past some of what it says (as a schema
    of fewer assertions, letting through text that breaks the rest), each with why."""
    found = []
    for where, node in _subschemas(schema):
        place = where or "top level"
        leading = [key for key in _LEADING_KEYWORDS if key in node]
        read_past = sorted(_TYPE_KEYWORDS & node.keys())
        if leading and leading[0] == "prefixItems":
            # outlines-core writes the prefix's items and no more (a narrower `items`): counts
            # that tuple meets hold, as Pydantic's fixed-length tuples write them
            length = len(node["prefixItems"]) if isinstance(node["prefixItems"], list) else 0
            met = {key for key, holds in (("minItems", length.__ge__), ("maxItems", length.__le__))
                   if isinstance(node.get(key), int) and holds(node[key])}
            read_past = sorted(_TYPE_KEYWORDS - {"items"} - met & node.keys())
        if len(leading) > 1 or (leading and read_past):
            found.append(f"{place} combines {', '.join(leading + read_past)}, of which only {leading[0]} would be "
                         f"enforced")
        elif not leading and {"minLength", "maxLength"} & node.keys() and "pattern" in node:
            found.append(f"{place} combines a length and a pattern, of which only the length would be enforced")
        elif not leading and "format" in node and {"minLength", "maxLength", "pattern"} & node.keys():
            found.append(f"{place} combines a format with a length or a pattern, of which only one would be "
                         f"enforced")
        if "allOf" in node and isinstance(node["allOf"], list) and len(node["allOf"]) > 1:
            all_of = f"{where}.allOf" if where else "allOf"
            found.append(f"{all_of} has {len(node['allOf'])} branches, which would be written one after another "
                         f"(merge them into one schema)")
        listed = [node["const"]] if "const" in node else node.get("enum")
        types = _types(node) if isinstance(node.get("type"), (str, list)) else None
        if isinstance(listed, list) and types is not None:
            strays = [value for value in listed
                      if _json_type(value) not in types and not (_json_type(value) == "integer" and "number" in types)]
            if strays:
                found.append(f"{place} lists {json.dumps(strays[0])}, which its type {json.dumps(node['type'])} "
                             f"does not admit")
        required = node.get("required")
        if isinstance(required, list):
            properties = node.get("properties") if isinstance(node.get("properties"), dict) else {}
            missing = [name for name in required if name not in properties]
            if missing:
                found.append(f"{place} requires {json.dumps(missing[0])}, which it gives no schema for in its "
                             f"properties")
    return found


# Keywords outlines-core reads as a count (an unsigned integer); any other value it reads
# past, enforcing no bound at all: maxLength 2.0 (an integer, to JSON Schema) let any length
# through, and so did "5" or -1.
_COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems")
# Keywords whose list no value can satisfy when empty: outlines-core compiles each to the
# empty expression, whose one match, the empty text, no JSON reader parses.
_NONEMPTY_LISTS = ("enum", "anyOf", "oneOf", "allOf", "type")


def _malformed(schema) -> list[str]:
    """Where a schema's keyword has a value outlines-core would read past or compile to the
    empty expression, each with why.  A count written as an integral float (2.0) is made an
    integer in place, as JSON Schema reads it."""
    if not isinstance(schema, dict):
        return []  # outlines-core refuses any other schema with a message of its own
    found = []
    for where, node in _subschemas(schema):
        place = f"{where}." if where else ""
        for key in _COUNT_KEYWORDS:
            value = node.get(key)
            if isinstance(value, float) and value.is_integer() and value >= 0:
                node[key] = value = int(value)
            if key in node and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                found.append(f"{place}{key} must be a non-negative integer, not {json.dumps(value)}")
        low, high = node.get("minItems"), node.get("maxItems")
        if all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (low, high)) and low > high:
            # outlines-core writes {low-1,high-1}, which no expression compiler reads
            found.append(f"{place}minItems {low} is above maxItems {high}, so no array matches")
        for key in _NONEMPTY_LISTS:
            if isinstance(node.get(key), list) and not node[key]:
                found.append(f"{place}{key} is empty, so no value matches")
        if "pattern" in node and not isinstance(node["pattern"], str):
            found.append(f"{place}pattern must be a string, not {json.dumps(node['pattern'])}")
        required = node.get("required")
        if "required" in node and not (isinstance(required, list) and all(isinstance(n, str) for n in required)):
            found.append(f"{place}required must be a list of property names, not {json.dumps(required)}")
    return found


# Branches of one oneOf compared pairwise at most (a tagged union of this many is compared by
# its tags at once): a request's schema must not buy seconds of this process's time.
MAX_ONE_OF_BRANCHES = 512


@dataclass(frozen=True)
class _Branch:
    """What a oneOf branch says plainly: the values it lists (`const`, `enum`) as canonical
    JSON, its JSON types, and the listed values of each property it requires (a tag); None
    where it does not say."""

    values: frozenset[str] | None
    types: frozenset[str] | None
    tags: dict[str, frozenset[str]]

    @classmethod
    def of(cls, schema, root) -> "_Branch | None":
        schema = _resolved(schema, root)
        if not isinstance(schema, dict):
            return None
        tags = {}
        for name in schema.get("required") or ():
            tag = _resolved((schema.get("properties") or {}).get(name), root) if isinstance(name, str) else None
            listed = _values(tag) if isinstance(tag, dict) else None
            if listed is not None:
                tags[name] = listed
        return cls(_values(schema), _types(schema), tags)

    def disjoint(self, other: "_Branch") -> bool:
        """Whether no value can match both: listed values that differ, types that differ, or a
        property both require whose listed values differ (a discriminated union's tag)."""
        if self.values is not None and other.values is not None:
            return not self.values & other.values
        if self.types is not None and other.types is not None and not _types_overlap(self.types, other.types):
            return True
        return any(not self.tags[name] & other.tags[name] for name in self.tags.keys() & other.tags.keys())


def _exclusive(branches: list, root, place: str) -> bool:
    """Whether no value can match two of `branches`, by what they say plainly (`_Branch`);
    False when that cannot be told."""
    summaries = [_Branch.of(branch, root) for branch in branches]
    if any(summary is None for summary in summaries):
        return False
    if len(summaries) < 2:
        return True
    # Lists of values, or one tag, that tell every pair apart, counted at once.
    if all(summary.values is not None for summary in summaries) and _apart([s.values for s in summaries]):
        return True
    if any(_apart([s.tags[tag] for s in summaries]) for tag in set.intersection(*(set(s.tags) for s in summaries))):
        return True
    if len(summaries) > MAX_ONE_OF_BRANCHES:
        raise ValueError(f"json_schema's {place} has {len(summaries)} branches: more than {MAX_ONE_OF_BRANCHES} "
                         f"are told apart only by a property they all require with distinct const values (a tag)")
    return all(a.disjoint(b) for i, a in enumerate(summaries) for b in summaries[i + 1:])


def _apart(sets: list[frozenset]) -> bool:
    """Whether no two of `sets` share a member."""
    return sum(map(len, sets)) == len(frozenset().union(*sets))


def _resolved(schema, root, depth: int = 0):
    """`schema` with its local `$ref` ("#/$defs/Cat") followed; None for one that cannot be
    (remote, broken, or a cycle of references)."""
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        if depth > 32 or not isinstance(ref, str) or not ref.startswith("#"):
            return None
        schema, depth = root, depth + 1
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(schema, dict) or part not in schema:
                return None
            schema = schema[part]
    return schema


# How many times one definition is written out along one path of a recursive schema, the
# last time closed (as many as outlines-core writes); and how many schema objects a schema may be
# written out into, past which its expression would be too large anyway.
MAX_RECURSION_DEPTH = 4
MAX_UNROLLED_SCHEMAS = 50_000
_NO_END = object()  # what a recursive position written out too often stands for


def _unrolled(schema):
    """`schema` with each local `$ref` written out in its place, one definition at most
    MAX_RECURSION_DEPTH times along a path, and its recursion closed the last time where the
    schema lets it end: an optional property left out, an array left empty, an alternative
    dropped.  outlines-core unrolls recursion itself but closes it by leaving the recursive
    property out of the object's expression, a required one's comma included ({"v": 4,}: no
    JSON).  ValueError for a schema that no finite value matches (each level requiring the
    next) or that writes out into more than MAX_UNROLLED_SCHEMAS objects."""
    unrolled = _unroll(schema, schema, (id(schema),), [MAX_UNROLLED_SCHEMAS])
    if unrolled is _NO_END:
        raise ValueError("json_schema has no finite value: its recursion never ends (each level requires the next "
                         "through a required property, a non-empty array or every alternative)")
    if isinstance(unrolled, dict):  # for a reference where this does not look (outlines-core follows it)
        unrolled.update({key: schema[key] for key in ("$defs", "definitions") if key in schema})
    return unrolled


def _unroll(node, root, path: tuple, left: list):
    """`_unrolled`'s writing of `node` under the definitions of `path` (their ids), or _NO_END;
    `left`: how many more objects may be written.  A function of the module, not a closure
    calling itself: that would be a cycle holding the schema (the client's, up to a request's
    size) until the collector ran."""
    if not isinstance(node, dict):
        return node
    left[0] -= 1
    if left[0] < 0:
        raise ValueError(f"json_schema cannot be compiled: its references write out into more than "
                         f"{MAX_UNROLLED_SCHEMAS} schemas")
    if "$ref" in node:
        target = _resolved(node, root)
        if target is None:
            return node  # outlines-core refuses it with a message of its own
        if path.count(id(target)) >= MAX_RECURSION_DEPTH:
            return _NO_END
        return _unroll(target, root, path + (id(target),), left)
    written = dict(node)
    if isinstance(node.get("properties"), dict):
        required = node.get("required") if isinstance(node.get("required"), list) else []
        written["properties"] = {}
        for name, sub in node["properties"].items():
            sub = _unroll(sub, root, path, left)
            if sub is _NO_END and name in required:
                return _NO_END
            if sub is not _NO_END:
                written["properties"][name] = sub
    if isinstance(node.get("additionalProperties"), dict):
        written["additionalProperties"] = _unroll(node["additionalProperties"], root, path, left)
        if written["additionalProperties"] is _NO_END:  # no more properties than those named
            del written["additionalProperties"]
            written.setdefault("properties", {})
    if isinstance(node.get("items"), dict):
        written["items"] = _unroll(node["items"], root, path, left)
        if written["items"] is _NO_END:  # no more items than the prefix's
            most = len(node["prefixItems"]) if isinstance(node.get("prefixItems"), list) else 0
            if not isinstance(node.get("minItems", 0), int) or node.get("minItems", 0) > most:
                return _NO_END
            del written["items"]
            written["maxItems"] = most
    for key in ("prefixItems", "allOf", "anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            subs = [_unroll(sub, root, path, left) for sub in node[key]]
            written[key] = [sub for sub in subs if sub is not _NO_END]
            if len(written[key]) < len(subs) and (key in ("prefixItems", "allOf") or not written[key]):
                return _NO_END
    return written


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def _canonical(value):
    """`value` as JSON compares it: 1.0 is 1 (at any depth), true is not 1."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    return value


def _values(schema) -> frozenset[str] | None:
    """The values a schema admits when it lists them (`const`, `enum`), each as canonical JSON;
    None when it does not."""
    listed = [schema["const"]] if "const" in schema else schema.get("enum")
    if not isinstance(listed, list):
        return None
    return frozenset(json.dumps(_canonical(v), sort_keys=True) for v in listed)


def _types(schema) -> frozenset[str] | None:
    """The JSON types a schema admits, when it says (`type`, or its listed values'); None when
    it does not."""
    if isinstance(schema.get("type"), str):
        return frozenset({schema["type"]})
    if isinstance(schema.get("type"), list):
        return frozenset(t for t in schema["type"] if isinstance(t, str))
    values = _values(schema)
    return None if values is None else frozenset(_json_type(json.loads(v)) for v in values)


def _types_overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    def widened(types: frozenset[str]) -> frozenset[str]:  # an integer is a number too
        return types | {"number"} if "integer" in types else types

    return bool(widened(a) & widened(b))


class _Build:
    """One build under way: its callers' watches (`caller_watch`), and its value or error once
    `done`."""

    def __init__(self):
        self.watches: list = []
        self.done = threading.Event()
        self.value = self.error = None

    def all_left(self) -> bool:
        """Whether every caller waiting for it has left: then, and only then, is it given up."""
        return all(left is not None and left() for left in list(self.watches))


class _KeptBuilds:
    """Values of a slow build by key, the last `max_entries` asked for kept, the least recently
    used dropped first.  Callers asking for the same new key at once (a batch job's clients, one
    schema) wait for one build — seconds, in a compiler process — instead of each running its
    own; different keys build side by side.  The first caller builds, watching all of them
    (`rayspec.models.cancellation`): the build is given up only once every one has left, and a
    caller who leaves stops waiting at once, within CALLER_POLL_SECONDS.  A build's error is
    each waiting caller's; a build that fails is kept for nobody."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._values: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict = {}  # key -> its _Build under way

    def get(self, key, build: Callable[[], object]):
        left = caller_watch()
        while True:
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    return self._values[key]
                pending = self._building.get(key)
                mine = pending is None
                if mine:
                    pending = self._building[key] = _Build()
                pending.watches.append(left)
            if mine:
                return self._build(key, pending, build)
            while not pending.done.wait(CALLER_POLL_SECONDS):
                stop_if_caller_left("while it waited for another request's compilation of the same structured output")
            if pending.error is None:
                return pending.value
            if not isinstance(pending.error, GenerationCancelled) or (left is not None and left()):
                raise pending.error
            # given up by the callers who all left before this one came: built again

    def _build(self, key, pending: _Build, build: Callable[[], object]):
        try:
            with watching_caller(pending.all_left):
                value = build()
            with self._lock:
                self._values[key] = value
                while len(self._values) > self.max_entries:
                    self._values.popitem(last=False)
            pending.value = value
            return value
        except BaseException as error:
            pending.error = error
            raise
        finally:
            with self._lock:
                self._building.pop(key, None)
            pending.done.set()


# Schemas' expressions by the digest of the schema's text: the text is the client's, as long as
# a request (32 MB), and kept as the key 64 of them would hold 2 GB.
MAX_CACHED_SCHEMAS = 64
_SCHEMA_REGEXES = _KeptBuilds(MAX_CACHED_SCHEMAS)


def _schema_regex(schema_text: str) -> str:
    """`_build_schema_regex(schema_text)`, built once for the last MAX_CACHED_SCHEMAS schemas
    asked for (a schema that fails is built again each time, as it was never kept)."""
    key = hashlib.sha256(schema_text.encode("utf-8", "surrogatepass")).digest()
    return _SCHEMA_REGEXES.get(key, lambda: _build_schema_regex(schema_text))


def _build_schema_regex(schema_text: str) -> str:
    try:
        return _compile_schema(schema_text)
    except RecursionError:  # reading and walking the schema recurse once per level
        raise ValueError("json_schema nests too deeply to compile") from None


def _compile_schema(schema_text: str) -> str:
    try:
        schema = json.loads(schema_text)
    except json.JSONDecodeError as error:
        raise ValueError(f"json_schema is not valid JSON: {error}") from None
    malformed = _malformed(schema)
    if malformed:
        raise ValueError(f"json_schema is malformed: {'; '.join(malformed)}")
    unenforced = _unenforced(schema)
    if unenforced:
        raise ValueError(f"json_schema uses {', '.join(unenforced)}, which structured output cannot enforce "
                         f"(numeric bounds, multipleOf, uniqueItems, min/maxProperties, not, contains, "
                         f"propertyNames, dependencies): give the values as an enum, or leave the keyword out")
    in_part = _compiled_in_part(schema)
    if in_part:
        raise ValueError(f"json_schema cannot be enforced as written: {'; '.join(in_part)}")
    overlapping = _overlapping_one_ofs(schema)
    if overlapping:
        raise ValueError(f"json_schema's {', '.join(overlapping)} has branches one value could match two of, and "
                         f"structured output would let such a value through (it enforces oneOf as anyOf): use "
                         f"anyOf, or make the branches exclusive — distinct types, distinct const/enum values, or a "
                         f"property all of them require with distinct const values (a discriminated union's tag)")
    _name_properties_by_their_json(schema)
    _formats_as_json_safe_patterns(schema)
    _free_form_values_nest_as_json_objects_do(schema)
    schema_text = json.dumps(_unrolled(schema))
    # In a compiler process too: the expression doubles with each level of nested arrays (a
    # schema of 1 kB nesting 40 deep asks for gigabytes), and outlines-core aborts the process
    # whose allocation fails — here, the server.
    regex_ = _in_compiler(("schema", schema_text, MAX_SCHEMA_REGEX_CHARS), "json_schema cannot be compiled",
                          "json_schema", "its expression is too large (each level of nested arrays doubles it)")
    return regex_.replace(_STRING_CHARACTER + "{", _COUNTABLE_STRING_CHARACTER + "{")


# outlines-core's character of a JSON string, and the same characters with the quote escaped
# as \u0022 rather than \": under a count (a minLength or maxLength) outlines-core's automaton
# of the first grows exponentially with the count where the string can begin the text (a
# schema of a string, or a union with one: maxLength 20 did not compile in 60 s over the
# demo's vocabulary, 14 took 1.5 s); of the second, linearly (500: 0.8 s).  Replaced under
# every count, not only where seen to explode: a vocabulary of its own may explode elsewhere.
_STRING_CHARACTER = r'([^"\\\x00-\x1F\x7F-\x9F]|\\["\\/bfnrt])'
_COUNTABLE_STRING_CHARACTER = r'([^"\\\x00-\x1F\x7F-\x9F]|\\[\\/bfnrt]|\\u0022)'


def _name_properties_by_their_json(schema) -> None:
    """Rename, in place, each property (and its `required` entry) to its name as JSON writes it
    between the quotes: outlines-core puts a name into the expression as a literal, escaped for
    the expression but not for JSON, so a name holding a quote, a backslash or a control
    character was a key no JSON reader could parse ({"q"x": ...} for q"x)."""
    def written(name):
        return json.dumps(name, ensure_ascii=False)[1:-1] if isinstance(name, str) else name

    for _, node in list(_subschemas(schema)):
        if isinstance(node.get("properties"), dict):
            node["properties"] = {written(name): sub for name, sub in node["properties"].items()}
        if isinstance(node.get("required"), list):
            node["required"] = [written(name) for name in node["required"]]


# The JSON types of a free-form value (`{}`), as outlines-core lists them for one.
_ANY_TYPE = ["boolean", "null", "number", "string", "array", "object"]
# Keywords that say nothing of a value: a schema of these alone admits any value, as `{}` does
# (Pydantic writes an `Any` field {"title": "X"}), and outlines-core refused it ("Unsupported
# JSON Schema structure"), as it refused the schema `true` (`"items": true`).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "$id", "$schema", "$anchor", "$defs", "definitions"})


def _says_nothing(schema) -> bool:
    return isinstance(schema, dict) and not schema.keys() - _ANNOTATIONS


def _free_form_values_nest_as_json_objects_do(schema) -> None:
    """Give, in place, each free-form part of a schema — a value of any type (`{}`), an object
    without `properties` whose `additionalProperties` is not a schema (`dict`), an array without
    `items` or `prefixItems` (`list`) — the nesting json_object admits: JSON_OBJECT_DEPTH levels
    of arrays and objects from where it stands, through outlines-core's `depth`.  Its own
    default nests one level more, whose automaton takes seconds: {"type": "object"} took 9 to
    31 s over the demo's 8k tokens (0.3 s now), an array of `{}` items did not compile in 60 s.
    An array or object whose items or values are `{}` (`List[Any]`, `Dict[str, Any]` written
    so) is free-form itself: its `{}` one level below it.  A `depth` the schema gives is kept.
    The schema `true` where a schema stands (but `additionalProperties`, where outlines-core
    reads it) is made `{}` first, and a schema of annotations alone (`_says_nothing`) is `{}`."""
    for _, node in list(_subschemas(schema)):
        if node.get("items") is True:
            node["items"] = {}
        if isinstance(node.get("properties"), dict):
            node["properties"] = {name: {} if sub is True else sub for name, sub in node["properties"].items()}
        for key in ("prefixItems", "allOf", "anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                node[key] = [{} if sub is True else sub for sub in node[key]]
    for _, node in list(_subschemas(schema)):
        if _says_nothing(node):
            node.update(type=list(_ANY_TYPE))
        types = _types(node) if isinstance(node.get("type"), (str, list)) else frozenset()
        object_free = "object" in types and "properties" not in node
        array_free = "array" in types and "prefixItems" not in node
        for child in ([node.get("items")] if array_free else []) + (
                [node.get("additionalProperties")] if object_free else []):
            if _says_nothing(child):  # visited after its parent, so left at this depth
                child.update(type=list(_ANY_TYPE), depth=JSON_OBJECT_DEPTH - 2)
        if (object_free and not isinstance(node.get("additionalProperties"), dict)) or (
                array_free and "items" not in node):
            node.setdefault("depth", JSON_OBJECT_DEPTH - 1)


# Patterns that stand for these formats in place of outlines-core's, whose text could break
# JSON or the format: its email and uri admit a quote, a backslash or a control character raw
# inside the string (an email's quoted local part, a uri's path: "http://a.b/x"y"), its time
# a backslash before any character where the fraction's dot goes ("12:00:00\ 5"), its date
# any Unicode digit ("٢٠٢٤-01-01").  Each admits a subset of what the format allows.
_URI_CHARS = r"[A-Za-z0-9._~%!$&'()*+,;=:@/?-]"
_FORMAT_PATTERNS = {
    "date": r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
    "time": r"(2[0-3]|[01][0-9]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z)?",
    "email": r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
             r"([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?",
    "uri": rf"((https?|ftp)://([A-Za-z0-9._~%!$&'()*+,;=-]+(:[A-Za-z0-9._~%!$&'()*+,;=-]*)?@)?"
           rf"([A-Za-z0-9.-]+\.[A-Za-z]{{2,}}|localhost)(:[0-9]+)?(/{_URI_CHARS}*)?(\?{_URI_CHARS}*)?(#{_URI_CHARS}*)?"
           rf"|urn:[a-zA-Z0-9][a-zA-Z0-9-]{{0,31}}:{_URI_CHARS}+)",
}


def _formats_as_json_safe_patterns(schema) -> None:
    """Give, in place, each string format of `_FORMAT_PATTERNS` as its pattern there (a format
    with a length or a pattern is refused before, by `_compiled_in_part`), and each pattern as
    one group (`_grouped`) over the string's JSON text (`_over_json_text`)."""
    for _, node in list(_subschemas(schema)):
        if isinstance(node.get("pattern"), str):
            node["pattern"] = _grouped(node["pattern"], _over_json_text)
        elif node.get("format") in _FORMAT_PATTERNS:
            node["pattern"] = _FORMAT_PATTERNS[node.pop("format")]


def _grouped(pattern: str, rewrite=lambda inner: inner) -> str:
    """`pattern` as one group between its anchors, what lies between them rewritten: outlines-core
    writes a pattern between the string's quotes as it is, so a top-level alternative
    ("^cat|dog$") took a quote each ('"cat' was a whole match)."""
    inner = pattern[1:] if pattern.startswith("^") else pattern
    trailing_backslashes = len(inner[:-1]) - len(inner[:-1].rstrip("\\"))
    if inner.endswith("$") and trailing_backslashes % 2 == 0:
        inner = inner[:-1]
    return f"^(?:{rewrite(inner)})$"


# A character a JSON string holds as itself: no quote, backslash or control character.
_JSON_PLAIN = r'[^"\\\x00-\x1F]'
_JSON_ESCAPED = {'"': r'\\"', "\\": r"\\\\", "\n": r"\\n", "\t": r"\\t", "\r": r"\\r", "\f": r"\\f", "\b": r"\\b"}
_CHARACTER_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}


def _written_in_json(character: str, as_given: str) -> str:
    """The expression for one literal character as a JSON string writes it: a quote, a
    backslash or a control character escaped, any other as the pattern gave it."""
    if character in _JSON_ESCAPED:
        return _JSON_ESCAPED[character]
    if ord(character) < 0x20:
        return rf"\\u{ord(character):04x}"
    return as_given


# ECMA-262's \d and \w, the dialect JSON Schema's patterns are written in, as classes' items:
# ASCII, where the regex crate's are Unicode (\d admitted "٢٠٢٤", and the automaton of
# \w{1,100} took 2.6 s to compile over the demo's vocabulary).
_ECMA_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_", "D": "[^0-9]", "W": "[^0-9A-Za-z_]"}


def _ecma_escapes_in_class(class_text: str) -> str:
    r"""A character class with its \d, \w, \D and \W written as ECMA-262 reads them
    (`_ECMA_CLASSES`; the regex crate unites a class nested in a class with its items)."""
    out, at = [], 0
    while at < len(class_text):
        if class_text[at] == "\\" and at + 1 < len(class_text):
            out.append(_ECMA_CLASSES.get(class_text[at + 1], class_text[at:at + 2]))
            at += 2
        else:
            out.append(class_text[at])
            at += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """The index past the character class opening at `start` (nested classes included)."""
    at = start + 1
    if pattern[at:at + 1] == "^":
        at += 1
    if pattern[at:at + 1] == "]":  # a ] first is a literal one
        at += 1
    while at < len(pattern):
        if pattern[at] == "\\":
            at += 2
        elif pattern[at] == "[":
            at = _class_end(pattern, at)
        elif pattern[at] == "]":
            return at + 1
        else:
            at += 1
    raise ValueError(f"json_schema's pattern {pattern!r} leaves a character class open")


def _over_json_text(pattern: str) -> str:
    """A schema's string `pattern` (without its anchors) made an expression over the string's
    JSON text, which is what outlines-core matches it against: each class and `.` kept to the
    characters JSON writes as themselves (a class of the regex crate intersected with
    `_JSON_PLAIN`: a string holding a quote, a backslash or a control character there is left
    out, rather than written raw into text no JSON reader parses), and a literal quote,
    backslash or control character written as JSON escapes it."""
    out, at = [], 0
    while at < len(pattern):
        character = pattern[at]
        if character == "[":
            end = _class_end(pattern, at)
            out.append(f"[{_ecma_escapes_in_class(pattern[at:end])}&&{_JSON_PLAIN}]")
            at = end
        elif character == ".":
            out.append(_JSON_PLAIN)
            at += 1
        elif character == "\\" and at + 1 < len(pattern):
            kind = pattern[at + 1]
            end = at + 2
            if kind in "pPxu" and pattern[end:end + 1] == "{":  # \p{Greek}, \x{1F600}
                end = pattern.index("}", end) + 1 if "}" in pattern[end:] else len(pattern)
            elif kind in "pPxu":  # \pL, \x41, \u0041
                end += {"p": 1, "P": 1, "x": 2, "u": 4}[kind]
            escape = pattern[at:end]
            if kind in _ECMA_CLASSES:
                out.append(f"[{_ECMA_CLASSES[kind]}&&{_JSON_PLAIN}]")
            elif kind in "sSpP":
                out.append(f"[{escape}&&{_JSON_PLAIN}]")
            elif kind in "xu":
                digits = escape[2:].strip("{}")
                try:
                    if len(digits) != (2 if kind == "x" else 4) and not escape.endswith("}"):
                        raise ValueError(escape)
                    out.append(_written_in_json(chr(int(digits, 16)), escape))
                except (ValueError, OverflowError):
                    out.append(escape)  # not a code point: left for the compiler's error to name
            elif kind in _CHARACTER_ESCAPES:
                out.append(_written_in_json(_CHARACTER_ESCAPES[kind], escape))
            elif kind in "\\\"":
                out.append(_written_in_json(kind, escape))
            else:  # an escaped metacharacter, or an assertion (\b, \B, \A, \z)
                out.append(escape)
            at = end
        else:  # a trailing lone backslash stays one, for the compiler's error to name
            out.append(character if character == "\\" else _written_in_json(character, character))
            at += 1
    return "".join(out)


def _byte_level_alphabet() -> dict[str, int]:
    """The printable stand-in of each byte in byte-level BPE vocabularies (GPT-2's): printable
    Latin-1 bytes stand for themselves, the others for the characters from U+0100 on, in
    order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    stand_in = {b: chr(b) for b in printable}
    for b in range(256):
        if b not in stand_in:
            stand_in[b] = chr(256 + len(stand_in) - len(printable))
    return {char: b for b, char in stand_in.items()}


_SENTENCEPIECE_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer) -> dict[int, bytes]:
    """The bytes each ordinary token adds to the text (special tokens have none here): an added
    token's own text, else from byte-level BPE's stand-in characters, or SentencePiece's
    pieces ("▁" a space, "<0xNN>" a byte)."""
    special = set(tokenizer.all_special_ids)
    added = {token: text for text, token in getattr(tokenizer, "get_added_vocab", dict)().items()}
    size = len(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(size)))
    alphabet = _byte_level_alphabet()
    byte_level = all(c in alphabet for token, piece in enumerate(pieces) if piece and token not in added
                     for c in piece)
    table = {}
    for token, piece in enumerate(pieces):
        if token in special or not piece:
            continue
        if token in added:  # written as it reads, not in the model's byte alphabet
            table[token] = added[token].encode("utf-8")
        elif byte_level:
            table[token] = bytes(alphabet[c] for c in piece)
        elif match := _SENTENCEPIECE_BYTE.fullmatch(piece):
            table[token] = bytes([int(match.group(1), 16)])
        else:
            table[token] = piece.replace("\u2581", " ").encode("utf-8")
    return table


_VOCABULARIES_LOCK = threading.Lock()
_TOKEN_BYTES: dict[int, tuple[object, dict[int, bytes]]] = {}
_TOKEN_BYTES_LOCK = threading.Lock()  # not _VOCABULARIES_LOCK: `vocabulary_of` asks for the table holding that


def token_bytes_of(tokenizer) -> dict[int, bytes]:
    """`token_bytes(tokenizer)`, built once per tokenizer object; read only."""
    return built_once(tokenizer, _TOKEN_BYTES, _TOKEN_BYTES_LOCK, token_bytes)


class GrammarVocabulary:
    """A tokenizer's vocabulary as structured output reads it: the stop token the automaton
    ends on, the tokens' bytes as outlines-core takes them (`outlines`), and a fingerprint
    naming the table (two tokenizers with the same one share compiled automata)."""

    def __init__(self, tokenizer):
        from outlines_core import Vocabulary

        bytes_of = token_bytes_of(tokenizer)
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("structured output needs the tokenizer's EOS token: this tokenizer has none")
        self.eos_token_id = int(eos)
        self.fingerprint = hashlib.sha256(repr((self.eos_token_id, sorted(bytes_of.items()))).encode()).hexdigest()
        by_bytes: dict[bytes, list[int]] = {}
        for token, text in bytes_of.items():
            if token != self.eos_token_id:
                by_bytes.setdefault(text, []).append(token)
        self.outlines = Vocabulary(self.eos_token_id, by_bytes)


_VOCABULARIES: dict[int, tuple[object, GrammarVocabulary]] = {}


def vocabulary_of(tokenizer) -> GrammarVocabulary:
    """The tokenizer's `GrammarVocabulary`, built once per tokenizer object (held with it, so
    that its id is not reused)."""
    return built_once(tokenizer, _VOCABULARIES, _VOCABULARIES_LOCK, GrammarVocabulary)


MAX_CACHED_INDEXES = 32
_INDEXES = _KeptBuilds(MAX_CACHED_INDEXES)


def compiled_index(regex: str, vocabulary: GrammarVocabulary):
    """The token-level automaton of `regex` over `vocabulary` (an `outlines_core.Index`),
    compiled once per process (the last MAX_CACHED_INDEXES kept; requests asking for the same
    new expression at once wait for one compilation).  An expression that does not compile, or
    that no text of this vocabulary can match, is a ValueError."""
    return _INDEXES.get((regex, vocabulary.fingerprint), lambda: _compile(regex, vocabulary))


# A compilation runs in a child process of its own, given this long and this much memory:
# an expression's automaton can grow exponentially with it ("[ab]*a[ab]{n}" has 2^n states:
# 1.1 s at n = 12 over the demo's 8k tokens, 8x more for each 3 more), and so can a schema's
# expression; a compilation in this process could be neither stopped nor kept from taking
# the machine's memory (outlines-core aborts the process whose allocation fails).
COMPILE_SECONDS = 60.0
COMPILE_MEMORY_BYTES = 4 << 30
# Compilers running at once (each may take COMPILE_MEMORY_BYTES); another waits its turn, at
# most COMPILE_SECONDS.
MAX_COMPILERS = 2
_COMPILERS = threading.BoundedSemaphore(MAX_COMPILERS)
# How often a compilation, and a wait for a compiler, asks whether its caller left
# (`rayspec.models.cancellation`): a departed client's compiler is stopped within this.
CALLER_POLL_SECONDS = 0.1
# A schema's expression longer than this is refused: the automaton of one so long would not
# compile in time, and each would be kept in the caches.  Real schemas' are kilobytes.
MAX_SCHEMA_REGEX_CHARS = 2 << 20
# The child imports outlines-core alone (30 ms), never rayspec or torch.  Pickle is the only
# form outlines-core gives its vocabulary and automaton; both ends are this process and its
# own child, over a pipe: nothing crosses a network.  A job: ("index", regex, vocabulary) or
# ("schema", schema_text, most characters).
_COMPILER = """
import sys
sys.path[:] = sys.argv[2:]  # the server's path: not its working directory, whose files would shadow modules
import pickle, resource
try:
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
except (ValueError, OSError):  # a system that does not bound address space (macOS): the time bound alone
    pass
from outlines_core import Index
from outlines_core.json_schema import build_regex_from_schema
job = pickle.load(sys.stdin.buffer)
try:
    if job[0] == "index":
        answer = ("done", Index(job[1], job[2]))
    else:
        regex = build_regex_from_schema(job[1])
        answer = ("done", regex) if len(regex) <= job[2] else (
            "error", f"it expands to an expression of {len(regex)} characters, more than the {job[2]} enforced: "
                     f"nest arrays and alternatives less deeply")
except (ValueError, TypeError) as error:
    answer = ("error", str(error))
pickle.dump(answer, sys.stdout.buffer)
"""


def _compile(regex: str, vocabulary: GrammarVocabulary):
    """`regex`'s automaton over `vocabulary`, compiled in a child process (`_in_compiler`)."""
    what = f"the regular expression {_shortened(regex)}"
    index = _in_compiler(("index", regex, vocabulary.outlines), f"{what} cannot be used", what,
                         "its automaton is too large (repetitions such as [ab]*a[ab]{20} grow it exponentially)")
    if not index.get_allowed_tokens(index.get_initial_state()):
        raise ValueError(f"no text of this vocabulary matches the regular expression {_shortened(regex)}")
    return index


def _in_compiler(job: tuple, refused: str, what: str, too_large: str):
    """The answer of a compiler child process to `job`, given COMPILE_SECONDS and
    COMPILE_MEMORY_BYTES: past either, a ValueError saying `what` is `too_large`; a job the
    compiler refuses, "`refused`: its reason".  A compiler failing otherwise (a broken
    install) is a RuntimeError, the server's fault; every compiler busy for COMPILE_SECONDS,
    `AtCapacity` (the server's limit, not the request's fault).  A caller that leaves
    (`caller_left`) while it waits or compiles stops both, its compiler killed:
    `GenerationCancelled`, rather than a compiler held up to COMPILE_SECONDS for nobody."""
    deadline = time.monotonic() + COMPILE_SECONDS
    while not _COMPILERS.acquire(timeout=CALLER_POLL_SECONDS):
        stop_if_caller_left("while it waited for a structured-output compiler")
        if time.monotonic() >= deadline:
            raise AtCapacity(f"{what} waited {COMPILE_SECONDS:g} s for one of the {MAX_COMPILERS} compilers, all "
                             f"busy with other expressions; ask again later")
    try:
        path = [entry for entry in sys.path if entry not in ("", ".")]
        child = subprocess.Popen([sys.executable, "-c", _COMPILER, str(COMPILE_MEMORY_BYTES), *path],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        over = threading.Event()
        if (left := caller_watch()) is not None:
            # watched from a thread of its own: `communicate` holds this one, and polled in short
            # timeouts instead it would send no more of the job after the first (CPython's)
            threading.Thread(target=_kill_when_left, args=(child, left, over), name="rayspec-compiler-watch",
                             daemon=True).start()
        try:
            answer, printed = child.communicate(pickle.dumps(job), timeout=COMPILE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise ValueError(f"{what} did not compile within {COMPILE_SECONDS:g} s: {too_large}") from None
        finally:
            over.set()
            if child.poll() is None:  # a caller interrupted (KeyboardInterrupt): the child goes too
                child.kill()
                child.wait()
    finally:
        _COMPILERS.release()
    if child.returncode != 0:
        stop_if_caller_left(f"while {what} compiled")  # killed for it: no fault of the job's, nor the server's
        said = " ".join(printed.decode(errors="replace").split())[-200:] or "no message"
        # Past its memory the compiler dies of a signal (Rust aborts on a failed allocation) or
        # of a MemoryError: the job's doing.  Any other failure is this server's.
        if child.returncode > 0 and b"MemoryError" not in printed:
            raise RuntimeError(f"the structured-output compiler failed (exit {child.returncode}): {said}")
        raise ValueError(f"{what} could not be compiled within {COMPILE_MEMORY_BYTES / 2**30:g} GiB of memory "
                         f"(the compiler exited with {child.returncode}: {said}); {too_large}")
    kind, value = pickle.loads(answer)
    if kind == "error":
        raise ValueError(f"{refused}: {value}")
    return value


def _kill_when_left(child: subprocess.Popen, left: Callable[[], bool], over: threading.Event) -> None:
    """Kills the compiler `child` once its caller left (`left()`, asked every
    CALLER_POLL_SECONDS), unless its compilation is `over` first."""
    while not over.wait(CALLER_POLL_SECONDS):
        if left():
            child.kill()
            return


def _shortened(regex: str, keep: int = 80) -> str:
    return repr(regex if len(regex) <= keep else regex[:keep] + "...")


# Allowed-token rows kept across sequences (one automaton serves many requests, and the drafter
# and the target of one process share them): at most this many bytes of them.
MAX_CACHED_MASK_BYTES = 64 << 20


class _MaskCache:
    """Allowed-token rows by (expression's digest, vocabulary, stop tokens, size, device,
    state), the least recently used dropped first once their bytes, each row's own and what
    keeping it costs beyond them (`ROW_OVERHEAD_BYTES`), pass `max_bytes`."""

    # A kept row's key, tensor object and dictionary entry: about 0.8 kB measured, which a
    # small vocabulary's rows (64 bytes at 512 tokens) would leave far out of the count.
    ROW_OVERHEAD_BYTES = 1024

    def __init__(self, max_bytes: int):
        self.max_bytes, self.bytes = max_bytes, 0
        self.rows: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            row = self.rows.get(key)
            if row is not None:
                self.rows.move_to_end(key)
            return row

    def put(self, key, row: torch.Tensor) -> None:
        with self.lock:
            if key not in self.rows:
                self.rows[key] = row
                self.bytes += self._cost(row)
            while self.bytes > self.max_bytes and len(self.rows) > 1:
                _, dropped = self.rows.popitem(last=False)
                self.bytes -= self._cost(dropped)

    @classmethod
    def _cost(cls, row: torch.Tensor) -> int:
        return row.numel() * row.element_size() + cls.ROW_OVERHEAD_BYTES


_MASKS = _MaskCache(MAX_CACHED_MASK_BYTES)


class GrammarCursor:
    """Where a sequence's completion stands in a regex's automaton, and the tokens allowed
    after any drafted path from there.

    A path through a token the expression forbids leads nowhere; laws below it allow every
    token (such a node has target probability 0, so no walk reaches them, and they only need
    to be defined)."""

    _DEAD = None

    def __init__(self, regex: str, vocabulary: GrammarVocabulary, vocab_size: int, eos_token_ids: Sequence[int],
                 device=None):
        self.index = compiled_index(regex, vocabulary)
        self.vocab_size = int(vocab_size)
        # A match ends at a token the engine stops on: the model's EOS ids (its tokenizer's may
        # differ, as Llama 3's instruct models' do), the tokenizer's only for a model with none.
        self.grammar_eos = vocabulary.eos_token_id
        self.stop_ids = sorted(set(map(int, eos_token_ids))) or [vocabulary.eos_token_id]
        self.device = device
        self.state = self.index.get_initial_state()
        self._next: dict[tuple[int, int], int | None] = {}
        # The automaton by what it is compiled from, never by id(): an evicted one's id may be
        # reused.  By its expression's digest, not its text: every kept row would hold the text
        # (a client's, as long as a request, or a schema's, megabytes) outside the byte bound.
        digest = hashlib.sha256(regex.encode("utf-8", "surrogatepass")).digest()
        self._key = (digest, vocabulary.fingerprint, tuple(self.stop_ids), self.vocab_size, str(device))

    def _step(self, state: int | None, token: int) -> int | None:
        if state is self._DEAD:
            return self._DEAD
        key = (state, token)
        if key not in self._next:
            self._next[key] = self.index.get_next_state(state, token)
        return self._next[key]

    def _mask(self, state: int | None) -> torch.Tensor:
        key = (*self._key, state)
        mask = _MASKS.get(key)
        if mask is None:
            if state is self._DEAD:
                mask = torch.ones(self.vocab_size, dtype=torch.bool)
            else:
                allowed = [t for t in self.index.get_allowed_tokens(state) if t < self.vocab_size and
                           t != self.grammar_eos]
                if self.index.is_final_state(state):
                    allowed += self.stop_ids
                mask = torch.zeros(self.vocab_size, dtype=torch.bool)
                mask[torch.tensor(allowed, dtype=torch.long)] = True
            mask = mask.to(self.device)
            _MASKS.put(key, mask)
        return mask

    def advance(self, tokens: Sequence[int]) -> None:
        """Commit tokens of the completion."""
        for token in tokens:
            self.state = self._step(self.state, int(token))

    def masks(self, paths: Sequence[Sequence[int]]) -> torch.Tensor:
        """[R, V] bool: the tokens allowed after each path (drafted tokens after the
        completion so far)."""
        rows = []
        for path in paths:
            state = self.state
            for token in path:
                state = self._step(state, int(token))
            rows.append(self._mask(state))
        return torch.stack(rows) if rows else torch.zeros(0, self.vocab_size, dtype=torch.bool, device=self.device)
