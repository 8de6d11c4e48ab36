"""In-process drafter and target: HF causal LMs behind the engine's two interfaces.

The drafter grows the tree level by level, one forward for all of a level's internal nodes,
over its own KV cache; the target scores the whole tree in one forward and verifies it.
Both commit only the accepted path's keys and values (`TreeLM.keep`).  The same classes run
inside the gRPC workers of `rayspec.rpc`, so remote and local decoding are one code path.

Both sides start a sequence's cache from the longest prefix of its prompt that an earlier
sequence over the same model computed (`rayspec.models.prefix_cache`), and leave their own
rows there when they close.

Concurrent sequences over one model share its forwards (`rayspec.models.batching`): one
forward runs at a time on the model, and the calls that wait for it meanwhile go together as
the next, padded to one batch.  Everything else a step does (sampling, the verifier's walk,
commits) runs in each sequence's own thread, under a lock of the session's (`busy`), which a
close waits for.
"""

from __future__ import annotations

import functools
import math
import threading
import time
import weakref
from dataclasses import replace

import torch

from rayspec.coupling import KeyedNoise
from rayspec.engine.interfaces import (
    Draft, Outcome, SequenceSpec, SessionClosedError, TokenLogprobs, stream_generator, tokenizer_fingerprint,
)
from rayspec.engine.structured import GrammarCursor, GrammarVocabulary, vocabulary_of
from rayspec.models.batching import (
    DEFAULT_MAX_BATCH_SEQUENCES, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PREFILL_CHUNK, ForwardBatcher,
)
from rayspec.models.prefix_cache import DEFAULT_PREFIX_CACHE_MB, PrefixCache
from rayspec.models.tree_lm import TreeLM, check_tree_attention
from rayspec.tree.dynamic import DynamicPlan, select_dynamic_tree
from rayspec.tree.structure import DraftTree, TreeShape, root_path
from rayspec.verify import get_verifier
from rayspec.verify.processing import TokenHistory, half_precision, logits_to_probs, truncated_law


def model_context_length(model) -> int:
    return int(getattr(model.config, "max_position_embeddings", 2048))


def model_eos_ids(model) -> tuple[int, ...]:
    eos = getattr(model.generation_config, "eos_token_id", None) or getattr(model.config, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)


