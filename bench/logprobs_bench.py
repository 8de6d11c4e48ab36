"""What asking for log-probabilities costs: step time of the in-process engine, request
latency through the OpenAI-compatible HTTP app, and bytes per step over gRPC, each with
logprobs off and at k = 0, 5 and 20 alternatives, on the demo pair; and what scoring a
prompt (its tokens' log-probabilities, `echo` with `max_tokens: 0`) costs over the prefill
that opening a sequence runs anyway, by prompt length.

The target computes them from the tree's forward it already ran, for the accepted path's rows
only (a log-softmax and a top-k over V = 8192 per emitted token), and the prompt's from its
prefill's rows; the HTTP app decodes each token's and each alternative's text.

    python bench/logprobs_bench.py [--prompts 8] [--tokens 64] [--rounds 3]

Writes bench/results/logprobs_bench.{json,md} (`--out`).  The arms run one after the other on each
prompt, each first in turn, so they see the same machine; figures are medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from common import out_prefix, suffixed  # noqa: E402
from rayspec.demo import DRAFTER_PATH, TARGET_PATH, load_prompts  # noqa: E402
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine  # noqa: E402
from rayspec.engine.interfaces import SequenceSpec  # noqa: E402
from rayspec.models import TreeLM, load_causal_lm  # noqa: E402
from rayspec.rpc import codec  # noqa: E402
from rayspec.rpc.generated import worker_pb2  # noqa: E402
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget  # noqa: E402
from rayspec.rpc.worker import serve_drafter, serve_target  # noqa: E402
from rayspec.serve.http import create_app  # noqa: E402
from rayspec.serve.service import Service  # noqa: E402
from rayspec.verify.processing import SamplingParams  # noqa: E402

ARMS = [None, 0, 5, 20]
SETTING = dict(verifier="rrsw", tree="kary:2x3")
PROMPT_LENGTHS = [32, 256, 1000]
PROMPT_ARMS = ["last row", "every row", "k = 0", "k = 20"]


def label(k: int | None) -> str:
    return "off" if k is None else f"k = {k}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="default: bench/results/logprobs_bench")
    args = parser.parse_args()

    target, tokenizer = load_causal_lm(TARGET_PATH, "cpu", "float32")
    drafter, _ = load_causal_lm(DRAFTER_PATH, "cpu", "float32")
    engine = SpeculativeEngine(LocalTarget(target, prefix_cache_mb=0), LocalDrafter(drafter, prefix_cache_mb=0),
                               tokenizer=tokenizer, **SETTING)
    http = TestClient(create_app(Service(engine, tokenizer, "demo")))
    target_server, target_port = serve_target(LocalTarget(target, prefix_cache_mb=0), "127.0.0.1:0")
    drafter_server, drafter_port = serve_drafter(LocalDrafter(drafter, prefix_cache_mb=0), "127.0.0.1:0")
    remote_target = RemoteTarget(f"127.0.0.1:{target_port}")
    remote = SpeculativeEngine(remote_target, RemoteDrafter(f"127.0.0.1:{drafter_port}", remote_target.vocab_size),
                               tokenizer=tokenizer, **SETTING)
    prompts = [tokenizer.encode(p, add_special_tokens=False) for p in load_prompts()[: args.prompts]]

    step_ms = {k: [] for k in ARMS}
    request_ms = {k: [] for k in ARMS}
    wire_bytes = {k: [] for k in ARMS}
    same_tokens = True
    engine.run(prompts[0], max_new_tokens=8, seed=0)  # warm-up
    for round_ in range(args.rounds):
        for i, prompt in enumerate(prompts):
            seed = 1000 * round_ + i
            reference = None
            for k in ARMS[i % len(ARMS):] + ARMS[: i % len(ARMS)]:  # each arm first as often as the others
                chunks = list(engine.generate(prompt, max_new_tokens=args.tokens, temperature=0.6, seed=seed, logprobs=k))
                tokens = [t for c in chunks for t in c.tokens]
                same_tokens &= reference is None or tokens == reference
                reference = reference or tokens
                step_ms[k] += [1e3 * c.step.wall for c in chunks]
                body = {"prompt": prompt, "max_tokens": args.tokens, "temperature": 0.6, "seed": seed}
                if k is not None:
                    body["logprobs"] = k
                start = time.perf_counter()
                reply = http.post("/v1/completions", json=body)
                elapsed = time.perf_counter() - start
                assert reply.status_code == 200, reply.text
                same_tokens &= reply.json()["usage"]["completion_tokens"] == len(reference)
                request_ms[k].append(1e3 * elapsed)
                if round_ == 0:
                    steps = list(remote.generate(prompt, max_new_tokens=args.tokens, temperature=0.6, seed=seed,
                                                 logprobs=k))
                    same_tokens &= [t for c in steps for t in c.tokens] == reference
                    wire_bytes[k] += [c.step.wire_bytes for c in steps]
    target_server.stop(0)
    drafter_server.stop(0)
    scoring = prompt_scoring(engine, args.rounds * args.prompts)

    rows = []
    for k in ARMS:
        rows.append({
            "logprobs": k,
            "engine_step_ms": statistics.median(step_ms[k]),
            "http_request_ms": statistics.median(request_ms[k]),
            "wire_bytes_per_step": statistics.median(wire_bytes[k]),
        })
    base = rows[0]
    for row in rows:
        row["engine_step_vs_off"] = row["engine_step_ms"] / base["engine_step_ms"]
        row["http_vs_off"] = row["http_request_ms"] / base["http_request_ms"]
    result = {"setting": {**SETTING, "temperature": 0.6, "prompts": args.prompts, "tokens": args.tokens,
                          "rounds": args.rounds, "vocab": int(target.config.vocab_size)},
              "same_tokens_in_every_arm": same_tokens, "rows": rows, "prompt_scoring": scoring}
    out = out_prefix(args.out, "logprobs_bench")
    suffixed(out, ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# The cost of log-probabilities (demo pair, V = 8192, rrsw, kary:2x3, T = 0.6, CPU)",
        "",
        "| logprobs | engine step ms | vs off | HTTP request ms | vs off | gRPC bytes per step |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {label(row['logprobs'])} | {row['engine_step_ms']:.2f} | {row['engine_step_vs_off']:.3f} | "
                     f"{row['http_request_ms']:.1f} | {row['http_vs_off']:.3f} | {row['wire_bytes_per_step']:.0f} |")
    lines += [
        "",
        f"Medians over {args.rounds} rounds of {args.prompts} prompts × {args.tokens} tokens, the arms one after "
        "the other on each prompt, each first in turn.  Engine: each step's wall time in process.  HTTP: a non-streamed /v1/completions "
        "request through the app (in-process engine, FastAPI test client), the same tokens in every arm.  Bytes: the "
        "same requests over gRPC to a drafter and a target served in this process (first round).  "
        f"Identical tokens in every arm: **{same_tokens}**.",
        "",
        "## Opening a sequence: the target's prefill, and scoring a prompt",
        "",
        "| prompt tokens | last row only, ms (now) | every row, ms (before) | vs now | prompt logprobs k = 0, ms | vs now "
        "| k = 20, ms | vs now | Open reply bytes at k = 20 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in scoring:
        ms, ratio = row["ms"], row["vs_last_row"]
        lines.append(f"| {row['prompt_tokens']} | {ms['last row']:.2f} | {ms['every row']:.2f} | {ratio['every row']:.3f} | "
                     f"{ms['k = 0']:.2f} | {ratio['k = 0']:.3f} | {ms['k = 20']:.2f} | {ratio['k = 20']:.3f} | "
                     f"{row['open_reply_bytes_k20']} |")
    lines += [
        "",
        f"Medians of {args.rounds * args.prompts} openings of a target session (prefill, then close) per cell, the arms "
        "in turn on each repetition.  'Last row only': the prefill as a target opens a sequence now, projecting one row "
        "onto the vocabulary (`logits_to_keep`); 'every row': the same prefill projecting every row, as before; k = 0 "
        "and 20: opening with the prompt's log-probabilities (every row, a log-softmax and a top-k).  The Open reply's "
        "size is that of the encoded log-probabilities a target worker sends back (it is empty without them).",
    ]
    suffixed(out, ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def prompt_scoring(engine: SpeculativeEngine, repeats: int) -> list[dict]:
    """Per prompt length, the median time to open (prefill) and close a target session: as it
    runs now (projecting the last row only onto the vocabulary), projecting every row as it
    did before, and with the prompt's log-probabilities at k = 0 and 20; and the Open reply's
    bytes at k = 20."""
    model = engine.target.model
    rows = []
    for length in PROMPT_LENGTHS:
        prompt = [(12345 * (i + 7)) % 8000 + 1 for i in range(length)]
        times = {arm: [] for arm in PROMPT_ARMS}
        reply_bytes = 0
        for repeat in range(repeats + 1):
            shift = repeat % len(PROMPT_ARMS)
            for arm in PROMPT_ARMS[shift:] + PROMPT_ARMS[:shift]:
                start = time.perf_counter()
                if arm == "every row":
                    TreeLM(model).prefill(prompt[:-1])
                    elapsed = time.perf_counter() - start
                else:
                    k = None if arm == "last row" else int(arm.split()[-1])
                    spec = SequenceSpec(tuple(prompt), SamplingParams(0.6), 0, SETTING["verifier"], prompt_logprobs=k)
                    session = engine.target.open(spec)
                    elapsed = time.perf_counter() - start
                    if k == 20:
                        reply = worker_pb2.OpenReply()
                        codec.encode_logprobs(session.prompt_logprobs, reply.prompt_logprobs)
                        reply_bytes = reply.ByteSize()
                    session.close()
                if repeat:  # the first is a warm-up
                    times[arm].append(1e3 * elapsed)
        ms = {arm: statistics.median(times[arm]) for arm in PROMPT_ARMS}
        rows.append({"prompt_tokens": length, "ms": ms,
                     "vs_last_row": {arm: value / ms["last row"] for arm, value in ms.items()},
                     "open_reply_bytes_k20": reply_bytes})
    return rows


if __name__ == "__main__":
    sys.exit(main())
