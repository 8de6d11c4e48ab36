"""Models on one machine: loading HF causal LMs, tree-masked forwards over a KV cache."""

from rayspec.models.loading import load_causal_lm, resolve_device, resolve_dtype
from rayspec.models.tree_lm import TreeLM

__all__ = ["TreeLM", "load_causal_lm", "resolve_device", "resolve_dtype"]
