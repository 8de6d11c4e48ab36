"""Train the demo pair from a seed: tokenizer, target, drafter, evaluation, model card.

    python -m rayspec.demo.train [--seed 0] [--out rayspec/demo/pair] [--device auto|cpu|cuda]
                                 [--target-steps N | --target-minutes M]
                                 [--drafter-steps N | --drafter-minutes M]

The default recipe is a fixed number of steps, so a run is deterministic given the seed on a
given machine; it was sized to finish within two hours on an idle 2-core CPU.  ``--*-minutes``
trades that determinism for a wall-clock budget: the step count is fixed after the first few
steps from their measured speed (the warm-up does not depend on it) and recorded in the card.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# OpenMP threads that spin while waiting burn a shared CPU: with another busy process on these
# 2 cores a training step took 25 s spinning and 6 s passive.  Only effective before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from rayspec.demo import DEMO_DIR, PROMPTS_PATH  # noqa: E402
from rayspec.demo.corpus import HELDOUT_PERCENT, SourceFile, split_sources, stdlib_root  # noqa: E402
from rayspec.demo.prompts import build_prompts  # noqa: E402

EOT = "<|endoftext|>"
VOCAB_SIZE = 8192
SEQ_LEN = 256
MAX_POSITIONS = 1024

TARGET_ARCH = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=7,
                   num_attention_heads=6, num_key_value_heads=6)
DRAFTER_ARCH = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4)

# Messages become Python comments; the assistant's turn is code.  A later issue's chat endpoint
# renders requests with the model's own template.
CHAT_TEMPLATE = (
    "{% if tools %}# tools: {{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}# assistant:\n{{ m['content'] }}"
    "{% if m['tool_calls'] %}{{ m['tool_calls'] | tojson }}{% endif %}{{ '\\n' }}"
    "{% else %}# {{ m['role'] }}: {{ m['content'] | replace('\\n', '\\n# ') }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}# assistant:\n{% endif %}"
)

# The first evaluation windows, whose tokens and figures go into metrics.json so that a test
# can recompute them from the shipped weights in seconds.
CHECK_WINDOWS = 8
# Held-out windows evaluated for the card (a fixed, evenly spaced sample; ~1/3 of the split).
EVAL_WINDOWS = 256


@dataclass
class Phase:
    """One cosine schedule with linear warm-up; ``distill`` weights KL(target || model)."""

    steps: int
    lr: float
    batch: int
    warmup: int
    distill: float = 0.0
    minutes: float | None = None  # if set, ``steps`` is re-derived from measured speed


# Peak learning rates scale as 1/width (muP-style): 3e-3 suits the drafter's width 128, and the
# target's width 384 gets a third of it.  An earlier recipe (width 448, 2e-3, no scaled init)
# left the target behind its own drafter on held-out loss.
DEFAULT_TARGET = Phase(steps=2400, lr=1e-3, batch=8, warmup=100)
# The drafter learns from the target's soft labels as much as from the data: forward KL is what
# acceptance (1 - TV) rewards, and a short phase reaches a useful drafter that stays clearly
# behind the target.  (With an earlier target recipe, a drafter trained on hard labels alone for
# 3000 steps beat the target's held-out loss.)
DEFAULT_DRAFTER = Phase(steps=1200, lr=3e-3, batch=8, warmup=60, distill=0.5)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- tokenizer

def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE (GPT-2 pre-tokenisation), ``<|endoftext|>`` as id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def save_tokenizer(tok, directory: Path) -> None:
    """tokenizer.json + a tokenizer_config.json that transformers 4.x and 5.x both load."""
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT, "eos_token": EOT, "pad_token": EOT, "unk_token": None,
        "add_bos_token": False, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": EOT, "eos_token": EOT, "pad_token": EOT}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def encode_stream(tok, files: list[SourceFile]) -> torch.Tensor:
    """All files in path order, each followed by ``<|endoftext|>``, as one int64 stream."""
    eot = tok.token_to_id(EOT)
    ids: list[int] = []
    for enc in tok.encode_batch([f.read() for f in files]):
        ids.extend(enc.ids)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.int64)


# ----------------------------------------------------------------------------- models

def make_model(arch: dict, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=0, pad_token_id=0, rope_theta=10000.0, rms_norm_eps=1e-5,
        initializer_range=0.02, **arch)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # GPT-2's depth-scaled init: the projections that write into the residual stream start
    # 1/sqrt(2L) smaller, so the stream's variance does not grow with depth at initialisation.
    scale = (2 * config.num_hidden_layers) ** -0.5
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)
    model.config.use_cache = False
    return model


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def save_model(model, directory: Path) -> None:
    """fp16 safetensors, config dtype float16: the form a downloaded checkpoint takes."""
    model.config.use_cache = True
    model.to(device="cpu", dtype=torch.float16).save_pretrained(directory, safe_serialization=True)


def load_model(directory: Path, device: str = "cpu"):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).to(device).eval()


# ----------------------------------------------------------------------------- training

def windows(stream: torch.Tensor, batch: int, generator: torch.Generator):
    """Endless batches of ``SEQ_LEN + 1`` token windows: every window once per epoch, each
    epoch cut at a fresh random offset and visited in a fresh random order."""
    span = SEQ_LEN + 1
    while True:
        shift = int(torch.randint(SEQ_LEN, (1,), generator=generator))
        count = (len(stream) - shift - 1) // SEQ_LEN
        starts = shift + SEQ_LEN * torch.randperm(count, generator=generator)
        for i in range(0, count - batch + 1, batch):
            yield torch.stack([stream[s:s + span] for s in starts[i:i + batch].tolist()])


def use_bf16(device: str) -> bool:
    # bf16 autocast halves CPU matmul time only where the CPU has bf16 instructions.
    if device == "cuda":
        return True
    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def lr_factor(step: int, phase: Phase, total: int) -> float:
    if step < phase.warmup:
        return (step + 1) / phase.warmup
    progress = min(1.0, (step - phase.warmup) / max(1, total - phase.warmup))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def train_lm(model, stream: torch.Tensor, phase: Phase, device: str, seed: int, name: str,
             teacher=None) -> dict:
    """AdamW, warm-up + cosine to 10 %, clip 1.0; cross-entropy, mixed with distillation
    from ``teacher`` (forward KL at T = 1) when ``phase.distill`` > 0."""
    model.to(device).train()
    if teacher is not None:
        teacher.to(device).eval()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=phase.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(seed)
    batches = windows(stream, phase.batch, gen)
    amp = use_bf16(device)
    # With a time budget the step count is fixed once a few steps are timed (see below).
    total = phase.steps if phase.minutes is None else sys.maxsize
    step_times: list[float] = []
    t0 = time.time()
    smooth = None
    step = 0
    while step < total:
        tic = time.time()
        for g in opt.param_groups:
            g["lr"] = phase.lr * lr_factor(step, phase, total)
        batch = next(batches).to(device)
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            logits = model(input_ids=x).logits
        logits = logits.float()
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), y.reshape(-1))
        if teacher is not None and phase.distill > 0:
            with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
                t_logits = teacher(input_ids=x).logits
            t_logp = F.log_softmax(t_logits.float(), dim=-1)
            kl = (t_logp.exp() * (t_logp - F.log_softmax(logits, dim=-1))).sum(-1).mean()
            loss = (1 - phase.distill) * loss + phase.distill * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.time() - tic)
        if total == sys.maxsize and step == min(5, phase.warmup - 1):
            # The warm-up ramp does not depend on the step count, so fixing it now leaves the
            # steps taken so far unchanged.
            per_step = statistics.median(step_times[1:] or step_times)
            total = max(phase.warmup + 1, step + 1 + int((60 * phase.minutes - (time.time() - t0)) / per_step))
            log(f"{name}: {per_step:.2f} s/step measured, {total} steps fit in {phase.minutes} min")
        value = float(loss.detach())
        smooth = value if smooth is None else 0.95 * smooth + 0.05 * value
        step += 1
        if step % 25 == 1 or step == total:
            elapsed = time.time() - t0
            eta = elapsed / step * (total - step) if total < sys.maxsize else float("nan")
            log(f"{name} step {step}/{total} loss {smooth:.3f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{step * phase.batch * SEQ_LEN / elapsed:.0f} tok/s elapsed {elapsed / 60:.1f} min "
                f"eta {eta / 60:.1f} min")
    model.eval()
    return {"steps": total, "batch": phase.batch, "seq_len": SEQ_LEN,
            "tokens": total * phase.batch * SEQ_LEN, "lr": phase.lr, "warmup": phase.warmup,
            "distill": phase.distill, "seconds": round(time.time() - t0, 1),
            "final_train_loss": round(smooth, 4)}


# ----------------------------------------------------------------------------- evaluation

def eval_windows(stream: torch.Tensor, max_windows: int = EVAL_WINDOWS) -> torch.Tensor:
    """The fixed held-out sample: of the windows of ``SEQ_LEN + 1`` tokens that tile the
    held-out stream (overlapping by one token), ``max_windows`` evenly spaced ones."""
    count = (len(stream) - 1) // SEQ_LEN
    picks = torch.linspace(0, count - 1, min(count, max_windows)).round().long().unique()
    return torch.stack([stream[i * SEQ_LEN:i * SEQ_LEN + SEQ_LEN + 1] for i in picks.tolist()])


@torch.no_grad()
def evaluate_pair(target, drafter, wins: torch.Tensor, batch: int = 8) -> dict:
    """Mean held-out loss (nats/token) of each model and the drafter's mean acceptance
    sum_x min(p(x), q(x)) = 1 - TV(p, q) at T = 1, p the target, q the drafter; float32."""
    device = next(target.parameters()).device
    sums = {"loss_target": 0.0, "loss_drafter": 0.0, "acceptance": 0.0, "top1_agreement": 0.0}
    n = 0
    for i in range(0, len(wins), batch):
        w = wins[i:i + batch].to(device)
        x, y = w[:, :-1], w[:, 1:].reshape(-1)
        lp = F.log_softmax(target(input_ids=x).logits.float().reshape(-1, VOCAB_SIZE), -1)
        lq = F.log_softmax(drafter(input_ids=x).logits.float().reshape(-1, VOCAB_SIZE), -1)
        sums["loss_target"] += float(F.nll_loss(lp, y, reduction="sum"))
        sums["loss_drafter"] += float(F.nll_loss(lq, y, reduction="sum"))
        sums["acceptance"] += float(torch.minimum(lp, lq).exp().sum())
        sums["top1_agreement"] += float((lp.argmax(-1) == lq.argmax(-1)).sum())
        n += y.numel()
    return {k: v / n for k, v in sums.items()} | {"positions": n}


@torch.no_grad()
def forward_latency(model, cache_len: int = 128, new_tokens: int = 1, repeats: int = 30) -> float:
    """Median milliseconds of one forward of ``new_tokens`` tokens over a ``cache_len`` cache."""
    from transformers import DynamicCache

    from rayspec.models.tree_lm import cache_keyword

    keyword = cache_keyword(model)
    ids = torch.randint(1, VOCAB_SIZE, (1, cache_len + new_tokens))
    times = []
    for _ in range(repeats + 3):
        cache = DynamicCache()
        model(input_ids=ids[:, :cache_len], **{keyword: cache}, use_cache=True)
        tic = time.perf_counter()
        model(input_ids=ids[:, cache_len:], **{keyword: cache}, use_cache=True)
        times.append(time.perf_counter() - tic)
    return 1000 * statistics.median(times[3:])


# ----------------------------------------------------------------------------- model card

def write_card(out: Path, metrics: dict) -> None:
    m, t, d = metrics, metrics["target"], metrics["drafter"]
    ev = m["heldout"]
    tr = m["training"]
    reuse_note = (" (the target was trained by an earlier run of the same recipe and reused with "
                  "`--target-from`; its training time is included)" if m.get("target_reused") else "")

    def arch_row(name, a):
        return (f"| {name} | {a['params'] / 1e6:.2f} M | {a['hidden_size']} | {a['num_hidden_layers']} | "
                f"{a['num_attention_heads']} / {a['num_key_value_heads']} | {a['intermediate_size']} |")

    def train_row(name, r):
        return (f"| {name} | {r['steps']} × {r['batch']} × {r['seq_len']} | {r['tokens'] / 1e6:.2f} M | "
                f"{r['lr']:g} | {r['distill']:g} | {r['seconds'] / 60:.1f} min |")

    text = f"""# rayspec demo pair: a Llama target and drafter trained on the Python standard library

