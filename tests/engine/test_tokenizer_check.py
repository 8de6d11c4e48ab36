"""A drafter must draft its target's tokens: besides the sizes (`test_padded_vocabulary.py`),
the engine compares the two tokenizers' id -> token tables where both sides tell theirs — in
this process from the tokenizers, across processes from the fingerprint a worker announces
(`WorkerInfo.tokenizer_fingerprint`).  Another tokenizer of the same size (Llama 2's and
Mistral's 32,000 tokens) is refused; a drafter whose tokenizer names a few ids otherwise (a
fine-tune's own special tokens) is taken, with a warning."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from transformers import AutoTokenizer, GPT2Tokenizer

from rayspec.demo import DRAFTER_PATH, TARGET_PATH
from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
from rayspec.engine.interfaces import (
    FINGERPRINT_BLOCK_IDS, MAX_OTHER_TOKENS_SHARE, check_tokenizers, tokenizer_fingerprint,
)
from rayspec.engine.pool import DrafterPool
from rayspec.rpc.remote import RemoteDrafter, RemoteTarget
from rayspec.rpc.worker import serve_drafter, serve_target
from tests.tiny_models import noisy_copy, tiny_llama, word_tokenizer

VOCAB = 8192  # 128 blocks of 64 ids: one block differing is within MAX_OTHER_TOKENS_SHARE, two are not


@pytest.fixture(scope="module")
def models():
    target = tiny_llama(vocab=VOCAB, hidden=32, layers=2, context=256)
    return {"target": target, "drafter": noisy_copy(target, noise=0.3)}


def test_a_fingerprint_tells_which_blocks_of_ids_name_other_tokens():
    tokenizer = word_tokenizer(VOCAB)
    assert len(tokenizer_fingerprint(tokenizer)) == 8 * VOCAB // FINGERPRINT_BLOCK_IDS
    same = tokenizer_fingerprint(tokenizer)
    assert check_tokenizers(tokenizer_fingerprint(word_tokenizer(VOCAB)), same) == 0
    # Ids 5 and 63 share a block; 64 is the next one's.
    assert check_tokenizers(tokenizer_fingerprint(word_tokenizer(VOCAB, renamed={5, 63})), same) == 64
    assert 1 <= MAX_OTHER_TOKENS_SHARE * VOCAB / FINGERPRINT_BLOCK_IDS < 2
    with pytest.raises(ValueError, match=r"^the drafter's tokenizer is not the target's: 2 of 128 blocks of 64 token "
                                         r"ids name other tokens \(at most 1% may\), so its drafts would hardly ever "
                                         r"be accepted: a drafter must share its target's tokenizer$"):
        check_tokenizers(tokenizer_fingerprint(word_tokenizer(VOCAB, renamed={5, 64})), same)
    with pytest.raises(ValueError, match=r": 128 of 128 blocks"):
        check_tokenizers(tokenizer_fingerprint(word_tokenizer(VOCAB, prefix="w")), same)
    # A tokenizer longer or shorter by more than a block names ids the other has not.
    with pytest.raises(ValueError, match=r": 2 of 130 blocks"):
        check_tokenizers(tokenizer_fingerprint(word_tokenizer(VOCAB + 2 * FINGERPRINT_BLOCK_IDS)), same)
    with pytest.raises(ValueError, match=r": 2 of 128 blocks"):
        check_tokenizers(same, tokenizer_fingerprint(word_tokenizer(VOCAB - 2 * FINGERPRINT_BLOCK_IDS)))


class _Table:
    """A tokenizer as far as the fingerprint reads one: its table, and HF's len() (the count of
    its entries, which a table with gaps in its ids exceeds)."""

    def __init__(self, vocab: dict):
        self.vocab = vocab

    def get_vocab(self) -> dict:
        return dict(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)


def test_a_fingerprint_reads_ids_past_the_length_bytes_tokens_and_bare_tokenizers():
    # Ids 2-4 unused: the token at 5 is compared all the same.
    assert tokenizer_fingerprint(_Table({"a": 0, "b": 1, "c": 5})) != tokenizer_fingerprint(
        _Table({"a": 0, "b": 1, "zzz": 5}))
    # Tiktoken-style tables name tokens by their bytes (Qwen v1's remote code).
    by_bytes = tokenizer_fingerprint(_Table({b"a": 0, b"\xff": 1}))
    assert by_bytes == tokenizer_fingerprint(_Table({b"a": 0, b"\xff": 1}))
    assert by_bytes != tokenizer_fingerprint(_Table({b"a": 0, b"\xfe": 1}))
    # A bare `tokenizers.Tokenizer` has no len(); its table is the fast tokenizer's.
    fast = word_tokenizer(300)
    assert tokenizer_fingerprint(fast.backend_tokenizer) == tokenizer_fingerprint(fast)
    # Nothing to compare: no table, or ids that are no numbers.
    assert tokenizer_fingerprint(object()) is None
    assert tokenizer_fingerprint(_Table({"a": "zero"})) is None


def test_the_same_table_has_one_fingerprint_in_any_process_and_class(tmp_path):
    """Workers and coordinators compare fingerprints computed in their own processes (with
    their own string hashing) and from the files they were given."""
    demo = AutoTokenizer.from_pretrained(str(TARGET_PATH))
    fingerprint = tokenizer_fingerprint(demo)
    assert fingerprint == tokenizer_fingerprint(AutoTokenizer.from_pretrained(str(DRAFTER_PATH)))
    script = ("import sys; from transformers import AutoTokenizer; "
              "from rayspec.engine.interfaces import tokenizer_fingerprint; "
              "sys.stdout.write(tokenizer_fingerprint(AutoTokenizer.from_pretrained(sys.argv[1])).hex())")
    for seed in ("1", "7"):
        other = subprocess.run([sys.executable, "-c", script, str(TARGET_PATH)], capture_output=True, text=True,
                               check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        assert other == fingerprint.hex()
    # The byte-level BPE's table as a slow checkpoint ships it (vocab.json and merges.txt).
    model = json.loads((TARGET_PATH / "tokenizer.json").read_text())["model"]
    (tmp_path / "vocab.json").write_text(json.dumps(model["vocab"]))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(
        " ".join(merge) if isinstance(merge, list) else merge for merge in model["merges"]) + "\n")
    from_files = GPT2Tokenizer.from_pretrained(str(tmp_path))
    assert len(from_files) == len(demo)
    assert check_tokenizers(tokenizer_fingerprint(from_files), fingerprint) == 0


def test_a_local_drafter_of_another_tokenizer_of_the_same_size_is_refused(models):
    target = LocalTarget(models["target"])
    other = LocalDrafter(models["drafter"], word_tokenizer(VOCAB, prefix="w"))
    with pytest.raises(ValueError, match=r"^the drafter's tokenizer is not the target's: 128 of 128 blocks"):
        SpeculativeEngine(target, other, tree="kary:2x2", tokenizer=word_tokenizer(VOCAB))
    # With no tokenizer given the engine, the target's own is the one compared.
    with pytest.raises(ValueError, match=r"^the drafter's tokenizer is not the target's: 128 of 128 blocks"):
        SpeculativeEngine(LocalTarget(models["target"], word_tokenizer(VOCAB)), other, tree="kary:2x2")
    with pytest.raises(ValueError, match=r"^the drafter's tokenizer is not the target's"):
        SpeculativeEngine(target, DrafterPool([LocalDrafter(models["drafter"], word_tokenizer(VOCAB)), other]),
                          tree="kary:2x2", tokenizer=word_tokenizer(VOCAB))
    # The engine's tokenizer must be the target's own too.
    with pytest.raises(ValueError, match=r"^the tokenizer given the engine is not the target's: 128 of 128 blocks"):
        SpeculativeEngine(LocalTarget(models["target"], word_tokenizer(VOCAB)), None,
                          tokenizer=word_tokenizer(VOCAB, prefix="w"))
    # Where one side tells no tokenizer, nothing is compared, as before.
    SpeculativeEngine(target, other, tree="kary:2x2")
    SpeculativeEngine(target, LocalDrafter(models["drafter"]), tree="kary:2x2", tokenizer=word_tokenizer(VOCAB))


def test_a_drafter_naming_a_few_ids_otherwise_is_taken_and_logged(models, caplog):
    fine_tuned = LocalDrafter(models["drafter"], word_tokenizer(VOCAB, renamed={VOCAB - 2, VOCAB - 1}))
    with caplog.at_level(logging.WARNING, logger="rayspec.engine"):
        engine = SpeculativeEngine(LocalTarget(models["target"]), fine_tuned, tree="kary:2x2",
                                   tokenizer=word_tokenizer(VOCAB))
    assert [record.getMessage() for record in caplog.records] == [
        "the tokenizer of the drafter in this process names up to 64 token ids otherwise than the target's"]
    out = engine.run([1, 2, 3], max_new_tokens=12, temperature=0.0, ignore_eos=True)
    assert len(out.tokens) == 12


def test_a_drafter_worker_announces_its_tokenizer_and_another_is_refused(models):
    servers = [serve_drafter(LocalDrafter(models["drafter"], word_tokenizer(VOCAB, prefix="w")), "127.0.0.1:0"),
               serve_drafter(LocalDrafter(models["drafter"], word_tokenizer(VOCAB)), "127.0.0.1:0"),
               serve_target(LocalTarget(models["target"], word_tokenizer(VOCAB)), "127.0.0.1:0")]
    other, same, target = (f"127.0.0.1:{port}" for _, port in servers)
    handles = []
    try:
        handles = [RemoteDrafter(other, VOCAB), RemoteDrafter(same, VOCAB), RemoteTarget(target)]
        other_drafter, same_drafter, remote_target = handles
        assert other_drafter.tokenizer_fingerprint == tokenizer_fingerprint(word_tokenizer(VOCAB, prefix="w"))
        assert remote_target.tokenizer_fingerprint == tokenizer_fingerprint(word_tokenizer(VOCAB))
        message = rf"^drafter worker at {other}: the drafter's tokenizer is not the target's: 128 of 128 blocks"
        with pytest.raises(ValueError, match=message):  # against the coordinator's tokenizer
            SpeculativeEngine(remote_target, other_drafter, tree="kary:2x2", tokenizer=word_tokenizer(VOCAB))
        with pytest.raises(ValueError, match=message):  # against the target worker's
            SpeculativeEngine(remote_target, other_drafter, tree="kary:2x2")
        with pytest.raises(ValueError, match=message):  # a pool's member, named
            SpeculativeEngine(remote_target, DrafterPool([same_drafter, other_drafter]), tree="kary:2x2")
        # A coordinator given another tokenizer than its target worker's (the demo's, for want
        # of --tokenizer) is refused, whichever drafter it has, if any.
        message = (r"^the tokenizer given the engine is not the target's: 128 of 128 blocks of 64 token ids name "
                   r"other tokens \(at most 1% may\), so stop strings, bad words and the text returned would be "
                   r"another tokenizer's: give the engine \(a coordinator's --tokenizer\) the target's$")
        for drafter in (other_drafter, same_drafter, None):
            with pytest.raises(ValueError, match=message):
                SpeculativeEngine(remote_target, drafter, tree="kary:2x2",
                                  tokenizer=word_tokenizer(VOCAB, prefix="w"))
        engine = SpeculativeEngine(remote_target, same_drafter, tree="kary:2x2", tokenizer=word_tokenizer(VOCAB))
        in_process = SpeculativeEngine(LocalTarget(models["target"]), LocalDrafter(models["drafter"]),
                                       tree="kary:2x2")
        kwargs = dict(max_new_tokens=16, temperature=1.0, seed=3, ignore_eos=True)
        assert engine.run([1, 2, 3], **kwargs).tokens == in_process.run([1, 2, 3], **kwargs).tokens
    finally:
        for handle in handles:
            handle.close()
        for server, _ in servers:
            server.stop(0).wait()


def test_a_pools_drafters_of_different_tokenizers_are_refused_without_the_targets(models):
    """With no tokenizer told by the target or given the engine there is nothing to hold each
    drafter to, but two drafters that disagree cannot both have the target's: they were taken."""
    target = LocalTarget(models["target"])
    pool = DrafterPool([LocalDrafter(models["drafter"], word_tokenizer(VOCAB)),
                        LocalDrafter(models["drafter"], word_tokenizer(VOCAB, prefix="w"))])
    with pytest.raises(ValueError, match=r"^the drafter's tokenizer is not the pool's first drafter's: 128 of 128 "
                                         r"blocks .* so one of them is not the target's"):
        SpeculativeEngine(target, pool, tree="kary:2x2")
    same = DrafterPool([LocalDrafter(models["drafter"], word_tokenizer(VOCAB)),
                        LocalDrafter(models["drafter"], word_tokenizer(VOCAB, renamed={VOCAB - 1}))])
    SpeculativeEngine(target, same, tree="kary:2x2")  # a fine-tune's few ids: taken, as against a target's


def test_a_pool_member_of_another_vocabulary_size_is_named_by_its_address(models):
    """Of three drafter workers, the one whose size is no padding of the target's is named."""
    servers = [serve_drafter(LocalDrafter(model), "127.0.0.1:0")
               for model in (models["drafter"], tiny_llama(vocab=VOCAB + 2048, hidden=16, layers=1), models["drafter"])]
    addresses = [f"127.0.0.1:{port}" for _, port in servers]
    handles = [RemoteDrafter(address, VOCAB) for address in addresses]
    try:
        with pytest.raises(ValueError, match=rf"^drafter worker at {addresses[1]}: the drafter's vocab_size "
                                             rf"\({VOCAB + 2048}\) differs from the target's \({VOCAB}\) by more than"):
            SpeculativeEngine(LocalTarget(models["target"]), DrafterPool(handles), tree="kary:2x2",
                              tokenizer=word_tokenizer(VOCAB))
    finally:
        for handle in handles:
            handle.close()
        for server, _ in servers:
            server.stop(0).wait()