class _Session:
    """What both sides keep per sequence: the tokens, the cache, the verifier, randomness."""

    def __init__(self, model, spec: SequenceSpec, stream: str, batcher: ForwardBatcher | None = None,
                 vocabulary: GrammarVocabulary | None = None, eos_token_ids: tuple[int, ...] = (),
                 prefix_cache: PrefixCache | None = None):
        self.busy = threading.RLock()  # held while a call computes on this sequence
        self.lm = TreeLM(model, batcher)
        self.prefix_cache = prefix_cache if self.lm.reuses_prefixes else None
        self.cached_tokens = 0  # prompt tokens whose rows came from the prefix cache
        self.tokens = list(spec.prompt_ids)
        self.params = spec.params
        self.seed = spec.seed
        self.verifier = get_verifier(spec.verifier, **spec.verifier_params)
        self.generator = stream_generator(spec.seed, stream, spec)
        self.context_length = model_context_length(model)
        self.model_vocab_size = int(model.config.vocab_size)  # its embedding rows
        vocab_size = self.vocab_size = spec.vocab_size or self.model_vocab_size  # its laws' width
        spec.params.check_vocabulary(vocab_size)
        # The tokens penalties look back on; committed tokens extend it (`advance`).
        self.history = TokenHistory(spec.prompt_ids, self.lm.device) if spec.params.uses_history else None
        self.grammar = None  # where the completion stands in a regex's automaton (structured output)
        if spec.params.regex:
            if vocabulary is None:
                raise ValueError("structured output needs the model's tokenizer, and this model was loaded without one")
            self.grammar = GrammarCursor(spec.params.regex, vocabulary, vocab_size, eos_token_ids, self.lm.device)
        self.untempered_params = replace(self.params, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0)
        if spec.completion_ids:  # a resumed sequence: its completion so far, prefilled with the prompt
            self.advance(list(spec.completion_ids))

    def prefill_prompt(self, tokens: list[int], last: int | None, reuse: bool = True) -> torch.Tensor:
        """Prefill the sequence's first `tokens` into the empty cache: from the end of the
        longest prefix of them the prefix cache holds (never the last token, whose logits are
        wanted), and leave their rows there for later sequences; `prefill`'s logits."""
        start = 0
        if self.prefix_cache is not None and reuse:
            start, rows = self.prefix_cache.lookup(tokens[:-1])
            if rows is not None:
                self.lm.start_from(rows)
        self.cached_tokens = start
        logits = self.lm.prefill(tokens[start:], last=last)
        if self.prefix_cache is not None:
            self.prefix_cache.store(tokens, self.lm.committed_rows())
        return logits

    def model_ids(self, tokens: list[int]) -> list[int]:
        """The ids the model is fed for `tokens`: an id past its embeddings (a padding row only
        the target has, `fit_vocabulary`: emitted by the target, or drafted where a request
        allows nothing else) as token 0.  Only a drafter meets one, and only its drafts after
        it suffer; it is never fed a row that does not exist."""
        if self.vocab_size <= self.model_vocab_size:
            return tokens
        return [t if t < self.model_vocab_size else 0 for t in tokens]

    def advance(self, tokens: list[int]) -> None:
        """Commit emitted tokens to the sequence."""
        self.tokens += tokens
        if self.history is not None:
            self.history.extend(tokens)
        if self.grammar is not None:
            self.grammar.advance(tokens)

    def laws(self, logits: torch.Tensor, paths, untempered: bool = False) -> torch.Tensor:
        """The processed laws of rows of logits, row r's after the completion so far and the
        drafted tokens `paths()[r]` (called only when a penalty needs them).  untempered: with
        the bias, penalties and stop ban only (temperature 1, no min-p, top-k or top-p)."""
        params = self.untempered_params if untempered else self.params
        history = None
        if params.uses_history:
            drafted = paths()
            history = self.history.rows(drafted, params.bad_word_context)
            if self.grammar is not None:
                history = history._replace(allowed=self.grammar.masks(drafted))
        return logits_to_probs(logits, params, history=history)

    def check_fits(self, length: int, depth: int) -> None:
        """Refuse a tree `depth` levels deep below a sequence of `length` tokens unless all its
        nodes have positions in the model's context (learned position embeddings have none
        beyond it; on a GPU, indexing past them is a device-side assert that ends the process)."""
        if length + depth > self.context_length:
            raise ValueError(f"a tree {depth} levels deep after {length} tokens reaches position {length + depth - 1}; "
                             f"this model's context holds {self.context_length} positions")

    def randomness(self):
        """Private verifiers draw from this side's stream; couplings share keyed noise whose
        position is that of the root's children (the next token to emit)."""
        if self.verifier.drafter_invariant:
            return KeyedNoise(self.seed, len(self.tokens))
        return self.generator

    def close(self) -> None:
        """Drop the cache, after any computation in flight on this model: a worker may be told
        to release a session (its client left) while it still computes that session's step.
        Its committed rows go to the prefix cache: a conversation's next turn starts there."""
        with self.busy:
            if self.lm is not None and self.prefix_cache is not None and self.lm.committed:
                self.prefix_cache.store(self.model_ids(self.tokens[: self.lm.committed]), self.lm.committed_rows())
            self.lm = None

    def check_open(self) -> None:
        """Refuse a call that waited for the model while the session was closed (called under
        `busy`)."""
        if self.lm is None:
            raise SessionClosedError("the session was released or expired while this call waited for the model")


