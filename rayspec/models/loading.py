"""Loading causal language models: any HF checkpoint, from a local path or a hub id.

Nothing here downloads unless the user asks for a hub id on a machine with network access;
tests and CI set HF_HUB_OFFLINE=1.  The demo pair (`rayspec.demo`) is the default.
"""

from __future__ import annotations

from pathlib import Path

import torch

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def parse_device(device: str | torch.device) -> torch.device:
    """The torch device `device` names, with no check that it exists here.  ValueError for one
    torch does not know, and for the types it knows that rayspec does not decode on (meta, whose
    tensors hold no values; mps, xpu, ...): they passed every check and failed mid-decode."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N; got {device!r}")
    return resolved


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """`auto`: CUDA when this machine's torch sees a GPU, else the CPU.  ValueError for a
    device `parse_device` refuses, or a CUDA one this machine cannot reach."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = parse_device(device)
    reachable = torch.cuda.is_available() and (resolved.index or 0) < torch.cuda.device_count()
    if resolved.type == "cuda" and not reachable:
        raise ValueError(f"device {device!r}: this machine's torch sees {torch.cuda.device_count()} CUDA device(s)")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """`auto`: float32 on CPU (half-precision matmuls are slow there), bfloat16 on CUDA."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(_DTYPES)}; got {dtype!r}")
    return _DTYPES[dtype]


def load_tokenizer(path_or_id: str | Path):
    """The tokenizer of a checkpoint directory or hub id; where none loads, a FileNotFoundError
    naming the place with the loader's first line (its messages run to five lines, or speak of
    repo ids when given a local path)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path_or_id))
    except (OSError, ValueError) as error:
        said = str(error).strip().splitlines()
        raise FileNotFoundError(f"cannot load a tokenizer from {str(path_or_id)!r}: "
                                f"{said[0] if said else type(error).__name__}") from error


def load_causal_lm(path_or_id: str | Path, device="auto", dtype="auto"):
    """(model, tokenizer) for a causal LM checkpoint, in eval mode on `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a service's logs are not a terminal
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path_or_id), dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(path_or_id))
    except (OSError, ValueError) as error:  # ValueError: a directory without a causal LM's config.json
        said = str(error).strip().splitlines()
        raise FileNotFoundError(
            f"cannot load a causal LM from {str(path_or_id)!r}: give a local checkpoint directory "
            f"(config.json + weights) or, with network access, a hub id ({said[0] if said else type(error).__name__})"
        ) from error
    return model.to(device).eval(), tokenizer
