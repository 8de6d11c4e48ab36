"""From logits to the distributions verifiers see: temperature, then top-k, then top-p.

The same function serves the target and the drafter, so both sides see identically
processed laws (a mismatch between the q drafts are drawn from and the q used in the ratios
would break losslessness).  Temperature 0 means greedy: a one-hot law on the first argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k truncation

    def __post_init__(self):
        if not 0 <= self.temperature < float("inf"):  # NaN fails too
            raise ValueError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def logits_to_probs(logits: torch.Tensor, params: SamplingParams, dtype=torch.float32) -> torch.Tensor:
    """[..., V] logits -> [..., V] probabilities after temperature, top-k and top-p."""
    logits = logits.to(dtype)
    if params.greedy:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    # Shifted first: logits / T overflows float32 for a tiny T (1e-40), and softmax of inf is NaN.
    logits = (logits - logits.amax(-1, keepdim=True)) / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        # Keep the smallest prefix reaching top_p: a token stays if the mass before it is
        # still short of top_p (so the most likely token always stays).
        keep_sorted = mass_before < params.top_p
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def half_precision(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`probs` rounded to float16 and renormalised: (the law, its row divisors), the law being
    exactly `weights.float() / divisors` for the float16 `weights = (law * divisors).half()`.

    A drafter drafts from this law so that its rows can cross a wire as float16 values and a
    float32 divisor per row — half the bytes — and decode to the very law it drew from, bit
    for bit (float32 division is correctly rounded everywhere), which exact verification
    needs.  Rounding moves each probability by at most 2^-11 of itself; float16 subnormals
    keep probabilities down to 6e-8, and nothing smaller is ever drafted.  Recovering
    `weights` from the law is exact: law * divisors is within a few float32 ulps of a
    float16 value, far inside half a float16 step."""
    weights = probs.to(torch.float16).float()
    divisors = weights.sum(-1)
    return weights / divisors.unsqueeze(-1), divisors


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, top: int,
                   rows_at_once: int = 1024) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probabilities of `tokens` [n], row r's token under row r of `logits` [n, V], in the
    model's raw law (the log-softmax of its logits: temperature 1, no top-k or top-p, what
    OpenAI's API and vLLM report), and each row's `top` most likely tokens.

    Returns (chosen [n], top values [n, k], top ids [n, k]) on the CPU, float32 and int64,
    most likely first, with k = min(top, V).  Rows are taken `rows_at_once` at a time: a long
    prompt's log-softmax then needs one block beside its logits, not a second [n, V] tensor
    (2 GB of float32 for 4k tokens at V = 128k)."""
    k = min(top, logits.shape[-1])
    tokens = tokens.to(logits.device, torch.long).view(-1)
    blocks = []
    for start in range(0, max(len(logits), 1), rows_at_once):  # blocks of rows, not the vocabulary
        log_p = torch.log_softmax(logits[start : start + rows_at_once].float(), dim=-1)
        chosen = log_p.gather(-1, tokens[start : start + rows_at_once].view(-1, 1)).squeeze(-1)
        values, ids = torch.topk(log_p, k, dim=-1)
        blocks.append((chosen.cpu(), values.cpu(), ids.cpu()))
    chosen, values, ids = (torch.cat(parts) for parts in zip(*blocks))
    return chosen, values, ids
