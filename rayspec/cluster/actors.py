"""Ray actors hosting the gRPC workers and the gRPC coordinator.

Each actor runs the same server the plain processes of `rayspec.rpc.worker` run, bound on
all interfaces of its node and advertised at the node's IP, so drafter, target and
coordinator talk gRPC whether Ray placed them on one node or several.

An actor whose process dies (killed for memory, a CUDA error, a crash) is started again by
Ray, up to `placement.max_restarts` times, in its bundle: on the same node while the node
lives.  It then binds the port it had (`bind_again`), so the coordinators, which dial the
address it advertised at its first start, reconnect to it as to a worker that was down for a
while: a drafter's sequences decode target-only meanwhile, a target's requests fail (503 /
UNAVAILABLE) until it is back.  The sequences it held are lost with its process.  Restarted
elsewhere (its node lost, its bundle placed on another) it has another address, which the
coordinators' `WorkerWatch` finds and dials.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
import threading
import time
import uuid

import ray

from rayspec.rpc.server import host_port
from rayspec.serve.config import DrafterConfig, ServiceConfig, TargetConfig

log = logging.getLogger(__name__)

# Per worker bundle: a CPU share small enough that target, drafter and coordinator fit a
# 2-core laptop; GPUs come from the model configs.
BUNDLE_CPUS = 0.5


def auto_gpus(models, cluster_gpus: float) -> float:
    """What each of `models` whose `num_gpus` is auto reserves: a whole GPU when the cluster
    has one for each (beyond those the others name), else an equal share of one, so that a
    GPU holds ceil(n / GPUs) of them — the demo pair on a one-GPU machine: half each, rather
    than a placement group that never fits — and none on a cluster without GPUs."""
    auto = sum(model.num_gpus == "auto" for model in models)
    whole_gpus = math.floor(cluster_gpus - sum(float(m.num_gpus) for m in models if m.num_gpus != "auto"))
    if not auto or whole_gpus < 1:
        return 0.0
    return 1.0 / math.ceil(auto / whole_gpus)


def bundles(config: ServiceConfig, cluster_gpus: float) -> list[dict]:
    """The placement group's bundles: the target's first, then one per `where: worker` drafter."""
    models = [config.target, *config.worker_drafters]
    shared = auto_gpus(models, cluster_gpus)

    def bundle(model, extra):
        b = {"CPU": BUNDLE_CPUS, **extra}
        gpus = shared if model.num_gpus == "auto" else float(model.num_gpus)
        if gpus:
            b["GPU"] = round(gpus, 4)  # Ray's resolution: three thirds still fit one GPU
        return b

    return [bundle(config.target, config.placement.target_resources)] + [
        bundle(d, config.placement.drafter_resources) for d in config.worker_drafters
    ]


def check_fits_here(config: ServiceConfig, spec: list[dict], have: dict) -> None:
    """ValueError when the placement group `spec` (`bundles`) asks more of a resource than
    `have`, what the local Ray instance this process started found on this machine: no node
    will join that one, so its placement would wait (10 minutes) for nothing — a GPU asked of
    a machine with none.  Not for a cluster joined, where an autoscaler may add the nodes.  The
    message names the config's fields that ask for it.  GPUs are counted one by one as well:
    a bundle's fraction of a GPU must fit on one GPU beside the others' (three bundles of 0.6
    GPU do not fit two GPUs, though 1.8 < 2)."""
    asked: dict[str, float] = {}
    for bundle in spec:
        for resource, amount in bundle.items():
            asked[resource] = asked.get(resource, 0.0) + amount
    for resource, amount in asked.items():
        found = have.get(resource, 0.0)
        if amount > found + 1e-6:
            raise ValueError(
                f"the config asks {amount:g} {resource} of this machine ({', '.join(_asking(config, resource))}), "
                f"and the local Ray instance rayspec started finds {found:g} on it: ask for what it has "
                f"({'num_gpus: auto takes the GPUs there are' if resource == 'GPU' else 'or less'}), "
                f"or join a cluster that has it (--address)"
            )
    shares = [bundle.get("GPU", 0.0) for bundle in spec]
    if not gpus_fit(shares, int(have.get("GPU", 0))):
        raise ValueError(
            f"the config's GPU shares ({', '.join(_asking(config, 'GPU'))}) fit this machine's "
            f"{int(have.get('GPU', 0))} GPUs in sum but not GPU by GPU: a share of a GPU must fit on one GPU beside "
            f"the others' (Ray places it so); ask for shares that do (num_gpus: auto shares them out), or join a "
            f"cluster that has them (--address)"
        )


def gpus_fit(shares: list[float], gpus: int) -> bool:
    """Whether placement bundles asking `shares` of a GPU each fit `gpus` GPUs as Ray places
    them: a share's whole GPUs are its own, and its fraction shares one GPU with others whose
    fractions add up to 1 at most (in Ray's units of 1/10000).  An exact search, for the few
    bundles of one service: it answers False only where no placement exists."""
    units = 10_000
    scaled = [round(share * units) for share in shares]
    whole = sum(share // units for share in scaled)
    fractions = sorted((share % units for share in scaled if share % units), reverse=True)
    if whole > gpus:
        return False
    free = [units] * (gpus - whole)  # each GPU's room left, in units

    def place(i: int) -> bool:
        if i == len(fractions):
            return True
        tried = set()
        for gpu, room in enumerate(free):
            if room >= fractions[i] and room not in tried:  # GPUs with the same room left are alike
                tried.add(room)
                free[gpu] -= fractions[i]
                if place(i + 1):
                    return True
                free[gpu] += fractions[i]
        return False

    return place(0)


def _asking(config: ServiceConfig, resource: str) -> list[str]:
    """The config's fields that ask `resource` of the placement group, as `field: value`."""
    workers = [("target", config.target, config.placement.target_resources, "target_resources")] + [
        (f"drafters[{i}]", d, config.placement.drafter_resources, "drafter_resources")
        for i, d in enumerate(config.drafters) if d.where == "worker"
    ]
    fields = []
    for name, model, extra, extra_field in workers:
        if resource in extra:
            field = f"placement.{extra_field}.{resource}: {extra[resource]:g}"
            if field not in fields:
                fields.append(field)
        elif resource == "GPU" and model.num_gpus not in ("auto", 0, 0.0):
            fields.append(f"{name}.num_gpus: {model.num_gpus:g}")
        elif resource == "CPU":
            fields.append(f"{name}'s worker: {BUNDLE_CPUS:g} CPU")
    return fields


def placed(group, index: int, max_restarts: int) -> dict:
    """Ray options of a worker actor in bundle `index` of `group`: the GPUs the bundle
    reserved (`bundles` decided them once, for the whole group); restarted up to
    `max_restarts` times when its process dies (-1: always), its calls (`restartable`) waiting
    for it meanwhile."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return dict(
        num_cpus=BUNDLE_CPUS / 2,  # the other half of the bundle: the coordinator
        num_gpus=group.bundle_specs[index].get("GPU", 0),
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        runtime_env=model_runtime_env(),
        **restartable(max_restarts),
    )


def restartable(max_restarts: int) -> dict:
    """Ray options of an actor restarted up to `max_restarts` times (-1: always) whose method
    calls wait out a restart rather than fail: they are all idempotent (where it listens, its
    node, its costs, stop)."""
    return {"max_restarts": max_restarts, "max_task_retries": -1 if max_restarts else 0}


def bind_again(serve, host: str, port: int):
    """`serve(address)` -> (server, bound port), from an actor Ray may restart: at `port` when
    one is configured; else at any free port at the actor's first start, and at a restart at
    the port it had then (`Kept`), so that its address stays what the coordinators dial.  A
    restart whose old port was taken in the meantime binds another, where the coordinators'
    `WorkerWatch` finds it."""
    saved = Kept.of_this_actor("port")
    wanted = port or int((saved.read() if saved is not None else None) or 0)
    try:
        server, bound = serve(host_port(host, wanted))
    except (OSError, RuntimeError) as error:
        if not wanted or port:
            raise
        log.warning("cannot bind port %s again after a restart (%s): serving on another port, where the "
                    "coordinators follow it (`WorkerWatch`)", wanted, error)
        server, bound = serve(host_port(host, 0))
    if not port and saved is not None:
        saved.write(str(bound))
    return server, bound


class Kept:
    """A value an actor keeps for its restarts — its port, its measured costs — in the Ray
    cluster's key-value store (the GCS's, `ray.experimental.internal_kv`, where Ray Serve keeps
    its own state), under its actor id: found again on whichever node Ray restarts it (a file
    would be found on its first node only), and gone with the cluster when an actor killed
    outright could not drop it."""

    NAMESPACE = "rayspec-actors"

    def __init__(self, actor_id: str, name: str):
        self.key = f"{actor_id}/{name}"

    @classmethod
    def of_this_actor(cls, name: str) -> Kept | None:
        """This actor's value `name` (None outside an actor)."""
        actor = ray.get_runtime_context().get_actor_id()
        return None if actor is None else cls(actor, name)

    def read(self) -> str | None:
        """The value kept, None when none is, or the store does not answer (logged: the actor
        then starts as at its first start)."""
        from ray.experimental import internal_kv

        try:
            value = internal_kv._internal_kv_get(self.key, namespace=self.NAMESPACE)
        except Exception as error:  # noqa: BLE001 — Ray's RPC errors vary by version; what is kept is a convenience
            log.warning("cannot read %s: %s", self, error)
            return None
        return None if value is None else value.decode()

    def write(self, text: str) -> None:
        """Keep `text`; a store that does not answer is logged (a restart then starts afresh)."""
        from ray.experimental import internal_kv

        try:
            internal_kv._internal_kv_put(self.key, text, overwrite=True, namespace=self.NAMESPACE)
        except Exception as error:  # noqa: BLE001 — as in `read`
            log.warning("cannot keep %s: %s", self, error)

    def __str__(self) -> str:
        return f"the cluster's key-value store ({self.NAMESPACE}: {self.key})"


