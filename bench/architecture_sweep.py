"""Every causal LM of the installed transformers, tiny and random, through rayspec's tree
attention: is it refused at load (`check_tree_attention`), and if not, are each tree node's
logits its own forward's for the node's path (the oracle of tests/models/test_architectures.py,
within 1e-3) and is speculative greedy decoding plain greedy decoding (kary:2x3, 20 tokens)?

    python bench/architecture_sweep.py [MODEL_TYPE ...]

Two passes per model: HF's default initialisation, and sharper random weights
(`initializer_range` 0.2 and the like), under which attention is peaked enough for a wrong
position or mask to move the logits.  A model is OK when both match in both passes, WRONG when
it runs but does not (the dangerous case: no error), CRASH when it fails, REFUSED when
`check_tree_attention` refuses it, SKIPPED when it is no standalone decoder-only LM or cannot be
built tiny.  Writes bench/results/architecture_sweep.{json,md} (`--out`), about 30 s on one
CPU thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

transformers.logging.set_verbosity_error()
torch.set_num_threads(1)

from common import machine, save_results  # noqa: E402

from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.models.tree_lm import check_tree_attention
from tests.models.test_architectures import PROMPT, VOCAB, node_differences, plain_greedy, tiny
from tests.tiny_models import noisy_copy

TIME_LIMIT = 240  # seconds per model and pass

# Not decoder-only LMs: decoder halves of encoder-decoder models, and multimodal-only wrappers.
ENCODER_DECODER = {"bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp", "pegasus",
                   "plbart", "prophetnet", "trocr", "whisper", "musicgen", "musicgen_melody", "bert-generation",
                   "moss_transcribe_diarize"}
# Bidirectional encoders that HF lets run as causal decoders (is_decoder=True).
ENCODERS = {"bert", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert", "rembert",
            "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod",
            "xlm", "xlnet", "reformer"}
MULTIMODAL = {"fuyu", "git", "got_ocr2", "mllama", "emu3", "phi4_multimodal", "gemma3n", "gemma4", "gemma4_unified",
              "gemma3", "dots3_note", "moshi"}

# The standard tiny shape, under every name configs use for it.
BASE = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    intermediate_size=64, max_position_embeddings=128, head_dim=8,
    n_embd=32, n_layer=2, n_head=4, n_positions=128, n_ctx=128, d_model=32, n_layers=2, n_heads=4, ffn_dim=64,
    n_inner=64, d_ff=64, num_layers=2, num_heads=4, num_kv_heads=2, multi_query_group_num=2, ffn_hidden_size=64,
    # MoE
    num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
    shared_expert_intermediate_size=16, n_shared_experts=1, num_shared_experts=1, first_k_dense_replace=1, n_group=1,
    topk_group=1, moe_topk=2, moe_num_experts=4, expert_intermediate_size=16, ffn_config=None,
    # MLA
    q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8,
    # misc
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
)
# Per-architecture additions/overrides (found by trying).
EXTRA: dict[str, dict] = {
    "codegen": dict(rotary_dim=4), "gptj": dict(rotary_dim=4),
    "zamba": dict(layers_block_type=["mamba", "hybrid"], n_mamba_heads=2),
    "zamba2": dict(layers_block_type=["mamba", "hybrid"], n_mamba_heads=2),
    "bamba": dict(mamba_n_heads=4, mamba_d_state=16), "granitemoehybrid": dict(mamba_n_heads=4, mamba_d_state=16),
    "falcon_h1": dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_ssm=64, mamba_d_state=16),
    "mamba2": dict(num_heads=8, state_size=16), "zaya": dict(num_experts_per_tok=1),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=8),
    "gemma4_assistant": dict(hidden_size_per_layer_input=0),
    "gemma4_text": dict(vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8),
    "gemma3n_text": dict(vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8, num_kv_shared_layers=0,
                         laurel_rank=4, layer_types=["sliding_attention", "full_attention"],
                         activation_sparsity_pattern=[0.0, 0.0]),
    "dbrx": dict(attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0),
                 ffn_config=dict(ffn_hidden_size=64, moe_num_experts=4, moe_top_k=2)),
    "cohere_compass_text": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    "dory": dict(num_hidden_layers=3, n_input_layers=1, n_recurrent_layers=1, n_output_layers=1),
    "longcat_flash": dict(head_dim=4, expert_ffn_hidden_size=16, zero_expert_num=2, num_key_value_heads=4),
    "reformer": dict(axial_pos_shape=[8, 16], axial_pos_embds_dim=[16, 16], attn_layers=["local", "local"],
                     local_attn_chunk_length=8, attention_head_size=8, feed_forward_size=64),
    "roc_bert": dict(pronunciation_vocab_size=16, shape_vocab_size=16, pronunciation_embed_dim=8, shape_embed_dim=8),
}


def config_fields(cls) -> set[str]:
    try:
        names = {f.name for f in dataclasses.fields(cls)}
    except TypeError:
        import inspect
        names = set(inspect.signature(cls.__init__).parameters)
    return names | set(getattr(cls, "attribute_map", {}))


def build_config(model_type: str, sharp: bool):
    cls = CONFIG_MAPPING[model_type]
    fields = config_fields(cls)
    default = cls()
    kwargs = {}
    for name, value in BASE.items():
        if name not in fields:
            continue
        if value is None and name in ("partial_rotary_factor", "ffn_config"):
            continue
        kwargs[name] = value
    # only keep a small sliding window where the default has one; 8 < prompt + 20 new tokens
    if "sliding_window" in fields and getattr(default, "sliding_window", None) is not None:
        kwargs["sliding_window"] = 8
    if "kv_lora_rank" in fields:  # MLA: keys/values have every query head (real configs: kv heads = heads)
        kwargs["num_key_value_heads"] = 4
    if model_type in ENCODERS:
        kwargs["is_decoder"] = True
    kwargs.update(EXTRA.get(model_type, {}))
    if sharp:  # larger random weights: sharper attention, so that position and mask errors show in the logits
        for name, value in (("initializer_range", 0.2), ("init_std", 0.2), ("initializer_factor", 10.0)):
            if name in fields:
                kwargs[name] = value
    config = cls(**kwargs)
    return config, kwargs


class Timeout(Exception):
    pass


def _alarm(*_):
    raise Timeout(f"over {TIME_LIMIT}s")


def first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}" for f in frames[-4:][::-1])


def sweep_one(model_type: str, sharp: bool) -> dict:
    result = {"arch": model_type, "class": MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]}
    if model_type in ENCODER_DECODER:
        return {**result, "status": "SKIPPED", "why": "decoder of an encoder-decoder model"}
    if model_type in ("gemma4_assistant", "gemma4_unified_assistant"):
        return {**result, "status": "SKIPPED",
                "why": "MTP assistant head: ignores input_ids, needs the target's hidden states"}
    if model_type in MULTIMODAL:
        return {**result, "status": "SKIPPED", "why": "multimodal-only class"}
    try:
        config, kwargs = build_config(model_type, sharp)
        result["kwargs"] = {k: v for k, v in kwargs.items()}
    except Exception as exc:
        return {**result, "status": "SKIPPED", "why": "config: " + first_line(exc)}
    try:
        check_tree_attention(config)
    except ValueError as exc:
        return {**result, "status": "REFUSED", "why": first_line(exc)[:160]}
    except Exception as exc:
        return {**result, "status": "CRASH", "why": "check_tree_attention: " + first_line(exc), "where": where(exc)}
    try:
        model = tiny(config)
        if model_type == "xmod":
            model.set_default_language("en_XX")
        params = sum(p.numel() for p in model.parameters())
        result["params"] = params
        if params > 3_000_000:
            return {**result, "status": "SKIPPED", "why": f"not tiny: {params} parameters"}
        check_tree_attention(model.config)
        with torch.no_grad():
            model(input_ids=torch.tensor([PROMPT]))
    except Exception as exc:
        if isinstance(exc, ValueError) and "tree" in str(exc):
            return {**result, "status": "REFUSED", "why": first_line(exc)[:160]}
        return {**result, "status": "SKIPPED", "why": "instantiate/plain forward: " + first_line(exc),
                "where": where(exc)}

    status = "OK"
    # oracle
    try:
        diffs = node_differences(model)
        result["oracle_max_diff"] = max(diffs)
        result["oracle_diffs"] = [round(d, 6) for d in diffs]
        if not max(diffs) <= 1e-3:  # NaN counts as wrong
            status = "WRONG"
    except Exception as exc:
        result["oracle_error"] = first_line(exc)
        result["oracle_where"] = where(exc)
        status = "CRASH"
    # greedy
    try:
        expected = plain_greedy(model, PROMPT, 20)
        drafter = noisy_copy(model)
        engine = SpeculativeEngine(LocalTarget(model), LocalDrafter(drafter), verifier="greedy",
                                   tree="kary:2x3")
        run = engine.run(PROMPT, max_new_tokens=20, temperature=0, ignore_eos=True)
        result["greedy_match"] = run.tokens == expected
        if run.tokens != expected:
            result["greedy_expected"] = expected
            result["greedy_got"] = list(run.tokens)
            first = next((i for i, (a, b) in enumerate(zip(run.tokens, expected)) if a != b), None)
            result["greedy_first_diff"] = first
            if status == "OK":
                status = "WRONG"
        try:
            result["tokens_per_step"] = round(float(run.stats.tokens_per_step), 3)
        except Exception:
            pass
    except Exception as exc:
        result["greedy_error"] = first_line(exc)
        result["greedy_where"] = where(exc)
        if status != "WRONG":
            status = "CRASH"
    result["status"] = status
    return result


# The worse of two passes' outcomes, for a model that ran.
SEVERITY = {"OK": 0, "CRASH": 1, "WRONG": 2}


def sweep(model_type: str) -> dict:
    """Both passes of one model: its outcome (the worse pass's) and each pass's figures."""
    passes = {}
    for sharp in (False, True):
        start = time.time()
        signal.alarm(TIME_LIMIT)
        try:
            result = sweep_one(model_type, sharp)
        except Exception as exc:  # a timeout, or anything unexpected
            result = {"arch": model_type, "status": "CRASH", "why": "sweep: " + first_line(exc), "where": where(exc)}
        finally:
            signal.alarm(0)
        result["seconds"] = round(time.time() - start, 1)
        passes["sharp" if sharp else "default"] = result
        if result["status"] in ("REFUSED", "SKIPPED"):
            return {"arch": model_type, "status": result["status"], "passes": passes}
    status = max((p["status"] for p in passes.values()), key=SEVERITY.__getitem__)
    return {"arch": model_type, "status": status, "passes": passes}


def markdown(results) -> str:
    rows = results["rows"]
    m = results["machine"]
    lines = [f"# Every causal LM of transformers {results['transformers']} through tree attention "
             f"({m['device_name']}, torch {m['torch']})", "",
             "Tiny random weights (vocab 64, hidden 32, 2 layers), two passes (HF's initialisation, then sharper "
             "weights); OK: each tree node's logits are its path's own forward's within 1e-3 and speculative greedy "
             "decoding is plain greedy decoding, in both passes.", "",
             "| outcome | models | model types |", "|---|---|---|"]
    for status in ("OK", "REFUSED", "WRONG", "CRASH", "SKIPPED"):
        names = [row["arch"] for row in rows if row["status"] == status]
        lines.append(f"| {status} | {len(names)} | {', '.join(names) or '-'} |")
    problems = [row for row in rows if row["status"] in ("WRONG", "CRASH")]
    if problems:
        lines += ["", "| model type | pass | worst logit difference | greedy tokens match | error |",
                  "|---|---|---|---|---|"]
        for row in problems:
            for name, result in row["passes"].items():
                worst = result.get("oracle_max_diff")
                error = result.get("oracle_error") or result.get("greedy_error") or result.get("why") or ""
                lines.append(f"| {row['arch']} | {name} | {'-' if worst is None else f'{worst:.3g}'} | "
                             f"{result.get('greedy_match', '-')} | {error[:120]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_types", nargs="*", help="default: every AutoModelForCausalLM entry")
    parser.add_argument("--out", default="architecture_sweep")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    for name in args.model_types or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        rows.append(sweep(name))
        print(f"{name}: {rows[-1]['status']}", flush=True)
    results = {"machine": machine("cpu"), "transformers": transformers.__version__, "rows": rows}
    save_results(args.out, results, markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