class LocalTargetSession(_Session):
    def __init__(self, model, spec: SequenceSpec, batcher: ForwardBatcher | None = None,
                 vocabulary: GrammarVocabulary | None = None, eos_token_ids: tuple[int, ...] = (),
                 prefix_cache: PrefixCache | None = None):
        if spec.vocab_size not in (None, int(model.config.vocab_size)):
            raise ValueError(f"the sequence's laws are {spec.vocab_size} tokens wide; a target's are its vocabulary's "
                             f"({int(model.config.vocab_size)})")
        super().__init__(model, spec, "verify", batcher, vocabulary, eos_token_ids, prefix_cache)
        self.logprobs = spec.logprobs
        self.scored_logits = None  # the last scored tree's logits, kept for `commit` when logprobs are asked
        self.scored_tree = None  # the last scored tree, whose rows `commit` keeps: until it commits or fails
        self.prompt_logprobs = None
        if len(self.tokens) > 1:
            with self.busy:
                # The last prompt token is the first step's root; the rows are needed only to
                # report the prompt's log-probabilities (which a cached prefix would not give).
                scores_prompt = spec.prompt_logprobs is not None
                logits = self.prefill_prompt(self.tokens[:-1], last=None if scores_prompt else 1,
                                             reuse=not scores_prompt)
            if spec.prompt_logprobs is not None:  # row i is the law of prompt token i + 1
                self.prompt_logprobs = TokenLogprobs.of(logits, self.tokens[1:], spec.prompt_logprobs)
        elif spec.prompt_logprobs is not None:
            self.prompt_logprobs = TokenLogprobs.empty()

    def score(self, tree: DraftTree) -> torch.Tensor:
        """The target's law after every node's path, [N, V], from one tree-masked forward.

        The tree's rows stay in the cache until `commit` keeps the accepted path's; those of a
        tree scored before and never committed (its step failed) are dropped first."""
        if int(tree.tokens[0]) != self.tokens[-1]:
            raise ValueError(f"the tree's root {int(tree.tokens[0])} is not the last committed token {self.tokens[-1]}")
        self.check_fits(len(self.tokens), tree.shape.max_depth)
        if self.lm.cached > self.lm.committed:
            self.lm.keep([])
        self.scored_tree = None
        logits = self.lm.forward(tree.tokens.tolist(), tree.shape.parents, tree.shape.depth)
        self.scored_tree = tree
        self.scored_logits = None if self.logprobs is None else logits
        tokens = tree.tokens.tolist()
        parents = tree.shape.parents
        return self.laws(logits, lambda: [_path_tokens(node, parents, tokens) for node in range(len(tokens))])

    def node_samples(self, tree: DraftTree, p_rows: torch.Tensor) -> torch.Tensor:
        """Each node's own sample, [N]: all that token-only verifiers (greedy, couplings) need
        of the target — the token the walk emits there if it gets there."""
        samples = torch.empty(tree.shape.size, dtype=torch.long)
        for depth, level in enumerate(tree.shape.levels):
            rows = p_rows[level.start : level.stop]
            noise = self.verifier.tree_randomness(self.randomness(), depth)
            samples[level.start : level.stop] = self.verifier.sample_target_batch(rows, noise).cpu()
        return samples

    def commit(self, tokens: list[int], path: list[int]) -> TokenLogprobs | None:
        """Keep the root's and the accepted path's rows; the emitted tokens are committed.
        Returns their log-probabilities when the sequence asks for them: token i was drawn
        after the path's first i nodes, from the row of node (0, *path)[i].

        The tokens and path must be a walk's down the tree scored last (a worker's Commit is a
        caller's word for them): the cache keeps the path's rows and the sequence the tokens,
        so a path off the tree, tokens not its nodes', or more tokens than the path's and one,
        left the two apart, and every later step scored after the wrong context, silently."""
        if not _walks_down(self.scored_tree, tokens, path):
            raise ValueError(f"a commit takes a path down the tree scored last from its root, its nodes' tokens and one "
                             f"token more; got path {list(path)[:8]} and {len(tokens)} tokens"
                             + ("" if self.scored_tree is not None else ", with no tree scored since the last commit"))
        self.scored_tree = None
        logprobs = None
        if self.logprobs is not None:
            logits, self.scored_logits = self.scored_logits, None
            if logits is None or len(tokens) != len(path) + 1 or max(path, default=0) >= len(logits):
                raise ValueError("a commit with log-probabilities takes a path of the tree scored last "
                                 "and one token more than the path's nodes")
            logprobs = TokenLogprobs.of(logits[[0, *path]], tokens, self.logprobs)
        self.lm.keep([self.lm.committed + node for node in (0, *path)])
        self.advance(tokens)
        return logprobs

    def verify(self, draft: Draft) -> Outcome:
        """Score, verify and commit one tree; a step that fails leaves the session as it was
        (a worker answers the error and keeps the session open for the next step)."""
        q_rows = draft.q_rows  # decoded (a remote draft's) before taking the session
        with self.busy:
            self.check_open()
            drawn = self.generator.get_state()
            try:
                start = time.perf_counter()
                self.lm.batch_sizes.clear()
                p_rows = self.score(draft.tree)
                scored = time.perf_counter()
                q_rows = None if q_rows is None else q_rows.to(p_rows.device)
                verdict = self.verifier.verify_tree(draft.tree, p_rows, q_rows, self.randomness())
                verified = time.perf_counter()
            except BaseException:
                self.lm.keep([])
                self.generator.set_state(drawn)
                self.scored_logits = None
                self.scored_tree = None
                raise
            logprobs = self.commit(verdict.tokens, verdict.path)
        return Outcome(verdict.tokens, verdict.path, verdict.ranks, scored - start, verified - scored,
                       logprobs=logprobs, batch_size=self.lm.batch_sizes[-1])


