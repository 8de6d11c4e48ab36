"""The speculative decoding loop: one loop for in-process and distributed decoding.

    engine = SpeculativeEngine(target, drafter, verifier="rrsw", tree="kary:2x4")
    for chunk in engine.generate(prompt_ids, max_new_tokens=64, temperature=0.6, seed=1):
        ...  # chunk.tokens: the tokens accepted by one verification step

Each step: the drafter drafts a tree (committing the previous step's outcome first), the
target scores it in one forward pass and its verifier walks it; the emitted tokens are
yielded at once.  `target` and `drafter` are anything implementing the interfaces of
`rayspec.engine.interfaces`: in-process models or gRPC handles to remote workers.
Without a drafter (or with the tree "none") this is target-only decoding through the same
path — the baseline, and the fallback: a sequence whose drafter is lost mid-way
(`DrafterUnavailable`: a remote drafter gone, hung or restarted) decodes on target-only rather
than fail, with the target's law all the same (`GenerationStats.drafter_lost` says why), and
tries the drafter again now and then: a drafter that answers again — restarted, or another of
a pool — gets a new session, told the tokens so far, and the sequence drafts again
(`rayspec.engine.drafting`, which keeps each sequence's side of its drafter).
A sequence whose target is lost (`TargetUnavailable`: its worker gone, or restarted without
the session) is opened again on it (`SequenceSpec.resumed`) once it answers, within
`target_resume_timeout`, and the step that failed is verified there: the client sees a pause.
A caller that gives up meanwhile (`generate`'s `cancelled`) ends the wait at once.
With `draft_hedge`, a step whose draft is late goes on target-only (`rayspec.engine.hedge`).
"""

from __future__ import annotations

import logging
import operator
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field

import torch

from rayspec.engine.calibrate import CostsFile, measure_costs
from rayspec.engine.drafting import SequenceDrafting, check_drafted_tokens
from rayspec.engine.hedge import check_hedge_factor
from rayspec.engine.interfaces import (
    ContextLengthExceeded, Draft, GenerationCancelled, RequestFieldError, SequenceSpec, TargetUnavailable,
    TokenLogprobs, check_logprobs, check_tokenizers, check_vocabularies, tokenizer_fingerprint,
)
from rayspec.engine.policy import (
    AcceptanceLibrary, SequoiaSpec, SequoiaTrees, StaticTrees, TreePolicy, parse_sequoia, planned_tree,
    step_cost_model,
)
from rayspec.engine.prediction import GraftChoice, Prediction, check_graft_mode, graft_draft, prediction_chain
from rayspec.engine.structured import StructuredOutput, check_structured, structured_regex
from rayspec.engine.text import StopFinder, bad_words_token_ids, listed
from rayspec.engine.trees import parse_tree_spec
from rayspec.models.cancellation import watching_caller
from rayspec.tree.dynamic import DynamicPlan
from rayspec.tree.structure import DraftTree, TreeShape
from rayspec.verify import available_verifiers, get_verifier, verifier_class
from rayspec.verify.processing import SamplingParams

log = logging.getLogger("rayspec.engine")

# Trees that requests name are planned once and kept; the least recently used go beyond this
# many, so that requests naming ever new trees cannot grow the engine without bound.
MAX_REQUEST_POLICIES = 32


def _policy_key(tree):
    """One key per tree, however it is spelled: "sequoia:64" and "sequoia:064x10" plan the
    same trees, "chain:3" and "kary:1x3" draft the same shape."""
    if isinstance(tree, str):
        sequoia = parse_sequoia(tree)
        return sequoia if sequoia is not None else parse_tree_spec(tree)
    return tree


@dataclass
class StepStats:
    """One verification step.  Times in seconds; `other` is what remains of the step's wall
    time (transport between processes, serialisation, the engine's own bookkeeping).

    `accepted` is the verifier's acceptance, the measure of the drafts; `emitted` the tokens
    the step added to the completion, fewer than `accepted + 1` when a stop or max_tokens cut
    the step."""

    drafted: int
    accepted: int
    ranks: list[int]
    draft: float
    score: float
    verify: float
    wall: float
    wire_bytes: int = 0
    emitted: int = 0
    target_batch: int = 0  # sequences that shared the target's forward (0: not said)
    drafter_batch: float = 0.0  # sequences per forward of the drafter's for this tree (0: none)

    @property
    def accepted_in_completion(self) -> int:
        """Accepted drafts that are in the completion (the step's tokens begin with them)."""
        return min(self.accepted, self.emitted)

    @property
    def other(self) -> float:
        return max(self.wall - self.draft - self.score - self.verify, 0.0)


@dataclass
class Chunk:
    tokens: list[int]
    step: StepStats
    finish_reason: str | None = None  # "length" or "stop" on the last chunk
    # With finish_reason "stop": the stop string or stop token id that ended the completion,
    # None for an EOS token (vLLM's stop_reason).
    stop_reason: str | int | None = None
    logprobs: TokenLogprobs | None = None  # of `tokens`, when the request asked for them
    # On the first chunk only, when asked for: of the prompt's tokens after the first.
    prompt_logprobs: TokenLogprobs | None = None


# A target worker restarted by Ray is back in seconds with a small model; a large one loads
# for longer, and a client waiting without a token meanwhile may give up sooner than this.
TARGET_RESUME_TIMEOUT = 60.0


