"""Prometheus metrics of the HTTP service, in a registry of its own.

A private `CollectorRegistry` keeps two services in one process (tests, several Serve
applications) from colliding, and keeps Ray's and Python's default collectors out of the
service's `/metrics`.  Per verification step: tokens emitted (the acceptance length),
visits and descents at every tree depth, seconds per phase, bytes that crossed a process
boundary, and how many sequences shared each model's forwards (cross-request batching).  Per
generation, as vLLM's serving metrics: time to first token, the gaps between its steps that
emit tokens (a stream's inter-chunk latency), time per output token, its length in seconds,
tokens per second, and how it ended.  Per request, as vLLM's: how long it waited in the queue
for its generations' slots, and at each scrape how many wait.  Per prompt of a request (once,
whatever its `n`): its tokens.  Per HTTP request: the count by endpoint and status; per gRPC
Generation call, by method and status code.  The generations of both APIs are counted: the
gRPC API's coordinator, where it is another process, adds its metrics to each scrape
(`Metrics.add_coordinator`).  At each scrape, what sequoia:auto's load trials measured and
chose per load level (`rayspec.engine.policy.TreeTrial`): why its trees drafted or not; and
per verifier and temperature, the Sequoia tree in use, its changes while serving and its
re-planning checks (`rayspec.engine.policy.PlanReport`); and each worker's state, which the HTTP
coordinator asks for: its sessions, its prefix cache's bytes, queries and hits
(`Metrics.watch_workers`).

Phases follow `StepStats`: draft (the drafter's compute), score (the target's forward),
verify (the verifier's walk) and network — whatever else the step's wall time held:
transport, serialisation, the engine's bookkeeping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from rayspec.engine.engine import GenerationStats, StepStats

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
_PHASES = {"draft": "draft", "score": "score", "verify": "verify", "network": "other"}


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.acceptance_length = Histogram(
            "rayspec_acceptance_length", "Tokens a verification step accepted: its accepted drafts + 1 (a stop or "
            "max_tokens may keep fewer in the completion).",
            buckets=(1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32), registry=r,
        )
        self.depth_visits = Counter(
            "rayspec_depth_visits", "Visits of the verifier's walk to an internal tree node, by depth.",
            ["depth"], registry=r,
        )
        self.depth_accepted = Counter(
            "rayspec_depth_accepted", "Visits at a depth that accepted a child and descended.",
            ["depth"], registry=r,
        )
        self.phase_seconds = Counter(
            "rayspec_phase_seconds", "Seconds spent per phase of the verification steps.", ["phase"], registry=r,
        )
        self.draft_tokens = Histogram(
            "rayspec_draft_tokens_per_step",
            "Draft tokens (tree nodes under the root) verified per step: 0 for a step decoded target-only, as "
            "sequoia:auto decodes where drafting does not pay (under load, or with a poor drafter).",
            buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r,
        )
        self.step_bytes = Histogram(
            "rayspec_step_wire_bytes", "Bytes crossing a process boundary per verification step.",
            buckets=(0, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216), registry=r,
        )
        self.tokens = Counter("rayspec_generated_tokens", "Completion tokens generated.", registry=r)
        self.tokens_per_second = Histogram(
            "rayspec_request_tokens_per_second", "Completion tokens per second of each finished generation.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000), registry=r,
        )
        self.requests = Counter(
            "rayspec_http_requests", "HTTP requests answered, by endpoint and status code.",
            ["endpoint", "status"], registry=r,
        )
        self.grpc_requests = Counter(
            "rayspec_grpc_requests", "gRPC Generation calls answered, by method and status code.",
            ["method", "code"], registry=r,
        )
        self.in_flight = Gauge("rayspec_generations_in_flight", "Generations running now.", registry=r)
        # vLLM's vllm:num_requests_waiting and vllm:request_queue_time_seconds
        self.waiting = Gauge(
            "rayspec_requests_waiting", "Requests queued for generation slots now (limits.max_queued_requests at "
            "most in a coordinator's line), none of their generations started.", registry=r,
        )
        seconds = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
        self.queue_seconds = Histogram(
            "rayspec_request_queue_seconds",
            "Seconds each request waited in the queue for its generation slots (0 when they were free); a "
            "request refused for a full queue, or whose client left while it waited, is not counted.",
            buckets=(0, *seconds, 120, 300), registry=r,
        )
        self.time_to_first_token = Histogram(
            "rayspec_time_to_first_token_seconds",
            "Seconds from a generation's start (sessions opened, prompt prefilled) to its first verified tokens.",
            buckets=seconds, registry=r,
        )
        self.inter_chunk = Histogram(
            "rayspec_inter_chunk_seconds",
            "Seconds between a generation's consecutive steps that emit tokens: the gaps a stream's client sees.",
            buckets=seconds, registry=r,
        )
        self.time_per_output_token = Histogram(
            "rayspec_time_per_output_token_seconds",
            "Per finished generation of two tokens or more: seconds per completion token after the first.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1), registry=r,
        )
        self.generation_seconds = Histogram(
            "rayspec_generation_seconds",
            "Seconds each finished generation of one step or more ran, from its start to its last step.",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=r,
        )
        self.prompt_tokens = Counter(
            "rayspec_prompt_tokens",
            "Prompt tokens read, each prompt of a request once however many choices (n) read it: the sum of the "
            "responses' usage.prompt_tokens.  A prompt counts once its first choice has read it (its first step "
            "verified, or an echo of the prompt alone answered): a request that fails or loses its client after "
            "that counts, one refused or failed before it (a 400, 429 or 503 at the start) does not.",
            registry=r,
        )
        self.ended = Counter(
            "rayspec_generations_ended",
            "Generations ended, by how: stop (EOS, a stop string or token), length (an echo of the prompt alone, "
            "max_tokens 0, too: its response's finish reason, as vLLM's), abort (the client went away, or it "
            "failed).  A request refused as it starts (a 400 or 429) ended none.", ["reason"], registry=r,
        )
        self.drafter_lost = Counter(
            "rayspec_drafter_lost_generations",
            "Generations that lost their drafter mid-way (unreachable, out of time, or restarted) and decoded "
            "on without drafts.", registry=r,
        )
        self.target_resumes = Counter(
            "rayspec_target_resumes",
            "Times a generation whose target worker was lost under it was opened again there and decoded on.",
            registry=r,
        )
        self.hedged_steps = Counter(
            "rayspec_hedged_steps",
            "Steps that went on target-only while their draft was late (draft_hedge).", registry=r,
        )
        self.drafter_comebacks = Counter(
            "rayspec_drafter_comebacks",
            "Times a generation that had lost its drafter took it (or another drafter of the pool) back and "
            "drafted again.", registry=r,
        )
        self.batch_size = Histogram(
            "rayspec_forward_batch_size",
            "Per verification step: sequences that shared the target's forward, and the mean over the drafter's "
            "forwards for its tree (cross-request batching; 1: alone).",
            ["model"], buckets=(1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64), registry=r,
        )
        for phase in _PHASES:  # every phase is exported from the start, at zero
            self.phase_seconds.labels(phase)
        self.trials = None  # a callable giving (verifier, temperature, TrialReport)s: `watch_trials`
        self.plans = None  # a callable giving (verifier, temperature, PlanReport)s: `watch_plans`
        self.workers = None  # a callable giving (name, WorkerInfo or None)s: `watch_workers`
        # what another coordinator's exposition adds to these (`add_coordinator`); the trees'
        # families below are each coordinator's own view, not summed
        self._summed = {family.name for family in r.collect()}
        self._others: list[_Other] = []
        r.register(_TrialCollector(self))
        r.register(_PlanCollector(self))
        r.register(_WorkerCollector(self))

    def watch_queue(self, waiting) -> None:
        """Export, at each scrape, `waiting()` as the requests queued for slots."""
        self.waiting.set_function(waiting)

    def watch_trials(self, trials) -> None:
        """Export, at each scrape, the load trials `trials()` lists (`SpeculativeEngine.tree_trials`)."""
        self.trials = trials

    def watch_plans(self, plans) -> None:
        """Export, at each scrape, the Sequoia trees `plans()` lists (`SpeculativeEngine.tree_plans`)."""
        self.plans = plans

    def watch_workers(self, workers) -> None:
        """Export, at each scrape, the state of the workers `workers()` lists
        (`rayspec.serve.service.Service.worker_infos`)."""
        self.workers = workers

    def observe_step(self, step: StepStats) -> None:
        """One verification step (its completion tokens are fewer than its acceptance length
        when a stop or max_tokens cut them)."""
        self.tokens.inc(step.emitted)
        self.acceptance_length.observe(step.accepted + 1)
        self.draft_tokens.observe(step.drafted)
        for depth, rank in enumerate(step.ranks):
            self.depth_visits.labels(str(depth)).inc()
            if rank > 0:
                self.depth_accepted.labels(str(depth)).inc()
        for phase, field in _PHASES.items():
            self.phase_seconds.labels(phase).inc(getattr(step, field))
        self.step_bytes.observe(step.wire_bytes)
        if step.target_batch:  # 0: a worker that does not say
            self.batch_size.labels("target").observe(step.target_batch)
        if step.drafter_batch:  # 0: nothing drafted (or not said)
            self.batch_size.labels("drafter").observe(step.drafter_batch)

    def observe_chunk(self, seconds: float, first: bool) -> None:
        """A step that emitted tokens, `seconds` after the generation's start (`first`) or
        after its previous such step."""
        (self.time_to_first_token if first else self.inter_chunk).observe(seconds)

    def observe_generation(self, stats: GenerationStats, seconds: float, first_token_seconds: float | None,
                           finish_reason: str) -> None:
        """A generation that ran to its end (not one whose client went away), `seconds` long,
        its first tokens `first_token_seconds` after its start.  One of no steps (an echo of the
        prompt alone, max_tokens 0) is counted by how it ended, as its response says, and
        observed by no histogram: it decoded nothing to time."""
        self.ended.labels(finish_reason).inc()
        if not stats.steps:
            return
        if stats.tokens and stats.seconds > 0:
            self.tokens_per_second.observe(stats.tokens_per_second)
        self.generation_seconds.observe(seconds)
        if first_token_seconds is not None and stats.tokens > 1:
            self.time_per_output_token.observe((seconds - first_token_seconds) / (stats.tokens - 1))

    def observe_incidents(self, stats: GenerationStats) -> None:
        """What befell a generation's workers — its drafter lost (and back), steps hedged, the
        target resumed — however the generation ended: a client that left, or a target that
        failed after the drafter did, does not unmake them."""
        if stats.drafter_lost is not None:
            self.drafter_lost.inc()
        self.drafter_comebacks.inc(stats.drafter_comebacks)
        self.hedged_steps.inc(stats.hedged_steps)
        self.target_resumes.inc(stats.target_resumes)

    def observe_response(self, endpoint: str, status: int) -> None:
        self.requests.labels(endpoint, str(status)).inc()

    def observe_grpc_call(self, method: str, code: str) -> None:
        self.grpc_requests.labels(method, code).inc()

    def add_coordinator(self, exposition: Callable[[], bytes]) -> None:
        """Add, at each scrape, another coordinator's metrics to these (`exposition()`: its
        Prometheus text, blocking): every counter, gauge and histogram sample is summed with
        this one's, so that `/metrics` counts the generations of both (the gRPC API's
        coordinator actor beside the HTTP app's replica); the trees' trials and plans stay
        this coordinator's own.  A coordinator that does not answer adds what it answered last,
        so that a counter never seems to go back."""
        self._others.append(_Other(exposition))

    def exposition(self) -> bytes:
        own = generate_latest(self.registry)
        if not self._others:
            return own
        return _summed_exposition(own, [other.latest() for other in self._others], self._summed)


class _Other:
    """Another coordinator's exposition, with what it answered last."""

    def __init__(self, fetch: Callable[[], bytes]):
        self.fetch, self.last = fetch, b""

    def latest(self) -> bytes:
        try:
            self.last = self.fetch()
        except Exception as error:  # noqa: BLE001 — a scrape must answer with what it has
            log.warning("another coordinator's metrics did not come (its last are used): %s", error)
        return self.last


