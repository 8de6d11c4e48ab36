"""The `ray up` files in clusters/ pass Ray's own cluster-config checks.

`ray up` runs ``prepare_config`` (merge with the provider's defaults.yaml, the local provider's
node-type rewrite) and then ``validate_config`` (ray-schema.json plus the node-type rules)
before it talks to any cloud; the tests run exactly those two steps.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import click
import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"
CLOUDS = ["aws", "gcp"]
ALL = CLOUDS + ["local"]
SERVE_COMMAND = "rayspec serve clusters/service.yaml"


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTERS / f"{name}.yaml").read_text())


def ray_checked(config: dict) -> dict:
    """What `ray up` does to a config before it calls the provider."""
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def service() -> dict:
    return yaml.safe_load((CLUSTERS / "service.yaml").read_text())


def custom(resources: dict) -> dict:
    return {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}


def start_resources(commands: list[str]) -> dict:
    """The resources a `ray start --resources='{...}'` among ``commands`` advertises."""
    found = [re.search(r"--resources='([^']*)'", c) for c in commands]
    found = [json.loads(m.group(1)) for m in found if m]
    assert len(found) == 1, commands
    return found[0]


def node_resources(name: str) -> dict[str, dict]:
    """Resources by role: target, drafter."""
    config = ray_checked(load(name))
    if name == "local":  # one node type: roles follow the start commands
        return {"target": start_resources(config["head_start_ray_commands"]),
                "drafter": start_resources(config["worker_start_ray_commands"])}
    types = config["available_node_types"]
    return {"target": types["target_gpu"]["resources"], "drafter": types["drafter_gpu"]["resources"]}


@pytest.mark.parametrize("name", ALL)
def test_ray_validates_the_cluster_file(name):
    config = ray_checked(load(name))
    assert config["provider"]["type"] == name
    assert config["cluster_name"] == "rayspec"


@pytest.mark.parametrize("name", CLOUDS)
def test_cloud_files_have_a_head_a_target_gpu_and_a_drafter_gpu(name):
    config = ray_checked(load(name))
    types = config["available_node_types"]
    assert set(types) == {"head", "target_gpu", "drafter_gpu"}
    assert config["head_node_type"] == "head"
    assert types["target_gpu"]["resources"]["rayspec_target"] == 1
    assert types["drafter_gpu"]["resources"]["rayspec_drafter"] == 1
    for role in ("target_gpu", "drafter_gpu"):
        assert types[role]["min_workers"] >= 1  # both GPU nodes come up with the cluster
    assert not {"rayspec_target", "rayspec_drafter"} & set(types["head"]["resources"])
    if name == "gcp":  # no auto-detection on GCP: the GPU must be declared
        assert types["target_gpu"]["resources"]["GPU"] == 1
        assert types["drafter_gpu"]["resources"]["GPU"] == 1


def test_local_file_makes_the_head_the_target_and_the_workers_drafters():
    roles = node_resources("local")
    assert roles["target"]["rayspec_target"] == 1
    assert roles["drafter"]["rayspec_drafter"] == 1
    assert "rayspec_target" not in roles["drafter"]
    config = load("local")
    assert config["provider"]["head_ip"] and config["provider"]["worker_ips"]


@pytest.mark.parametrize("name", ALL)
def test_head_starts_the_service_after_ray(name):
    config = ray_checked(load(name))
    commands = config["head_start_ray_commands"]
    ray_start = next(i for i, c in enumerate(commands) if "ray start --head" in c)
    serve = [i for i, c in enumerate(commands) if SERVE_COMMAND in c]
    assert serve and serve[0] > ray_start
    assert "cd ~/rayspec" in commands[serve[0]]  # where the working tree is mounted
    assert "--address auto" in commands[serve[0]]  # join this cluster, do not start a Ray
    assert config["file_mounts"] == {"~/rayspec": "."}
    assert (CLUSTERS.parent / SERVE_COMMAND.split()[-1]).is_file()


@pytest.mark.parametrize("name", ALL)
def test_service_placement_fits_the_node_resources(name):
    """Each bundle's custom resources exist, in that amount, on the node of its role."""
    placement = service()["placement"]
    roles = node_resources(name)
    for role, key in (("target", "target_resources"), ("drafter", "drafter_resources")):
        assert custom(placement[key]), key  # a bundle without custom resources could land anywhere
        for resource, amount in custom(placement[key]).items():
            assert roles[role].get(resource, 0) >= amount, (role, resource)


def test_the_head_waits_for_what_the_placement_needs():
    """The start command waits for exactly the resources the service's bundles ask for."""
    from clusters.wait_for_resources import required_resources

    need = required_resources(service())
    assert need == {"rayspec_target": 1, "rayspec_drafter": len(service()["drafters"])}
    for name in ALL:
        serve = next(c for c in load(name)["head_start_ray_commands"] if SERVE_COMMAND in c)
        assert serve.index("wait_for_resources.py clusters/service.yaml &&") < serve.index(SERVE_COMMAND)


