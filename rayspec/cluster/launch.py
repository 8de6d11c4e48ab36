"""Start the whole service on a Ray cluster (a local one by default).

    rayspec serve [config.yaml] [--address auto]

With the target `where: worker` (the default):

1. a placement group with one bundle for the target and one per `where: worker` drafter
   (PACK: one node if it fits; STRICT_SPREAD: drafter and target on distinct nodes);
2. a `WorkerActor` per bundle serving gRPC (target, drafters);
3. the coordinator, twice over the same workers: the Ray Serve HTTP app (OpenAI-compatible)
   and a `GenerationActor` serving the `rayspec.v1.Generation` gRPC API.  Both run on the
   target's node (the actor in the target's bundle, the Serve replica pinned to that node),
   so the drafter's q rows cross the network once, drafter to target node, and the target's
   rows never do.

With the target `where: coordinator`, the Serve replica owns the same placement group
(Serve makes it for the replica, which runs in the target's bundle), loads the target, starts
the drafter workers in the other bundles and serves the Generation API itself: one process,
one coordinator, and a step makes one call, to the drafter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket

from rayspec.cluster.actors import (
    BUNDLE_CPUS, GenerationActor, ServiceStartError, WorkerActor, advertised_address, bundles, check_fits_here, placed,
    restartable, start_drafters, service_name, started, wait_for_group, why_not_started, worker_actor_names,
)
from rayspec.rpc.process import StopSignals
from rayspec.serve.config import ServiceConfig

# The Serve application's name: one per Ray cluster, at the route "/" of Serve's one HTTP
# proxy per node, so a second service on a cluster replaces the first one's HTTP app.
APP = "rayspec"


def ray_to_join(ray_address: str | None) -> str:
    """The `ray.init` address for `--address`: as given, else `RAY_ADDRESS`, else "local" (a
    new local Ray).  Not Ray's own default: with no address, `ray.init()` joins the last
    cluster `ray start` brought up on this machine, and when that one has died it waits for
    its GCS for ever instead of starting."""
    return ray_address or os.environ.get("RAY_ADDRESS") or "local"


@contextlib.contextmanager
def _without_serve_reconnect_line():
    """`serve.run` starts Serve again without options, finds the Serve `serve.start` just
    started, and logs 'Connecting to existing Serve app ... New http_options will not be
    applied' — at every start, about options it never passed.  `serve.start`'s own line of
    the kind, on a cluster where Serve already ran, still comes."""
    serve_log = logging.getLogger("ray.serve")

    def reconnect(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Connecting to existing Serve app")

    serve_log.addFilter(reconnect)
    try:
        yield
    finally:
        serve_log.removeFilter(reconnect)


def _deployment_failure(error: RuntimeError) -> str:
    """Why `serve.run` failed, in a line: the error a replica's constructor raised, the last
    line of the traceback Serve keeps in the deployment's status (its exception says only
    "Failed to update the deployments")."""
    from ray import serve

    app = serve.status().applications.get(APP)
    for deployment in (app.deployments.values() if app else ()):
        lines = [line.strip() for line in (deployment.message or "").splitlines() if line.strip()]
        if lines and "FAILED" in str(deployment.status):
            return lines[-1]
    return why_not_started(error)


def join_ray(ray_address: str | None) -> bool:
    """Connect this process to Ray as `ray_to_join` says, unless it is already; whether that
    started a local Ray instance."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        return False
    address = ray_to_join(ray_address)
    check_ray_answers(address)
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return address == "local"