def check_resume_timeout(seconds, name: str = "target_resume_timeout") -> None:
    """A clear error for a resume timeout that is not a number of seconds, 0 or more."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise ValueError(f"{name} must be a number of seconds, 0 or more, got {seconds!r}")


def check_max_new_tokens(value) -> None:
    """ValueError unless `value` is a whole number, 1 or more (a float such as 2.5 once passed
    and failed mid-generation; a bool is not a count)."""
    try:
        whole = operator.index(value)
    except TypeError:
        whole = None
    if isinstance(value, bool) or whole is None or whole < 1:
        raise ValueError(f"max_new_tokens must be a whole number, 1 or more, got {value!r}")


def check_seed(value) -> int:
    """`value` as a seed: an integer of any kind (numpy's included, and a whole float, 3.0, as
    requests take it) in int64's range, the one a worker's session and the couplings' keyed
    noise take; a bool or a fraction is refused, not cut (2.5 was read as 2, another seed's
    tokens)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        seed = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        seed = None
    if seed is None or not -2**63 <= seed < 2**63:
        raise ValueError(f"seed must be a 64-bit signed integer, got {value!r}")
    return seed


@dataclass
class GenerationStats:
    steps: list[StepStats] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    cached_prompt_tokens: int = 0  # the target's prompt rows taken from its prefix cache
    drafter_lost: str | None = None  # why the drafter was lost mid-sequence (`DrafterUnavailable`), if it was
    drafter_comebacks: int = 0  # times a drafter took the sequence back after it was lost
    hedged_steps: int = 0  # steps that went on target-only, their draft late (`rayspec.engine.hedge`)
    target_resumes: int = 0  # times the sequence was opened again on its target, lost under it

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / max(len(self.steps), 1)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def depth_acceptance(self) -> list[float]:
        """At each depth, the fraction of visits to an internal node there that descended."""
        visits, accepted = [], []
        for step in self.steps:
            for depth, rank in enumerate(step.ranks):
                if depth == len(visits):
                    visits.append(0)
                    accepted.append(0)
                visits[depth] += 1
                accepted[depth] += rank > 0
        return [a / v for a, v in zip(accepted, visits)]

    def phase_seconds(self) -> dict[str, float]:
        return {
            phase: sum(getattr(s, phase) for s in self.steps)
            for phase in ("draft", "score", "verify", "other")
        }

    def summary(self) -> str:
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in self.phase_seconds().items())
        return (
            f"{self.tokens} tokens in {len(self.steps)} steps: {self.tokens_per_step:.2f} tokens/step, "
            f"{self.tokens_per_second:.1f} tokens/s ({phases})"
        )


@dataclass
class Generation:
    tokens: list[int]
    finish_reason: str
    stats: GenerationStats
    seed: int
    stop_reason: str | int | None = None  # as `Chunk`'s


def tree_misfit(verifier: str, shape: TreeShape | DynamicPlan) -> str | None:
    """Why `verifier` cannot verify trees of `shape`, or None when it can."""
    cls = verifier_class(verifier)  # unknown names raise with the list of known ones
    if isinstance(shape, DynamicPlan) and not cls.deterministic_drafts:
        return (f"a dynamic tree chooses its drafts deterministically; verifier {verifier!r} needs them sampled "
                "by its own scheme — verify dynamic trees with topk (or greedy at temperature 0)")
    if cls.max_drafts is not None and shape.size > 1 and shape.max_children > cls.max_drafts:
        return (f"verifier {verifier!r} takes at most {cls.max_drafts} draft(s) per node, "
                f"the tree has a node with {shape.max_children} children")
    return None


def check_setting(verifier: str, params: dict, shape: TreeShape | DynamicPlan) -> None:
    """Refuse, with a message, a verifier, its parameters or a tree that cannot work together
    (checked when a request arrives, never mid-stream)."""
    misfit = tree_misfit(verifier, shape)
    if misfit is not None:
        raise ValueError(misfit)
    try:  # the verifier is known (`tree_misfit`): what fails is its parameters
        get_verifier(verifier, **params)
    except ValueError as error:
        raise RequestFieldError(str(error), "verifier_params") from None


def check_default_setting(verifier: str, params: dict, tree: str) -> None:
    """`check_setting` for a deployment's default verifier and tree spec, before any model
    loads: a Sequoia tree, planned per verifier at start-up, checks the verifier alone."""
    if parse_sequoia(tree) is None:
        check_setting(verifier, params, parse_tree_spec(tree))
    else:
        get_verifier(verifier, **params)


def resolve_priced_verifiers(priced, verifier: str) -> tuple[str, ...]:
    """The verifiers a `priced_verifiers` setting names: None means `verifier` alone, "all"
    every one; unknown names are refused with the list of known ones."""
    if priced is None:
        return (verifier,)
    if priced == "all":
        return tuple(available_verifiers())
    if not isinstance(priced, (list, tuple)) or not all(isinstance(name, str) for name in priced):
        raise ValueError(f"priced_verifiers must be a list of verifier names or 'all', got {priced!r}")
    for name in priced:
        verifier_class(name)
    return tuple(priced)


