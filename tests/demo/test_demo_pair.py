"""The shipped demo pair: loads offline like a downloaded pair, and its card tells the truth.

Recomputes the card's check figures (8 held-out windows, 2,048 positions, stored with their
tokens in metrics.json) from the shipped weights; the full figures must agree with the card.
"""

from __future__ import annotations

import json
import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

from rayspec.demo import DEMO_DIR, DRAFTER_PATH, METRICS_PATH, PROMPTS_PATH, TARGET_PATH, load_prompts  # noqa: E402
from rayspec.demo.corpus import split_of, stdlib_root  # noqa: E402
from rayspec.demo.train import DRAFTER_ARCH, TARGET_ARCH, VOCAB_SIZE, evaluate_pair  # noqa: E402

PAIR = {"target": (TARGET_PATH, TARGET_ARCH), "drafter": (DRAFTER_PATH, DRAFTER_ARCH)}


@pytest.fixture(scope="module")
def metrics():
    return json.loads(METRICS_PATH.read_text())


@pytest.fixture(scope="module")
def models():
    from transformers import AutoModelForCausalLM

    return {name: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            for name, (path, _) in PAIR.items()}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TARGET_PATH)


@pytest.mark.parametrize("name", PAIR)
def test_config_is_the_documented_llama(name, models):
    path, arch = PAIR[name]
    raw = json.loads((path / "config.json").read_text())
    assert raw["architectures"] == ["LlamaForCausalLM"] and raw["model_type"] == "llama"
    assert raw.get("dtype", raw.get("torch_dtype")) == "float16"
    config = models[name].config
    assert {k: getattr(config, k) for k in arch} == arch
    assert config.vocab_size == VOCAB_SIZE and config.tie_word_embeddings
    assert config.max_position_embeddings >= 1024
    assert type(models[name]).__name__ == "LlamaForCausalLM"
    assert next(models[name].parameters()).dtype == torch.float32


@pytest.mark.parametrize("name", PAIR)
def test_weights_are_float16_on_disk(name):
    with safe_open(PAIR[name][0] / "model.safetensors", framework="pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"F16"}


def test_sizes(models):
    shipped = sum(f.stat().st_size for f in DEMO_DIR.rglob("*") if f.is_file())
    assert shipped <= 64 * 2**20
    count = {n: sum(p.numel() for p in m.parameters()) for n, m in models.items()}
    assert 10 <= count["target"] / count["drafter"] <= 30


def test_tokenizer_is_shared_and_loads_from_both_directories(tokenizer):
    from transformers import AutoTokenizer

    assert (TARGET_PATH / "tokenizer.json").read_bytes() == (DRAFTER_PATH / "tokenizer.json").read_bytes()
    other = AutoTokenizer.from_pretrained(DRAFTER_PATH)
    assert len(tokenizer) == len(other) == VOCAB_SIZE
    assert tokenizer.eos_token == tokenizer.bos_token == tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token_id == 0
    assert tokenizer.model_max_length >= 1024


def test_tokenizer_round_trips_python_source(tokenizer):
    texts = [(stdlib_root() / "textwrap.py").read_text(), open(__file__).read(),
             "def f(x):\n\treturn 'é' + \"\\u00e9\"  # ünïcode, tabs, trailing spaces   \n\n\n"]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert ids.count(0) == text.count("<|endoftext|>")  # nothing added
        assert tokenizer.decode(ids) == text
    assert len(tokenizer(texts[0])["input_ids"]) < len(texts[0]) / 3  # BPE actually merges


def test_chat_template_renders_comments(tokenizer):
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "sort a list\nin place"}],
        tokenize=False, add_generation_prompt=True)
    assert text == "# system: Be brief.\n# user: sort a list\n# in place\n# assistant:\n"


def test_card_matches_metrics(metrics):
    card = (DEMO_DIR / "README.md").read_text()
    held = metrics["heldout"]
    for label, key in [("target loss", "loss_target"), ("drafter loss", "loss_drafter"),
                       ("acceptance 1 − TV", "acceptance")]:
        row = re.search(rf"\|[^|\n]*{re.escape(label)}[^|\n]*\| ([0-9.]+) \|", card)
        assert row, label
        assert float(row.group(1)) == pytest.approx(held[key], abs=1e-4)
    assert f"{metrics['target']['params'] / 1e6:.2f} M" in card
    assert f"{metrics['drafter']['params'] / 1e6:.2f} M" in card


def test_heldout_figures_are_what_was_promised(metrics):
    held = metrics["heldout"]
    assert 0.5 <= held["acceptance"] <= 0.85
    assert held["loss_drafter"] - held["loss_target"] >= 0.2  # a clear gap, nats/token
    assert held["positions"] >= 50_000


def test_shipped_weights_reproduce_the_check_figures(models, metrics):
    check = metrics["check"]
    windows = torch.tensor(check["windows"])
    got = evaluate_pair(models["target"], models["drafter"], windows)
    assert got["positions"] == check["positions"] == 2048
    assert got["loss_target"] == pytest.approx(check["loss_target"], rel=0.01)
    assert got["loss_drafter"] == pytest.approx(check["loss_drafter"], rel=0.01)
    assert got["acceptance"] == pytest.approx(check["acceptance"], abs=0.01)
    assert 0.5 <= got["acceptance"] <= 0.85
    assert got["loss_target"] < got["loss_drafter"]


def test_prompts_are_held_out_code(tokenizer):
    prompts = json.loads(PROMPTS_PATH.read_text())["prompts"]
    assert len(prompts) >= 100
    assert load_prompts(20) == [p["text"] for p in prompts[:20]]
    assert len({p["text"] for p in prompts}) == len(prompts)
    for p in prompts:
        assert split_of(p["source"]) == "heldout", p["source"]
        assert p["text"].endswith("\n") and p["text"].rstrip().endswith(":")
        assert 32 <= len(tokenizer(p["text"])["input_ids"]) <= 128
        compile(p["text"].split("\n")[-2].strip() + " pass", p["source"], "exec")  # a def header
