"""Start `rayspec serve`'s Service over the tiny pair on a Ray cluster (by default a fresh local one, 2 CPUs)."""

from __future__ import annotations

import contextlib
import os

from rayspec.serve.config import ServiceConfig
from tests.local_ray import start_ray
from tests.loopback import free_port
from tests.rpc.processes import save_tiny_pair

PROMPT = "def add(a, b):"
SAMPLING = dict(max_tokens=24, temperature=0.8, seed=17)
TREE = "kary:2x3"  # what the requests of `assert_serves_in_process_tokens` name


@contextlib.contextmanager
def launched(directory, target: dict, drafters: list[dict], placement: dict | None = None, ray_address: str | None = None,
             tree: str = TREE):
    """(service, target path, drafter path); `target` and `drafters` add keys to the
    configs of the tiny pair (paths filled in), verifier rrsw, the service's tree `tree`.  Ray:
    the cluster at `ray_address`, or a fresh local one with 2 CPUs."""
    import ray

    from rayspec.cluster.launch import Service

    target_path, drafter_path = save_tiny_pair(directory)
    config = ServiceConfig.from_dict({
        "model_id": "tiny",
        "target": {"path": str(target_path), **target},
        "drafters": [{"path": str(drafter_path), **d} for d in drafters],
        "verifier": "rrsw", "tree": tree, "adaptive_trees": False, "placement": placement or {},
        "http": {"port": free_port()}, "grpc": {"port": free_port()},
    })
    os.environ["RAY_AUTH_MODE"] = "disabled"
    if ray_address is None:
        head = start_ray(num_cpus=2)
    else:
        head = None
        ray.init(address=ray_address, log_to_driver=False)
    from rayspec.cluster.actors import kept_keys

    kept_before = kept_keys()
    try:
        running = Service(config)
        try:
            yield running, target_path, drafter_path
        finally:
            running.stop()
        # what the actors kept for their restarts (ports, costs) goes with them
        assert kept_keys() <= kept_before, f"left behind: {kept_keys() - kept_before}"
    finally:
        if head is None:
            ray.shutdown()
        else:
            head.stop()




def in_process_tokens(target_path, drafter_path, verifier: str = "rrsw", tree: str = TREE,
                      **sampling) -> tuple[list[int], object]:
    """What the in-process engine answers to PROMPT with `sampling` (request fields; default
    SAMPLING) on the launched setting, or with `verifier` and `tree`: (token ids, tokenizer)."""
    from rayspec.engine import LocalDrafter, LocalTarget, SpeculativeEngine
    from rayspec.models import load_causal_lm

    sampling = sampling or SAMPLING
    target, tokenizer = load_causal_lm(target_path, "cpu", "float32")
    drafter, _ = load_causal_lm(drafter_path, "cpu", "float32")
    engine = SpeculativeEngine(LocalTarget(target), LocalDrafter(drafter), verifier=verifier, tree=tree)
    result = engine.run(tokenizer.encode(PROMPT, add_special_tokens=False), max_new_tokens=sampling["max_tokens"],
                        **{name: value for name, value in sampling.items() if name != "max_tokens"})
    return result.tokens, tokenizer


def assert_serves_in_process_tokens(running, target_path, drafter_path) -> None:
    """PROMPT with SAMPLING gives the in-process engine's tokens over HTTP (the official openai
    client) and the gRPC SDK (unary and streaming), twice each."""
    from openai import OpenAI

    from rayspec.client import Client

    expected, tokenizer = in_process_tokens(target_path, drafter_path)
    client = OpenAI(base_url=f"{running.http_address}/v1", api_key="unused")
    for _ in range(2):  # with several drafters, successive requests take different ones
        http = client.completions.create(model="tiny", prompt=PROMPT, **SAMPLING, extra_body={"rayspec": {"tree": TREE}})
        assert http.choices[0].text == tokenizer.decode(expected, skip_special_tokens=True)
        assert http.usage.completion_tokens == SAMPLING["max_tokens"]
    with Client(running.grpc_address) as sdk:
        assert list(sdk.generate(PROMPT, **SAMPLING, tree=TREE).token_ids) == expected
        assert [t for chunk in sdk.stream(PROMPT, **SAMPLING, tree=TREE) for t in chunk.token_ids] == expected


def assert_both_coordinators_plan_from_one_calibration(running, tree: str | None = None) -> None:
    """A seeded sequoia:auto request (`tree`: what the request names; None: the service's own
    tree) gives the same text and steps over HTTP and the gRPC SDK, both coordinators holding
    the costs the gRPC one measured (each measuring its own would plan other trees, and so
    give other tokens for the same seed)."""
    import ray
    from openai import OpenAI
    from ray import serve

    from rayspec.client import Client

    options = {} if tree is None else {"extra_body": {"rayspec": {"tree": tree}}}
    http = OpenAI(base_url=f"{running.http_address}/v1", api_key="unused").completions.create(
        model="tiny", prompt=PROMPT, max_tokens=24, temperature=0.8, seed=3, **options)
    with Client(running.grpc_address) as sdk:
        grpc = sdk.generate(PROMPT, max_tokens=24, temperature=0.8, seed=3, tree=tree)
    costs = ray.get(running.generation.costs.remote())
    replica = serve.get_deployment_handle("rayspec-coordinator", app_name="rayspec")
    assert costs is not None and replica.costs.remote().result(timeout_s=60) == costs
    assert http.choices[0].text == grpc.text and http.rayspec["steps"] == grpc.usage.steps


def assert_metrics_count_both_apis(running) -> None:
    """/metrics counts a generation served through the gRPC SDK as it counts an HTTP one: their
    tokens, and each generation by how it ended; and the gRPC call by its status."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from rayspec.client import Client

    def scraped(http) -> dict:
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(http.get("/metrics").text) for sample in family.samples}

    tokens, ended = ("rayspec_generated_tokens_total", ()), ("rayspec_generations_ended_total", (("reason", "length"),))
    with httpx.Client(base_url=running.http_address, timeout=60) as http, Client(running.grpc_address) as sdk:
        before = scraped(http)
        assert len(sdk.generate(PROMPT, max_tokens=5, seed=1).token_ids) == 5
        reply = http.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 3, "seed": 1})
        assert reply.status_code == 200
        after = scraped(http)
    assert after[tokens] - before.get(tokens, 0) == 5 + 3
    assert after[ended] - before.get(ended, 0) == 2
    calls = ("rayspec_grpc_requests_total", (("code", "OK"), ("method", "Generate")))
    assert after[calls] - before.get(calls, 0) == 1