def check_ray_answers(address: str, timeout: float = 5.0) -> None:
    """ConnectionError unless a host:port address has something listening (a cluster's GCS):
    `ray.init` would try a dead one's for ever, a line every 5 s.  "local", "auto" and
    ray:// addresses are Ray's to resolve."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(f"no Ray cluster answers at {address}: {error}") from None


def check_before_ray(config: ServiceConfig) -> None:
    """The `ServiceStartError` a part would raise for a port another server holds or a model
    directory that is not there, found before Ray, the workers and the other models start
    rather than after them — some 45 s on two cores with the demo pair, minutes with real
    checkpoints (vLLM too binds its port and finds its model before its engine starts).  For
    a Ray this process starts, whose parts run on this machine; on a cluster it joins, ports
    bind and paths are read on the nodes the parts run on.  A model path checked here is an
    absolute one: a relative one that is not here may be a hub id.  What changes after this
    check (a port taken, a directory removed) still fails where it is used, in the same terms."""
    from rayspec.rpc.server import check_port_free

    for part, endpoint, server in (("HTTP server", config.http, "the HTTP server"),
                                   ("gRPC coordinator", config.grpc, "a gRPC server")):
        if endpoint.port:  # 0: any free one
            try:
                check_port_free(endpoint.host, endpoint.port, server)
            except OSError as error:
                raise ServiceStartError(f"the {part} could not start: OSError: {error}") from None
    models = [("target", config.target)] + [(f"drafter {i}", drafter) for i, drafter in enumerate(config.drafters)]
    for part, model in models:
        if model.path and os.path.isabs(model.path) and not os.path.isdir(model.path):
            raise ServiceStartError(f"the {part} could not start: FileNotFoundError: cannot load a causal LM from "
                                    f"{model.path!r}: no such directory on this machine")


class Service:
    """A running service: its actors, placement group and Serve application."""

    def __init__(self, config: ServiceConfig, ray_address: str | None = None, start_timeout: float = 600.0,
                 owns_ray: bool = False):
        """owns_ray: the caller started the local Ray this service runs on, for `stop` to end
        (as it does one the service starts itself)."""
        import ray

        # a local Ray instance of this service's own, which `stop` ends
        self.started_ray = join_ray(ray_address) or owns_ray
        # resolved here, where $RAYSPEC_API_KEY is set, and carried in the config to the actors
        self.config = config = dataclasses.replace(config, api_key=config.resolved_api_key)
        self.group, self.target, self.generation, self.drafters = None, None, None, []
        self.started = False  # whether it served: a start that failed has no requests to end
        nodes = [n for n in ray.nodes() if n["Alive"]]
        have = ray.cluster_resources()
        spec = bundles(config, have.get("GPU", 0))
        try:
            if config.placement.strategy == "STRICT_SPREAD" and len(nodes) < len(spec):
                raise ValueError(
                    f"STRICT_SPREAD needs {len(spec)} nodes (a target and {len(spec) - 1} drafter(s)), "
                    f"the cluster has {len(nodes)}; use PACK on one node"
                )
            if self.started_ray:  # no node joins it: what it lacks now is never placed
                check_fits_here(config, spec, have)
            if config.target.where == "coordinator":
                self._target_in_coordinator(spec, start_timeout)
            else:
                self._target_in_worker(spec, start_timeout)
        except BaseException:
            self.stop()  # what did start goes, on a cluster that outlives this process too
            raise
        self.http_address = f"http://{advertised_address(config.http.host, config.http.port)}"  # as gRPC's
        self.started = True

    def _run_http_app(self, app) -> None:
        import ray
        from ray import serve

        http = self.config.http
        try:
            serve.start(http_options={"host": http.host, "port": http.port})
        except ray.exceptions.RayError as error:  # its proxy's: the port is taken, mostly
            raise ServiceStartError(f"the HTTP server could not start on {http.host}:{http.port}: "
                                    f"{why_not_started(error)}") from None
        try:
            with _without_serve_reconnect_line():
                serve.run(app, name=APP, route_prefix="/")
        except RuntimeError as error:
            raise ServiceStartError(f"the HTTP app could not start: {_deployment_failure(error)}") from None

    def _target_in_worker(self, spec: list[dict], start_timeout: float) -> None:
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from rayspec.serve.app import build_serve_app

        config = self.config
        service = service_name()
        self.group = placement_group(spec, strategy=config.placement.strategy, name=service)
        wait_for_group(self.group, spec, config.placement.strategy, start_timeout)
        restarts = config.placement.max_restarts
        names = worker_actor_names(service, len(config.worker_drafters))
        self.target = WorkerActor.options(name=names[0], **placed(self.group, 0, restarts)).remote(
            "target", vars(config.target), config.model_id
        )
        self.drafters, self.drafter_addresses = start_drafters(config, self.group, start_timeout, names=names[1:])
        [self.target_address] = started([self.target], ["target worker"], start_timeout)
        coordinator = dict(
            num_cpus=BUNDLE_CPUS / 4, **restartable(restarts),
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=0),
        )
        workers = [self.target, *self.drafters]
        self.generation = GenerationActor.options(**coordinator).remote(
            config.to_dict(), self.target_address, self.drafter_addresses, names
        )
        [self.grpc_address] = started([self.generation], ["gRPC coordinator"], start_timeout)
        # Serve places its replicas itself: the target's node is named, not its bundle
        self.target_node = placement_group_table(self.group)["bundles_to_node_id"][0]
        # One calibration for both coordinators, the gRPC one's: each measuring its own would
        # plan its own sequoia:auto trees, and a seed would give other tokens over HTTP and gRPC.
        self._run_http_app(build_serve_app(config, self.target_address, self.drafter_addresses,
                                           node_id=self.target_node, costs_from=self.generation,
                                           worker_actors=workers))

    def _target_in_coordinator(self, spec: list[dict], start_timeout: float) -> None:
        from ray import serve

        from rayspec.serve.app import build_serve_app

        self._run_http_app(build_serve_app(self.config, None, [], placement_group=(spec, self.config.placement.strategy)))
        replica = serve.get_deployment_handle("rayspec-coordinator", app_name=APP)
        self.grpc_address = replica.grpc_address.remote().result(timeout_s=start_timeout)
        self.target_node = replica.node_id.remote().result(timeout_s=start_timeout)

    def stop(self) -> None:
        """End the generations in flight with the service's shutdown error (`shut_down`),
        delete the Serve application (on a cluster it joined) and stop the actors.  Then a Ray
        instance the service started ends, with Serve and all; on a cluster it joined, Serve
        itself stops when no other application is left, as it was before (another service may
        then start it with other ports)."""
        from ray import serve
        from ray.serve.exceptions import RayServeException

        if self.started:  # else a replica that never started could hold this up for its timeout
            self.shut_down()
        # On a Ray instance of its own, which ends with everything on it, the application is
        # not deleted first: from its deletion to the end Serve's proxy would answer every
        # request 404 (path not found), where the shut-down replica answers 503 until the
        # connection is refused.  Elsewhere not `serve.shutdown()` first: it would end the
        # cluster's other applications too, and it kills Serve's controller under its own
        # call, which Ray reports as a failed task (a line at every Ctrl-C).  A replica
        # holding the target takes its drafters and group with it.
        serving = False
        if not (self.started_ray and self.started):
            try:
                serve.delete(APP)
                serving = True
            except RayServeException:  # Serve never started: the service failed before
                pass
        self._end_actors(stop_first=True)
        if not self.started_ray and serving and not serve.status().applications:
            serve.shutdown()

    def shut_down(self) -> None:
        """Have both coordinators end their generations in flight — an HTTP stream with an
        error event and `[DONE]`, a gRPC one with UNAVAILABLE, any other with a 503 — and
        refuse new ones (`rayspec.serve.service.Service.shut_down`), as vLLM aborts its
        requests on shutdown: Serve tells a replica nothing as it drains it, and would let
        its streams run through its grace (20 s) and then cut them without a word.  Best
        effort: a part that did not start, or does not answer, is stopped next anyway."""
        import ray
        from ray import serve

        answers = []  # both asked before either is waited for: their streams end together
        if self.generation is not None:
            asked = self.generation.shut_down.remote()
            answers.append(lambda: ray.get(asked, timeout=10))
        try:
            replica = serve.get_deployment_handle("rayspec-coordinator", app_name=APP).shut_down.remote()
            answers.append(lambda: replica.result(timeout_s=10))
        except Exception:  # noqa: BLE001 — no Serve, or no application: no HTTP requests in flight
            pass
        for answer in answers:
            with contextlib.suppress(Exception):  # see the docstring
                answer()

    def stop_now(self) -> None:
        """`stop` without waiting for the requests in flight: the actors are killed, and a Ray
        instance the service started ends with them; on a cluster it joined, the Serve
        application, whose deletion `stop` asked for, goes after its replica's grace."""
        import ray

        if ray.is_initialized():  # else `stop` had ended the Ray instance already
            self._end_actors(stop_first=False)

    def _end_actors(self, stop_first: bool) -> None:
        """Kill the actors — each asked to `stop` first, if `stop_first` — remove the
        placement group, and end a Ray instance the service started."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in [self.generation, self.target, *self.drafters]:
            if actor is None:
                continue
            if stop_first:
                try:
                    ray.get(actor.stop.remote(), timeout=10)
                except Exception:  # noqa: BLE001 — stopping best-effort; the actor is killed next
                    pass
            ray.kill(actor)
        if self.group is not None:
            with contextlib.suppress(Exception):  # `stop` may have removed it already
                remove_placement_group(self.group)
        if self.started_ray:
            ray.shutdown()


def serve_forever(config: ServiceConfig, ray_address: str | None = None) -> int:
    """Start the service, print where it listens, and run until Ctrl-C or SIGTERM."""
    import ray

    def interrupt(*_):
        raise KeyboardInterrupt  # Ctrl-C or SIGTERM while starting: stop what started

    if ray_to_join(ray_address) == "local":
        check_before_ray(config)
    started_ray = join_ray(ray_address)
    # After `ray.init`, whose own SIGTERM handler would print a stack dump and exit.  SIGINT
    # too: a process started in the background of a shell inherits SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)
    service = Service(config, ray_address, owns_ray=started_ray)
    # From here a signal stops the service (set before the ready line: one sent as it appears
    # would otherwise meet the start's handler, and leave as a traceback).
    stop = StopSignals()
    http, model = service.http_address, config.model_id
    key = " -H \"Authorization: Bearer $RAYSPEC_API_KEY\"" if service.config.api_key else ""
    print(
        f"rayspec is ready: HTTP {http} (OpenAI API), gRPC {service.grpc_address} (rayspec.v1.Generation)\n"
        f"  try: curl {http}/v1/completions{key} -H 'Content-Type: application/json' "
        f"-d '{{\"model\": \"{model}\", \"prompt\": \"def fibonacci(n):\", \"max_tokens\": 48, \"temperature\": 0.6, "
        f"\"seed\": 1}}'\n"
        f"  Ctrl-C stops it.",
        flush=True,
    )
    stop.wait()
    print("stopping rayspec ... (Ctrl-C again: without waiting for the requests in flight)", flush=True)
    # Serve lets a replica's requests in flight run on for up to 20 s as it stops, and a
    # stream may take longer: a second signal cuts them rather than leave the terminal waiting.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)
    try:
        service.stop()
        forced = False
    except KeyboardInterrupt:
        forced = True
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # what is left is quick, and must not be cut short
    if forced:
        print("stopping rayspec now: the requests in flight are cut", flush=True)
        service.stop_now()
    ray.shutdown()
    return 0
