"""The Ray Serve application: the coordinator as the HTTP ingress deployment.

    app = build_serve_app(config, target_address, drafter_addresses)
    serve.start(http_options={"host": config.http.host, "port": config.http.port})
    serve.run(app, name="rayspec", route_prefix="/")

The replica builds its `Service` (gRPC handles to the workers, the tokenizer, the metrics)
in its constructor, and Serve then asks it for its ASGI app through the late-bound ingress
hook `__serve_build_asgi_app__`: the FastAPI app of `rayspec.serve.http.create_app` is made
inside the replica around that live service, so nothing unpicklable (channels, locks, the
app's closures) travels from the driver.  Serve's proxy passes the app's streaming responses
through as they are produced: each verification step reaches the client as an SSE event.

Placement: `node_id` pins the replica to one node (the target's, as `rayspec serve` does)
through Ray's node-id label, so the coordinator sits next to the target on a cluster of
several nodes; without it Serve may start the replica on any node, the head included.

Concurrency: the app answers 429 itself beyond `limits.max_concurrent_requests`
generations, so the replica must be allowed a few more ongoing requests than that (health,
metrics and the 429 answers themselves); past those Serve queues at most
`max_concurrent_requests` more requests and answers 503 to the rest.
"""

from __future__ import annotations

from ray import serve

from rayspec.serve.config import ServiceConfig

HEADROOM = 16  # ongoing requests beyond the generations: /health, /metrics, /v1/models, 429 answers


@serve.ingress()
class Coordinator:
    """The Serve replica: a `Service` over the workers, served by the OpenAI-compatible app."""

    def __init__(self, config: ServiceConfig, target_address: str, drafter_addresses: list[str]):
        from rayspec.serve.service import Service

        self.service = Service.from_config(config, target_address, drafter_addresses)

    def node_id(self) -> str:
        """The Ray node this replica runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def __serve_build_asgi_app__(self):
        from rayspec.serve.http import create_app

        return create_app(self.service)

    def __del__(self):
        if hasattr(self, "service"):  # not when the constructor failed
            self.service.close()


def build_serve_app(config: ServiceConfig, target_address: str, drafter_addresses: list[str],
                    node_id: str | None = None) -> serve.Application:
    """The Serve application of one coordinator replica over running workers, on the node
    `node_id` when one is given."""
    limit = config.limits.max_concurrent_requests
    deployment = serve.deployment(
        Coordinator,
        name="rayspec-coordinator",
        num_replicas=1,
        ray_actor_options=coordinator_actor_options(node_id),
        max_ongoing_requests=limit + HEADROOM,
        max_queued_requests=limit,
    )
    return deployment.bind(config, target_address, list(drafter_addresses))


def coordinator_actor_options(node_id: str | None) -> dict:
    """Ray options of the coordinator replica: no CPU reserved (it waits on the workers; it
    fits a 2-core machine), and pinned to `node_id` when one is given."""
    from ray.util.placement_group import NODE_ID_LABEL_KEY

    options = {"num_cpus": 0}
    if node_id is not None:
        options["label_selector"] = {NODE_ID_LABEL_KEY: node_id}
    return options
