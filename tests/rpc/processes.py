"""A tiny random model pair saved with the demo tokenizer, for the worker tests (`Worker` is
`rayspec.rpc.process.Worker`)."""

from __future__ import annotations

import shutil
from contextlib import ExitStack, contextmanager
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


def start_tiny_pair_workers(started: ExitStack, directory: Path, *coordinator_args: str) -> dict:
    """A target and a drafter worker of `save_tiny_pair`'s pair and a coordinator over them
    (with `coordinator_args`), processes logging into `directory`, each stopped when `started`
    closes (one that fails to start stops those started before it): {"target", "drafter",
    "coordinator", "paths": (target path, drafter path)}."""
    target_path, drafter_path = save_tiny_pair(directory)
    target = started.enter_context(stopping(Worker(directory / "target.log", "--role", "target", "--model",
                                                   str(target_path))))
    drafter = started.enter_context(stopping(Worker(directory / "drafter.log", "--role", "drafter", "--model",
                                                    str(drafter_path))))
    coordinator = started.enter_context(stopping(Worker(
        directory / "coordinator.log", "--role", "coordinator", "--target", target.address, "--drafter",
        drafter.address, "--tokenizer", str(target_path), *coordinator_args)))
    return {"target": target, "drafter": drafter, "coordinator": coordinator, "paths": (target_path, drafter_path)}
