"""One forward pass for a whole draft tree over a KV cache, and cache compaction.

`TreeLM` wraps a HF causal LM and one sequence's `DynamicCache`.  The cache holds the KV of
the *committed* tokens; a step appends tree nodes to it, and `keep` then drops every
appended node that was not accepted.  Each appended node attends to the committed prefix
and to its own ancestors only (SpecInfer's topology-aware mask), at position id
`committed length + depth`, so its logits are those of its root-to-node path run alone.

transformers 5 details (see the project's environment notes): the mask must be a *float*
additive 4D mask [1, 1, n, cache + n] (0 = attend, finfo.min = masked) — a bool mask with
eager attention is silently wrong; and `DynamicCache.crop` only removes, so compaction
moves the kept rows of every layer's keys and values down over the dropped ones and slices
the tail off.  HF's `DynamicLayer` concatenates: every forward copies the whole cache of
every layer (on the demo pair on a CPU, a fifth of a step); `GrowingLayer` writes the new
rows into a buffer with room to spare instead.

On a GPU, a forward must not reach cuDNN's attention: it plans an execution graph for every
new shape, and a decoding step's shapes are always new (the cache grows, trees differ in
size).  Profiled on an H100 (bench/results/profile_step_cuda.md at commit a65062c), that planning took 81 % of
the host's time at 7.8 ms a call for 9 us of GPU work.  The other kernels (memory-efficient
attention takes the float mask) need no planning.  A TreeLM on a CUDA device therefore turns
cuDNN's attention off for its whole process (`leave_cudnn_attention_out`): torch's backend
switches are process-wide, and switching them around each forward would race between threads
forwarding two models at once — one thread restoring them under the other's forward, whose
kernels, and so whose bfloat16 rounding, would then depend on timing.
"""

from __future__ import annotations

import functools
import inspect
import logging

import torch
from transformers import DynamicCache, cache_utils
from transformers.cache_utils import DynamicLayer

from rayspec.models.cancellation import stop_if_caller_left

log = logging.getLogger(__name__)


def leave_cudnn_attention_out(device: torch.device) -> None:
    """On a CUDA device, turn cuDNN's scaled-dot-product attention off for this process (see
    the module's docstring); elsewhere, nothing."""
    if device.type == "cuda" and torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)
        log.info("cuDNN's attention turned off in this process: it plans a graph for every new shape")


def visible_beyond_prefix(parents, pending: int, visible_slots=None) -> torch.Tensor:
    """[n, pending + n] bool, on the CPU: which uncommitted cache rows each of n new nodes
    attends to — the `pending` rows appended earlier in the step that `visible_slots` [n,
    pending] grants it or its ancestors, then itself and its ancestors among the new nodes.
    parents [n]: each node's parent among the new nodes (parents come first), or -1.

    Built here and sent to the model's device once: on a GPU, an operation per node is a
    kernel launch per node (a prefill of 2,000 tokens would be 4,000 of them).  The ancestor
    lists are walked in Python and written with one indexed assignment: a tensor operation per
    node, on the host alone, was 405 of a sequoia:32 step's 3,756 torch operations on the demo
    pair (67 now), and a GPU step's time is its host's (bench/results/profile_step_cuda.md)."""
    n = len(parents)
    visible = torch.zeros(n, pending + n, dtype=torch.bool)
    granted = pending and visible_slots is not None
    if not granted and list(parents) == list(range(-1, n - 1)):
        visible[:, pending:] = torch.ones(n, n, dtype=torch.bool).tril()  # a chain: a prefill
        return visible
    if all(parent < 0 for parent in parents):  # a drafter's level: each node sees itself and its grant
        visible[:, pending:].fill_diagonal_(True)
        if granted:
            visible[:, :pending] = torch.as_tensor(visible_slots, dtype=torch.bool)
        return visible
    lineage: list[list[int]] = []  # each node's ancestors among the new nodes, and itself
    for i, parent in enumerate(parents):
        lineage.append((lineage[parent] if parent >= 0 else []) + [i])
    rows = torch.tensor([i for i, line in enumerate(lineage) for _ in line], dtype=torch.long)
    columns = torch.tensor([node for line in lineage for node in line], dtype=torch.long)
    visible[rows, pending + columns] = True
    if granted:  # a row granted to any of a node's lineage is the node's to see
        slots = torch.as_tensor(visible_slots, dtype=torch.bool)
        visible[:, :pending] = (visible[:, pending:].to(torch.float32) @ slots.to(torch.float32)) > 0
    return visible


