"""Ray actors hosting the gRPC workers and the gRPC coordinator.

Each actor runs the same server the plain processes of `rayspec.rpc.worker` run, bound on
all interfaces of its node and advertised at the node's IP, so drafter, target and
coordinator talk gRPC whether Ray placed them on one node or several.
"""

from __future__ import annotations

import ray

from rayspec.serve.config import DrafterConfig, ModelConfig, ServiceConfig


def _node_address(port: int) -> str:
    return f"{ray.util.get_node_ip_address()}:{port}"


class _Placed:
    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()


@ray.remote
class WorkerActor(_Placed):
    """A target or drafter gRPC worker (`rayspec.v1.TargetService` / `DrafterService`)."""

    def __init__(self, role: str, model: dict, model_id: str = "target"):
        from rayspec.demo import DRAFTER_PATH, TARGET_PATH
        from rayspec.engine.local import LocalDrafter, LocalTarget
        from rayspec.rpc.worker import serve_drafter, serve_target

        self.role = role
        config = ModelConfig(**model) if role == "target" else DrafterConfig(**model)
        loaded, _ = config.load(TARGET_PATH if role == "target" else DRAFTER_PATH)
        if role == "target":
            self.server, port = serve_target(LocalTarget(loaded), "0.0.0.0:0", model_id=model_id)
        else:
            self.server, port = serve_drafter(LocalDrafter(loaded), "0.0.0.0:0")
        self.address = _node_address(port)

    def ready(self) -> str:
        return self.address

    def stop(self) -> None:
        self.server.stop(grace=1).wait()


@ray.remote
class GenerationActor(_Placed):
    """The `rayspec.v1.Generation` gRPC coordinator: the engine over the workers' handles."""

    def __init__(self, config: dict, target_address: str, drafter_addresses: list[str]):
        from rayspec.rpc.coordinator import serve_generation
        from rayspec.serve.service import Service

        config = ServiceConfig.from_dict(config)
        service = Service.from_config(config, target_address, drafter_addresses)
        self.server, port = serve_generation(
            service.engine, service.tokenizer, f"{config.grpc.host}:{config.grpc.port}", service.request_limits,
            max_concurrent_requests=config.limits.max_concurrent_requests,
        )
        self.address = f"{config.grpc.host}:{port}"

    def ready(self) -> str:
        return self.address

    def stop(self) -> None:
        self.server.stop(grace=1).wait()
