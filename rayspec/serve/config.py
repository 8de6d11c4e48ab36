"""The service configuration: one YAML file, every key optional.

    rayspec serve config.yaml

    model_id: rayspec-demo            # the name clients pass as `model`
    target:   {path: null, device: auto, dtype: auto, num_gpus: auto, threads: null, cpus: null, where: worker,
               prefix_cache_mb: 1024, max_batch_sequences: 16, max_batch_tokens: 256, prefill_chunk_tokens: 0,
               resume_timeout: 60}
    drafters: [{path: null, device: auto, dtype: auto, num_gpus: auto, threads: null, cpus: null, where: worker,
                prefix_cache_mb: 1024, max_batch_sequences: 16, max_batch_tokens: 256, prefill_chunk_tokens: 0,
                draft_top_k: 0, draft_timeout: 10}]
    verifier: rrsw                    # the default; requests may choose another
    verifier_params: {}
    priced_verifiers: null            # sequoia:auto times these verifiers' own drafts and walks:
                                      # a list, or all (null: the default verifier; others price as rrsw)
    acceptance_dir: null              # measured acceptance vectors (null: the demo pair's)
    tree: sequoia:auto                # the default tree; requests may choose another
    adaptive_trees: true              # Sequoia trees re-plan from the acceptance served
    load_aware_trees: true            # sequoia:auto trees shrink as more sequences decode at once
    graft_predictions: auto           # T > 0: a prediction's chain beside the drafter's tree: auto | always | never
    draft_hedge: null                 # a step waits for its draft at most this many times the recent median
                                      # draft time, then goes on target-only (null: waits for every draft)
    verify_at: target                 # where the verifier runs: target | coordinator
    tool_call_parser: auto            # reads tool_choice "auto" replies: auto | hermes | mistral | json | none
    placement:
      strategy: PACK                  # PACK (one node if it fits) | STRICT_SPREAD (distinct nodes)
      target_resources: {}            # extra Ray resources for the target, e.g. {rayspec_target: 1}
      drafter_resources: {}
      max_restarts: -1                # times Ray restarts a worker actor whose process died (-1: always)
    http: {host: 127.0.0.1, port: 8000}
    grpc: {host: 127.0.0.1, port: 9000}
    limits: {default_max_tokens: 256, max_tokens: 4096, max_concurrent_requests: 64,
             max_queued_requests: 256,      # requests waiting for a generation slot, HTTP and gRPC each (0: none)
             max_request_bytes: 33554432,   # HTTP bodies over this many bytes get a 413
             body_timeout: 60}              # seconds for an HTTP body to arrive whole, or 408 (0: no limit)
    api_key: null                     # clients must send it (null: $RAYSPEC_API_KEY, if set)

With an API key, every HTTP request but `/health` and `/metrics` needs `Authorization: Bearer
<key>` (401 otherwise, as OpenAI and vLLM answer: the `openai` client's `api_key` sends it), and
so does every gRPC Generation call but the health service (UNAUTHENTICATED otherwise: the SDK's
`api_key`).  Give it in the `RAYSPEC_API_KEY` environment variable rather than in a file you
share; the worker's own gRPC ports carry no key, so keep them inside the cluster's network.

`prefix_cache_mb` bounds each model's automatic prefix cache (`rayspec.models.prefix_cache`):
the keys and values of the sequences it has read, on its device, so that a prompt sharing a
prefix with an earlier one (a system prompt, a conversation's earlier turns) is prefilled from
where that prefix ends, if it is 16 tokens or more; `usage.prompt_tokens_details.cached_tokens`
counts the target's.  0 turns it off.

`max_batch_sequences` and `max_batch_tokens` bound each model's cross-request batching
(`rayspec.models.batching`): the forwards that concurrent requests' sequences wait for while
the model computes run together as its next forward, up to that many sequences and that many
query rows (sequences x the widest one's tokens: a long prefill runs alone).  A request alone
is never held back to wait for company.  `max_batch_sequences: 1` turns batching off.  On a
GPU, raise both (a forward of 64 sequences of 16-node trees costs little more than one).
`prefill_chunk_tokens` (0: off) prefills a longer prompt in chunks of that many tokens, with
the other sequences' forwards in between: the decoding requests' longest stalls shrink (on
the demo pair, p99 gaps 471-505 -> 295-300 ms with 900-token prompts arriving) and the long
prompt's first token comes later (464-479 -> 1041-1274 ms), each chunk waiting for their
forwards (`bench/results/prefill_chunk_bench.md`).

A drafter's `draft_top_k` (0: off) drafts from each node's k likeliest tokens only, every
verifier verifying against that law, so the output stays exact; a remote drafter's q rows then
cross as k entries instead of the vocabulary.  For slow links and large vocabularies: over
loopback on the demo pair it cut the bytes 3-41x and cost 2-19 % of tokens/s
(`bench/results/draft_top_k_bench.md`).  The in-process engine gives the service's tokens for
a seed with the same k.

A worker drafter's `draft_timeout` (seconds, default 10) is the deadline of each draft after a
sequence's first (which prefills the prompt, and has the call deadline of 60 s): a drafter
that hangs past it loses its sequences, which decode on target-only, with the target's law
(`rayspec.rpc.remote.RemoteDrafter`).  Lower it where a hung drafter must not hold a request
up for long; raise it for a drafter that is slow to answer (a far link, a drafter queueing
many sequences' prefills).

`draft_hedge` (null: off) is for a drafter that is late now and then: far from the target, or
shared by many sequences.  A step whose draft is later than that many times the drafter's
recent median draft time goes on target-only, as do the steps after it until the draft is in
(`rayspec.engine.hedge`); the law stays the target's.  With gumbel and minhash a seed's tokens
are the same hedged or not; other verifiers hedge only requests without a seed, whose tokens
need not repeat.  On the demo pair over loopback, with 5 % of drafts 50 ms late, hedging at 3
gave 1.09-1.13x the tokens/s of waiting and cut the p99 step from 71-74 to 24-28 ms; with 1 %
of drafts 200 ms late, the longest step fell from 225 to 32 ms.  With no draft late it cost up
to 2.5 % (a thread hand-off per draft), so it is off by default (`bench/results/hedge_bench*.md`).

A null model path is the shipped demo pair; a relative one that exists where `rayspec serve`
reads the file is made absolute there, as are a relative `acceptance_dir` and `tree:
file:PATH` (Ray's workers do not start in that directory; the cluster files sync the tree to
the same place on every node); in each a leading `~` is the home directory there, as a shell
would read it.  `num_gpus: auto` is a whole
GPU when the cluster has one for each model, an equal share of one when it has fewer (the
demo pair on a one-GPU machine: half each), and 0 without GPUs.  `cpus` ("0-3", "8,9") pins
the process that computes with the model (its worker, or the coordinator for `where:
coordinator`) to those CPUs of its node, and caps its torch threads at their number when
`threads` is null; null leaves it to Linux.

A drafter runs `where: worker` (default: a gRPC worker of its own, on its own GPU when there
are GPUs) or `where: coordinator`: loaded into each coordinator process (the HTTP replica and
the gRPC Generation actor), so a step makes one call, to the target, instead of two.  That
suits a drafter small enough to run on the coordinator's CPU (these processes reserve no
GPU, so `num_gpus` must stay auto or 0 there); it is what `service_bench`'s "drafter in
coordinator" arm measures.

The target runs `where: worker` (default: a gRPC worker of its own, with the gRPC
Generation actor and the HTTP replica as two coordinators beside it on its node) or `where:
coordinator`: loaded into the HTTP replica itself, which then also serves the gRPC Generation
API, so one process holds the target, the verifier and both front ends.  A step then makes
one call, to the drafter, whose reply is all that crosses: the target's rows never leave its
process, the fewest bytes for every verifier (`verify_at` does not apply).  The replica
reserves the target's GPU and owns the placement group, and starts the drafter workers in
its other bundles.  It is what `service_bench`'s "target in coordinator" arm measures.

A worker target's `resume_timeout` (seconds, default 60; 0: off): a sequence whose target
worker is lost under it (gone, or restarted without the session) waits up to that long for the
target to answer again, and as soon as it does is opened there again after the tokens it has
and decodes on; the client sees a pause.  Its law stays the target's, and with `gumbel` or
`minhash` its tokens are those of a sequence never interrupted.  Past the timeout the request fails (503 / UNAVAILABLE).

`placement.max_restarts`: how often Ray starts a worker actor (or the gRPC coordinator actor)
again after its process died (-1: always; 0: never).  A restarted worker binds the port it had,
so the coordinators reconnect to it, or they find it at its new address when it was restarted
on another node; the sequences it held are lost (`rayspec.cluster.actors`).

`tool_call_parser` reads the tool calls out of a `tool_choice: "auto"` reply
(`rayspec.serve.tool_parsers`): `auto` takes hermes or mistral when the model's chat template
writes their markers and json (Llama 3's syntax, and the fallback template's) otherwise; name
one where the template teaches another, or `none` to refuse "auto" with a 400.

Reproducibility: a seed gives the same tokens for the same tree.  Adaptive Sequoia trees may
re-plan between two requests, and a different tree draws different drafts, so the same seed
can then give a different (equally distributed) sample — except with the coupling verifiers
(gumbel, minhash), whose output never depends on the drafts.  Set `adaptive_trees: false`
or a static tree when byte-for-byte repeats matter more than adapting.  Requests that give a
seed keep the tree planned for one sequence whatever the load (`load_aware_trees` shrinks only
the others' trees).  Repeats also need
the same arithmetic: the same device, dtype and torch thread count (a CPU matmul sums in a
different order on a different number of threads, and a 1e-6 change of a probability flips a
sample whose uniform fell that close to a boundary).  For the same reason the prefix cache and
cross-request batching keep a seed's law but not always its bits: a request that reuses
cached rows, or whose forwards are batched with others' (which depends on timing), computes
in forwards of other shapes.  Set `prefix_cache_mb: 0` and `max_batch_sequences: 1` on both
models for byte-for-byte repeats under concurrent load.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rayspec.engine.engine import check_default_setting, check_resume_timeout, resolve_priced_verifiers
from rayspec.engine.hedge import check_hedge_factor
from rayspec.engine.prediction import check_graft_mode
from rayspec.engine.trees import TREE_SPEC_HELP
from rayspec.models.batching import (
    DEFAULT_MAX_BATCH_SEQUENCES, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PREFILL_CHUNK, check_batch_limits,
)
from rayspec.models.prefix_cache import DEFAULT_PREFIX_CACHE_MB, check_prefix_cache_mb
from rayspec.rpc.checks import api_key_from_environment, check_api_key
from rayspec.serve.tool_parsers import check_parser_setting


@dataclass
class ModelConfig:
    path: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    num_gpus: float | str = "auto"
    threads: int | None = None
    cpus: str | None = None  # taskset-style CPU list the computing process keeps to
    prefix_cache_mb: float = DEFAULT_PREFIX_CACHE_MB  # the model's prefix cache; 0: none
    max_batch_sequences: int = DEFAULT_MAX_BATCH_SEQUENCES  # sequences per forward; 1: no batching
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS  # query rows of a batched forward
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK  # tokens per prefill chunk; 0: whole prefills

    def __post_init__(self):
        check_prefix_cache_mb(self.prefix_cache_mb, "prefix_cache_mb")
        check_batch_limits(self.max_batch_sequences, self.max_batch_tokens, self.prefill_chunk_tokens)
        if self.cpus is not None:
            from rayspec.models.threads import parse_cpu_list

            parse_cpu_list(self.cpus)  # a clear error at config time; availability is checked where it runs

    def load(self, default_path):
        """(model, tokenizer) as configured (`default_path` for a null path); sets this
        process's torch thread count and CPUs when the config gives them."""
        import torch

        from rayspec.models import load_causal_lm
        from rayspec.models.threads import pin_process_to_cpus

        if self.cpus is not None:
            pin_process_to_cpus(self.cpus)
        if self.threads:
            torch.set_num_threads(self.threads)
        return load_causal_lm(self.path or default_path, self.device, self.dtype)

    _handle = ""  # the `rayspec.engine.local` class serving this model in a process

    def local(self, default_path):
        """This model's in-process handle (`LocalTarget` or `LocalDrafter`), loaded as `load`
        loads it, with its prefix cache and batching limits."""
        from rayspec.engine import local

        return getattr(local, self._handle)(*self.load(default_path), **self._options())

    def _options(self) -> dict:
        """The handle's keyword options beside the model and tokenizer."""
        return {"prefix_cache_mb": self.prefix_cache_mb, "max_batch_sequences": self.max_batch_sequences,
                "max_batch_tokens": self.max_batch_tokens, "prefill_chunk_tokens": self.prefill_chunk_tokens}