def _summed_exposition(own: bytes, others: list[bytes], summed: set[str]) -> bytes:
    """`own` (Prometheus text) with each sample of a family in `summed` increased by the same
    sample (name and labels) of `others`; their samples of label values `own` has not seen
    yet are added after its own.  Families outside `summed`, and those `own` lacks, are left
    as `own` has them."""
    def key(sample) -> tuple:
        return sample.name, tuple(sorted(sample.labels.items()))

    extra: dict[str, dict[tuple, object]] = {}  # family -> sample key -> sample, values summed
    for text in others:
        for family in text_string_to_metric_families(text.decode()):
            if family.name not in summed:
                continue
            samples = extra.setdefault(family.name, {})
            for sample in family.samples:
                there = samples.get(key(sample))
                samples[key(sample)] = sample if there is None else there._replace(value=there.value + sample.value)
    families = list(text_string_to_metric_families(own.decode()))
    for family in families:
        added = extra.get(family.name)
        if not added:
            continue
        mine = {key(sample) for sample in family.samples}
        family.samples = [sample._replace(value=sample.value + added[key(sample)].value) if key(sample) in added
                          else sample for sample in family.samples]
        family.samples += [sample for sample_key, sample in added.items() if sample_key not in mine]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


class _Families:
    def __init__(self, families: list):
        self.families = families

    def collect(self):
        return self.families


