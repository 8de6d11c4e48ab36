"""The architectures the README names: for each (tiny random weights), the engine's greedy
decoding — target-only, and speculative over a tree with a noisy copy as drafter — equals
HF's plain greedy decoding token for token, each tree node's logits are those of its path run
alone, and ALiBi, recurrent and chunked-attention models are refused with a message.
(Sliding-window models are held to HF's own forward node by node in test_tree_lm.py.)"""

from __future__ import annotations

import re

import pytest
import torch
import transformers

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models import TreeLM
from rayspec.tree.structure import TreeShape
from tests.tiny_models import noisy_copy

VOCAB = 64
COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=128)
CONFIGS = {
    "mistral": lambda: transformers.MistralConfig(**COMMON, num_key_value_heads=2, sliding_window=None),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON, num_key_value_heads=2),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**COMMON),
    "phi3": lambda: transformers.Phi3Config(**COMMON, num_key_value_heads=2, pad_token_id=0),
    "opt": lambda: transformers.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          ffn_dim=64, max_position_embeddings=128, word_embed_proj_dim=32),
    "falcon": lambda: transformers.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4),
}
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


def tiny(config) -> torch.nn.Module:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # sharper logits than the default init, so that greedy paths are not ties
        model.get_output_embeddings().weight.mul_(8.0)
    model.config.eos_token_id = model.generation_config.eos_token_id = None
    return model


@torch.no_grad()
def plain_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@torch.no_grad()
def node_differences(model) -> list[float]:
    """Per node of a 10-node tree after `PROMPT`, the largest difference between its logits in
    one tree-masked forward and the model's own for the node's path run alone."""
    shape = TreeShape((-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(VOCAB, (shape.size,), generator=generator).tolist()
    tokens[0] = PROMPT[-1]
    lm = TreeLM(model)
    lm.prefill(PROMPT[:-1])
    logits = lm.forward(tokens, shape.parents, shape.depth)
    differences = []
    for node in range(shape.size):
        path = PROMPT[:-1] + [tokens[i] for i in [0, *shape.path_to(node)]]
        alone = model(input_ids=torch.tensor([path])).logits[0, -1].float()
        differences.append(float((logits[node].float() - alone).abs().max()))
    return differences


@pytest.mark.parametrize("architecture", sorted(CONFIGS))
def test_each_tree_nodes_logits_are_hfs_for_its_path(architecture):
    differences = node_differences(tiny(CONFIGS[architecture]()))
    assert max(differences) <= 1e-4, differences


@pytest.mark.parametrize("architecture", sorted(CONFIGS))
def test_greedy_decoding_is_hfs_for_each_architecture(architecture):
    target = tiny(CONFIGS[architecture]())
    drafter = noisy_copy(target, noise=0.05)
    expected = plain_greedy(target, PROMPT, 40)
    alone = SpeculativeEngine(LocalTarget(target, prefix_cache_mb=0))
    assert alone.run(PROMPT, max_new_tokens=40, temperature=0, ignore_eos=True).tokens == expected
    for verifier, tree in (("greedy", "kary:2x3"), ("rrsw", "sequoia:16")):
        engine = SpeculativeEngine(LocalTarget(target, prefix_cache_mb=0), LocalDrafter(drafter, prefix_cache_mb=0),
                                   verifier=verifier, tree=tree)
        run = engine.run(PROMPT, max_new_tokens=40, temperature=0, ignore_eos=True)
        assert run.tokens == expected, verifier
        assert run.stats.tokens_per_step > 1.2, verifier  # the trees' drafts were accepted, deep ones too


@pytest.mark.parametrize("config", [
    lambda: transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4),
    lambda: transformers.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      alibi=True),
    lambda: transformers.MptConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4),
], ids=["bloom", "falcon-alibi", "mpt"])
def test_alibi_models_are_refused_with_a_message(config):
    model = tiny(config())
    for side in (LocalTarget, LocalDrafter):
        with pytest.raises(ValueError, match="use ALiBi position biases, which tree attention cannot drive"):
            side(model)