@dataclass
class TargetConfig(ModelConfig):
    where: str = "worker"  # worker | coordinator (see the module doc)
    resume_timeout: float = 60.0  # how long a sequence whose target worker was lost waits for it (see the module doc)
    _handle = "LocalTarget"

    def __post_init__(self):
        super().__post_init__()
        check_resume_timeout(self.resume_timeout, "target.resume_timeout")


@dataclass
class DrafterConfig(ModelConfig):
    where: str = "worker"  # worker | coordinator (see the module doc)
    draft_top_k: int = 0  # draft from each node's k likeliest tokens only (`LocalDrafter`); 0: all
    draft_timeout: float = 10.0  # a worker drafter's deadline per draft after a sequence's first (see the module doc)
    _handle = "LocalDrafter"

    def __post_init__(self):
        super().__post_init__()
        from rayspec.engine.local import check_draft_top_k
        from rayspec.rpc.remote import check_draft_timeout

        check_draft_top_k(self.draft_top_k)
        check_draft_timeout(self.draft_timeout)

    def _options(self) -> dict:
        return {**super()._options(), "draft_top_k": self.draft_top_k}


@dataclass
class PlacementConfig:
    strategy: str = "PACK"
    target_resources: dict = field(default_factory=dict)
    drafter_resources: dict = field(default_factory=dict)
    max_restarts: int = -1  # Ray restarts a dead worker or gRPC coordinator actor this often; -1: always

    def __post_init__(self):
        if type(self.max_restarts) is not int or self.max_restarts < -1:
            raise ValueError(f"placement.max_restarts must be a whole number, -1 (always) or more, "
                             f"got {self.max_restarts!r}")
        for name in ("target_resources", "drafter_resources"):
            resources = getattr(self, name)
            # Ray would refuse them only when it places the bundle, after start-up.
            if not isinstance(resources, dict) or not all(
                    isinstance(key, str) and key and not isinstance(amount, bool) and isinstance(amount, (int, float))
                    and 0 <= amount < math.inf for key, amount in resources.items()):
                raise ValueError(f"placement.{name} must map Ray resource names to amounts, 0 or more, "
                                 f"e.g. {{rayspec_target: 1}}; got {resources!r}")