# A worker that answered a scrape's `Info` RESOURCE_EXHAUSTED: up, every thread it has for
# calls busy (a load peak), its state unknown this once (`Service.worker_infos`)
WORKER_BUSY = "busy"


class _WorkerCollector:
    """The workers' state, asked at scrape time: whether each answered, the sessions it holds,
    its prefix cache's bytes, and the tokens it was asked about and found (vLLM's
    prefix_cache_queries and prefix_cache_hits, per worker); a model in the coordinator's own
    process (`where: coordinator`) is one of them, under the name a worker would have.  A worker
    that did not answer has `rayspec_worker_up` 0 and no other sample in that scrape; one too
    busy to answer (`WORKER_BUSY`) has `rayspec_worker_up` 1 and no other sample, so that a
    load peak does not read as a worker lost (nor its counters as reset)."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self):
        labels = ["worker"]
        up = GaugeMetricFamily("rayspec_worker_up", "1 where the worker answered at this scrape (its state, or that "
                               "it was too busy to tell it), 0 where it did not answer in time.", labels=labels)
        sessions = GaugeMetricFamily(
            "rayspec_worker_open_sessions", "Sessions the worker holds now, those opening included (0 once every "
            "coordinator has released its sequences).", labels=labels)
        cached = GaugeMetricFamily("rayspec_prefix_cache_bytes", "Bytes of keys and values the worker's prefix cache "
                                   "holds (at most its prefix_cache_mb).", labels=labels)
        queried = CounterMetricFamily("rayspec_prefix_cache_queried_tokens", "Prompt tokens the worker's prefix cache "
                                      "was asked about.", labels=labels)
        hits = CounterMetricFamily("rayspec_prefix_cache_hit_tokens", "Of those, tokens of cached prefixes reused.",
                                   labels=labels)
        for name, info in self.metrics.workers() if self.metrics.workers else []:
            up.add_metric([name], float(info is not None))
            if info is not None and info is not WORKER_BUSY:
                sessions.add_metric([name], info.open_sessions)
                cached.add_metric([name], info.prefix_cache_bytes)
                queried.add_metric([name], info.prefix_cache_queried_tokens)
                hits.add_metric([name], info.prefix_cache_hit_tokens)
        return [up, sessions, cached, queried, hits]


class _TrialCollector:
    """sequoia:auto's load trials as gauges, read at scrape time: per verifier, temperature and
    load level, each tree's measured tokens per second and turns, and the choice."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self):
        labels = ["verifier", "temperature", "sequences"]
        rates = GaugeMetricFamily(
            "rayspec_tree_trial_tokens_per_second",
            "Tokens per second sequoia:auto's trial measured at a load (sequences decoding at once) for its drafting "
            "tree and for target-only decoding, over each one's recent turns.", labels=[*labels, "tree"])
        turns = GaugeMetricFamily(
            "rayspec_tree_trial_turns", "Settled turns the trial has measured each tree over.", labels=[*labels, "tree"])
        drafting = GaugeMetricFamily(
            "rayspec_tree_trial_drafting",
            "1 where the trial chose drafting at that load, 0 where it chose target-only decoding (absent until both "
            "have been measured).", labels=labels)
        nodes = GaugeMetricFamily(
            "rayspec_tree_trial_drafting_nodes", "Nodes of the tree the trial drafts at that load (the root included).",
            labels=labels)
        for verifier, temperature, report in self.metrics.trials() if self.metrics.trials else []:
            level = [verifier, f"{temperature:g}", str(report.sequences)]
            for tree, rate, measured in zip(("drafting", "target_only"), report.rates, report.turns):
                if rate is not None:
                    rates.add_metric([*level, tree], rate)
                turns.add_metric([*level, tree], measured)
            if report.choice is not None:
                drafting.add_metric(level, float(report.choice == "drafting"))
            nodes.add_metric(level, report.drafting_nodes)
        yield from (rates, turns, drafting, nodes)