A target/drafter pair for speculative decoding that works with no download.  Both are plain
`LlamaForCausalLM` checkpoints with a shared byte-level BPE tokenizer:

```python
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from rayspec.demo import TARGET_PATH, DRAFTER_PATH
target = AutoModelForCausalLM.from_pretrained(TARGET_PATH, dtype=torch.float32)
drafter = AutoModelForCausalLM.from_pretrained(DRAFTER_PATH, dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(TARGET_PATH)  # the same file in both directories
```

They complete Python code; they are tiny and know nothing else.  Weights are stored in float16;
load them in float32 on CPU.

## Corpus

The `.py` sources of the standard library of the Python that ran the training
(`sysconfig.get_paths()["stdlib"]`, here CPython {m['python']}), without `site-packages`,
test suites, generated codec tables (`encodings/`), `pydoc_data/` and `_sysconfigdata_*`
(see `rayspec/demo/corpus.py`).  Files are split by a salted SHA-256 of their relative path:
{HELDOUT_PERCENT} % held out.  This run: {m['corpus']['train_files']} train files
({m['corpus']['train_tokens'] / 1e6:.2f} M tokens), {m['corpus']['heldout_files']} held-out files
({m['corpus']['heldout_tokens'] / 1e3:.0f} k tokens).  Each file is followed by `<|endoftext|>`.

