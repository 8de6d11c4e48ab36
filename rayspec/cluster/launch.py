"""Start the whole service on a Ray cluster (a local one by default).

    rayspec serve [config.yaml] [--address auto]

1. a placement group with one bundle for the target and one per `where: worker` drafter
   (PACK: one node if it fits; STRICT_SPREAD: drafter and target on distinct nodes);
2. a `WorkerActor` per bundle serving gRPC (target, drafters);
3. the coordinator, twice over the same workers: the Ray Serve HTTP app (OpenAI-compatible)
   and a `GenerationActor` serving the `rayspec.v1.Generation` gRPC API.  Both run on the
   target's node (the actor in the target's bundle, the Serve replica pinned to that node),
   so the drafter's q rows cross the network once, drafter to target node, and the target's
   rows never do.
"""

from __future__ import annotations

import os
import signal
import threading

from rayspec.serve.config import ServiceConfig

# Per worker bundle: a CPU share small enough that target, drafter and coordinator fit a
# 2-core laptop; GPUs come from the model configs.
_BUNDLE_CPUS = 0.5


def _gpus(model, cluster_gpus: float) -> float:
    if model.num_gpus == "auto":
        return 1.0 if cluster_gpus >= 1 else 0.0
    return float(model.num_gpus)


def bundles(config: ServiceConfig, cluster_gpus: float) -> list[dict]:
    def bundle(model, extra):
        b = {"CPU": _BUNDLE_CPUS, **extra}
        if _gpus(model, cluster_gpus):
            b["GPU"] = _gpus(model, cluster_gpus)
        return b

    return [bundle(config.target, config.placement.target_resources)] + [
        bundle(d, config.placement.drafter_resources) for d in config.worker_drafters
    ]


class Service:
    """A running service: its actors, placement group and Serve application."""

    def __init__(self, config: ServiceConfig, ray_address: str | None = None, start_timeout: float = 600.0):
        import ray
        from ray import serve
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from rayspec.cluster.actors import GenerationActor, WorkerActor
        from rayspec.serve.app import build_serve_app

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        if not ray.is_initialized():
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
        self.config = config
        gpus = ray.cluster_resources().get("GPU", 0)
        nodes = [n for n in ray.nodes() if n["Alive"]]
        spec = bundles(config, gpus)
        if config.placement.strategy == "STRICT_SPREAD" and len(nodes) < len(spec):
            raise ValueError(
                f"STRICT_SPREAD needs {len(spec)} nodes (a target and {len(spec) - 1} drafter(s)), "
                f"the cluster has {len(nodes)}; use PACK on one node"
            )
        self.group = placement_group(spec, strategy=config.placement.strategy, name="rayspec")
        ray.get(self.group.ready(), timeout=start_timeout)

        def placed(index: int, model):
            return dict(
                num_cpus=_BUNDLE_CPUS / 2,  # the other half of the bundle: the coordinator
                num_gpus=_gpus(model, gpus),
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index),
                # idle OpenMP threads of one worker spinning would steal the core another computes
                # on (as for plain-process workers); the driver's own setting wins
                runtime_env={"env_vars": {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}},
            )

        self.target = WorkerActor.options(**placed(0, config.target)).remote("target", vars(config.target), config.model_id)
        self.drafters = [
            WorkerActor.options(**placed(i + 1, d)).remote("drafter", vars(d))
            for i, d in enumerate(config.worker_drafters)
        ]
        self.target_address = ray.get(self.target.ready.remote(), timeout=start_timeout)
        self.drafter_addresses = ray.get([d.ready.remote() for d in self.drafters], timeout=start_timeout)

        coordinator = dict(
            num_cpus=_BUNDLE_CPUS / 4,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=0),
        )
        self.generation = GenerationActor.options(**coordinator).remote(
            config.to_dict(), self.target_address, self.drafter_addresses
        )
        self.grpc_address = ray.get(self.generation.ready.remote(), timeout=start_timeout)
        # Serve places its replicas itself: the target's node is named, not its bundle
        self.target_node = placement_group_table(self.group)["bundles_to_node_id"][0]
        serve.start(http_options={"host": config.http.host, "port": config.http.port})
        serve.run(
            build_serve_app(config, self.target_address, self.drafter_addresses, node_id=self.target_node),
            name="rayspec", route_prefix="/",
        )
        self.http_address = f"http://{config.http.host}:{config.http.port}"

    def stop(self) -> None:
        import ray
        from ray import serve
        from ray.util.placement_group import remove_placement_group

        serve.shutdown()
        for actor in [self.generation, self.target, *self.drafters]:
            try:
                ray.get(actor.stop.remote(), timeout=10)
            except Exception:  # noqa: BLE001 — stopping best-effort; the actor is killed next
                pass
            ray.kill(actor)
        remove_placement_group(self.group)


def serve_forever(config: ServiceConfig, ray_address: str | None = None) -> int:
    """Start the service, print where it listens, and run until Ctrl-C or SIGTERM."""
    import ray

    service = Service(config, ray_address)
    http, model = service.http_address, config.model_id
    print(
        f"rayspec is ready: HTTP {http} (OpenAI API), gRPC {service.grpc_address} (rayspec.v1.Generation)\n"
        f"  try: curl {http}/v1/completions -H 'Content-Type: application/json' "
        f"-d '{{\"model\": \"{model}\", \"prompt\": \"def fibonacci(n):\", \"max_tokens\": 48, \"temperature\": 0.6}}'\n"
        f"  Ctrl-C stops it.",
        flush=True,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    print("stopping rayspec ...", flush=True)
    service.stop()
    ray.shutdown()
    return 0
