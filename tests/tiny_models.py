"""Tiny random Llama pairs for runtime tests: a target, and a drafter that is a noisy copy of
it (so drafts get accepted often enough to exercise deep paths)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(vocab: int = 64, seed: int = 0, context: int = 128, layers: int = 2, hidden: int = 32, eos=None):
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=2 * hidden, max_position_embeddings=context,
        eos_token_id=eos, bos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper logits than the default init, like a trained model's
        model.lm_head.weight.mul_(8.0)
    return model


def noisy_copy(model, noise: float = 0.05, seed: int = 1):
    torch.manual_seed(seed)
    copy = LlamaForCausalLM(model.config).eval()
    with torch.no_grad():
        for mine, theirs in zip(copy.parameters(), model.parameters()):
            mine.copy_(theirs + noise * theirs.std() * torch.randn_like(theirs))
    return copy
