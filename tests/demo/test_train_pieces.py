"""The training pipeline's parts on toy inputs: seconds, no corpus scan, no shipped pair."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from rayspec.demo.corpus import SourceFile  # noqa: E402
from rayspec.demo.prompts import build_prompts  # noqa: E402
from rayspec.demo.train import (  # noqa: E402
    Phase, SEQ_LEN, encode_stream, eval_windows, evaluate_pair, make_model, save_tokenizer,
    train_lm, train_tokenizer, windows)

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=2)
SOURCE = '''import os


class Greeter:
    """Says hello."""

    def __init__(self, name):
        self.name = name

    def greet(self, loud=False):
        text = f"hello {self.name}"
        return text.upper() if loud else text


def main(argv=None):
    print(Greeter(os.environ.get("USER", "world")).greet())
'''


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer([SOURCE * 3, "def f(x):\n    return x + 1\n"], vocab_size=400)


def test_tokenizer_saves_in_a_form_transformers_loads(tok, tmp_path):
    from transformers import AutoTokenizer

    save_tokenizer(tok, tmp_path)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    assert hf.decode(hf(SOURCE)["input_ids"]) == SOURCE
    assert hf.eos_token_id == hf.bos_token_id == hf.pad_token_id == 0
    chat = hf.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x = 1"}],
                                  tokenize=False)
    assert chat == "# user: hi\n# assistant:\nx = 1\n"


def test_stream_windows_cover_each_epoch(tok, tmp_path):
    (tmp_path / "a.py").write_text(SOURCE)
    stream = encode_stream(tok, [SourceFile("a.py", tmp_path / "a.py")] * 40)
    assert (stream == 0).sum() == 40  # one <|endoftext|> after each file
    batch = next(windows(stream, 4, torch.Generator().manual_seed(0)))
    assert batch.shape == (4, SEQ_LEN + 1)
    wins = eval_windows(stream, max_windows=5)
    assert wins.shape == (5, SEQ_LEN + 1)
    assert torch.equal(wins[0], stream[:SEQ_LEN + 1])


def train_tiny(stream, **phase):
    model = make_model(TINY, seed=0)
    record = train_lm(model, stream, Phase(**{"steps": 3, "lr": 1e-3, "batch": 2, "warmup": 2} | phase),
                      "cpu", seed=1, name="tiny")
    return model, record


def test_training_is_deterministic_given_the_seed():
    stream = torch.randint(1, 8192, (5000,), generator=torch.Generator().manual_seed(0))
    (a, rec), (b, _) = train_tiny(stream), train_tiny(stream)
    assert rec["steps"] == 3 and rec["tokens"] == 3 * 2 * SEQ_LEN
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_distillation_and_time_budget():
    stream = torch.randint(1, 8192, (5000,), generator=torch.Generator().manual_seed(0))
    teacher, _ = train_tiny(stream)
    student = make_model(TINY, seed=5)
    record = train_lm(student, stream, Phase(steps=0, lr=1e-3, batch=2, warmup=8, distill=0.5, minutes=0.02),
                      "cpu", seed=2, name="student", teacher=teacher)
    assert record["steps"] >= 9 and record["distill"] == 0.5
    assert torch.isfinite(torch.tensor(record["final_train_loss"]))


def test_evaluate_pair_of_a_model_with_itself():
    model = make_model(TINY, seed=0).eval()
    wins = torch.randint(1, 8192, (2, SEQ_LEN + 1), generator=torch.Generator().manual_seed(0))
    got = evaluate_pair(model, model, wins)
    assert got["acceptance"] == pytest.approx(1.0, abs=1e-5)
    assert got["loss_target"] == got["loss_drafter"] == pytest.approx(torch.log(torch.tensor(8192.0)).item(), abs=0.1)
    assert got["positions"] == 2 * SEQ_LEN


def test_prompts_end_after_a_def_header(tmp_path):
    (tmp_path / "m.py").write_text(SOURCE)
    count = lambda text: len(text.split())  # noqa: E731  (any monotone length works here)
    files = [SourceFile("m.py", tmp_path / "m.py")]
    prompts = build_prompts(files, count, n=10, min_tokens=5, max_tokens=40)
    assert prompts == build_prompts(files, count, n=10, min_tokens=5, max_tokens=40)
    assert prompts and {p["line"] for p in prompts} <= {7, 10, 15}  # the def lines
    for p in prompts:
        assert p["text"].splitlines()[-1].lstrip().startswith("def ")
        assert SOURCE.startswith(p["text"]) or ("\n" + p["text"]) in SOURCE
        assert 5 <= count(p["text"]) <= 40


def test_residual_projections_start_depth_scaled():
    model = make_model(dict(TINY, hidden_size=64, intermediate_size=128, num_hidden_layers=4), seed=0)
    std = 0.02 * (2 * 4) ** -0.5
    for layer in model.model.layers:
        assert layer.self_attn.o_proj.weight.std().item() == pytest.approx(std, rel=0.15)
        assert layer.mlp.down_proj.weight.std().item() == pytest.approx(std, rel=0.15)
        assert layer.self_attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.15)