class _PlanCollector:
    """Adaptive Sequoia trees, read at scrape time: per verifier and temperature, the tree a
    sequence decodes with now, how often serving changed it, and what checking cost."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self):
        labels = ["verifier", "temperature", "tree"]  # tree: the Sequoia spec planning it (the service's, or a request's)
        nodes = GaugeMetricFamily("rayspec_tree_nodes", "Nodes of the Sequoia tree a sequence decodes with now (the "
                                  "root included: 1 is target-only decoding).", labels=labels)
        depth = GaugeMetricFamily("rayspec_tree_depth", "Drafted levels of that tree.", labels=labels)
        replans = CounterMetricFamily("rayspec_tree_replans", "Changes of that tree while serving, from the "
                                      "acceptance the verifier measured.", labels=labels)
        checks = CounterMetricFamily("rayspec_tree_replan_checks", "Re-planning checks run (each runs Sequoia's "
                                     "dynamic program; they back off while the tree holds).", labels=labels)
        seconds = CounterMetricFamily("rayspec_tree_replan_check_seconds", "Time those checks took, each on a "
                                      "thread of its own beside the decoding steps.", labels=labels)
        for verifier, temperature, report in self.metrics.plans() if self.metrics.plans else []:
            key = [verifier, f"{temperature:g}", report.spec]
            nodes.add_metric(key, report.nodes)
            depth.add_metric(key, report.depth)
            replans.add_metric(key, report.replans)
            checks.add_metric(key, report.checks)
            seconds.add_metric(key, report.check_seconds)
        yield from (nodes, depth, replans, checks, seconds)