class KeptCosts(Kept):
    """The step costs a coordinator actor measured (the engine's `kept_costs`), so that a
    restart — on any node — plans the sequoia:auto trees it planned before, and those the HTTP
    coordinator, given them, plans."""

    def __init__(self, actor_id: str):
        super().__init__(actor_id, "costs")

    def load(self):
        from rayspec.engine.calibrate import Costs

        text = self.read()
        return None if text is None else Costs.from_json(json.loads(text))

    def save(self, costs) -> None:
        self.write(json.dumps(costs.to_json()))


def forget_kept() -> None:
    """Drop what this actor kept for its restarts, as it stops for good.  Best effort: an
    actor stopping as its cluster goes down finds no store to drop them from, nor a need."""
    from ray.experimental import internal_kv

    actor = ray.get_runtime_context().get_actor_id()
    if actor is None:
        return
    try:
        internal_kv._internal_kv_del(f"{actor}/", del_by_prefix=True, namespace=Kept.NAMESPACE)
    except Exception as error:  # noqa: BLE001 — see the docstring
        log.info("what actor %s kept for its restarts was not dropped: %s", actor, error)


def kept_keys() -> set[bytes]:
    """The keys of what every actor of the cluster keeps for its restarts (tests check that
    a stopped service leaves none)."""
    from ray.experimental import internal_kv

    return set(internal_kv._internal_kv_list("", namespace=Kept.NAMESPACE))


