"""Token-level verifiers: which drafted tokens the target accepts.

    >>> from rayspec.verify import get_verifier, available_verifiers
    >>> v = get_verifier("rrsw")
    >>> drafts = v.sample_drafts(q, k=4, generator=g)
    >>> token, index = v.verify(p, q, drafts, g)

See `rayspec.verify.base` for the contract and the notation (p target, q draft).
"""

from __future__ import annotations

import functools
import importlib
import inspect

from rayspec.verify.base import Verifier
from rayspec.verify.tree_walk import TreeVerdict, walk_tree

# name -> "module:class"; imported on first use, so a CLI listing names stays fast.
_REGISTRY: dict[str, str] = {
    "greedy": "rayspec.verify.greedy:GreedyVerifier",
    "sps": "rayspec.verify.sps:SpeculativeSampling",
    "rrs": "rayspec.verify.rrs:RecursiveRejectionSampling",
    "rrsw": "rayspec.verify.rrsw:RecursiveRejectionSamplingWithoutReplacement",
    "spectr": "rayspec.verify.spectr:SpecTr",
    "spechub": "rayspec.verify.spechub:SpecHub",
    "is": "rayspec.verify.importance:ImportanceSampling",
    "is-weighted": "rayspec.verify.importance:WeightedImportanceSampling",
    "gumbel": "rayspec.verify.gumbel:GumbelCoupling",
    "minhash": "rayspec.verify.minhash:MinHashCoupling",
    "mentored": "rayspec.verify.mentored:MentoredDecoding",
    "topk": "rayspec.verify.topk:TopKPointMass",
}


def available_verifiers() -> list[str]:
    return list(_REGISTRY)


def verifier_class(name: str) -> type[Verifier]:
    if not isinstance(name, str) or name not in _REGISTRY:  # a YAML list or mapping is no name either
        raise ValueError(
            f"unknown verifier {name!r}; available: {', '.join(available_verifiers())}"
        )
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


@functools.cache
def _parameters(cls: type[Verifier]) -> dict[str, inspect.Parameter]:
    """A verifier class's keyword parameters.  Cached: `inspect.signature` of an inherited
    `object.__init__` parses its text signature (0.14 ms here) and a request asks three times."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {name: parameter for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and parameter.kind in named}  # not object.__init__'s *args, **kwargs


def get_verifier(name: str, **params) -> Verifier:
    """The verifier `name`, configured by `params` (e.g. get_verifier("mentored", kl_budget=0.1))."""
    cls = verifier_class(name)
    signature = _parameters(cls)
    unknown = set(params) - set(signature)
    if unknown:
        allowed = ", ".join(sorted(signature)) or "none"
        raise ValueError(
            f"verifier {name!r} takes no parameter(s) {', '.join(sorted(unknown))}; "
            f"its parameters: {allowed}"
        )
    for key, value in params.items():  # parameters arrive from requests: a wrong type is bad input
        default = signature[key].default
        kinds = {bool: (bool,), int: (int,), float: (int, float)}.get(type(default))
        if kinds and value is not None and (type(value) not in kinds):
            raise ValueError(f"verifier {name!r}: {key} must be {type(default).__name__}, got {value!r}")
    try:
        return cls(**params)
    except TypeError as error:
        raise ValueError(f"verifier {name!r}: bad parameters {params}: {error}") from None


__all__ = ["Verifier", "TreeVerdict", "available_verifiers", "get_verifier", "verifier_class", "walk_tree"]
