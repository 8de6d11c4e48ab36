"""TEMPORARY recipe exploration (not shipped): runs variants in parallel on one GPU."""
import json, os, subprocess, sys, time
from pathlib import Path
import torch
from rayspec.demo import train as T
from rayspec.demo.corpus import split_sources

OUT = Path(os.environ.get("OUT", "/tmp/exp"))
STD = Path(__file__).parent / "_stdlib"
MOD = Path(os.environ.get("MOD", "/tmp/expm"))
DEV = os.environ.get("DEV", "cuda")

A = {
    "448x8": T.TARGET_ARCH,
    "512x8": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8),
    "384x8": dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6, num_key_value_heads=6),
    "128x2": T.DRAFTER_ARCH,
    "160x2": dict(hidden_size=160, intermediate_size=448, num_hidden_layers=2, num_attention_heads=5, num_key_value_heads=5),
    "96x2": dict(hidden_size=96, intermediate_size=256, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3),
}


def data():
    s = split_sources(STD)
    tok = T.train_tokenizer([f.read() for f in s["train"]])
    return tok, T.encode_stream(tok, s["train"]), T.encode_stream(tok, s["heldout"])


def worker(spec):
    torch.set_num_threads(2)
    tok, tr, ho = data()
    wins = T.eval_windows(ho, int(os.environ.get("EVALW", "256")))
    d = MOD / spec["name"]
    d.mkdir(parents=True, exist_ok=True)
    (OUT / spec["name"]).mkdir(parents=True, exist_ok=True)
    model = T.make_model(A[spec["arch"]], spec.get("seed", 0))
    if spec.get("init"):
        model = T.load_model(MOD / spec["init"] / "model", DEV)
    teacher = T.load_model(MOD / spec["teacher"] / "model", DEV) if spec.get("teacher") else None
    phase = T.Phase(steps=spec["steps"], lr=spec["lr"], batch=spec["batch"], warmup=spec.get("warmup", 40),
                    distill=spec.get("distill", 0.0))
    rec = T.train_lm(model, tr, phase, DEV, spec.get("seed", 0) + 1, spec["name"], teacher=teacher)
    T.save_model(model, d / "model")
    m = T.load_model(d / "model", DEV)
    ev = T.evaluate_pair(teacher if teacher is not None else m, m, wins)
    res = {"spec": spec, "train": rec, "params": T.n_params(m), "loss": ev["loss_drafter"],
           "teacher_loss": ev["loss_target"] if teacher is not None else None,
           "acceptance": ev["acceptance"] if teacher is not None else None, "top1": ev["top1_agreement"]}
    (OUT / spec["name"] / "result.json").write_text(json.dumps(res))
    print("RESULT", json.dumps(res), flush=True)


def launch(specs):
    procs = []
    for s in specs:
        log = open(OUT / f"{s['name']}.log", "w")
        procs.append(subprocess.Popen([sys.executable, "-m", "rayspec.demo._exp", "worker", json.dumps(s)],
                                      stdout=log, stderr=subprocess.STDOUT))
    for p in procs:
        p.wait()
    for s in specs:
        r = OUT / s["name"] / "result.json"
        print(s["name"], r.read_text() if r.exists() else "FAILED: " + (OUT / f"{s['name']}.log").read_text()[-2000:], flush=True)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1] == "worker":
        worker(json.loads(sys.argv[2]))
    else:
        for stage in json.loads(Path(sys.argv[2]).read_text() if sys.argv[1] == "file" else sys.argv[2]):
            t = time.time()
            launch(stage)
            print(f"stage done in {time.time() - t:.0f}s", flush=True)