## Tokenizer

Byte-level BPE (`tokenizers`, GPT-2 pre-tokenisation), vocabulary {VOCAB_SIZE}, trained on the
train files; `<|endoftext|>` (id 0) is BOS, EOS and padding and is never added automatically.
Decoding inverts encoding exactly.  A chat template renders messages as Python comments
(`# user: ...`) and opens the assistant's turn with `# assistant:`.
{m['corpus']['heldout_bytes_per_token']:.2f} bytes per token on the held-out files.

## Architectures

Both: Llama (RMSNorm, SwiGLU, RoPE θ = 10000), tied input/output embeddings, context
{MAX_POSITIONS} positions, vocabulary {VOCAB_SIZE}.

| model | parameters | hidden | layers | heads / kv heads | MLP |
|---|---|---|---|---|---|
{arch_row('target', t)}
{arch_row('drafter', d)}

Parameter ratio target / drafter: {t['params'] / d['params']:.1f}.

## Training

Seed {m['seed']}, device `{m['device']}` ({m['hardware']}), {m['torch']} / transformers {m['transformers']},
bf16 autocast: {m['bf16']}.  Initialisation N(0, 0.02), with the projections that write into the
residual stream (attention output, MLP down) scaled by 1/√(2 × layers) as in GPT-2.
AdamW (β = 0.9, 0.95, weight decay 0.1 on matrices), linear warm-up then
cosine decay to 10 %, gradient clipping 1.0, random {SEQ_LEN}-token windows of the train stream
(each epoch cut at a fresh offset and shuffled).  The drafter is trained after the target with
loss (1 − w)·cross-entropy + w·KL(target ‖ drafter) at T = 1 (w below; w > 0 is distillation
from the target's soft labels).

| model | steps × batch × length | tokens | peak lr | w | wall time |
|---|---|---|---|---|---|
{train_row('target', tr['target'])}
{train_row('drafter', tr['drafter'])}

Whole run, tokenizer and evaluation included: {m['total_minutes']:.1f} min{reuse_note}.

## Held-out figures

On a fixed sample of {ev['positions']:,} held-out positions ({EVAL_WINDOWS} evenly spaced windows of
{SEQ_LEN} tokens), float32, from the shipped float16 weights:

| | value |
|---|---|
| target loss (nats/token) | {ev['loss_target']:.4f} |
| drafter loss (nats/token) | {ev['loss_drafter']:.4f} |
| drafter mean acceptance 1 − TV(p, q) at T = 1 | {ev['acceptance']:.4f} |
| greedy (top-1) agreement | {ev['top1_agreement']:.4f} |

p is the target's next-token distribution and q the drafter's; acceptance is the mean over
positions of Σ_x min(p(x), q(x)), the probability that one drafted token is accepted by
standard speculative sampling.  `metrics.json` holds these figures with more digits and, for a
quick test, the tokens and figures of the first {CHECK_WINDOWS} windows.

## Speed

Forward latency on the training machine's CPU ({m['cpu']}, {m['threads']} threads, float32, median
of 30, over a 128-token cache; a shared machine, so indicative only):

