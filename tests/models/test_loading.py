"""Loading a checkpoint: a place that holds none is a FileNotFoundError naming it, whatever the
loader raised (an empty directory made transformers raise a ValueError about `model_type`)."""

from __future__ import annotations

import json

import pytest

from rayspec.models import load_causal_lm


@pytest.mark.parametrize("holds", ["nothing", "a config without model_type", "no directory"])
def test_a_place_without_a_checkpoint_is_a_file_not_found_error_naming_it(tmp_path, holds):
    place = tmp_path / "model"
    if holds != "no directory":
        place.mkdir()
    if holds == "a config without model_type":
        (place / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(FileNotFoundError) as caught:
        load_causal_lm(place, device="cpu")
    said = str(caught.value)
    assert said.startswith(f"cannot load a causal LM from '{place}': give a local checkpoint directory "
                           f"(config.json + weights) or, with network access, a hub id ("), said
    assert "\n" not in said