def model_runtime_env() -> dict:
    """The runtime environment of a process that computes with a model: idle OpenMP threads
    of one spinning would steal the core another computes on (as for plain-process workers);
    the driver's own setting wins."""
    return {"env_vars": {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}}


def service_name() -> str:
    """A name for one service's placement group and actors, unique in the cluster, so that a
    service started again never meets the actors of one still stopping.  Its HTTP app is not
    so named: a cluster serves one rayspec HTTP app (`rayspec.cluster.launch.APP`, at "/"),
    and a second service started on it replaces the first one's."""
    return f"rayspec-{uuid.uuid4().hex[:8]}"


def worker_actor_names(service: str, drafters: int) -> list[str]:
    """Names for `service`'s target and drafter `WorkerActor`s, in that order."""
    return [f"{service}-target", *(f"{service}-drafter-{i}" for i in range(drafters))]


class ServiceStartError(RuntimeError):
    """A part of the service could not start; the message says which, and why, in a line."""


def started(actors: list, parts: list[str], timeout: float) -> list[str]:
    """The addresses of actors just created (their `ready` replies), or a `ServiceStartError`
    naming the first of `parts` that did not start and the error its constructor raised: one
    line, not Ray's three tracebacks of it.  `ready` is not retried here: an actor whose
    constructor failed is not restarted, and Ray would log every retry of the call."""
    deadline = time.monotonic() + timeout
    calls = [actor.ready.options(max_task_retries=0).remote() for actor in actors]
    addresses = []
    for call, part in zip(calls, parts):
        try:
            addresses.append(ray.get(call, timeout=max(deadline - time.monotonic(), 0.0)))
        except ray.exceptions.GetTimeoutError:
            raise ServiceStartError(f"the {part} did not start within {timeout:g} s") from None
        except ray.exceptions.RayActorError as error:
            raise ServiceStartError(f"the {part} could not start: {why_not_started(error)}") from None
    return addresses


