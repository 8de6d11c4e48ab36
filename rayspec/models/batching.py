"""Cross-request batching: the forwards of concurrent sequences over one model, run as one.

Every sequence keeps its own KV cache (`TreeLM`), and its session calls `TreeLM.forward` when
it needs logits: a target's tree, a drafter's tree level, a prefill.  Those calls go through
the model's `ForwardBatcher`, which runs one forward at a time on the model.  While a forward
runs, the calls of other sequences queue; when it ends, the oldest waiting call's thread takes
the queue's head — as many calls as fit the limits, in arrival order — and runs them as one
padded forward (continuous batching, as in vLLM and SGLang, at the granularity of a forward:
each sequence's speculative loop goes on unchanged, and a sequence alone is never made to
wait for company).

A batched forward pads every call to the widest call's tokens and to the longest cache, and
gives each row a mask of its own: its committed prefix, its ancestors among its tree's nodes
(`visible_beyond_prefix`), nothing of the padding.  Its new keys and values are written into
that sequence's own cache, as a forward alone would write them.

A call alone takes `TreeLM.forward_alone`, a forward's arithmetic without batching.  A call in
a batch gets the same logits up to rounding (a matrix product's rounding depends on its shape;
about 1e-6 relative on the demo target): each row's law is its own sequence's, so every
verifier stays exact in law, but a sample whose uniform falls that close to a boundary may
differ from the one drawn alone.  Which calls share a forward depends on timing, so a seed
repeats its tokens byte for byte under load only with batching off (`max_sequences=1`), as
with the prefix cache (`rayspec.models.prefix_cache`).

Batched: plain growing caches without a sliding window (`TreeLM.reuses_prefixes`; the padded
mask here applies no window, so such a model's calls run alone) and calls whose padded batch stays
within `max_tokens` query rows, at most half of them padding (so a long prefill runs alone
or nearly, instead of padding a batch of small trees to its length: on a CPU a padding row
costs what a real one does).  A batch that fails (memory, say) is undone — each cache cut
back to what it held — and each of its calls is run alone, so that one call's failure is
never another request's.

Chunked prefill (`prefill_chunk`, off by default): a prefill longer than that many tokens goes
in chunks, each committed before the next, and the forwards other sequences queued meanwhile
run between two chunks.  It bounds how long a long prompt stalls the sequences that are
decoding, at the price of that prompt's time to first token: each chunk waits for a forward
of theirs (measured on the demo pair, `bench/results/prefill_chunk_bench.md`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field

import torch
from transformers.cache_utils import DynamicLayer

from rayspec.models.cancellation import GenerationCancelled, caller_watch
from rayspec.models.tree_lm import visible_beyond_prefix

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_SEQUENCES = 16
# Query rows of one padded batch (sequences x widest call): sixteen 16-node trees, or a
# 256-token prefill alone.  A GPU serves more; a CPU's forward grows with every row.
DEFAULT_MAX_BATCH_TOKENS = 256
# The most of a batch's query rows that may be padding (calls narrower than the widest).
MAX_PADDING = 0.5
DEFAULT_PREFILL_CHUNK = 0  # tokens per prefill chunk; 0: a prefill goes in one forward
# How often a queued call asks whether its caller left: a forward ahead of it may take seconds
# (a long prefill), and nothing else wakes it.
LEFT_CHECK_SECONDS = 0.25


@dataclass(eq=False)  # a call is itself: found in the queue by identity
class _Call:
    """One sequence's forward, queued: `TreeLM.forward_alone`'s arguments and its result."""

    lm: object  # TreeLM
    tokens: list[int]
    parents: list[int]
    offsets: list[int]
    visible_slots: object = None
    last: int | None = None
    logits: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False
    batch_size: int = 1  # calls in the forward that computed it

    @property
    def width(self) -> int:
        return len(self.tokens)

    def run_alone(self) -> None:
        try:
            self.logits = self.lm.forward_alone(self.tokens, self.parents, self.offsets, self.visible_slots, self.last)
        except BaseException as error:  # noqa: BLE001 — handed to the call's own thread
            self.error = error


@dataclass
class BatchStats:
    """What a batcher has done: forwards run, the calls they carried, and how many forwards
    carried each number of calls."""

    forwards: int = 0
    calls: int = 0
    failed_batches: int = 0  # batched forwards that failed and were run call by call
    sizes: dict[int, int] = field(default_factory=dict)

    @property
    def mean_batch(self) -> float:
        return self.calls / self.forwards if self.forwards else 0.0


class ForwardBatcher:
    """One model's forwards, one at a time, concurrent sequences' calls batched (module doc).

    max_sequences: the most calls in one forward (1: no batching, each call alone, as before
    batching existed).  max_tokens: the most query rows of a padded batch (calls x widest).
    prefill_chunk: tokens per chunk of a prefill (`TreeLM.prefill`; 0: no chunks)."""

    def __init__(self, max_sequences: int = DEFAULT_MAX_BATCH_SEQUENCES,
                 max_tokens: int = DEFAULT_MAX_BATCH_TOKENS, prefill_chunk: int = DEFAULT_PREFILL_CHUNK):
        check_batch_limits(max_sequences, max_tokens, prefill_chunk)
        self.max_sequences, self.max_tokens = int(max_sequences), int(max_tokens)
        self.prefill_chunk = int(prefill_chunk)
        self._changed = threading.Condition()
        self._queue: deque[_Call] = deque()
        self._running = False
        self.stats = BatchStats()

    @property
    def waiting(self) -> int:
        """Calls queued for the next forward."""
        return len(self._queue)

    def forward(self, lm, tokens, parents, offsets, visible_slots=None,
                last: int | None = None) -> tuple[torch.Tensor, int]:
        """(`lm.forward_alone(...)`'s logits, how many sequences their forward carried),
        computed alone or beside other sequences' calls."""
        call = _Call(lm, list(tokens), list(parents), list(offsets), visible_slots, last)
        left = caller_watch()
        with self._changed:
            self._queue.append(call)
            while not call.done and (self._running or self._queue[0] is not call):
                self._changed.wait(None if left is None else LEFT_CHECK_SECONDS)
                if left is not None and call in self._queue and left():
                    # A prefill whose caller left leaves the queue, rather than cost the
                    # sequences behind it a forward that nobody waits for.
                    self._queue.remove(call)
                    self._changed.notify_all()
                    raise GenerationCancelled("its caller left while its forward was queued")
            if not call.done:  # the oldest call, and the model is free: this thread runs a forward
                batch = self._take()
                self._running = True
        if not call.done:
            try:
                self._run(batch)
            finally:
                with self._changed:
                    self._running = False
                    for member in batch:
                        if member.logits is None and member.error is None:  # `_run` itself broke off
                            member.error = RuntimeError("the model's forward was abandoned before this call ran")
                        member.done = True
                    self._changed.notify_all()
        if call.error is not None:
            raise call.error
        return call.logits, call.batch_size

    def _take(self) -> list[_Call]:
        """The queue's head and the calls after it that fit the limits (called holding the
        condition); strict arrival order, so no call is passed over for long."""
        batch = [self._queue.popleft()]
        if not _batchable(batch[0]):
            return batch
        width = rows = batch[0].width
        while self._queue and len(batch) < self.max_sequences:
            following = self._queue[0]
            wider = max(width, following.width)
            padded = wider * (len(batch) + 1)
            if (not _batchable(following) or padded > self.max_tokens
                    or padded - rows - following.width > MAX_PADDING * padded):
                break
            batch.append(self._queue.popleft())
            width, rows = wider, rows + following.width
        return batch

    def _run(self, batch: list[_Call]) -> None:
        if len(batch) == 1:
            batch[0].run_alone()
        else:
            before = [call.lm.cached for call in batch]
            try:
                for call, logits in zip(batch, forward_batch(batch), strict=True):
                    call.logits, call.batch_size = logits, len(batch)
            except Exception:  # noqa: BLE001 — undone, then each call alone below
                log.warning("a batched forward of %d sequences failed; running them one by one", len(batch),
                            exc_info=True)
                for call, rows in zip(batch, before):  # logits are set only once the whole batch returned
                    call.lm.truncate(rows)
                self.stats.failed_batches += 1
                for call in batch:
                    call.run_alone()
        self.stats.forwards += 1
        self.stats.calls += len(batch)
        self.stats.sizes[len(batch)] = self.stats.sizes.get(len(batch), 0) + 1


def check_batch_limits(max_sequences, max_tokens, prefill_chunk=DEFAULT_PREFILL_CHUNK, named=str) -> None:
    """A clear error for a limit that is no whole number at or above its least, naming the setting
    as `named` spells it (a command line's: its flag, --max-batch-sequences)."""
    for name, value, least in (("max_batch_sequences", max_sequences, 1), ("max_batch_tokens", max_tokens, 1),
                               ("prefill_chunk_tokens", prefill_chunk, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{named(name)} must be a whole number, {least} or more, got {value!r}")


def _batchable(call: _Call) -> bool:
    return call.lm.reuses_prefixes


@torch.inference_mode()
def forward_batch(calls: list[_Call]) -> list[torch.Tensor]:
    """Each call's logits (as `TreeLM.forward_alone` returns them, float32), from one forward
    over all of them: tokens padded to the widest call, caches to the longest (module doc)."""
    first = calls[0].lm
    model, device, dtype = first.model, first.device, first.dtype
    widths = [call.width for call in calls]
    width = max(widths)
    ends = [call.lm.cached + n for call, n in zip(calls, widths)]
    length = max(ends)
    masked = torch.finfo(dtype).min
    # Built on the CPU and moved once: on a GPU each small write would be a kernel launch.
    input_ids = torch.zeros(len(calls), width, dtype=torch.long)
    position_ids = torch.zeros(len(calls), width, dtype=torch.long)
    mask = torch.full((len(calls), 1, width, length), masked, dtype=dtype)
    for row, (call, n, end) in enumerate(zip(calls, widths, ends)):
        lm = call.lm
        input_ids[row, :n] = torch.as_tensor(call.tokens, dtype=torch.long)
        position_ids[row, :n] = lm.committed + torch.as_tensor(call.offsets, dtype=torch.long)
        position_ids[row, n:] = lm.committed
        hidden = visible_beyond_prefix(call.parents, lm.cached - lm.committed, call.visible_slots).logical_not()
        mask[row, 0, :n, : lm.committed] = 0
        mask[row, 0, :n, lm.committed : end] = torch.zeros(hidden.shape, dtype=dtype).masked_fill_(hidden, masked)
        mask[row, 0, n:, 0] = 0  # a padding row sees one key, so that no softmax row is all masked
    cache = first.new_cache()
    cache.layers = [_BatchedLayer([call.lm.cache.layers[i] for call in calls], widths, length)
                    for i in range(len(first.cache.layers))]
    out = model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                position_ids=position_ids.to(device), use_cache=True, **{first.cache_argument: cache})
    return [out.logits[row, :n].float() if call.last is None else out.logits[row, n - call.last : n].float()
            for row, (call, n) in enumerate(zip(calls, widths))]


class _BatchedLayer(DynamicLayer):
    """One layer of a batched forward: writes each sequence's new rows into that sequence's
    own cache layer and hands attention all of them, padded to `length` rows with zeros
    (masked, but never NaN: 0 times a masked weight stays 0)."""

    def __init__(self, layers: list, widths: list[int], length: int):
        super().__init__()
        self.layers, self.widths, self.length = layers, widths, length
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        batch, heads, _, dim = key_states.shape
        keys = key_states.new_zeros(batch, heads, self.length, dim)
        values = value_states.new_zeros(batch, heads, self.length, value_states.shape[-1])
        for row, (layer, n) in enumerate(zip(self.layers, self.widths)):
            own_keys, own_values = layer.update(key_states[row : row + 1, :, :n], value_states[row : row + 1, :, :n])
            keys[row, :, : own_keys.shape[-2]] = own_keys[0]
            values[row, :, : own_values.shape[-2]] = own_values[0]
        return keys, values

    def get_seq_length(self) -> int:
        return self.length
