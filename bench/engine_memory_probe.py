"""The in-process engine's resident memory under the traffic `worker_memory_probe.py` sends its
plain-process workers: the demo pair in this one process (no gRPC), prefix caches off, one
torch thread, kary:2x3 trees and rrsw as the probe's coordinator, two users (half 24-token
generations, half streams left after their first step).  Every 60 s it prints the resident
MiB, then asks glibc for its free pages back (`malloc_trim(0)`) and prints it again: memory
that keeps rising after the trim here is the models' side of a worker's growth; flat, it is in
what a worker adds around them (gRPC, the codec, its threads).

    python bench/engine_memory_probe.py [MINUTES]      # default 12; output as printed
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from rayspec.demo import DRAFTER_PATH, TARGET_PATH  # noqa: E402
from rayspec.engine import SpeculativeEngine  # noqa: E402
from rayspec.serve.config import ServiceConfig  # noqa: E402
from soak import resident_before_and_after_trim  # noqa: E402


def main() -> int:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 12
    torch.set_num_threads(1)  # as the probe's workers (--threads 1)
    config = ServiceConfig.from_dict({"target": {"prefix_cache_mb": 0}, "drafters": [{"prefix_cache_mb": 0}]})
    tokenizer = AutoTokenizer.from_pretrained(str(TARGET_PATH))
    engine = SpeculativeEngine(config.target.local(TARGET_PATH), config.drafters[0].local(DRAFTER_PATH),
                               tokenizer=tokenizer, tree="kary:2x3", verifier="rrsw")
    end = time.monotonic() + minutes * 60
    done = [0]

    def user(seed: int) -> None:
        rng = random.Random(seed)
        short, left = tokenizer("def fibonacci(n):\n")["input_ids"], tokenizer("class Stack:\n")["input_ids"]
        while time.monotonic() < end:
            if rng.random() < 0.5:
                engine.run(short, max_new_tokens=24, temperature=0.6, seed=rng.randrange(1 << 30))
            else:
                steps = engine.generate(left, max_new_tokens=64, temperature=0.6)
                next(steps)
                steps.close()
            done[0] += 1

    users = [threading.Thread(target=user, args=(i,)) for i in range(2)]
    for thread in users:
        thread.start()
    started = time.monotonic()
    while any(thread.is_alive() for thread in users):
        time.sleep(60)
        before, after = resident_before_and_after_trim()
        print(f"{time.monotonic() - started:6.0f}s n={done[0]} resident {before:.0f} MiB, "
              f"after malloc_trim {after:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
