"""Start rayspec workers as plain processes, as a GPU machine without Ray runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rayspec.demo import TARGET_PATH
from tests.tiny_models import noisy_copy, tiny_llama

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def save_tiny_pair(directory: Path) -> tuple[Path, Path]:
    """A tiny random target and its noisy-copy drafter with the demo tokenizer, on disk."""
    target = tiny_llama(vocab=8192, hidden=32, layers=2, context=512)
    drafter = noisy_copy(target, noise=0.3)
    paths = []
    for name, model in (("target", target), ("drafter", drafter)):
        path = directory / name
        model.save_pretrained(path)
        for file in TOKENIZER_FILES:
            if (TARGET_PATH / file).exists():
                shutil.copy(TARGET_PATH / file, path / file)
        paths.append(path)
    return paths[0], paths[1]


class Worker:
    def __init__(self, log: Path, *args: str, timeout: float = 120.0):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        self.log = open(log, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rayspec.rpc.worker", "--port", "0", "--threads", "1", *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line.startswith("READY"):
                self.address = line.split()[2]
                return
            if not line and self.process.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"worker {args} did not start; see {log}: {Path(log).read_text()[-2000:]}")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()
