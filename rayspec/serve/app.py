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

Placement: with the target `where: coordinator` (no target address), the replica hosts the
target: Serve makes the placement group `placement_group` for it, the replica runs in its
first bundle (reserving the target's GPU), loads the target, starts the drafter workers in
the other bundles and also serves the `rayspec.v1.Generation` gRPC API over the same engine.
Otherwise `node_id` pins the replica to one node (the target's, as `rayspec serve` does)
through Ray's node-id label, so the coordinator sits next to the target on a cluster of
several nodes; without it Serve may start the replica on any node, the head included.

Concurrency: the app runs `limits.max_concurrent_requests` generations, queues up to
`limits.max_queued_requests` more requests itself (first come, first served: a request's `n`
choices start together) and answers 429 beyond those.  Its queue must be reached, so the
replica is allowed max_concurrent_requests + max_queued_requests + HEADROOM ongoing requests
(`replica_request_limits`): the queued ones are ongoing to Serve, and the headroom keeps
/health, /metrics and the 429 answers themselves from waiting behind them.  Serve's own queue
is as long again: Serve counts in it every request not yet handed to the replica, those that
arrive together included, so a queue shorter than the replica's room answers 503 to a burst the
replica would take (`max_queued_requests` of 4 dropped 11 of 16 users arriving at once, under
locust).  Past both, Serve answers 503.
"""

from __future__ import annotations

import logging

from ray import serve

from rayspec.serve.config import ServiceConfig

log = logging.getLogger("rayspec.serve")

START_TIMEOUT = 600.0  # drafter workers loading their models
HEADROOM = 16  # ongoing requests beyond the generations and the queue: /health, /metrics, /v1/models, 429s
OTHER_METRICS_TIMEOUT = 2.0  # a scrape waits this long for the gRPC coordinator's metrics


@serve.ingress()
class Coordinator:
    """The Serve replica: a `Service` over the workers, served by the OpenAI-compatible app;
    with no target address, the target's host as well (see the module doc)."""

    def __init__(self, config: ServiceConfig, target_address: str | None, drafter_addresses: list[str],
                 costs_from=None, worker_actors=None):
        """costs_from: the gRPC coordinator (a `GenerationActor` handle), whose measured step
        costs sequoia:auto trees are planned from here too — whether the service's tree or a
        request names it — so that a seed gives the same tokens through either API.
        worker_actors: the target's and the drafters' `WorkerActor`s, in that order, which the
        replica follows when Ray restarts one at another address (`WorkerWatch`)."""
        import ray

        from rayspec.cluster.actors import addresses_of, serve_generation_api, start_drafters, watch_workers
        from rayspec.engine.calibrate import Costs
        from rayspec.serve.service import Service

        # the drafter actors' handles are held: Ray kills an actor once its last handle goes
        self.drafters, self.generation, self._grpc_address = [], None, None
        if target_address is not None:
            self.costs_from = costs_from  # held as well

            def grpc_coordinators_costs():
                return Costs.from_json(ray.get(costs_from.costs.remote(measure=True)))

            if worker_actors:  # where they listen now: a replica started again may come after a move
                target_address, *drafter_addresses = addresses_of(worker_actors)
            self.service = Service.from_config(config, target_address, drafter_addresses,
                                               costs=None if costs_from is None else grpc_coordinators_costs)
            if costs_from is not None:  # /metrics counts the gRPC API's generations too
                self.service.metrics.add_coordinator(
                    lambda: ray.get(costs_from.metrics.remote(), timeout=OTHER_METRICS_TIMEOUT))
            self.watch = watch_workers(self.service, [target_address, *drafter_addresses], worker_actors)
            # here only: the gRPC coordinator's exposition, added to this one's, leaves them out
            self.service.metrics.watch_workers(self.service.worker_infos)
            return
        from rayspec.demo import TARGET_PATH

        group = ray.util.get_current_placement_group()
        self.drafters, addresses = start_drafters(config, group, START_TIMEOUT)
        target = config.target.local(TARGET_PATH)
        self.service = Service.from_config(config, target, addresses)
        self.watch = watch_workers(self.service, addresses, self.drafters)
        self.service.metrics.watch_workers(self.service.worker_infos)  # the drafter workers, and the target here
        self.generation, self._grpc_address = serve_generation_api(self.service, config)

    def costs(self) -> dict | None:
        """The step costs this replica's engine plans sequoia:auto trees from (None: none yet)."""
        return self.service.measured_costs()

    def grpc_address(self) -> str | None:
        """Where this replica serves the Generation API (None: a `GenerationActor` does)."""
        return self._grpc_address

    def node_id(self) -> str:
        """The Ray node this replica runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def drafter_nodes(self) -> list[str]:
        """The Ray nodes of the drafter workers this replica started (none over running workers)."""
        import ray

        return ray.get([d.node_id.remote() for d in self.drafters])

    def gpu_ids(self) -> list:
        """The GPUs Ray assigned this replica (the target's, when it hosts the target)."""
        import ray

        return ray.get_gpu_ids()

    def drafter_gpu_ids(self) -> list[list]:
        """The GPUs of each drafter worker this replica started."""
        import ray

        return ray.get([d.gpu_ids.remote() for d in self.drafters])

    def shut_down(self) -> None:
        """End the generations in flight, HTTP (a 503, or a stream's error event) and gRPC
        (UNAVAILABLE), and refuse new ones: the service is stopping.  Asked by
        `rayspec.cluster.launch.Service.stop` before it deletes the application — Serve tells a
        replica nothing as it starts draining it, and would let its streams run through its
        grace (20 s) and then cut them without a word."""
        self.service.shut_down()

    def __serve_build_asgi_app__(self):
        from rayspec.serve.http import create_app

        return create_app(self.service, answer_request_ids=False)  # Ray Serve's proxy answers X-Request-Id

    def __del__(self):
        import ray

        from rayspec.cluster.actors import forget_kept

        if hasattr(self, "service"):  # what Serve's drain left (the application deleted otherwise) ends now
            self.service.shut_down()
        if getattr(self, "watch", None) is not None:
            self.watch.stop()
        if getattr(self, "generation", None) is not None:
            self.generation.stop(grace=1)
            forget_kept()  # its port: a replica Serve starts again is another actor
        if getattr(self, "drafters", None):  # those it started die with it: let them stop first
            try:
                ray.get([drafter.stop.remote() for drafter in self.drafters], timeout=10)
            except Exception as error:  # noqa: BLE001 — shutting down: what is not stopped is killed
                log.warning("the drafter workers did not stop: %s", error)
        if hasattr(self, "service"):  # not when the constructor failed
            self.service.close()


def build_serve_app(config: ServiceConfig, target_address: str | None, drafter_addresses: list[str],
                    node_id: str | None = None, placement_group: tuple[list[dict], str] | None = None,
                    costs_from=None, worker_actors=None) -> serve.Application:
    """The Serve application of one coordinator replica: over running workers, on the node
    `node_id` when one is given, planning from the step costs the gRPC coordinator
    `costs_from` (a `GenerationActor` handle) measures, when given, and following the
    `worker_actors` (target's, then drafters') when Ray restarts one elsewhere; or, with no
    `target_address`, hosting the target in the placement group `placement_group` =
    (bundles, strategy), the target's bundle first."""
    options = {"ray_actor_options": coordinator_actor_options(node_id)}
    if target_address is None:
        if placement_group is None:
            raise ValueError("a replica hosting the target needs its placement group's bundles")
        from rayspec.cluster.actors import model_runtime_env

        spec, strategy = placement_group
        target_bundle = spec[0]
        options = {
            # within the target's bundle, as a target worker would be (a subset of it)
            "ray_actor_options": {"num_cpus": target_bundle["CPU"] / 2, "num_gpus": target_bundle.get("GPU", 0),
                                  "runtime_env": model_runtime_env()},
            "placement_group_bundles": spec,
            "placement_group_strategy": strategy,
        }
    deployment = serve.deployment(
        Coordinator,
        name="rayspec-coordinator",
        num_replicas=1,
        **replica_request_limits(config.limits),
        # A constructor that fails at the start fails again (a missing checkpoint, a worker
        # refusing the session): Serve's three tries only tripled the wait for its message.
        # Once a replica has started, Serve replaces one that dies whatever this says.
        max_constructor_retry_count=1,
        **options,
    )
    return deployment.bind(config, target_address, list(drafter_addresses), costs_from, worker_actors)


def replica_request_limits(limits) -> dict:
    """Serve's `max_ongoing_requests` and `max_queued_requests` of the replica serving
    `limits` (`LimitsConfig`): as ongoing requests, the generations that run, the requests the
    app queues for them, and HEADROOM for the rest; Serve's own queue as long, so that a burst
    the replica has room for passes it (see the module doc)."""
    ongoing = limits.max_concurrent_requests + limits.max_queued_requests + HEADROOM
    return {"max_ongoing_requests": ongoing, "max_queued_requests": ongoing}


def coordinator_actor_options(node_id: str | None) -> dict:
    """Ray options of the coordinator replica: no CPU reserved (it waits on the workers; it
    fits a 2-core machine), and pinned to `node_id` when one is given."""
    from ray.util.placement_group import NODE_ID_LABEL_KEY

    options = {"num_cpus": 0}
    if node_id is not None:
        options["label_selector"] = {NODE_ID_LABEL_KEY: node_id}
    return options