class LocalDrafterSession(_Session):
    def __init__(self, model, spec: SequenceSpec, batcher: ForwardBatcher | None = None,
                 vocabulary: GrammarVocabulary | None = None, eos_token_ids: tuple[int, ...] = (),
                 prefix_cache: PrefixCache | None = None, draft_top_k: int = 0):
        super().__init__(model, spec, "draft", batcher, vocabulary, eos_token_ids, prefix_cache)
        self.slots: dict[int, int] = {}  # node of the last tree -> its cache row
        self.drafted_tree = None  # the last tree drafted, whose path `commit` keeps: until it commits
        self.draft_top_k = draft_top_k

    def check_outcome(self, previous: Outcome) -> None:
        """Refuse an outcome that is no walk down the tree drafted last from its root, its nodes'
        tokens and one token more, or more still (steps this drafter sat out, `Outcome.then`);
        an empty path needs no tree.  The cache keeps the path's rows and the sequence the
        tokens (a worker's Commit, or its Draft's `previous`, is a caller's word for both), so
        any other outcome left the two apart: every later draft drawn after the wrong context,
        drafts worse and verification none the wiser."""
        if not previous.tokens or (previous.path and not _walks_down(self.drafted_tree, previous.tokens,
                                                                     previous.path, more=True)):
            raise ValueError(f"a drafter's outcome takes a path down the tree it drafted last from its root, its "
                             f"nodes' tokens and at least one token more; got path {list(previous.path)[:8]} and "
                             f"{len(previous.tokens)} tokens"
                             + ("" if self.drafted_tree is not None or not previous.path
                                else ", with no tree drafted since the last commit"))

    def commit(self, previous: Outcome) -> None:
        """Keep the cache rows of the accepted path's drafted nodes; commit the emitted tokens."""
        self.check_outcome(previous)
        self.drafted_tree = None
        kept = []
        for node in previous.path:  # a prefix of the path was forwarded (the rest: leaves)
            if node not in self.slots:
                break
            kept.append(self.slots[node])
        self.lm.keep(kept)
        self.advance(previous.tokens)

    def _draft_law(self, logits: torch.Tensor, paths) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(law to draft from, law to ship, its row divisors): greedy drafts the top-k of the
        drafter's scores at temperature 1 (bias and penalties applied), every other verifier
        the processed law it is verified against.  That law is taken in half precision
        (`half_precision`) wherever the drafter runs, so that a remote drafter's rows cross
        at half the bytes and in-process decoding gives the same tokens.  paths: a function
        giving each row's drafted tokens after the completion so far (`laws`).  With
        `draft_top_k`, the law is first kept to its k likeliest tokens (`truncated_law`).
        Greedy verification reads no q, so greedy ships none (None): computing it cost a greedy
        sequoia:32 step on the demo pair a processed law and its half-precision copy per
        level: 134 of its 2,751 torch operations (profile_step.py --by-function)."""
        if self.verifier.name == "greedy":
            return self.laws(logits, paths, untempered=True), None, None
        q, divisors = half_precision(truncated_law(self.laws(logits, paths), self.draft_top_k))
        return q, q, divisors

    def draft(self, shape: TreeShape | DynamicPlan, previous: Outcome | None) -> Draft:
        with self.busy:
            self.check_open()
            self.lm.batch_sizes.clear()
            draft = self._draft(shape, previous)
            sizes = self.lm.batch_sizes
            draft.batch_size = sum(sizes) / len(sizes) if sizes else 0.0
            return draft

    def _draft(self, shape: TreeShape | DynamicPlan, previous: Outcome | None) -> Draft:
        start = time.perf_counter()
        if getattr(shape, "predicted", 0):
            raise ValueError("a drafter drafts no predicted chain: the coordinator grafts a prediction beside "
                             "the drafter's tree")
        if previous is None and self.lm.committed == len(self.tokens):
            raise ValueError("nothing new to draft from: send the previous step's outcome with this draft, "
                             "or commit it first")
        length = len(self.tokens) + (0 if previous is None else len(previous.tokens))
        self.check_fits(length, shape.depth if isinstance(shape, DynamicPlan) else shape.max_depth)
        if previous is not None:
            self.commit(previous)
        self.slots, self.drafted_tree = {}, None
        pending = self.model_ids(self.tokens[self.lm.committed :])
        if self.lm.committed:
            root_logits = self.lm.prefill(pending, last=1)  # the root is now committed
        else:
            root_logits = self.prefill_prompt(pending, last=1)
        root_logits = fit_vocabulary(root_logits, self.vocab_size)
        if isinstance(shape, DynamicPlan):
            tree = self.drafted_tree = self._draft_dynamic(shape, root_logits)
            return Draft(tree, None, time.perf_counter() - start)

        parents, tokens, planned, depth = [-1], [self.tokens[-1]], [0], [0]
        q_rows, q_divisors = [], []
        # `level`: this depth's nodes that have planned children, with their logits.
        level, level_logits = ([0] if shape.num_children[0] else []), root_logits
        randomness = self.randomness()
        for d in range(shape.max_depth):
            if not level:
                break
            draw_from, ship, divisors = self._draft_law(level_logits, lambda: [_path_tokens(node, parents, tokens)
                                                                               for node in level])
            widest = max(shape.num_children[planned[node]] for node in level)
            noise = randomness.shifted(d) if isinstance(randomness, KeyedNoise) else randomness
            drafts = self.verifier.sample_drafts_batch(draw_from, widest, noise).tolist()
            next_level = []
            for row, node in enumerate(level):
                planned_children = shape.children[planned[node]]
                chosen = [t for t in drafts[row][: len(planned_children)] if t >= 0]
                for rank, token in enumerate(chosen):
                    next_level.append(len(tokens))
                    parents.append(node)
                    tokens.append(token)
                    planned.append(planned_children[rank])
                    depth.append(d + 1)
                if chosen and ship is not None:
                    q_rows.append(ship[row])
                    q_divisors.append(divisors[row])
            level = [n for n in next_level if shape.num_children[planned[n]]]
            if level and d + 1 < shape.max_depth:
                level_logits = self._forward_level(level, parents, tokens, depth)
        tree = self.drafted_tree = DraftTree(TreeShape(tuple(parents)), torch.tensor(tokens))
        if not (q_rows and self.verifier.needs_draft_probs):
            return Draft(tree, None, time.perf_counter() - start)
        return Draft(tree, torch.stack(q_rows), time.perf_counter() - start, q_divisors=torch.stack(q_divisors))

    def _draft_dynamic(self, plan: DynamicPlan, root_logits: torch.Tensor) -> DraftTree:
        """EAGLE-2: expand the `top_k` best candidates of each level into their `top_k` most
        likely children (scored by cumulative log-probability of the drafter's plain softmax),
        then keep the `budget` best.  Deterministic drafts: verified as point masses (topk).
        The scores see the bias and penalties, so that the drafts are what the target favours."""
        parents, tokens, scores, depth = [-1], [self.tokens[-1]], [0.0], [0]  # candidate 0: the root
        frontier, logits = [0], root_logits
        for d in range(plan.depth):
            if self.params.adjusts_logits:
                paths = [_path_tokens(n, parents, tokens) for n in frontier]
                log_q = self.laws(logits, lambda: paths, untempered=True).log()
            else:
                log_q = torch.log_softmax(logits.float(), -1)
            best = torch.topk(log_q, min(plan.top_k, log_q.shape[-1]), dim=-1)
            level = []
            for row, node in enumerate(frontier):
                for value, token in zip(best.values[row].tolist(), best.indices[row].tolist()):
                    level.append(len(tokens))
                    parents.append(node)
                    tokens.append(token)
                    scores.append(scores[node] + value)
                    depth.append(d + 1)
            frontier = sorted(level, key=lambda c: -scores[c])[: plan.top_k]
            if d + 1 < plan.depth:
                frontier.sort()
                logits = self._forward_level(frontier, parents, tokens, depth)
        chosen = select_dynamic_tree([p - 1 for p in parents[1:]], scores[1:], plan.budget)
        candidate = [-1] + [int(c) + 1 for c in chosen.candidates[1:]]
        self.slots = {node: self.slots[c] for node, c in enumerate(candidate) if c in self.slots}
        return DraftTree(chosen.shape, torch.tensor([tokens[c] if c >= 0 else tokens[0] for c in candidate]))

    def _forward_level(self, level, parents, tokens, depth) -> torch.Tensor:
        """Logits of one level's internal nodes; each sees its forwarded ancestors."""
        rows, columns = [], []  # one indexed write below: a tensor write per ancestor cost a step 100 operations
        for i, node in enumerate(level):
            ancestor = parents[node]
            while ancestor > 0:  # the root is committed, always visible
                rows.append(i)
                columns.append(self.slots[ancestor] - self.lm.committed)
                ancestor = parents[ancestor]
        visible = torch.zeros(len(level), self.lm.cached - self.lm.committed, dtype=torch.bool)
        if rows:
            visible[rows, columns] = True
        first_row = self.lm.cached
        logits = self.lm.forward(
            self.model_ids([tokens[n] for n in level]), [-1] * len(level), [depth[n] - 1 for n in level], visible
        )
        for i, node in enumerate(level):
            self.slots[node] = first_row + i
        return fit_vocabulary(logits, self.vocab_size)


# How far below a drafter's highest logit the target's padding ids are put: exp(-1e4) is 0 in
# every float, so they get no mass wherever one of the drafter's own tokens may be drawn.
PADDING_LOGIT_GAP = 1e4


def fit_vocabulary(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """A drafter's logits over a target's `vocab_size` tokens: the columns of padding rows only
    the drafter has are cut; those only the target has are `PADDING_LOGIT_GAP` below the row's
    highest finite logit, not -inf, so that a row keeps a law where a request allows the target's padding
    ids alone (`allowed_token_ids`; a penalty would clamp -inf there anyway): the drafter then
    drafts one, fed to it as token 0 (`model_ids`).  q is the law drafted from either way,
    which is all the verifiers' exactness asks.  Both sides process and sample laws of one
    width, so couplings' shared noise lines up and a seed gives the target's tokens whatever
    the drafter's padding."""
    width = logits.shape[-1]
    if width == vocab_size:
        return logits
    if width > vocab_size:
        return logits[..., :vocab_size]
    # Below the highest finite logit: a row holding +inf (a float16 overflow) is uniform over
    # its +inf entries (`logits_to_probs`), and the padding must stay out of that.
    top = logits.masked_fill(logits == math.inf, -math.inf).amax(-1, keepdim=True)
    padding = (top - PADDING_LOGIT_GAP).expand(*logits.shape[:-1], vocab_size - width)
    return torch.cat([logits, padding], dim=-1)


def _walks_down(tree: DraftTree | None, tokens: list[int], path: list[int], more: bool = False) -> bool:
    """Whether `path` goes down `tree` from its root's child, node by node, `tokens` holding its
    nodes' tokens and one more (more: at least one more)."""
    if tree is None or len(tokens) < len(path) + 1 or (len(tokens) > len(path) + 1 and not more):
        return False
    parents, above = tree.shape.parents, 0
    for node, token in zip(path, tokens):
        if not 0 < node < len(parents) or parents[node] != above or int(tree.tokens[node]) != token:
            return False
        above = node
    return True


def _path_tokens(node: int, parents, tokens) -> list[int]:
    """The drafted tokens from the root's child down to `node`: what penalties see beyond the
    committed sequence at that node."""
    return [tokens[n] for n in root_path(parents, node)]


class _LocalModel:
    """What both sides' models keep: the model, its sizes, the batcher of its forwards
    (`max_batch_sequences` calls and `max_batch_tokens` query rows at most, 1 sequence: each
    forward alone; prefills in chunks of `prefill_chunk_tokens`, 0: whole), its tokenizer's
    vocabulary for structured output (built at the first request that needs it), and the
    prefix cache of its sequences' rows (`prefix_cache_mb`; 0: none)."""

    def __init__(self, model, tokenizer=None, prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB,
                 max_batch_sequences: int = DEFAULT_MAX_BATCH_SEQUENCES,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK):
        check_tree_attention(model.config)
        if model.training:
            raise ValueError("the model is in training mode, where dropout would draw each forward's logits at random "
                             "(greedy decoding would not repeat): call model.eval() before serving it")
        self.model = model
        self.batcher = ForwardBatcher(max_batch_sequences, max_batch_tokens, prefill_chunk_tokens)
        self.prefix_cache = PrefixCache(int(prefix_cache_mb * 2**20)) if prefix_cache_mb else None
        self.tokenizer = tokenizer
        self.vocab_size = int(model.config.vocab_size)
        self.context_length = model_context_length(model)
        self.eos_token_ids = model_eos_ids(model)
        self._sessions = weakref.WeakSet()  # those it opened: a session dropped unclosed leaves it
        self._sessions_lock = threading.Lock()

    def _opened(self, session: _Session) -> _Session:
        with self._sessions_lock:
            self._sessions.add(session)
        return session

    def state(self) -> dict:
        """What an operator watches of this model (`rayspec_worker_*` in /metrics, a worker's
        `Info`): the sequences it holds open, and its prefix cache's bytes and the prompt
        tokens it was asked about and found (0 without a cache)."""
        with self._sessions_lock:
            held = sum(session.lm is not None for session in list(self._sessions))
        cache = self.prefix_cache
        return {"open_sessions": held, "prefix_cache_bytes": 0 if cache is None else cache.nbytes,
                "prefix_cache_queried_tokens": 0 if cache is None else cache.queried_tokens,
                "prefix_cache_hit_tokens": 0 if cache is None else cache.reused_tokens}

    @functools.cached_property
    def tokenizer_fingerprint(self) -> bytes | None:
        """Its tokenizer's `tokenizer_fingerprint` (None without one), against which an engine
        checks that a drafter and its target share a tokenizer."""
        return None if self.tokenizer is None else tokenizer_fingerprint(self.tokenizer)

    def vocabulary(self, spec: SequenceSpec) -> GrammarVocabulary | None:
        if not spec.params.regex or self.tokenizer is None:
            return None
        return vocabulary_of(self.tokenizer)


class LocalTarget(_LocalModel):
    """A target model in this process (tokenizer: needed for structured output only)."""

    def __init__(self, model, tokenizer=None, **options):
        super().__init__(model, tokenizer, **options)
        self.verifies_predictions = True  # trees with a predicted chain (`TreeShape.predicted`)

    def open(self, spec: SequenceSpec) -> LocalTargetSession:
        return self._opened(LocalTargetSession(self.model, spec, self.batcher, self.vocabulary(spec),
                                               self.eos_token_ids, self.prefix_cache))


class LocalDrafter(_LocalModel):
    """A drafter model in this process (tokenizer: needed for structured output only).

    draft_top_k: draft from each node's k likeliest tokens only (`truncated_law`; 0: the whole
    law).  Exact for every verifier, at some acceptance; a remote drafter's q rows then cross
    as k entries each instead of the vocabulary.  In-process and remote drafters give the same
    tokens for a seed when they are given the same k."""

    def __init__(self, model, tokenizer=None, draft_top_k: int = 0, **options):
        check_draft_top_k(draft_top_k)
        super().__init__(model, tokenizer, **options)
        self.draft_top_k = int(draft_top_k)

    def open(self, spec: SequenceSpec) -> LocalDrafterSession:
        return self._opened(LocalDrafterSession(self.model, spec, self.batcher, self.vocabulary(spec),
                                                self.eos_token_ids, self.prefix_cache, self.draft_top_k))


def check_draft_top_k(value, name: str = "draft_top_k") -> None:
    """A clear error for a draft_top_k that is no whole number, 0 or more, naming the setting `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 (off) or more, got {value!r}")