@dataclass
class Endpoint:
    host: str = "127.0.0.1"
    port: int = 8000


@dataclass
class LimitsConfig:
    """The HTTP service's limits.  Beyond `max_concurrent_requests` generations (a request's
    `n` choices and batch prompts are one each; one with more than that runs them that many at
    a time, and holds at most `max_concurrent_requests + max_queued_requests`), a request waits
    for its slots, first come, first served, as vLLM and SGLang queue what they cannot run yet;
    beyond `max_queued_requests` waiting it is refused, 429.  256 by default: four times the
    generations that run, so that a burst (a load test's users all starting at once) is served
    late rather than refused, while a sustained overload still gets 429s that tell clients to
    back off instead of queueing without end (vLLM's queue is unbounded: its clients time out
    instead).  0 refuses at once whatever finds no free slot.  The gRPC Generation API has the
    same limits (RESOURCE_EXHAUSTED for a full line), but not `max_request_bytes`: its servers
    refuse requests over 256 MiB.  A process that serves both APIs (the Serve replica, with
    the target `where: coordinator`) runs them in one engine, and their requests wait in one
    line for the same slots; with the target in a worker, the gRPC API's coordinator is an
    actor of its own (`GenerationActor`), with its own slots and line."""
    default_max_tokens: int = 256
    max_tokens: int = 4096
    max_concurrent_requests: int = 64
    max_queued_requests: int = 256
    max_request_bytes: int = 32 * 2**20  # a batch of 64 prompts of 64k token ids each, as JSON, fits
    body_timeout: float = 60.0  # seconds for a body to arrive whole, or 408 (0: no limit; `LimitBodies`)

    def __post_init__(self):
        for name in ("default_max_tokens", "max_tokens", "max_concurrent_requests", "max_request_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"limits.{name} must be a positive integer, got {value!r}")
        if type(self.max_queued_requests) is not int or self.max_queued_requests < 0:
            raise ValueError("limits.max_queued_requests must be a whole number, 0 (no queue) or more, "
                             f"got {self.max_queued_requests!r}")
        if type(self.body_timeout) not in (int, float) or not 0 <= self.body_timeout < float("inf"):
            raise ValueError(f"limits.body_timeout must be a number of seconds, 0 (no limit) or more, "
                             f"got {self.body_timeout!r}")
        if self.default_max_tokens > self.max_tokens:
            raise ValueError(f"limits.default_max_tokens ({self.default_max_tokens}) is above "
                             f"limits.max_tokens ({self.max_tokens})")


@dataclass
class ServiceConfig:
    model_id: str = "rayspec-demo"
    target: TargetConfig = field(default_factory=TargetConfig)
    drafters: list[DrafterConfig] = field(default_factory=lambda: [DrafterConfig()])
    verifier: str = "rrsw"
    verifier_params: dict = field(default_factory=dict)
    priced_verifiers: list[str] | str | None = None  # `SpeculativeEngine`'s (null: the default verifier)
    tree: str = "sequoia:auto"
    acceptance_dir: str | None = None  # measured vectors (null: the demo pair's when serving it)
    adaptive_trees: bool = True  # Sequoia trees re-plan from served acceptance (see the module doc)
    load_aware_trees: bool = True  # sequoia:auto trees priced for the sequences decoding at once
    graft_predictions: str = "auto"  # `SpeculativeEngine`'s: where a prediction's chain goes above T = 0
    draft_hedge: float | None = None  # `SpeculativeEngine`'s: see the module doc
    verify_at: str = "target"
    tool_call_parser: str = "auto"  # `rayspec.serve.tool_parsers`: auto picks by the chat template
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    http: Endpoint = field(default_factory=Endpoint)
    grpc: Endpoint = field(default_factory=lambda: Endpoint(port=9000))
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    api_key: str | None = None

    def __post_init__(self):
        if self.api_key is not None:
            check_api_key(self.api_key, "api_key")
        if not isinstance(self.model_id, str) or not self.model_id.strip():
            raise ValueError(f"model_id must be a non-empty string (the name clients pass as `model`), "
                             f"got {self.model_id!r}")
        if self.acceptance_dir is not None and (not isinstance(self.acceptance_dir, str)
                                                or not self.acceptance_dir.strip()):
            raise ValueError(f"acceptance_dir must be a directory's path, or null for the demo pair's, "
                             f"got {self.acceptance_dir!r}")
        for flag in dataclasses.fields(self):
            value = getattr(self, flag.name)
            if flag.type == "bool" and type(value) is not bool:  # YAML's quoted "false" is a truthy string
                raise ValueError(f"{flag.name} must be true or false, got {value!r}")
        for name, endpoint in (("http", self.http), ("grpc", self.grpc)):
            _check_endpoint(endpoint, name)
        if self.http.port and self.http.port == self.grpc.port:
            raise ValueError(f"http.port and grpc.port are both {self.http.port}: the HTTP and gRPC front ends "
                             f"need a port each")
        _check_model(self.target, "target")
        for i, drafter in enumerate(self.drafters):
            _check_model(drafter, f"drafters[{i}]")
        if not isinstance(self.tree, str):
            raise ValueError(f"tree must be a tree spec ({TREE_SPEC_HELP}), got {self.tree!r}")
        if not isinstance(self.verifier_params, dict):
            raise ValueError(f"verifier_params must be a mapping of the verifier's parameters, "
                             f"got {self.verifier_params!r}")
        if self.placement.strategy not in ("PACK", "STRICT_PACK", "SPREAD", "STRICT_SPREAD"):
            raise ValueError(f"placement.strategy must be PACK, STRICT_PACK, SPREAD or STRICT_SPREAD, got {self.placement.strategy!r}")
        check_graft_mode(self.graft_predictions)
        check_hedge_factor(self.draft_hedge)
        resolve_priced_verifiers(self.priced_verifiers, self.verifier)
        check_parser_setting(self.tool_call_parser)
        if self.verify_at not in ("target", "coordinator"):
            raise ValueError(f"verify_at must be target or coordinator, got {self.verify_at!r}")
        if self.target.where not in ("worker", "coordinator"):
            raise ValueError(f"target.where must be worker or coordinator, got {self.target.where!r}")
        for i, drafter in enumerate(self.drafters):
            if drafter.where not in ("worker", "coordinator"):
                raise ValueError(f"drafters[{i}].where must be worker or coordinator, got {drafter.where!r}")
            if drafter.where == "coordinator" and drafter.num_gpus not in ("auto", 0, 0.0):
                raise ValueError(
                    f"drafters[{i}] runs in the coordinator, which reserves no GPU: num_gpus must be auto or 0, "
                    f"got {drafter.num_gpus!r}; give a GPU drafter `where: worker`"
                )
        check_default_setting(self.verifier, self.verifier_params, self.tree)

    @classmethod
    def from_dict(cls, data: dict | None) -> "ServiceConfig":
        return _build(cls, data or {}, "config")

    @classmethod
    def from_yaml(cls, path: str | Path) -> "ServiceConfig":
        try:
            data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_RefusingDuplicateKeys)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:  # the decode error named no file
            raise ValueError(f"cannot read the service config {path}: {error}") from error
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"the service config {path} must be a mapping")
        config = cls.from_dict(data)
        for model in (config.target, *config.drafters):
            model.path = _absolute_if_here(model.path)
        config.acceptance_dir = _absolute_if_here(config.acceptance_dir)
        if config.tree.startswith("file:"):  # checked here, read by the coordinators
            config.tree = "file:" + _absolute_if_here(config.tree[len("file:"):])
        return config

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def resolved_api_key(self) -> str | None:
        """The key clients must send: the config's, else $RAYSPEC_API_KEY, else none.
        ValueError, naming the variable, for a key in it that no client can send."""
        return self.api_key or api_key_from_environment()

    @property
    def worker_drafters(self) -> list[DrafterConfig]:
        return [d for d in self.drafters if d.where == "worker"]

    @property
    def coordinator_drafters(self) -> list[DrafterConfig]:
        return [d for d in self.drafters if d.where == "coordinator"]


