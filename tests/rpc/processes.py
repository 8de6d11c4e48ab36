"""A tiny random model pair saved with the demo tokenizer, for the worker tests (`Worker` is
`rayspec.rpc.process.Worker`)."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

from rayspec.demo import TARGET_PATH
from rayspec.rpc.process import Worker  # noqa: F401 — re-exported for the tests
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


@contextmanager
def stopping(worker: Worker):
    """`worker`, stopped when the block ends, however it ends."""
    try:
        yield worker
    finally:
        worker.stop()