def wait_for_group(group, spec: list[dict], strategy: str, timeout: float, notice_after: float = 10.0) -> None:
    """Wait until the placement group's bundles are placed.  After `notice_after` seconds, say
    on stderr what it waits for (a cluster may be adding nodes, or may lack them for good:
    a GPU asked of a machine with none); at `timeout`, a `ServiceStartError` saying what the
    cluster has."""
    ready = group.ready()
    wanted = f"bundles {spec} ({strategy})"
    try:
        ray.get(ready, timeout=min(notice_after, timeout))
        return
    except ray.exceptions.GetTimeoutError:
        pass
    print(f"rayspec: waiting for the cluster to place {wanted}; it has {_resources()} (Ctrl-C stops)",
          file=sys.stderr, flush=True)
    try:
        ray.get(ready, timeout=max(timeout - notice_after, 0.0))
    except ray.exceptions.GetTimeoutError:
        raise ServiceStartError(f"the cluster did not place {wanted} within {timeout:g} s; it has "
                                f"{_resources()}") from None


def _resources() -> str:
    nodes = sum(1 for node in ray.nodes() if node["Alive"])
    # less Ray's own entries: memory, node ids, and the bundles of placement groups
    total = {name: amount for name, amount in sorted(ray.cluster_resources().items())
             if not ("memory" in name or name.startswith(("node:", "accelerator_type:")) or "group" in name)}
    return f"{total} on {nodes} node(s)"