def test_drafters_in_the_coordinator_need_no_drafter_resources():
    from clusters.wait_for_resources import required_resources

    config = service()
    config["drafters"] = [{"where": "coordinator"}, {}, {"where": "worker"}]
    assert required_resources(config)["rayspec_drafter"] == 2
    config["drafters"] = []  # target-only decoding: no drafter node to wait for
    assert required_resources(config) == {"rayspec_target": 1}
    del config["drafters"]  # the one default drafter
    assert required_resources(config)["rayspec_drafter"] == 1


@pytest.mark.parametrize("text, error", [
    ("drafters:\n", "config.drafters must be a list"),  # was a TypeError's traceback
    ("placement: {strategy: PACK, drafter_resource: {rayspec_drafter: 1}}\n",
     "unknown key(s) in config.placement: drafter_resource; known: strategy, target_resources, drafter_resources, "
     "max_restarts"),
])
def test_a_config_rayspec_serve_refuses_is_refused_before_waiting_for_the_nodes(text, error, tmp_path, monkeypatch,
                                                                                capsys):
    """A mistake in service.yaml was told only once the GPU nodes had booted (ten minutes and more
    on a cloud), when `rayspec serve` read the file, or was a traceback from this script."""
    from clusters import wait_for_resources

    def no_cluster(*args, **kwargs):
        raise AssertionError("joined the cluster to wait for the nodes")

    monkeypatch.setattr(ray, "init", no_cluster)
    (tmp_path / "service.yaml").write_text(text)
    assert wait_for_resources.main([str(tmp_path / "service.yaml")]) == 2
    assert capsys.readouterr().err == f"wait_for_resources: error: {error}\n"


def test_service_config_loads_with_rayspec_serve_s_parser():
    config = pytest.importorskip("rayspec.serve.config")
    loaded = config.ServiceConfig.from_yaml(CLUSTERS / "service.yaml")
    assert loaded.placement.strategy == "STRICT_SPREAD"
    for model in (loaded.target, *loaded.drafters):  # GPU batches, above the CPU defaults
        assert (model.max_batch_sequences, model.max_batch_tokens) == (64, 2048)


@pytest.mark.parametrize("name", ALL)
def test_cluster_ray_matches_this_ray(name):
    """`ray up` needs the same Ray on the cluster as on the laptop."""
    text = (CLUSTERS / f"{name}.yaml").read_text()
    pinned = re.findall(r"rayproject/ray:([\d.]+)-|ray\[[\w,]+\]==([\d.]+)", text)
    assert pinned and {a or b for a, b in pinned} == {ray.__version__}


def test_service_config_names_everything():
    config = service()
    assert {"model_id", "target", "drafters", "verifier", "verifier_params", "tree", "placement",
            "http", "grpc"} <= set(config)
    assert config["placement"]["strategy"] == "STRICT_SPREAD"
    for model in [config["target"], *config["drafters"]]:
        assert {"path", "device", "dtype"} <= set(model)
    assert config["http"]["port"] == 8000 and config["grpc"]["port"] == 9000


def _set(path: str, value):
    def mutate(config):
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value
    return mutate


Invalid = jsonschema.ValidationError
BROKEN = {  # mutation, the error Ray raises
    "unknown top-level key": (_set("max_gpus", 2), Invalid),
    "fractional custom resource":
        (_set("available_node_types.target_gpu.resources.rayspec_target", 0.5), Invalid),
    "node type without node_config":
        (lambda c: c["available_node_types"]["drafter_gpu"].pop("node_config"), Invalid),
    "min_workers not a number": (_set("available_node_types.target_gpu.min_workers", "one"), Invalid),
    "head type not among the node types": (_set("head_node_type", "missing"), ValueError),
    "min_workers above max_workers": (_set("max_workers", 1), ValueError),
}


@pytest.mark.parametrize("mutation", list(BROKEN), ids=list(BROKEN))
@pytest.mark.parametrize("name", CLOUDS)
def test_ray_rejects_a_broken_file(name, mutation):
    config = load(name)
    mutate, error = BROKEN[mutation]
    mutate(config)
    with pytest.raises(error):
        ray_checked(config)


def test_ray_rejects_node_types_for_the_local_provider():
    """The local provider has one node type; node types written by hand are refused."""
    config = load("local")
    config["available_node_types"] = load("aws")["available_node_types"]
    config["head_node_type"] = "head"
    with pytest.raises(click.ClickException, match="not supported for on-premise"):
        ray_checked(config)


def test_waiting_ends_when_the_nodes_join_or_at_the_timeout():
    from clusters.wait_for_resources import wait

    need = {"rayspec_target": 1, "rayspec_drafter": 2}
    joins = iter([{"CPU": 8}, {"CPU": 8, "rayspec_target": 1, "rayspec_drafter": 1},
                  {"CPU": 8, "rayspec_target": 1, "rayspec_drafter": 2}])
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    assert wait(need, lambda: next(joins), timeout=60, poll=10, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 20
    now[0] = 0.0
    assert not wait(need, lambda: {"rayspec_target": 1}, timeout=60, poll=10, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 60