@pytest.mark.parametrize("config, kinds", [
    (lambda: transformers.Qwen3NextConfig(**COMMON, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
                                          linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                                          num_experts=2, num_experts_per_tok=1, moe_intermediate_size=16,
                                          shared_expert_intermediate_size=16,
                                          layer_types=["linear_attention", "full_attention"]), '"linear_attention"'),
    (lambda: transformers.JambaConfig(**COMMON, num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1,
                                      expert_layer_period=2, expert_layer_offset=1, num_experts=2, mamba_d_state=4,
                                      mamba_expand=1, use_mamba_kernels=False), '"linear_attention"'),
    (lambda: transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, state_size=4,
                                      use_mambapy=True), '"linear_attention"'),
    (lambda: transformers.Llama4TextConfig(**COMMON, num_key_value_heads=2, head_dim=8, attention_chunk_size=4,
                                           num_local_experts=2, intermediate_size_mlp=64, no_rope_layers=[1, 0],
                                           layer_types=["chunked_attention", "full_attention"]),
     '"chunked_attention"'),
    (lambda: transformers.RwkvConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                                     context_length=128), "recurrent"),
], ids=["qwen3_next", "jamba", "mamba", "llama4", "rwkv"])
def test_recurrent_and_chunked_attention_models_are_refused_with_a_message(config, kinds):
    """Before this, Qwen3-Next's tree logits were 0.2 off its own for each node's path, with no
    error (its linear-attention state runs through every branch laid out before a node);
    Jamba's were 0.002 off; Mamba, RWKV and Llama 4's chunked attention failed mid-forward."""
    model = tiny(config())
    for side in (LocalTarget, LocalDrafter):
        with pytest.raises(ValueError, match=f"models have {kinds} layers, which a tree mask cannot steer"):
            side(model)


@pytest.mark.parametrize("config, reason", [
    (lambda: transformers.GPTNeoConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4,
                                       intermediate_size=64, max_position_embeddings=128, window_size=8,
                                       attention_types=[[["global", "local"], 1]]),
     "its local layers' window counts cache rows"),
    (lambda: transformers.RoFormerConfig(**COMMON, is_decoder=True), "its rotary positions count cache rows"),
    (lambda: transformers.RobertaConfig(**COMMON, is_decoder=True, pad_token_id=0),
     "it numbers positions from its padding id on"),
    (lambda: transformers.OpenAIGPTConfig(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128),
     "it keeps no cache"),
], ids=["gpt_neo", "roformer", "roberta", "openai-gpt"])
def test_models_whose_own_masks_or_positions_override_the_trees_are_refused(config, reason):
    """GPT-Neo's tree logits were up to 16 off its own per path with sharper weights (its local
    window counts cache rows), RoFormer's 15 and a RoBERTa decoder's 2-21, with no error;
    GPT-1 failed mid-forward (`bench/results/architecture_sweep.md`)."""
    model = tiny(config())
    for side in (LocalTarget, LocalDrafter):
        with pytest.raises(ValueError, match=f"models cannot run tree attention: {reason}"):
            side(model)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_attention_implementations_that_take_the_trees_mask_give_each_paths_logits(implementation):
    model = tiny(transformers.LlamaConfig(**COMMON))
    model.set_attn_implementation(implementation)
    LocalTarget(model)
    assert max(node_differences(model)) <= 1e-4


def test_attention_implementations_that_cannot_take_the_trees_mask_are_refused():
    model = tiny(transformers.LlamaConfig(**COMMON))
    model.set_attn_implementation("paged|eager")
    assert max(node_differences(model)) > 0.01  # why: its logits are not the paths'
    for implementation in ("paged|eager", "flex_attention", "flash_attention_2"):
        model.config._attn_implementation = implementation  # as loaded so (flash attention is not installed here)
        for side in (LocalTarget, LocalDrafter):
            with pytest.raises(ValueError, match=rf"^this model's attention runs on '{re.escape(implementation)}', "
                                                 rf"which cannot take a tree's mask \(rayspec needs 'sdpa' or "
                                                 rf"'eager'\): load it with attn_implementation='sdpa', or call "
                                                 rf"model.set_attn_implementation\('sdpa'\)$"):
                side(model)


def test_a_model_in_training_mode_is_refused_until_put_in_eval_mode():
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS["gpt2"]())  # dropout 0.1, and training
    with torch.no_grad():  # why: each forward draws its dropout, so its logits
        assert not torch.equal(model(input_ids=torch.tensor([PROMPT])).logits,
                               model(input_ids=torch.tensor([PROMPT])).logits)
    for side in (LocalTarget, LocalDrafter):
        with pytest.raises(ValueError, match=r"^the model is in training mode, where dropout would draw each "
                                             r"forward's logits at random \(greedy decoding would not repeat\): "
                                             r"call model.eval\(\) before serving it$"):
            side(model)
    model.eval()
    engine = SpeculativeEngine(LocalTarget(model, prefix_cache_mb=0), LocalDrafter(model, prefix_cache_mb=0),
                               verifier="greedy", tree="kary:2x2")
    assert engine.run(PROMPT, max_new_tokens=12, temperature=0, ignore_eos=True).tokens == plain_greedy(model, PROMPT, 12)
