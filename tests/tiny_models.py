"""Tiny random Llama pairs for runtime tests: a target, and a drafter that is a noisy copy of
it (so drafts get accepted often enough to exercise deep paths)."""

from __future__ import annotations

from copy import deepcopy

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
    copy = type(model)(model.config).eval()
    with torch.no_grad():
        for mine, theirs in zip(copy.parameters(), model.parameters()):
            # (a one-element parameter, such as xIELU's alphas in Apertus, has no spread: NaN)
            scale = theirs.std() if theirs.numel() > 1 else theirs.abs().mean()
            mine.copy_(theirs + noise * scale * torch.randn_like(theirs))
    return copy


def padded(model, rows: int, favoured: bool = False):
    """A copy of `model` with `rows` more embedding rows, past any tokenizer's ids (as Qwen2.5
    pads 0.5B's to 151,936 and 7B's to 152,064).  favoured: their output rows copy the first
    ones', so that the model emits padding ids often (a trained model hardly ever does)."""
    copy = deepcopy(model)  # resizing rewrites the config, which `noisy_copy`s share
    vocab = copy.config.vocab_size
    copy.resize_token_embeddings(vocab + rows, mean_resizing=False)
    if favoured:  # near copies, not copies: ties would make greedy decoding depend on their order
        generator = torch.Generator().manual_seed(rows)
        with torch.no_grad():
            first = model.get_output_embeddings().weight[:rows]
            copy.get_output_embeddings().weight[vocab:] = first + 0.1 * first.std() * torch.randn(
                first.shape, generator=generator)
    return copy.eval()


def word_tokenizer(size: int, prefix: str = "t", renamed=()):
    """A real tokenizer of `size` tokens ("t0", "t1", ...; another `prefix`, other tokens; the
    ids in `renamed` named "x<id>"), for the engine's checks that read it."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    names = {i: f"x{i}" if i in renamed else f"{prefix}{i}" for i in range(size)}
    words = models.WordLevel({name: i for i, name in names.items()}, unk_token=names[0])
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(words))


SLIDING_WINDOW_ARCHITECTURES = ("mistral", "qwen2", "gemma2", "gemma3")


def tiny_sliding_window(architecture: str, window: int = 4, vocab: int = 64, seed: int = 0):
    """A tiny random model whose attention slides over `window` positions: Mistral's in every
    layer; Qwen2's, Gemma2's and Gemma3's in one of their two, beside a full one (HF's hybrid
    models, which take a mask per layer type)."""
    import transformers

    common = dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, max_position_embeddings=128, sliding_window=window)
    configs = {
        "mistral": lambda: transformers.MistralConfig(**common),
        "qwen2": lambda: transformers.Qwen2Config(**common, use_sliding_window=True, max_window_layers=1),
        "gemma2": lambda: transformers.Gemma2Config(**common, head_dim=8),
        "gemma3": lambda: transformers.Gemma3TextConfig(**common, head_dim=8,
                                                         layer_types=["full_attention", "sliding_attention"]),
    }
    if architecture not in configs:
        raise ValueError(f"architecture must be one of {', '.join(configs)}; got {architecture!r}")
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(configs[architecture]()).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def nan_row_at(model, position: int):
    """Hook `model`'s output layer to give a NaN row at `position` of any forward over more positions."""
    def poison(module, inputs, output):
        if output.shape[-2] > position:
            output = output.clone()
            output[..., position, :] = float("nan")
        return output

    return model.lm_head.register_forward_hook(poison)