| model | 1 new token | 16 new tokens |
|---|---|---|
| target | {m['cpu_forward_latency']['target']['1_new_tokens_ms']:.1f} ms | {m['cpu_forward_latency']['target']['16_new_tokens_ms']:.1f} ms |
| drafter | {m['cpu_forward_latency']['drafter']['1_new_tokens_ms']:.1f} ms | {m['cpu_forward_latency']['drafter']['16_new_tokens_ms']:.1f} ms |

## Reproduce

```
python -m rayspec.demo.train --seed {m['seed']}
```

retrains tokenizer, target and drafter, evaluates them and rewrites this directory and
`rayspec/demo/prompts.json` (see `--help`).  The recipe is a fixed number of steps, so the same
machine gives the same pair; other hardware gives a pair with the same figures up to noise.
"""
    (out / "README.md").write_text(text)


# ----------------------------------------------------------------------------- main

def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rayspec.demo.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEMO_DIR, help="directory for target/, drafter/, card")
    ap.add_argument("--prompts", type=Path, default=PROMPTS_PATH, help="where to write prompts.json")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--stdlib", type=Path, default=None, help="standard library to read (default: this Python's)")
    ap.add_argument("--target-steps", type=int, default=DEFAULT_TARGET.steps)
    ap.add_argument("--drafter-steps", type=int, default=DEFAULT_DRAFTER.steps)
    ap.add_argument("--target-minutes", type=float, default=None, help="derive the target's steps from this budget")
    ap.add_argument("--drafter-minutes", type=float, default=None, help="derive the drafter's steps from this budget")
    ap.add_argument("--distill", type=float, default=DEFAULT_DRAFTER.distill,
                    help="weight of KL(target || drafter) in the drafter's loss")
    ap.add_argument("--target-from", type=Path, default=None,
                    help="reuse this trained target (and its tokenizer); train only the drafter")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import tokenizers
    import transformers

    started = time.time()
    torch.set_num_threads(args.threads)
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else (
        "cpu" if args.device == "auto" else args.device)
    root = args.stdlib or stdlib_root()
    splits = split_sources(root)
    log(f"corpus {root}: {len(splits['train'])} train, {len(splits['heldout'])} held-out files; device {device}")

    if args.target_from is not None:
        tok = tokenizers.Tokenizer.from_file(str(args.target_from / "tokenizer.json"))
    else:
        tok = train_tokenizer([f.read() for f in splits["train"]])
    train_stream = encode_stream(tok, splits["train"])
    heldout_stream = encode_stream(tok, splits["heldout"])
    heldout_bytes = sum(len(f.read().encode()) for f in splits["heldout"])
    log(f"tokens: train {len(train_stream):,}, held-out {len(heldout_stream):,}")

    target_phase = Phase(**{**asdict(DEFAULT_TARGET), "steps": args.target_steps, "minutes": args.target_minutes})
    drafter_phase = Phase(**{**asdict(DEFAULT_DRAFTER), "steps": args.drafter_steps,
                             "minutes": args.drafter_minutes, "distill": args.distill})
    out = args.out
    if args.target_from is not None:
        target_dir = args.target_from
        training = {"target": json.loads((target_dir / "training.json").read_text())}
    else:
        target_dir = out / "target"
        target = make_model(TARGET_ARCH, args.seed)
        training = {"target": train_lm(target, train_stream, target_phase, device, args.seed + 1, "target")}
        save_model(target, target_dir)
        save_tokenizer(tok, target_dir)
        (target_dir / "training.json").write_text(json.dumps(training["target"], indent=1) + "\n")
        del target
    # The drafter learns from the target as shipped (float16 weights), so retraining only the
    # drafter with --target-from gives the same drafter as a full run.
    target = load_model(target_dir, device)
    drafter = make_model(DRAFTER_ARCH, args.seed + 2)
    training["drafter"] = train_lm(drafter, train_stream, drafter_phase, device, args.seed + 3, "drafter",
                                   teacher=target if drafter_phase.distill > 0 else None)
    save_model(drafter, out / "drafter")
    save_tokenizer(tok, out / "drafter")
    (out / "drafter" / "training.json").write_text(json.dumps(training["drafter"], indent=1) + "\n")
    if target_dir.resolve() != (out / "target").resolve():
        shutil.copytree(target_dir, out / "target", dirs_exist_ok=True)
    del target, drafter

    # Evaluate what ships: the saved float16 weights, loaded back the way a user loads them.
    target, drafter = load_model(out / "target", device), load_model(out / "drafter", device)
    wins = eval_windows(heldout_stream)
    heldout = evaluate_pair(target, drafter, wins)
    check = evaluate_pair(target, drafter, wins[:CHECK_WINDOWS])
    log(f"held-out: {heldout}")
    latency = {name: {f"{k}_new_tokens_ms": round(forward_latency(model.cpu(), 128, k), 2) for k in (1, 16)}
               for name, model in (("target", target), ("drafter", drafter))}
    log(f"cpu forward latency: {latency}")

    count = lambda text: len(tok.encode(text).ids)  # noqa: E731
    prompts = build_prompts(splits["heldout"], count, n=100, seed=args.seed)
    args.prompts.write_text(json.dumps({
        "description": "Held-out code prompts: prefixes of held-out stdlib files ending after a "
                       "one-line def header (rayspec/demo/prompts.py); sources are never train files.",
        "tokenizer": "rayspec/demo/pair/target",
        "prompts": prompts}, indent=1) + "\n")

    arch = lambda model, a: {**a, "params": n_params(model)}  # noqa: E731
    metrics = {
        "seed": args.seed, "device": device, "python": platform.python_version(),
        "hardware": (torch.cuda.get_device_name() if device == "cuda"
                     else f"{cpu_name()}, {torch.get_num_threads()} threads"),
        "cpu": cpu_name(), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__, "bf16": use_bf16(device),
        "corpus": {"train_files": len(splits["train"]), "heldout_files": len(splits["heldout"]),
                   "train_tokens": len(train_stream), "heldout_tokens": len(heldout_stream),
                   "heldout_bytes_per_token": heldout_bytes / len(heldout_stream)},
        "target": arch(target, TARGET_ARCH), "drafter": arch(drafter, DRAFTER_ARCH),
        "training": training, "heldout": heldout,
        "check": check | {"windows": wins[:CHECK_WINDOWS].tolist()},
        "cpu_forward_latency": latency,
        # With --target-from the target's training time is counted as if trained in this run.
        "total_minutes": (time.time() - started + (training["target"]["seconds"] if args.target_from else 0)) / 60,
        "target_reused": args.target_from is not None,
    }
    (out / "metrics.json").write_text(json.dumps(metrics) + "\n")
    write_card(out, metrics)
    log(f"done in {metrics['total_minutes']:.1f} min: {out}")
    return metrics


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