def check_shared_tokenizer(target, drafter=None, tokenizer=None) -> None:
    """ValueError unless the engine's models and tokenizer speak the target's tokens.  Each
    drafter (a pool's, each) has vocabulary sizes that differ from the target's in padding rows
    only (`check_vocabularies`).  Where two sides tell their tokenizers, the tables must be one
    (`check_tokenizers`): the engine's `tokenizer` and the target's own; each drafter's and the
    target's (the engine's, else the target's own); with neither, a pool's drafters each and its
    first's, which cannot both be the target's where they differ.  A ValueError about a worker
    names it.  A few ids named otherwise are logged."""
    members = () if drafter is None else getattr(drafter, "drafters", (drafter,))
    for member in members:
        with _naming_the_worker(member):
            check_vocabularies(member.vocab_size, target.vocab_size, tokenizer)
    drafters = [(m, fingerprint) for m in members if (fingerprint := getattr(m, "tokenizer_fingerprint", None))]
    another = tokenizer is not None and tokenizer is not getattr(target, "tokenizer", None)
    if not (drafters or another):
        return
    target_fingerprint = getattr(target, "tokenizer_fingerprint", None)
    if another:
        given = tokenizer_fingerprint(tokenizer)
        if given and target_fingerprint:
            _warn_of_other_ids("the tokenizer given the engine", check_tokenizers(given, target_fingerprint, "engine"))
        target_fingerprint = given or target_fingerprint
    if target_fingerprint:
        reference, side = target_fingerprint, "drafter"
    elif len(drafters) > 1:  # no target's table: a pool's drafters are held to one another's
        reference, side = drafters[0][1], "pool"
    else:
        return
    for member, fingerprint in drafters:
        with _naming_the_worker(member):
            other_ids = check_tokenizers(fingerprint, reference, side)
        address = getattr(member, "address", None)
        _warn_of_other_ids(f"the tokenizer of the drafter {address or 'in this process'}", other_ids,
                           "the target's" if side == "drafter" else "the pool's first drafter's")


@contextmanager
def _naming_the_worker(drafter):
    """A check's ValueError about `drafter` names its worker, where it has one: which of a pool's."""
    try:
        yield
    except ValueError as error:
        address = getattr(drafter, "address", None)
        if address is None:
            raise
        raise ValueError(f"drafter worker at {address}: {error}") from None


def _warn_of_other_ids(whose: str, other_ids: int, whom: str = "the target's") -> None:
    if other_ids:
        log.warning("%s names up to %d token ids otherwise than %s", whose, other_ids, whom)


def _stop_if_cancelled(cancelled: threading.Event | None, when: str) -> None:
    """`GenerationCancelled` once the caller of a generation gave up on it: a client that left
    (an expired deadline) while it was queued or prefilled gets no drafter session and no step."""
    if cancelled is not None and cancelled.is_set():
        raise GenerationCancelled(f"its caller left {when}")


def _open_target(target, spec: SequenceSpec, cancelled: threading.Event | None):
    """`target.open(spec)`, the prompt's prefill, which stops (`GenerationCancelled`) where the
    target can stop it once the caller gave up (`watching_caller`): a remote target cancels
    its Open, and the worker skips or cuts short its prefill."""
    _stop_if_cancelled(cancelled, "before its prompt was prefilled")  # no Open (nor prefill) for nobody
    with _watched_by(cancelled):
        return target.open(spec)


def _watched_by(cancelled: threading.Event | None):
    """`watching_caller` for a generation's `cancelled`: the calls to workers made within it
    end (`GenerationCancelled`) once it is set, rather than at their deadline.  Around calls
    only, never across a `yield`: the generation's consumer must not run inside the watch."""
    return watching_caller(None if cancelled is None else cancelled.is_set)


class _ClosedWatched(ExitStack):
    """A generation's sessions, closed within the watch of its caller (`_watched_by`): a
    remote session's Release is waited for only while the caller is there, so that one that
    left while a worker hangs is let go at once.  Only the closing is watched, never the
    block, which yields to the generation's consumer."""

    def __init__(self, cancelled: threading.Event | None):
        super().__init__()
        self._cancelled = cancelled

    def __exit__(self, *exc):
        with _watched_by(self._cancelled):
            return super().__exit__(*exc)


