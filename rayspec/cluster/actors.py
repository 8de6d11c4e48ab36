"""Ray actors hosting the gRPC workers and the gRPC coordinator.

Each actor runs the same server the plain processes of `rayspec.rpc.worker` run, bound on
all interfaces of its node and advertised at the node's IP, so drafter, target and
coordinator talk gRPC whether Ray placed them on one node or several.
"""

from __future__ import annotations

import os

import ray

from rayspec.serve.config import DrafterConfig, ServiceConfig, TargetConfig

# Per worker bundle: a CPU share small enough that target, drafter and coordinator fit a
# 2-core laptop; GPUs come from the model configs.
BUNDLE_CPUS = 0.5


def model_gpus(model, cluster_gpus: float) -> float:
    if model.num_gpus == "auto":
        return 1.0 if cluster_gpus >= 1 else 0.0
    return float(model.num_gpus)


def bundles(config: ServiceConfig, cluster_gpus: float) -> list[dict]:
    """The placement group's bundles: the target's first, then one per `where: worker` drafter."""
    def bundle(model, extra):
        b = {"CPU": BUNDLE_CPUS, **extra}
        if model_gpus(model, cluster_gpus):
            b["GPU"] = model_gpus(model, cluster_gpus)
        return b

    return [bundle(config.target, config.placement.target_resources)] + [
        bundle(d, config.placement.drafter_resources) for d in config.worker_drafters
    ]


def placed(group, index: int) -> dict:
    """Ray options of a worker actor in bundle `index` of `group`: the GPUs the bundle
    reserved (`bundles` decided them once, for the whole group)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return dict(
        num_cpus=BUNDLE_CPUS / 2,  # the other half of the bundle: the coordinator
        num_gpus=group.bundle_specs[index].get("GPU", 0),
        scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        runtime_env=model_runtime_env(),
    )


def model_runtime_env() -> dict:
    """The runtime environment of a process that computes with a model: idle OpenMP threads
    of one spinning would steal the core another computes on (as for plain-process workers);
    the driver's own setting wins."""
    return {"env_vars": {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}}


def start_drafters(config: ServiceConfig, group, timeout: float) -> tuple[list, list[str]]:
    """A `WorkerActor` per `where: worker` drafter, in bundles 1.. of `group`; (actors, addresses)."""
    actors = [
        WorkerActor.options(**placed(group, i + 1)).remote("drafter", vars(d))
        for i, d in enumerate(config.worker_drafters)
    ]
    return actors, ray.get([a.ready.remote() for a in actors], timeout=timeout)


def serve_generation_api(service, config: ServiceConfig) -> tuple:
    """The `rayspec.v1.Generation` gRPC server over `service`'s engine; (server, address)."""
    from rayspec.rpc.coordinator import serve_generation

    server, port = serve_generation(
        service.engine, service.tokenizer, f"{config.grpc.host}:{config.grpc.port}", service.request_limits,
        max_concurrent_requests=config.limits.max_concurrent_requests, api_key=service.api_key,
    )
    return server, advertised_address(config.grpc.host, port)


def advertised_address(host: str, port: int) -> str:
    """Where clients reach a server bound on `host`: the node's IP for the wildcard hosts
    (what `rayspec serve` prints must be an address another machine can dial)."""
    if host in ("0.0.0.0", "::", "[::]"):
        return _node_address(port)
    return f"{host}:{port}"


def _node_address(port: int) -> str:
    return f"{ray.util.get_node_ip_address()}:{port}"


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
            self.server, port = serve_target(handle, "0.0.0.0:0", model_id=model_id)
        else:
            self.server, port = serve_drafter(handle, "0.0.0.0:0")
        self.address = advertised_address("0.0.0.0", port)

    def ready(self) -> str:
        return self.address

    def stop(self) -> None:
        self.server.stop(grace=1).wait()


@ray.remote
class GenerationActor(_Placed):
    """The `rayspec.v1.Generation` gRPC coordinator: the engine over the workers' handles."""

    def __init__(self, config: dict, target_address: str, drafter_addresses: list[str]):
        from rayspec.serve.service import Service

        config = ServiceConfig.from_dict(config)
        self.service = Service.from_config(config, target_address, drafter_addresses)
        self.server, self.address = serve_generation_api(self.service, config)

    def ready(self) -> str:
        return self.address

    def costs(self, measure: bool = False) -> dict | None:
        """The step costs its engine plans sequoia:auto trees from (`Costs.to_json`), which the
        HTTP coordinator plans from too: measured at start-up when the service's tree is
        sequoia:auto, else when a request first names it, or now if `measure` (None until then)."""
        if measure:
            self.service.engine.costs()
        return self.service.measured_costs()

    def stop(self) -> None:
        self.server.stop(grace=1).wait()
