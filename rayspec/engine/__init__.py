"""The speculative decoding loop and its in-process drafter and target."""

from rayspec.engine.engine import Chunk, Generation, GenerationStats, SpeculativeEngine, StepStats
from rayspec.engine.interfaces import Draft, Outcome, SequenceSpec
from rayspec.engine.local import LocalDrafter, LocalTarget
from rayspec.engine.trees import parse_tree_spec

__all__ = [
    "Chunk", "Draft", "Generation", "GenerationStats", "LocalDrafter", "LocalTarget", "Outcome",
    "SequenceSpec", "SpeculativeEngine", "StepStats", "parse_tree_spec",
]