class _RefusingDuplicateKeys(yaml.SafeLoader):
    """`yaml.safe_load`'s loader, but a key given twice in one mapping is an error: PyYAML keeps
    the last silently, so a second `target:` section (a device added below the model) dropped
    the first one's path and served the demo pair.  A merge key's (`<<: *defaults`) keys are
    not duplicates: overriding them is what it is for."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool, type(None))):  # (a list key: PyYAML refuses it below)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"the key {key!r} is given twice", key_node.start_mark)
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _absolute_if_here(path: str | None) -> str | None:
    """`path` made absolute when it is relative and names something in this working directory:
    a model, acceptance directory or tree file the file gives relative to the tree `rayspec
    serve` runs in, which Ray's workers — started elsewhere — would not find.  A leading `~` is
    this user's home, as a shell reads it (no shell reads the file: the loader took `~/models/x`
    for a hub id, the acceptance library for a missing directory).  Anything else (a hub id,
    null) as it is."""
    if path is None:
        return path
    path = os.path.expanduser(path)
    if os.path.isabs(path) or not Path(path).exists():
        return path
    return str(Path(path).resolve())


def _check_endpoint(endpoint: Endpoint, name: str) -> None:
    """ValueError for a host or port the front end would fail on only once Ray and the models
    are up (a port past 65535 as an OverflowError; gRPC's as "port in use")."""
    if not isinstance(endpoint.host, str) or not endpoint.host.strip():
        raise ValueError(f"{name}.host must be a host name or IP address, got {endpoint.host!r}")
    port = endpoint.port
    if type(port) is not int or not 0 <= port <= 65535:
        raise ValueError(f"{name}.port must be a whole number from 0 to 65535 (0: any free one), got {port!r}")


def _check_model(model: ModelConfig, name: str) -> None:
    """ValueError for a model setting that would otherwise fail only on the model's node, after
    Ray has started (or be misread there: a GPU count of -1 in its bundle)."""
    import torch

    from rayspec.models.loading import parse_device, resolve_dtype

    if model.path is not None and (not isinstance(model.path, str) or not model.path.strip()):
        raise ValueError(f"{name}.path must be a checkpoint directory or hub id, or null for the demo pair, "
                         f"got {model.path!r}")
    gpus = model.num_gpus
    if gpus != "auto" and (isinstance(gpus, bool) or not isinstance(gpus, (int, float)) or not 0 <= gpus < math.inf):
        raise ValueError(f"{name}.num_gpus must be auto or a number of GPUs, 0 or more, got {gpus!r}")
    threads = model.threads
    if threads is not None and (type(threads) is not int or threads < 1):
        raise ValueError(f"{name}.threads must be a whole number, 1 or more, or null for the default, got {threads!r}")
    # Only the spelling: whether a CUDA device exists is for the node that loads the model
    # (resolve_device checks it there), not for this one, which may have no GPU.
    try:
        if not isinstance(model.device, str):
            raise TypeError
        if model.device != "auto":
            parse_device(model.device)
    except (ValueError, TypeError):
        raise ValueError(f"{name}.device must be auto, cpu, cuda or cuda:N, got {model.device!r}") from None
    if not isinstance(model.dtype, str):
        raise ValueError(f"{name}.dtype must be auto or a dtype's name such as bfloat16, got {model.dtype!r}")
    try:
        resolve_dtype(model.dtype, torch.device("cpu"))
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def _build(cls, data: dict, where: str):
    """A dataclass from a dict, refusing unknown keys with their location."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        # YAML reads a bare `yes:` or `1:` as a bool or int key
        unknown = sorted(map(str, unknown))
        raise ValueError(f"unknown key(s) in {where}: {', '.join(unknown)}; known: {', '.join(fields)}")
    values = {}
    for name, value in data.items():
        kind = {"target": TargetConfig, "placement": PlacementConfig, "http": Endpoint, "grpc": Endpoint, "limits": LimitsConfig}.get(name)
        # Only null (a bare `target:`) is the defaults: `target: []` or `http: 0` is a mistake.
        if kind is not None:
            value = _build(kind, {} if value is None else value, f"{where}.{name}")
        elif name == "drafters":
            if not isinstance(value, list):
                raise ValueError(f"{where}.drafters must be a list")
            value = [_build(DrafterConfig, {} if d is None else d, f"{where}.drafters[{i}]")
                     for i, d in enumerate(value)]
        values[name] = value
    try:
        return cls(**values)
    except ValueError as error:
        if not issubclass(cls, ModelConfig):  # the others' checks name their section
            raise
        raise ValueError(_naming_the_model(str(error), where.removeprefix("config."), cls)) from None


def _naming_the_model(message: str, model: str, cls) -> str:
    """A model's check's message with the model it is about (`drafters[1].prefix_cache_mb must
    be ...`, `drafters[1]: ...`): the checks a ModelConfig runs itself name only the setting,
    which left a config of several drafters to guess which one."""
    if message.startswith(f"{model}."):  # target.resume_timeout
        return message
    setting = message.split(maxsplit=1)[0].rstrip(":")
    return f"{model}.{message}" if setting in {f.name for f in dataclasses.fields(cls)} else f"{model}: {message}"