class SpeculativeEngine:
    """Speculative decoding over a target and (optionally) a drafter."""

    def __init__(self, target, drafter=None, verifier: str = "rrsw", tree="sequoia:auto",
                 verifier_params: dict | None = None, tokenizer=None, acceptance_dir=None, adaptive: bool = True,
                 costs=None, graft_predictions: str = "auto", load_aware: bool = True, priced_verifiers=None,
                 target_resume_timeout: float = TARGET_RESUME_TIMEOUT, kept_costs=None,
                 draft_hedge: float | None = None):
        """tokenizer: the target's, for stop strings and bad words, and to check a drafter
        whose vocabulary size differs from the target's (`check_vocabularies`: padding rows
        only); its table and each drafter's must be the target's (`check_shared_tokenizer`).
        tree: a tree spec (see `rayspec.engine.policy`) or a TreeShape; `acceptance_dir` holds
        the measured acceptance vectors Sequoia trees are planned from; `adaptive` lets Sequoia
        trees re-plan from the ranks accepted while serving; `costs` (measured by
        `rayspec.engine.calibrate`) spares sequoia:auto its measurement, or a function that
        gives them when first needed (another coordinator's, measured there once).
        graft_predictions: above T = 0, whether a prediction's chain is drafted beside the
        drafter's tree ("always"), instead of it ("never"), or whichever gives more tokens per
        second by the measured costs ("auto"; `rayspec.engine.prediction.GraftChoice`).
        load_aware: sequoia:auto trees are priced for the sequences decoding at once
        (`rayspec.engine.policy`), shrinking under load; requests with a seed keep the tree
        planned for one sequence.  priced_verifiers: the verifiers whose own drafted levels
        and walks sequoia:auto's calibration times (`rayspec.engine.calibrate`), a list or
        "all" (None: `verifier` alone); any other is priced as rrsw.  Each costs about half a
        second of start-up on the demo pair on CPU.  target_resume_timeout: how long a sequence
        whose target was lost waits for it to answer again (0: it fails at once).  kept_costs:
        where the measured costs are kept — read instead of measuring when they are there,
        written once measured — so that a process started again (a Ray actor's restart) plans
        the trees it planned before: a JSON file's path, or an object with `load()` and
        `save(costs)` (`rayspec.engine.calibrate.CostsFile`).  draft_hedge: a step waits for
        its draft at most this many times the drafter's recent median draft time, then goes
        on target-only (`rayspec.engine.hedge`); None waits for every draft."""
        check_resume_timeout(target_resume_timeout)
        check_hedge_factor(draft_hedge)
        check_shared_tokenizer(target, drafter, tokenizer)
        self.draft_hedge = draft_hedge
        self._hedge_threads: ThreadPoolExecutor | None = None  # where hedged drafts wait, made at the first
        self._hedge_threads_lock = threading.Lock()
        self.target_resume_timeout = float(target_resume_timeout)
        self.target = target
        self.drafter = drafter
        self.tokenizer = tokenizer
        self.verifier = verifier
        self.verifier_params = dict(verifier_params or {})
        self.priced_verifiers = resolve_priced_verifiers(priced_verifiers, verifier)
        self.library = AcceptanceLibrary(acceptance_dir)
        self.adaptive = adaptive
        self.load_aware = load_aware
        self._decoding = 0  # generations between their first and last step, here
        self._decoding_lock = threading.Lock()
        check_graft_mode(graft_predictions)
        self.graft_predictions = graft_predictions
        self._costs = None if callable(costs) else costs
        self._costs_source = costs if callable(costs) else None
        self._costs_lock = threading.Lock()  # measured once, whichever requests need them first
        self.kept_costs = kept_costs if kept_costs is None or hasattr(kept_costs, "load") else CostsFile(kept_costs)
        if drafter is None:
            _policy_key(tree)  # a bad tree is refused all the same, though no tree is drafted
        self.tree = tree if drafter is not None else "none"
        self._tree_key = _policy_key(self.tree)
        self._tree_policy = self._build_policy(self._tree_key)  # sequoia:auto calibrates here, at start-up
        self._policies: OrderedDict = OrderedDict()  # the trees requests named, least recently used first
        self._policies_lock = threading.Lock()
        check_setting(verifier, self.verifier_params, self._tree_policy.shape_for(verifier, 1.0))

    def costs(self):
        """This deployment's measured step costs (`rayspec.engine.calibrate`), measured (or
        fetched from the source given) once."""
        with self._costs_lock:
            if self._costs is None:
                if self._costs_source is not None:
                    self._costs = self._costs_source()
                elif (kept := self._kept_costs()) is not None:
                    self._costs = kept
                else:
                    # Each verifier's walk is timed on the trees its plans draft.
                    self._costs = measure_costs(
                        self.target, self.drafter, verifiers=self.priced_verifiers,
                        walk_trees=lambda verifier, n, temperature: planned_tree(self.library, verifier, temperature, n),
                        verifier_params={self.verifier: self.verifier_params})
                    if self.kept_costs is not None:
                        try:
                            self.kept_costs.save(self._costs)
                        except OSError as error:  # the costs serve all the same; a restart measures anew
                            log.warning("cannot keep the step costs in %s: %s", self.kept_costs, error)
            return self._costs

    def _kept_costs(self):
        """The costs `kept_costs` holds, None when it holds none that can be read (measured anew)."""
        if self.kept_costs is None:
            return None
        try:
            costs = self.kept_costs.load()
        except (OSError, ValueError, KeyError, TypeError) as error:
            log.warning("cannot read the step costs kept in %s (%s): measuring them anew", self.kept_costs, error)
            return None
        if costs is not None:
            log.info("step costs read from %s, as measured before", self.kept_costs)
        return costs

    @property
    def measured_costs(self):
        """The step costs measured so far (None until a sequoia:auto tree needed them): another
        engine over the same workers given them (`costs=`) plans the same trees."""
        return self._costs

    def policy(self, tree=None) -> TreePolicy:
        """The tree policy of a spec (None: the engine's own), built once per tree and kept
        while requests use it, so that its plans and running estimates persist."""
        if isinstance(tree, TreePolicy):
            return tree
        key = self._tree_key if tree is None else _policy_key(tree)
        if key == self._tree_key:
            return self._tree_policy
        if isinstance(key, SequoiaSpec) and key.budget is None:
            self.costs()  # once per engine, and not while holding the lock other requests wait on
        with self._policies_lock:
            policy = self._policies.get(key)
            if policy is None:
                policy = self._policies[key] = self._build_policy(key)
                while len(self._policies) > MAX_REQUEST_POLICIES:
                    self._policies.popitem(last=False)
            self._policies.move_to_end(key)
            return policy

    def _all_policies(self) -> list[TreePolicy]:
        """The engine's tree policy and those of the trees requests named."""
        with self._policies_lock:
            return [self._tree_policy, *self._policies.values()]

    def tree_trials(self) -> list:
        """(verifier, temperature, `TrialReport`) of the load trials of sequoia:auto, whether
        it is the engine's tree or one that requests named."""
        return [trial for policy in self._all_policies() for trial in policy.trials()]

    def tree_plans(self) -> list:
        """(verifier, temperature, `PlanReport`) of the Sequoia trees planned so far, whether
        for the engine's tree or for one that requests named (`PlanReport.spec` tells them
        apart)."""
        return [plan for policy in self._all_policies() for plan in policy.plans()]

    def _build_policy(self, key) -> TreePolicy:
        """Cheap but for sequoia:auto's one-off calibration: Sequoia trees are planned lazily,
        per (verifier, temperature), by the policy itself."""
        if isinstance(key, TreePolicy):
            return key
        if isinstance(key, SequoiaSpec):
            if key.budget is None:
                self.costs()
            return SequoiaTrees(key, self.library, self.costs, self.target.vocab_size, adaptive=self.adaptive,
                                load_aware=self.load_aware)
        return StaticTrees(key)

    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int = 128,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        logit_bias: Mapping[int, float] | None = None,
        min_p: float = 0.0,
        min_tokens: int = 0,
        allowed_token_ids: Sequence[int] = (),
        bad_words: str | Sequence[str | Sequence[int]] = (),
        ignore_eos: bool = False,
        seed: int | None = None,
        stop: str | Sequence[str | int] | None = None,
        skip_special_tokens: bool = True,
        verifier: str | None = None,
        tree: str | TreeShape | None = None,
        verifier_params: dict | None = None,
        stats: GenerationStats | None = None,
        replayable: bool | None = None,
        logprobs: int | None = None,
        prompt_logprobs: int | None = None,
        prediction: Sequence[int] | None = None,
        structured_output: StructuredOutput | str | None = None,
        cancelled: threading.Event | None = None,
    ) -> Iterator[Chunk]:
        """Yield the tokens of each verification step as soon as it is verified.

        stop: strings (needs the engine's tokenizer) and/or token ids, or one string (one stop,
        not its characters: as OpenAI and vLLM read it, and bad_words alike); the target's EOS
        ids stop too unless `ignore_eos`.  Stop tokens are not yielded; a stop string's text is
        (trim it with `rayspec.engine.text.TextAssembler`).  Stop strings are searched in the
        text decoded as the tokenizer's `decode(..., skip_special_tokens)` gives it.  `stats`
        (optional) is filled as steps go.
        replayable: draft the trees the policy planned before serving anything, not those it
        adapted since, and graft a prediction by tokens per step rather than by this
        process's measured costs, so that the same request and seed give the same tokens
        whatever was served in between, and wherever the same tree is planned: a named tree
        everywhere, `sequoia:auto` where the costs it is planned from are the same (the
        service's coordinators share one calibration; default: when a seed is given).
        logprobs: k to give each chunk its tokens' log-probabilities under the target's raw
        law and the k most likely tokens' at each position (`TokenLogprobs`); the tokens are
        the same with or without.
        prompt_logprobs: k to give the first chunk the same for the prompt's tokens after the
        first (`Chunk.prompt_logprobs`), from the target's prefill.  presence_penalty,
        frequency_penalty, repetition_penalty, logit_bias, min_p: as OpenAI and vLLM define
        them (`SamplingParams`); they change the target's law, and the output follows the law
        they define exactly.  min_tokens (vLLM's): the stop tokens cannot be drawn, and stop
        strings do not stop, before the completion has that many tokens.  allowed_token_ids
        (vLLM's): the only tokens that can be drawn (the law restricted to them).  bad_words
        (vLLM's): words the completion never contains, as strings (tokenized as vLLM does,
        `rayspec.engine.text.bad_words_token_ids`: needs the engine's tokenizer) or token id
        sequences (`SamplingParams.bad_words_ids`).  prediction: token ids the completion is
        expected to be (OpenAI's Predicted Outputs), drafted as a chain wherever the
        completion follows it and by the drafter elsewhere (`rayspec.engine.prediction`;
        `tree` may then give the chain as `chain:N`, the drafter drawing the engine's trees,
        or that chain for a verifier the engine's trees do not suit);
        the output follows the target's law all the same.  structured_output: what the
        completion must be (vLLM's guided decoding: a JSON schema, any JSON object, a regular
        expression or a choice, `rayspec.engine.structured.StructuredOutput`, or a regular
        expression as a string); both models restrict their laws to it, so the output follows
        the constrained law exactly.  It ends where a match does, at a stop token, and needs
        the models' tokenizers (`LocalTarget(model, tokenizer)`; workers load theirs).
        cancelled: an event the caller sets when it gives up on the generation (its client
        left): the generation ends with `GenerationCancelled` after its prefill, before its
        drafter is opened, and before each step; a wait for a lost target ends at once instead
        of at `target_resume_timeout`."""
        replayable = seed is not None if replayable is None else replayable
        stop, bad_words = listed(stop), listed(bad_words)
        check_max_new_tokens(max_new_tokens)
        check_logprobs(logprobs)
        check_logprobs(prompt_logprobs, "prompt_logprobs")
        stop_ids = self._stop_ids(stop, ignore_eos)
        # First: a refused request must not pay a JSON schema's expression (up to a minute to build).
        check_structured(structured_output, ignore_eos, self.target.eos_token_ids)
        regex = structured_regex(structured_output)
        params = SamplingParams(temperature, top_p, top_k, presence_penalty, frequency_penalty, repetition_penalty,
                                logit_bias or (), min_p, min_tokens, stop_ids if min_tokens else (),
                                tuple(allowed_token_ids or ()), self._bad_words_ids(bad_words), regex)
        params.check_vocabulary(self.target.vocab_size)
        min_tokens = params.min_tokens
        prompt = self.check_prompt(prompt_ids)
        context = self.target.context_length
        # Trees fit both models' contexts; past a shorter drafter's, steps decode target-only
        # (as vLLM skips proposals for sequences longer than the draft model's max length).
        draft_context = context if self.drafter is None else min(context, self.drafter.context_length)
        verifier = verifier or self.verifier
        verifier_params = self.verifier_params if verifier_params is None else dict(verifier_params)
        try:
            exact = verifier_class(verifier).exact_params
        except ValueError as error:  # an unknown name
            raise RequestFieldError(str(error), "verifier") from None
        if params.greedy and exact:  # T = 0 asks for the target's greedy output, exactly
            verifier_params = {**verifier_params, **exact}
        chain = None if prediction is None else prediction_chain(tree)  # a prediction's drafts
        if tree is not None and (self.drafter is None or chain is not None):
            _policy_key(tree)  # not drafted, but refused when bad all the same
        policy = self.policy(None if self.drafter is None or chain is not None else tree)
        if chain is not None and self.drafter is not None and tree_misfit(
                verifier, policy.shape_for(verifier, params.temperature)) is not None:
            # `tree` names the prediction's chain, so the request cannot name the drafter's:
            # where the engine's trees do not suit its verifier (sps and mentored take one
            # draft per node), the drafter drafts that chain too.
            policy = self.policy(chain)
        check_setting(verifier, verifier_params, policy.shape_for(verifier, params.temperature))
        if chain is not None:
            check_setting(verifier, verifier_params, chain)
        stop_texts = [s for s in stop or () if isinstance(s, str) and s]
        if stop_texts and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer; give the engine one, or stop on token ids")
        stop_finder = StopFinder(self.tokenizer, stop_texts, prompt, min_tokens,
                                 skip_special_tokens) if stop_texts else None
        eos_ids = () if ignore_eos else self.target.eos_token_ids
        seed = secrets.randbits(63) if seed is None else check_seed(seed)
        spec = SequenceSpec(tuple(prompt), params, seed, verifier, verifier_params,
                            logprobs=None if logprobs is None else int(logprobs),
                            prompt_logprobs=None if prompt_logprobs is None else int(prompt_logprobs),
                            vocab_size=self.target.vocab_size)
        stats = stats if stats is not None else GenerationStats()
        started = time.perf_counter()

        predicted = None if prediction is None else Prediction(prediction, spec, self.target.vocab_size,
                                                                  self.target.context_length)
        # At T > 0 a prediction's chain may go beside the drafter's tree, at T = 0 it goes
        # instead of it (`rayspec.engine.prediction`); only to a target that verifies such trees.
        grafting = None
        if predicted is not None and not params.greedy and getattr(self.target, "verifies_predictions", False):
            # A replayable request's choice weighs tokens per step alone: the measured costs
            # are this process's, and come only once a request needs them (sequoia:auto), so
            # with them a seed's tokens would depend on what was served before, and where.
            costs = None if replayable else self.measured_costs
            grafting = GraftChoice(self.graft_predictions, None if costs is None else
                                   step_cost_model(costs, verifier, self.target.vocab_size,
                                                   temperature=params.temperature))
        with _ClosedWatched(cancelled) as sessions:
            targeting = sessions.enter_context(ExitStack())  # the target's session
            target = targeting.enter_context(closing(_open_target(self.target, spec, cancelled)))
            _stop_if_cancelled(cancelled, "while its prompt was prefilled")
            sessions.enter_context(self._counted())
            stats.cached_prompt_tokens = getattr(target, "cached_tokens", 0)
            prompt_chunk_logprobs = _prompt_logprobs(target, spec)
            hedges = self.draft_hedge is not None and (not replayable or verifier_class(verifier).drafter_invariant)
            drafting = sessions.enter_context(SequenceDrafting(
                self.drafter, spec, stats, (self.draft_hedge, self._hedge_executor()) if hedges else None,
                replayable=replayable))
            produced: list[int] = []
            while True:
                _stop_if_cancelled(cancelled, f"after {len(produced)} tokens")
                step_start = time.perf_counter()
                length = len(prompt) + len(produced)
                drafts = drafting.may_draft(length + 1 < draft_context, produced)
                if replayable:
                    planned = policy.first_shape(verifier, params.temperature)
                else:
                    planned = policy.next_shape(verifier, params.temperature, self._decoding)
                # A step emits at most its tree's depth + 1 tokens: no deeper than the contexts
                # and the tokens left allow, or the target scores drafts that cannot be emitted.
                left = max_new_tokens - len(produced)
                step_shape = planned.truncated(min(draft_context - length, left) - 1)
                draft = None if predicted is None else predicted.draft(min(chain.max_depth, context - length - 1,
                                                                           left - 1))
                chained = draft is not None  # the step drafts the prediction's chain, alone or grafted
                by_drafter = drafts and step_shape.size > 1 and (
                    draft is None or (grafting is not None and grafting.grafts(draft.tree.shape, step_shape)))
                placed = None  # with a grafted prediction: the node each of the drafter's nodes became
                if by_drafter:
                    with _watched_by(cancelled):  # a first draft prefills the prompt: seconds
                        drafted = drafting.draft(step_shape, len(produced))
                    if drafted is None:  # lost, or late: the step goes on without it
                        by_drafter = False
                    else:
                        check_drafted_tokens(drafted, self.target.vocab_size)
                        if draft is None:
                            draft = drafted
                        else:
                            draft, placed = graft_draft(drafted, draft)
                if draft is None:
                    draft = Draft(DraftTree(TreeShape.chain(0), torch.tensor([produced[-1] if produced else prompt[-1]])), None)
                outcome, target = self._verified(draft, target, spec, produced, targeting, stats, cancelled)
                if spec.logprobs is not None and outcome.logprobs is None:
                    raise RuntimeError("the target sent no log-probabilities: its worker predates them")
                if predicted is not None:
                    predicted.follow(outcome.tokens)
                if grafting is not None and chained:
                    grafting.observe(outcome, grafted=placed is not None)
                drafting.tell(outcome, by_drafter, placed)
                # What a prediction accepts says nothing of the drafter; the drafter's part of a
                # grafted tree is verified against p less the prediction's head, not p.
                if placed is None and (by_drafter or predicted is None):
                    policy.served(verifier, params.temperature, planned, outcome)
                    policy.observe(verifier, params.temperature, draft.tree.shape, outcome)
                new, finish, stop_reason = _kept_of_step(outcome.tokens, max_new_tokens - len(produced), stop_ids,
                                                         eos_ids, stop_finder)
                produced += new
                if finish is None and len(prompt) + len(produced) >= context:
                    finish = "length"
                step = StepStats(
                    drafted=draft.tree.shape.size - 1,
                    accepted=len(outcome.path),
                    ranks=list(outcome.ranks),
                    draft=draft.seconds,
                    score=outcome.score_seconds,
                    verify=outcome.verify_seconds,
                    wall=time.perf_counter() - step_start,
                    wire_bytes=draft.wire_bytes + outcome.wire_bytes,
                    emitted=len(new),
                    target_batch=outcome.batch_size,
                    drafter_batch=draft.batch_size,
                )
                stats.steps.append(step)
                stats.tokens = len(produced)
                stats.seconds = time.perf_counter() - started
                yield Chunk(new, step, finish, stop_reason,
                            None if outcome.logprobs is None else outcome.logprobs.head(len(new)), prompt_chunk_logprobs)
                prompt_chunk_logprobs = None
                if finish is not None:
                    return

    def _verified(self, draft: Draft, target, spec: SequenceSpec, produced: list[int], targeting: ExitStack,
                  stats: GenerationStats, cancelled: threading.Event | None):
        """(the target's outcome of `draft`, the target session that gave it): a session lost
        on the way is opened again for the sequence so far (`_resume_target`), within one
        deadline for the step counted from its first failure, and the draft is verified there."""
        resume_by = None
        while True:
            try:
                with _watched_by(cancelled):  # a hung worker would hold the departed client's slot
                    return target.verify(draft), target
            except TargetUnavailable as error:
                resume_by = resume_by or time.monotonic() + self.target_resume_timeout
                target = self._resume_target(spec.resumed(produced), error, targeting, resume_by, cancelled)
                stats.target_resumes += 1

    def _resume_target(self, resumed: SequenceSpec, lost: TargetUnavailable, targeting: ExitStack,
                       deadline: float, cancelled: threading.Event | None = None):
        """The sequence's target session, lost (`lost`), opened again as `resumed` once the
        target answers: tried every 0.25 s, then 0.5, 1 and 2 s apart, until `deadline`
        (`time.monotonic()`); then the loss is raised.  The deadline is the step's, so that a
        target that loses every session it opens fails the sequence in time all the same.
        `cancelled` set meanwhile: `GenerationCancelled` at once — nobody waits for the tokens."""
        done = len(resumed.completion_ids)
        if time.monotonic() >= deadline:
            raise lost
        log.warning("target lost after %d tokens (%s): the sequence resumes when it answers", done, lost)
        targeting.close()
        wait = 0.25
        while True:
            try:
                session = targeting.enter_context(closing(_open_target(self.target, resumed, cancelled)))
            except TargetUnavailable as error:
                if time.monotonic() + wait > deadline:
                    log.warning("target still lost after %g s: the sequence fails", self.target_resume_timeout)
                    raise error from lost
                if cancelled is None:
                    time.sleep(wait)
                elif cancelled.wait(wait):
                    log.info("a sequence waiting for its lost target was cancelled after %d tokens", done)
                    raise GenerationCancelled(f"cancelled while its target was lost ({lost})") from lost
                wait = min(2 * wait, 2.0)
                continue
            log.info("sequence resumed on its target after %d tokens", done)
            return session

    def close(self) -> None:
        """Let go of the engine's own threads (those hedged drafts are waited on), at once: for
        an application that makes engines and drops them.  The models are the caller's, and an
        engine used again makes its threads again."""
        with self._hedge_threads_lock:
            threads, self._hedge_threads = self._hedge_threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SpeculativeEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _hedge_executor(self) -> ThreadPoolExecutor:
        """The threads hedged drafts are waited for on: one per sequence with a draft out at
        most, so enough for the requests a service serves at once."""
        with self._hedge_threads_lock:
            if self._hedge_threads is None:
                self._hedge_threads = ThreadPoolExecutor(max_workers=256, thread_name_prefix="rayspec-draft")
            return self._hedge_threads

    @contextmanager
    def _counted(self):
        """Count a generation among those decoding (what load-aware trees are planned for)."""
        with self._decoding_lock:
            self._decoding += 1
        try:
            yield
        finally:
            with self._decoding_lock:
                self._decoding -= 1

    @property
    def decoding(self) -> int:
        """Generations decoding on this engine now."""
        return self._decoding

    def _stop_ids(self, stop: Sequence[str | int] | None, ignore_eos: bool) -> tuple[int, ...]:
        """The tokens that end a completion: the stop list's ids, and the target's EOS ids
        unless they are ignored."""
        try:
            ids = {operator.index(s) for s in stop or () if not isinstance(s, str)}
        except TypeError:
            raise ValueError("stop must hold strings and integer token ids") from None
        outside = sorted(t for t in ids if not 0 <= t < self.target.vocab_size)
        if outside:
            raise ValueError(f"stop token {outside[0]} is outside the vocabulary of {self.target.vocab_size} tokens")
        return tuple(sorted(ids | (set() if ignore_eos else set(self.target.eos_token_ids))))

    def _bad_words_ids(self, bad_words: Sequence[str | Sequence[int]]) -> tuple:
        """Bad words as token sequences: strings tokenized as vLLM does, sequences as given."""
        words = [w for w in bad_words or () if isinstance(w, str)]
        if words and self.tokenizer is None:
            raise ValueError("bad words given as text need a tokenizer; give the engine one, or give token ids")
        sequences = [w for w in bad_words or () if not isinstance(w, str)]
        return tuple(sequences + (bad_words_token_ids(self.tokenizer, words) if words else []))

    def prompt_logprobs(self, prompt_ids: Sequence[int], top: int = 0) -> TokenLogprobs:
        """The log-probabilities of the prompt's tokens after the first under the target's raw
        law, and the `top` most likely tokens' at each position: one prefill, nothing generated
        (OpenAI's `echo` with `max_tokens: 0`, which scores a text): a prompt may fill the context."""
        prompt = self.check_prompt(prompt_ids, completion=False)
        spec = SequenceSpec(tuple(prompt), SamplingParams(), 0, self.verifier, self.verifier_params,
                            prompt_logprobs=int(top))
        with closing(self.target.open(spec)) as target:
            return _prompt_logprobs(target, spec)

    def check_prompt(self, prompt_ids: Sequence[int], completion: bool = True) -> list[int]:
        """The prompt's ids as ints; ValueError unless they are in the vocabulary and leave
        room in the context for a completion's first token (completion False: a prompt scored
        alone, which fits when it fills the context: its last token's row is never computed)."""
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("the prompt must contain at least one token")
        bad = [t for t in prompt if not 0 <= t < self.target.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids out of the vocabulary [0, {self.target.vocab_size}): {bad[:5]}")
        context = self.target.context_length
        if len(prompt) + completion > context:
            raise ContextLengthExceeded.of_prompt(context, f"the prompt has {len(prompt)} tokens")
        return prompt

    def run(self, prompt_ids: Sequence[int], **kwargs) -> Generation:
        """`generate` to the end: all tokens, the finish reason and the statistics."""
        stats = GenerationStats()
        tokens, finish, stop_reason = [], "length", None
        seed = kwargs.pop("seed", None)
        kwargs.setdefault("replayable", seed is not None)
        seed = secrets.randbits(63) if seed is None else check_seed(seed)
        for chunk in self.generate(prompt_ids, seed=seed, stats=stats, **kwargs):
            tokens += chunk.tokens
            finish, stop_reason = chunk.finish_reason or finish, chunk.stop_reason
        return Generation(tokens, finish, stats, seed, stop_reason)


def _kept_of_step(tokens: Sequence[int], room: int, stop_ids, eos_ids, stop_finder: StopFinder | None):
    """(the tokens of a step the completion keeps, its finish reason or None, vLLM's
    stop_reason): the step's tokens up to the first stop token (not kept; a stop token past
    the `room` left under max_tokens is never reached), then up to `room` ("length"), then up
    to a stop string that ends in them (kept: the caller's text trims it)."""
    new, finish, stop_reason = list(tokens), None, None
    for i, token in enumerate(new[:room]):
        if token in stop_ids:
            new, finish = new[:i], "stop"
            stop_reason = None if token in eos_ids else token
            break
    if finish is None and len(new) >= room:
        new, finish = new[:room], "length"
    if stop_finder and new:  # a stop string in the step's last allowed tokens still stops
        found = stop_finder.cut(new)
        if found is not None:
            (cut, stop_reason), finish = found, "stop"
            new = new[:cut]
    return new, finish, stop_reason


def _prompt_logprobs(target, spec: SequenceSpec) -> TokenLogprobs | None:
    """The prompt's log-probabilities that a target session computed at open, if asked for."""
    if spec.prompt_logprobs is None:
        return None
    logprobs = getattr(target, "prompt_logprobs", None)
    if logprobs is None or len(logprobs) != len(spec.prompt_ids) - 1:
        raise RuntimeError("the target sent no log-probabilities of the prompt: its worker predates them")
    # A NaN logit (an overflow, a broken checkpoint) makes its row's log-probabilities NaN, which
    # JSON cannot carry: the target failed, as a worker's NaN row fails its decoding.
    broken = [i for i, (value, top) in enumerate(zip(logprobs.chosen, logprobs.top_values))
              if not value <= 0 or not all(v <= 0 for v in top)]
    if broken:
        raise RuntimeError(f"the target's log-probabilities of the prompt are not numbers at {len(broken)} "
                           f"position(s), the first that of prompt token {broken[0] + 1} (from 0): its logits there are not finite")
    return logprobs
