"""Communication-free coupling (seed 000): drafter and target sample from shared noise."""

from rayspec.coupling.noise import KeyedNoise, keyed, shared_uniform

__all__ = ["KeyedNoise", "keyed", "shared_uniform"]