@functools.cache
def forward_keywords(model_class: type) -> frozenset[str]:
    """The keywords of a model class's `forward`: read once per class, not per sequence
    (`inspect.signature` cost 0.2 ms, a twentieth of a short request on the tiny models)."""
    return frozenset(inspect.signature(model_class.forward).parameters)


def cache_keyword(model) -> str:
    """The keyword `model.forward` takes its KV cache by: transformers 5.24 renamed
    `past_key_values` to `cache` (the old name goes in 5.40)."""
    return "cache" if "cache" in forward_keywords(type(model)) else "past_key_values"


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of buffers with room for more rows:
    an update writes its rows in place, and a buffer is reallocated (half as large again, at
    least `MIN_GROWTH` rows more) only when it is full — instead of a concatenation that
    copies every cached row on every forward.  Shrinking the views (`TreeLM.keep`, `crop`)
    keeps the buffers: the next update writes over the dropped rows."""

    MIN_GROWTH = 128

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer = self.value_buffer = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        if self.key_buffer is None or end > self.key_buffer.shape[-2]:
            self.key_buffer, self.value_buffer = (
                _regrown(self.keys, key_states, end), _regrown(self.values, value_states, end))
        self.key_buffer[..., start:end, :] = key_states
        self.value_buffer[..., start:end, :] = value_states
        self.keys, self.values = self.key_buffer[..., :end, :], self.value_buffer[..., :end, :]
        return self.keys, self.values

    def reset(self) -> None:
        self.key_buffer = self.value_buffer = None
        super().reset()


def _regrown(cached: torch.Tensor, new: torch.Tensor, rows: int) -> torch.Tensor:
    """A buffer of `new`'s layout with room for `rows` rows and more, `cached`'s rows copied in."""
    room = rows + max(rows // 2, GrowingLayer.MIN_GROWTH)
    buffer = new.new_empty((*new.shape[:-2], room, new.shape[-1]))
    if cached.dim() == new.dim():  # the first update's `cached` is an empty 1-D tensor
        buffer[..., : cached.shape[-2], :] = cached
    return buffer


# HF's cache layer of sliding-window attention (transformers >= 4.57; None before, when such
# layers had other types that keep their own rules).
_SLIDING_LAYER = getattr(cache_utils, "DynamicSlidingWindowLayer", None)


def sliding_window_of(config) -> tuple[int | None, list[str]]:
    """(the window of a model's sliding-window attention layers, or None if it has none; its
    layers' types as HF names them, e.g. "full_attention", "sliding_attention").

    In HF's semantics a query at position t sees the keys at positions t - window + 1 .. t.
    Read from the config's own fields, as HF's caches read them (`layer_types` where the config
    has it, else every layer sliding when `sliding_window` is set), not through a helper of
    the newest transformers only."""
    config = config.get_text_config(decoder=True)
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is None:
        layer_types = ["sliding_attention" if window is not None else "full_attention"] * config.num_hidden_layers
    return (window if "sliding_attention" in layer_types else None), list(layer_types)


# The layers a tree mask steers: attention over the keys the mask lets through (HF's names).
TREE_LAYER_TYPES = ("full_attention", "sliding_attention")
# HF's attention implementations that add the tree's float 4-D mask to the scores.  Flash
# attention takes masks of padding only; "paged|eager" gave logits 0.14 off a path's own, with
# no error, and "flex_attention" corrupted the heap on CPU (transformers 5.24, torch 2.13).
TREE_ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")
# Recurrent or convolutional models whose configs name no layer types of that kind.
_STATEFUL_MODEL_TYPES = ("rwkv", "xlstm", "lfm2", "lfm2_moe")
# Models whose own masks or positions override the tree's, though their configs name only
# attention layers: each found running tiny random weights of every HF causal LM against its
# own forward for each node's path (`bench/architecture_sweep.py`).
_OWN_POSITIONS = "it numbers positions from its padding id on, not the tree's positions"
_UNSTEERABLE = {
    "roformer": "its rotary positions count cache rows, not the tree's positions",
    "cpmant": "it builds its own mask and positions, for one token at a time",
    "openai-gpt": "it keeps no cache and takes a 2-D padding mask only",
    "xlm": "it builds its own masks from lengths",
    "xlnet": "its relative attention takes a 2-D mask only",
    "reformer": "its chunked attention keeps its own buckets and takes a 2-D mask only",
    **dict.fromkeys(("roberta", "roberta-prelayernorm", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text",
                     "xmod"), _OWN_POSITIONS),
}


def check_tree_attention(config) -> None:
    """ValueError for a model whose layers a tree mask cannot steer.  ALiBi models build their
    position biases from a key's cache row (MPT: wrong for a tree's branches, whose rows are
    not their positions) or from a 2-D padding mask of their own (BLOOM, Falcon with `alibi`:
    they fail on a 4-D one).  Recurrent and convolutional layers (HF's "linear_attention",
    "hybrid", "conv": Mamba, Jamba, Qwen3-Next, Falcon-H1, RWKV, LFM2) carry a state along the
    token sequence, through every branch laid out before a node: Qwen3-Next's tree logits were
    0.2 off its own, silently, and Mamba's and RWKV's forwards failed.  Chunked attention
    (Llama 4) masks by chunks of positions of its own, and failed on a tree mask.  A few others
    override the tree's mask or positions with their own (`_UNSTEERABLE`; GPT-Neo's local
    layers).  And attention must be computed by an implementation that takes the tree's mask
    (`TREE_ATTENTION_IMPLEMENTATIONS`)."""
    config = config.get_text_config(decoder=True)
    implementation = getattr(config, "_attn_implementation", None)  # None: HF's default, sdpa or eager
    if implementation is not None and implementation not in TREE_ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"this model's attention runs on {implementation!r}, which cannot take a tree's mask (rayspec "
                         f"needs {' or '.join(map(repr, TREE_ATTENTION_IMPLEMENTATIONS))}): load it with "
                         f"attn_implementation='sdpa', or call model.set_attn_implementation('sdpa')")
    supported = ("rayspec runs models with rotary or learned position embeddings whose layers are full or "
                 "sliding-window attention (Llama, Mistral, Qwen2/3, Gemma, GPT-2, GPT-NeoX, Phi-3, OPT, Falcon "
                 "without alibi)")
    if config.model_type in ("bloom", "mpt") or getattr(config, "alibi", False) is True:
        raise ValueError(f"{config.model_type} models use ALiBi position biases, which tree attention cannot drive; "
                         f"{supported}")
    reason = _UNSTEERABLE.get(config.model_type)
    if config.model_type == "gpt_neo" and "local" in getattr(config, "attention_layers", ()):
        reason = "its local layers' window counts cache rows, not positions"
    if reason is not None:
        raise ValueError(f"{config.model_type} models cannot run tree attention: {reason}; {supported}")
    if not hasattr(config, "num_hidden_layers"):
        raise ValueError(f"{config.model_type} models keep their layers in sub-configs, which rayspec does not read; "
                         f"{supported}")
    others = sorted(set(sliding_window_of(config)[1]) - set(TREE_LAYER_TYPES))
    if others or config.model_type in _STATEFUL_MODEL_TYPES:
        kinds = ", ".join(f'"{kind}"' for kind in others) or "recurrent"
        raise ValueError(f"{config.model_type} models have {kinds} layers, which a tree mask cannot steer (a state "
                         f"carried along the sequence, or attention chunked by position, sees every branch laid "
                         f"out before a node); {supported}")


class TreeLM:
    """A causal LM with the KV cache of one sequence; tree-masked forwards and compaction.

    A sliding-window model's sliding layers keep every row, as full layers do, and the window
    is applied in the tree mask instead: HF's sliding layers drop all but the last rows, so a
    row's index would no longer be its position, which the tree mask and `keep` rely on."""

    def __init__(self, model, batcher=None):
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        leave_cudnn_attention_out(self.device)
        # The model's `rayspec.models.batching.ForwardBatcher`, shared by its sequences; None:
        # every forward runs at once, alone.
        self.batcher = batcher
        self.cache = self.new_cache()
        self.sliding_window, self.layer_types = sliding_window_of(model.config)
        # Other special layers (chunked attention, recurrent states) keep their own update rules.
        self.cache.layers = [GrowingLayer() if type(layer) is DynamicLayer
                             or (type(layer) is _SLIDING_LAYER and layer_type == "sliding_attention")
                             else layer for layer, layer_type in zip(self.cache.layers, self.layer_types)]
        self.committed = 0  # cache rows of committed tokens (a prefix of the cache)
        # With a sliding window: the position ids of the appended, uncommitted rows (a committed
        # row's position is its index), which the window is measured from.
        self.pending_positions = torch.zeros(0, dtype=torch.long, device=self.device)
        self.batch_sizes: list[int] = []  # sequences in each forward since `batch_sizes` was last emptied
        accepted = forward_keywords(type(model))
        # HF causal LMs project only the last positions onto the vocabulary when told to: a
        # prefill that needs one row spares an [n, V] product and its memory (2 GB of float32
        # for 4k tokens at V = 128k).
        self.keeps_last_logits = "logits_to_keep" in accepted
        self.cache_argument = cache_keyword(model)

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    @property
    def cached(self) -> int:
        """Rows in the cache: committed tokens plus the nodes appended this step."""
        return self.cache.get_seq_length()

    def forward(self, tokens, parents, offsets, visible_slots=None, last: int | None = None) -> torch.Tensor:
        """`forward_alone`, through the model's batcher when it has one: then this call may
        share its forward with other sequences' (`rayspec.models.batching`)."""
        if self.batcher is None:
            self.batch_sizes.append(1)
            return self.forward_alone(tokens, parents, offsets, visible_slots, last)
        logits, size = self.batcher.forward(self, tokens, parents, offsets, visible_slots, last)
        self.batch_sizes.append(size)
        return logits

    @torch.inference_mode()
    def forward_alone(self, tokens, parents, offsets, visible_slots=None, last: int | None = None) -> torch.Tensor:
        """Append n nodes and return their logits [n, V] (float32), or the last `last` nodes'
        only when given (all n of them if the model cannot skip the others).

        tokens [n]: the new nodes' tokens.  parents [n]: for each new node, the index of its
        parent among the new nodes, or -1 if its parent is not among them.  offsets [n]:
        position ids relative to the committed prefix (position id = committed + offset),
        i.e. the node's depth below the first uncommitted position.  visible_slots
        [n, cached - committed] (bool, optional): which already-appended, uncommitted rows
        each new node sees (its ancestors from earlier forwards of the same step).
        """
        n = len(tokens)
        tokens = torch.as_tensor(tokens, dtype=torch.long).view(1, n).to(self.device)
        offsets = torch.as_tensor(offsets, dtype=torch.long).to(self.device)
        pending = self.cached - self.committed
        hidden = ~visible_beyond_prefix(parents, pending, visible_slots).to(self.device)
        mask = torch.zeros(n, self.committed + pending + n, dtype=self.dtype, device=self.device)
        mask[:, self.committed :].masked_fill_(hidden, torch.finfo(self.dtype).min)
        positions = self.committed + offsets
        keep = {"logits_to_keep": last} if last and last < n and self.keeps_last_logits else {}
        out = self.model(
            input_ids=tokens,
            attention_mask=self.attention_masks(mask.view(1, 1, n, -1), positions),
            position_ids=positions.view(1, n),
            use_cache=True,
            **{self.cache_argument: self.cache},
            **keep,
        )
        if self.sliding_window is not None:
            self.pending_positions = torch.cat((self.pending_positions, positions))
        logits = out.logits[0]
        return (logits if last is None else logits[-last:]).float()

    def attention_masks(self, mask: torch.Tensor, positions: torch.Tensor):
        """A forward's `attention_mask` from its tree mask [1, 1, n, cached + n] and its new
        nodes' position ids [n]: the mask itself; with a sliding window, the mask that also
        hides the keys a node's window leaves out, for every layer if all of them slide, else
        as HF's hybrid models take it, one mask per layer type."""
        if self.sliding_window is None:
            return mask
        keys = torch.cat((torch.arange(self.committed, device=self.device), self.pending_positions, positions))
        windowed = mask.masked_fill(keys <= positions[:, None] - self.sliding_window, torch.finfo(self.dtype).min)
        if all(layer_type == "sliding_attention" for layer_type in self.layer_types):
            return windowed
        return {layer_type: windowed if layer_type == "sliding_attention" else mask for layer_type in self.layer_types}

    @torch.inference_mode()  # the cache holds inference tensors, updated in place here
    def keep(self, rows) -> None:
        """Commit the appended rows listed in `rows` (cache indices >= committed, in order)
        and drop every other appended row."""
        rows = [int(r) for r in rows]
        if any(not self.committed <= r < self.cached for r in rows) or rows != sorted(set(rows)):
            raise ValueError(f"rows to keep must be increasing, uncommitted cache rows; got {rows}")
        end = self.committed + len(rows)
        moved = rows != list(range(self.committed, end))
        if moved or end != self.cached:
            # Only the appended rows move: the committed prefix is never copied.
            source = torch.tensor(rows, dtype=torch.long, device=self.device)
            for layer in self.cache.layers:
                if moved:
                    layer.keys[..., self.committed : end, :] = layer.keys.index_select(-2, source)
                    layer.values[..., self.committed : end, :] = layer.values.index_select(-2, source)
                layer.keys, layer.values = layer.keys[..., :end, :], layer.values[..., :end, :]
        self.committed = end
        self.pending_positions = self.pending_positions[:0]

    def truncate(self, rows: int) -> None:
        """Cut every layer back to its first `rows` rows (at least the committed ones): what a
        failed batched forward does to undo the rows it wrote into some layers."""
        if rows < self.committed:
            raise ValueError(f"truncating to {rows} rows would drop committed ones ({self.committed})")
        for layer in self.cache.layers:
            if layer.is_initialized and layer.get_seq_length() > rows:
                layer.keys, layer.values = layer.keys[..., :rows, :], layer.values[..., :rows, :]
        self.pending_positions = self.pending_positions[: rows - self.committed]

    @property
    def reuses_prefixes(self) -> bool:
        """Whether rows computed elsewhere can start this cache (`start_from`), and whether its
        forwards may be batched with other sequences': every layer a plain growing one (other
        layers keep rows by rules of their own), and no sliding window (which `forward_batch`'s
        masks do not apply)."""
        return self.sliding_window is None and all(type(layer) is GrowingLayer for layer in self.cache.layers)

    def committed_rows(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Views of each layer's committed keys and values (rows the cache never writes again)."""
        return [(layer.keys[..., : self.committed, :], layer.values[..., : self.committed, :])
                for layer in self.cache.layers]

    @torch.inference_mode()
    def start_from(self, rows: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Begin the empty cache with the committed rows of a prefix computed before (copied:
        the cache writes on after them)."""
        if self.cached:
            raise ValueError("a cache starts from a prefix only when empty")
        for layer, (keys, values) in zip(self.cache.layers, rows, strict=True):
            layer.update(keys.to(self.device), values.to(self.device))
        self.committed = self.cached

    def prefill(self, tokens, last: int | None = None) -> torch.Tensor:
        """Append and commit a causal chain of tokens; returns its logits [n, V], or its last
        `last` tokens' [last, V].

        With a batcher whose `prefill_chunk` is set, a longer chain goes in chunks of that many
        tokens, each committed before the next (chunked prefill): the model serves the forwards
        other sequences queued meanwhile between two chunks, so a long prompt delays their
        steps by a chunk's forward at a time rather than by its whole prefill.  The chunks are
        a function of the prompt alone, so a seed's tokens do not depend on the load.  A caller
        that left (`rayspec.models.cancellation`) stops it before its first chunk (a prefill
        that found the model idle, and so never waited in its queue) or between two."""
        tokens = list(tokens)
        chunk = self.batcher.prefill_chunk if self.batcher is not None else 0
        size = chunk if chunk and tokens else max(len(tokens), 1)
        kept = []
        for start in range(0, max(len(tokens), 1), size):
            stop_if_caller_left(f"after {start} tokens of its prompt's prefill" if start else "before its prefill")
            piece = tokens[start : start + size]
            n = len(piece)
            # of a chunk before the last, only rows that `last` may still reach
            rows = None if last is None else min(last, n)
            kept.append(self.forward(piece, list(range(-1, n - 1)), list(range(n)), last=rows))
            self.keep(range(self.committed, self.committed + n))
        logits = kept[0] if len(kept) == 1 else torch.cat(kept)
        return logits if last is None else logits[-last:]