def why_not_started(error: Exception) -> str:
    """The line of a Ray error that says what went wrong: the exception a remote call raised,
    or for an actor whose constructor raised, that one (the last line of the remote traceback
    Ray quotes)."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, Exception):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(getattr(error, "error_msg", None) or error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[-1] if getattr(error, "actor_init_failed", False) else lines[0]


def start_drafters(config: ServiceConfig, group, timeout: float,
                   names: list[str] | None = None) -> tuple[list, list[str]]:
    """A `WorkerActor` per `where: worker` drafter, in bundles 1.. of `group`, named `names`
    when given; (actors, addresses), or a `ServiceStartError`."""
    actors = [
        WorkerActor.options(**placed(group, i + 1, config.placement.max_restarts),
                            **({"name": names[i]} if names else {})).remote("drafter", vars(d))
        for i, d in enumerate(config.worker_drafters)
    ]
    return actors, started(actors, [f"drafter worker {i}" for i in range(len(actors))], timeout)


def serve_generation_api(service, config: ServiceConfig) -> tuple:
    """The `rayspec.v1.Generation` gRPC server over `service`'s engine, from an actor (at its
    port of before if Ray restarted it: `bind_again`); (server, address)."""
    server, port = bind_again(service.serve_generation_api, config.grpc.host, config.grpc.port)
    return server, advertised_address(config.grpc.host, port)


def advertised_address(host: str, port: int) -> str:
    """Where clients reach a server bound on `host`: the node's IP for the wildcard hosts
    (what `rayspec serve` prints must be an address another machine can dial)."""
    if host in ("0.0.0.0", "::", "[::]"):
        return _node_address(port)
    return host_port(host, port)


def _node_address(port: int) -> str:
    return host_port(ray.util.get_node_ip_address(), port)


class WorkerWatch:
    """Follows the worker actors a coordinator's `service` dials: one that Ray restarted at
    another address — its node was lost and its bundle placed on another, or its old port was
    taken — is dialled there (`Service.move_worker`) within `PERIOD` seconds of its restart.
    `actors`: address -> the worker actor listening there at first."""

    PERIOD = 1.0  # one small actor call per worker per period

    def __init__(self, service, actors: dict):
        self.service, self.actors = service, dict(actors)
        self._asked: dict = {}  # address -> the unanswered question to its actor (restarting, or unplaceable)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rayspec-worker-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD):
            self.check()

    def check(self) -> None:
        """Ask each worker actor where it listens; follow those that moved."""
        for address, actor in list(self.actors.items()):
            # An actor that cannot be placed queues what it is asked: the question still
            # unanswered is waited for again, rather than a new one added every period.
            asked = self._asked.pop(address, None) or actor.ready.remote()
            answered, _ = ray.wait([asked], timeout=self.PERIOD)
            if not answered:
                self._asked[address] = asked
                continue
            try:
                now = ray.get(asked)
            except Exception:  # noqa: BLE001 — it failed while restarting (asked again next time), or is gone
                continue
            if now != address:
                log.warning("worker %s now listens at %s: dialling it there", address, now)
                self.service.move_worker(address, now)
                self.actors[now] = self.actors.pop(address)

    def stop(self) -> None:
        self._stop.set()


def addresses_of(actors: list, timeout: float = 600.0) -> list[str]:
    """Where `WorkerActor`s listen now."""
    return ray.get([actor.ready.remote() for actor in actors], timeout=timeout)


def watch_workers(service, addresses: list[str], actors: list | None) -> WorkerWatch | None:
    """A `WorkerWatch` over the worker actors listening at `addresses`, whose handles
    `service` holds (None: no actors)."""
    return WorkerWatch(service, dict(zip(addresses, actors, strict=True))) if actors else None


class _Placed:
    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    def gpu_ids(self) -> list:
        """The GPUs Ray assigned this actor (its CUDA_VISIBLE_DEVICES)."""
        return ray.get_gpu_ids()


@ray.remote
class WorkerActor(_Placed):
    """A target or drafter gRPC worker (`rayspec.v1.TargetService` / `DrafterService`)."""

    def __init__(self, role: str, model: dict, model_id: str = "target"):
        from rayspec.demo import DRAFTER_PATH, TARGET_PATH
        from rayspec.rpc.worker import serve_drafter, serve_target

        self.role = role
        config = TargetConfig(**model) if role == "target" else DrafterConfig(**model)
        handle = config.local(TARGET_PATH if role == "target" else DRAFTER_PATH)
        if role == "target":
            self.server, port = bind_again(lambda address: serve_target(handle, address, model_id=model_id), "0.0.0.0", 0)
        else:
            self.server, port = bind_again(lambda address: serve_drafter(handle, address), "0.0.0.0", 0)
        self.address = advertised_address("0.0.0.0", port)

    def ready(self) -> str:
        return self.address

    def stop(self) -> None:
        forget_kept()
        self.server.stop(grace=1).wait()


@ray.remote
class GenerationActor(_Placed):
    """The `rayspec.v1.Generation` gRPC coordinator: the engine over the workers' handles."""

    def __init__(self, config: dict, target_address: str, drafter_addresses: list[str],
                 worker_names: list[str] | None = None):
        """worker_names: the names of the target's and the drafters' `WorkerActor`s, in that
        order, which it follows (`WorkerWatch`); their addresses are asked afresh (this actor
        may be restarted after they moved).  Names, not handles: Ray keeps a restartable
        actor's handle arguments in its object store, from where a restart may find them gone."""
        from rayspec.serve.service import Service

        config = ServiceConfig.from_dict(config)
        worker_actors = [ray.get_actor(name) for name in worker_names or ()]
        if worker_actors:
            target_address, *drafter_addresses = addresses_of(worker_actors)
        actor_id = ray.get_runtime_context().get_actor_id()
        self.service = Service.from_config(config, target_address, drafter_addresses, kept_costs=KeptCosts(actor_id))
        self.watch = watch_workers(self.service, [target_address, *drafter_addresses], worker_actors)
        self.server, self.address = serve_generation_api(self.service, config)

    def ready(self) -> str:
        return self.address

    def workers(self) -> list[str]:
        """The workers it dials, as "target host:port" / "drafter host:port" (the names HTTP
        /health lists): where its `WorkerWatch` last found them."""
        return list(self.service.workers)

    def costs(self, measure: bool = False) -> dict | None:
        """The step costs its engine plans sequoia:auto trees from (`Costs.to_json`), which the
        HTTP coordinator plans from too: measured at start-up when the service's tree is
        sequoia:auto, else when a request first names it, or now if `measure` (None until then)."""
        if measure:
            self.service.engine.costs()
        return self.service.measured_costs()

    def metrics(self) -> bytes:
        """Its Prometheus text: the HTTP app's `/metrics` adds it to the replica's own
        (`rayspec.serve.metrics.Metrics.add_coordinator`)."""
        return self.service.metrics.exposition()

    def shut_down(self) -> None:
        """End the generations in flight with UNAVAILABLE, and refuse new ones, as the service
        stops (`rayspec.serve.service.Service.shut_down`)."""
        self.service.shut_down()

    def stop(self) -> None:
        self.shut_down()  # before the server's grace: its streams end with a status, not cut
        forget_kept()
        if self.watch is not None:
            self.watch.stop()
        self.server.stop(grace=1).wait()
