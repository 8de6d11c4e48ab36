"""The service config: where drafters run, and the errors for settings that cannot work."""

from __future__ import annotations

import pytest

from rayspec.cluster.actors import bundles, check_fits_here
from rayspec.rpc.checks import API_KEY_VARIABLE
from rayspec.serve.config import ServiceConfig


def test_drafters_in_the_coordinator_get_no_bundle():
    config = ServiceConfig.from_dict({"drafters": [{"where": "coordinator"}, {"num_gpus": 1}, {}]})
    assert [d.where for d in config.coordinator_drafters] == ["coordinator"]
    assert len(config.worker_drafters) == 2
    assert bundles(config, cluster_gpus=3) == [{"CPU": 0.5, "GPU": 1.0}] * 3
    assert bundles(ServiceConfig.from_dict({"drafters": [{"where": "coordinator"}]}), cluster_gpus=0) == [{"CPU": 0.5}]


@pytest.mark.parametrize("drafters, cluster_gpus, gpus", [
    ([{}], 2, [1.0, 1.0]),  # a GPU each
    ([{}], 1, [0.5, 0.5]),  # the demo pair on a one-GPU machine: it shares the GPU
    ([{}, {}], 2, [0.5, 0.5, 0.5]),  # two to a GPU
    ([{}, {}], 1, [0.3333, 0.3333, 0.3333]),
    ([{"num_gpus": 1}], 2, [1.0, 1.0]),  # the auto target has the GPU the drafter leaves
    ([{"num_gpus": 1}, {}], 2, [0.5, 1.0, 0.5]),
    ([{"num_gpus": 2}], 2, [None, 2.0]),  # none left: the target computes on its CPUs
    ([{}], 0, [None, None]),
])
def test_auto_gpus_share_the_clusters_gpus_when_there_are_fewer_than_models(drafters, cluster_gpus, gpus):
    config = ServiceConfig.from_dict({"drafters": drafters})
    assert [bundle.get("GPU") for bundle in bundles(config, cluster_gpus)] == gpus


@pytest.mark.parametrize("config, have, message", [
    ({"target": {"num_gpus": 1}}, {"CPU": 2.0},
     "the config asks 1 GPU of this machine (target.num_gpus: 1), and the local Ray instance rayspec started "
     "finds 0 on it: ask for what it has (num_gpus: auto takes the GPUs there are), or join a cluster that has it "
     "(--address)"),
    ({"drafters": [{"where": "coordinator"}, {"num_gpus": 0.5}, {"num_gpus": 1}]}, {"CPU": 8.0, "GPU": 1.0},
     "the config asks 1.5 GPU of this machine (drafters[1].num_gpus: 0.5, drafters[2].num_gpus: 1), and the "
     "local Ray instance rayspec started finds 1 on it: ask for what it has (num_gpus: auto takes the GPUs there "
     "are), or join a cluster that has it (--address)"),
    ({"placement": {"target_resources": {"rayspec_target": 1}}}, {"CPU": 2.0},
     "the config asks 1 rayspec_target of this machine (placement.target_resources.rayspec_target: 1), and the "
     "local Ray instance rayspec started finds 0 on it: ask for what it has (or less), or join a cluster that has "
     "it (--address)"),
    ({"drafters": [{}, {}]}, {"CPU": 1.0},
     "the config asks 1.5 CPU of this machine (target's worker: 0.5 CPU, drafters[0]'s worker: 0.5 CPU, "
     "drafters[1]'s worker: 0.5 CPU), and the local Ray instance rayspec started finds 1 on it: ask for what it "
     "has (or less), or join a cluster that has it (--address)"),
])
def test_a_placement_the_local_ray_cannot_make_is_refused_naming_the_fields(config, have, message):
    """`rayspec serve` on a Ray of its own refuses at once what it would wait 10 minutes for."""
    config = ServiceConfig.from_dict(config)
    with pytest.raises(ValueError) as refused:
        check_fits_here(config, bundles(config, have.get("GPU", 0)), have)
    assert str(refused.value) == message


def test_gpu_shares_that_fit_in_sum_but_not_gpu_by_gpu_are_refused_naming_the_fields():
    """Three 0.6-GPU bundles on two GPUs: 1.8 <= 2 passed the sums, and the placement waited
    10 minutes for a GPU that could hold two of them."""
    config = ServiceConfig.from_dict({"target": {"num_gpus": 0.6}, "drafters": [{"num_gpus": 0.6}, {"num_gpus": 0.6}]})
    have = {"CPU": 8.0, "GPU": 2.0}
    with pytest.raises(ValueError) as refused:
        check_fits_here(config, bundles(config, 2.0), have)
    assert str(refused.value) == (
        "the config's GPU shares (target.num_gpus: 0.6, drafters[0].num_gpus: 0.6, drafters[1].num_gpus: 0.6) fit "
        "this machine's 2 GPUs in sum but not GPU by GPU: a share of a GPU must fit on one GPU beside the others' "
        "(Ray places it so); ask for shares that do (num_gpus: auto shares them out), or join a cluster that has "
        "them (--address)")


@pytest.mark.parametrize("shares, gpus, fit", [
    ([0.6, 0.6, 0.6], 2, False), ([0.6, 0.6], 2, True), ([0.5] * 4, 2, True),
    ([0.3333] * 3, 1, True),  # what num_gpus: auto gives three models on one GPU
    ([0.3334] * 3, 1, False), ([1, 0.5, 0.5], 2, True), ([1, 0.6, 0.6], 2, False),
    ([0.5, 0.4, 0.3, 0.3, 0.25, 0.25], 2, True),  # 0.5 + 0.25 + 0.25 and 0.4 + 0.3 + 0.3: first-fit misses it
    ([1.5, 0.5], 2, True), ([1.5, 0.6], 2, False), ([2], 1, False), ([0, 0], 0, True), ([], 0, True),
])
def test_gpu_shares_fit_exactly_where_some_placement_holds_them(shares, gpus, fit):
    from rayspec.cluster.actors import gpus_fit

    assert gpus_fit(shares, gpus) is fit


@pytest.mark.parametrize("config, have", [
    ({}, {"CPU": 1.0}),  # auto GPUs: none asked of a machine without
    ({"target": {"num_gpus": 1}, "drafters": [{}]}, {"CPU": 2.0, "GPU": 1.0}),  # the auto drafter: none left
    ({"target": {"num_gpus": 0.5}, "drafters": [{"num_gpus": 0.5}]}, {"CPU": 2.0, "GPU": 1.0}),
    ({"drafters": [{}, {}]}, {"CPU": 2.0, "GPU": 1.0}),  # auto: a third of the GPU each
    ({"target": {"num_gpus": 0.7}, "drafters": [{"num_gpus": 0.6}, {"num_gpus": 0.4}, {"num_gpus": 0.3}]},
     {"CPU": 4.0, "GPU": 2.0}),
])
def test_a_placement_the_local_ray_can_make_passes(config, have):
    config = ServiceConfig.from_dict(config)
    check_fits_here(config, bundles(config, have.get("GPU", 0)), have)


@pytest.mark.parametrize("drafter, message", [
    ({"where": "edge"}, "drafters[0].where must be worker or coordinator, got 'edge'"),
    ({"where": "coordinator", "num_gpus": 1}, "drafters[0] runs in the coordinator, which reserves no GPU"),
    ({"placement": "coordinator"}, "unknown key(s) in config.drafters[0]: placement"),
    ({"cpus": "2-0"}, "cpus: the range '2-0' runs backwards"),
    ({"max_batch_sequences": 0}, "max_batch_sequences must be a whole number, 1 or more, got 0"),
    ({"max_batch_tokens": "many"}, "max_batch_tokens must be a whole number, 1 or more, got 'many'"),
    ({"prefill_chunk_tokens": -8}, "prefill_chunk_tokens must be a whole number, 0 or more, got -8"),
    ({"draft_top_k": -1}, "draft_top_k must be a whole number, 0 (off) or more, got -1"),
    ({"draft_top_k": 2.5}, "draft_top_k must be a whole number, 0 (off) or more, got 2.5"),
])
def test_bad_drafter_settings_are_refused_with_a_message(drafter, message):
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict({"drafters": [drafter]})
    assert message in str(raised.value)


@pytest.mark.parametrize("limits, message", [
    ({"default_max_tokens": 300, "max_tokens": 256}, "limits.default_max_tokens (300) is above limits.max_tokens (256)"),
    ({"max_concurrent_requests": 0}, "limits.max_concurrent_requests must be a positive integer, got 0"),
    ({"max_tokens": "lots"}, "limits.max_tokens must be a positive integer, got 'lots'"),
    ({"max_queued_requests": -1}, "limits.max_queued_requests must be a whole number, 0 (no queue) or more, got -1"),
    ({"max_queued_requests": 2.5}, "limits.max_queued_requests must be a whole number, 0 (no queue) or more, got 2.5"),
])
def test_bad_limits_are_refused_with_a_message(limits, message):
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict({"limits": limits})
    assert message in str(raised.value)


def test_requests_queue_by_default_and_a_queue_of_none_is_allowed():
    assert ServiceConfig.from_dict({}).limits.max_queued_requests == 256
    assert ServiceConfig.from_dict({"limits": {"max_queued_requests": 0}}).limits.max_queued_requests == 0


def test_tool_call_parser_names_a_parser_auto_or_none():
    assert ServiceConfig.from_dict({}).tool_call_parser == "auto"
    assert ServiceConfig.from_dict({"tool_call_parser": "hermes"}).tool_call_parser == "hermes"
    with pytest.raises(ValueError, match="tool_call_parser must be one of auto, hermes, mistral, json, llama3_json, "
                                         "none, got 'pythonic'"):
        ServiceConfig.from_dict({"tool_call_parser": "pythonic"})


def test_priced_verifiers_name_known_verifiers_or_all():
    assert ServiceConfig.from_dict({}).priced_verifiers is None  # the default verifier alone
    assert ServiceConfig.from_dict({"priced_verifiers": ["gumbel", "is"]}).priced_verifiers == ["gumbel", "is"]
    assert ServiceConfig.from_dict({"priced_verifiers": "all"}).priced_verifiers == "all"
    with pytest.raises(ValueError, match="unknown verifier 'nope'"):
        ServiceConfig.from_dict({"priced_verifiers": ["nope"]})
    with pytest.raises(ValueError, match="a list of verifier names or 'all', got 'gumbel'"):
        ServiceConfig.from_dict({"priced_verifiers": "gumbel"})


@pytest.mark.parametrize("verifier", [["rrsw"], {"a": 1}, 3])
def test_a_verifier_that_is_no_name_is_refused_with_a_message(verifier):
    with pytest.raises(ValueError, match=r"^unknown verifier .*; available: greedy, "):
        ServiceConfig.from_dict({"verifier": verifier})


def test_graft_predictions_takes_the_engines_modes():
    assert ServiceConfig.from_dict({}).graft_predictions == "auto"
    assert ServiceConfig.from_dict({"graft_predictions": "always"}).graft_predictions == "always"
    with pytest.raises(ValueError, match="graft_predictions must be one of auto, always, never, got 'yes'"):
        ServiceConfig.from_dict({"graft_predictions": "yes"})


def test_draft_hedge_is_off_or_a_factor_above_one():
    assert ServiceConfig.from_dict({}).draft_hedge is None
    assert ServiceConfig.from_dict({"draft_hedge": 2.5}).draft_hedge == 2.5
    with pytest.raises(ValueError, match="draft_hedge must be a number above 1 .* got 1"):
        ServiceConfig.from_dict({"draft_hedge": 1})


def test_a_models_batching_limits_reach_its_batcher():
    from rayspec.demo import DRAFTER_PATH

    config = ServiceConfig.from_dict({"drafters": [{"max_batch_sequences": 4, "max_batch_tokens": 64,
                                                    "prefill_chunk_tokens": 128}]})
    batcher = config.drafters[0].local(DRAFTER_PATH).batcher
    assert (batcher.max_sequences, batcher.max_tokens, batcher.prefill_chunk) == (4, 64, 128)


def test_a_drafters_draft_top_k_reaches_its_handle():
    from rayspec.demo import DRAFTER_PATH

    config = ServiceConfig.from_dict({"drafters": [{"draft_top_k": 32}, {}]})
    assert [d.local(DRAFTER_PATH).draft_top_k for d in config.drafters] == [32, 0]


def test_placement_max_restarts_is_minus_one_or_a_count():
    assert ServiceConfig.from_dict({}).placement.max_restarts == -1  # always, as Serve restarts its replicas
    assert ServiceConfig.from_dict({"placement": {"max_restarts": 0}}).placement.max_restarts == 0
    for bad in (-2, 1.5, "always", True):
        with pytest.raises(ValueError, match=f"placement.max_restarts must be a whole number, -1 \\(always\\) or more, "
                                             f"got {bad!r}"):
            ServiceConfig.from_dict({"placement": {"max_restarts": bad}})


def test_a_worker_actor_without_restarts_has_no_call_retries():
    from rayspec.cluster.actors import restartable

    assert restartable(-1) == {"max_restarts": -1, "max_task_retries": -1}
    assert restartable(3) == {"max_restarts": 3, "max_task_retries": -1}
    assert restartable(0) == {"max_restarts": 0, "max_task_retries": 0}


def test_the_targets_resume_timeout_is_a_number_of_seconds():
    assert ServiceConfig.from_dict({}).target.resume_timeout == 60
    assert ServiceConfig.from_dict({"target": {"resume_timeout": 0}}).target.resume_timeout == 0
    for bad in (-1, "soon", True):
        with pytest.raises(ValueError, match=f"target.resume_timeout must be a number of seconds, 0 or more, got {bad!r}"):
            ServiceConfig.from_dict({"target": {"resume_timeout": bad}})


@pytest.mark.parametrize("config, message", [
    ({"http": {"port": 70000}}, "http.port must be a whole number from 0 to 65535 (0: any free one), got 70000"),
    ({"http": {"port": -1}}, "http.port must be a whole number from 0 to 65535 (0: any free one), got -1"),
    ({"http": {"port": "abc"}}, "http.port must be a whole number from 0 to 65535 (0: any free one), got 'abc'"),
    ({"grpc": {"port": 9000.5}}, "grpc.port must be a whole number from 0 to 65535 (0: any free one), got 9000.5"),
    ({"grpc": {"port": True}}, "grpc.port must be a whole number from 0 to 65535 (0: any free one), got True"),
    ({"http": {"host": 5}}, "http.host must be a host name or IP address, got 5"),
    ({"grpc": {"host": ""}}, "grpc.host must be a host name or IP address, got ''"),
    ({"http": {"port": 18001}, "grpc": {"port": 18001}}, "http.port and grpc.port are both 18001"),
])
def test_bad_endpoints_are_refused_with_a_message(config, message):
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict(config)
    assert message in str(raised.value)


def test_both_front_ends_may_take_any_free_port():
    config = ServiceConfig.from_dict({"http": {"port": 0}, "grpc": {"port": 0}})
    assert (config.http.port, config.grpc.port) == (0, 0)


@pytest.mark.parametrize("config, message", [
    ({"tree": 5}, "tree must be a tree spec (chain:N, kary:KxD"),
    ({"verifier_params": [1]}, "verifier_params must be a mapping of the verifier's parameters, got [1]"),
    ({"priced_verifiers": 3}, "priced_verifiers must be a list of verifier names or 'all', got 3"),
    ({True: 1}, "unknown key(s) in config: True; known: model_id"),  # YAML's `yes: 1`
    ({"target": {1: 2, "x": 3}}, "unknown key(s) in config.target: 1, x; known: path"),
    ({"adaptive_trees": "false"}, "adaptive_trees must be true or false, got 'false'"),
    ({"load_aware_trees": 0}, "load_aware_trees must be true or false, got 0"),
    ({"target": {"num_gpus": "lots"}}, "target.num_gpus must be auto or a number of GPUs, 0 or more, got 'lots'"),
    ({"drafters": [{"num_gpus": -1}]}, "drafters[0].num_gpus must be auto or a number of GPUs, 0 or more, got -1"),
    ({"target": {"num_gpus": True}}, "target.num_gpus must be auto or a number of GPUs, 0 or more, got True"),
    ({"target": {"threads": "many"}}, "target.threads must be a whole number, 1 or more, or null for the default"),
    ({"drafters": [{}, {"threads": -1}]}, "drafters[1].threads must be a whole number, 1 or more, or null for the "
                                          "default, got -1"),
    ({"target": {"device": "tpu"}}, "target.device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    ({"target": {"device": 0}}, "target.device must be auto, cpu, cuda or cuda:N, got 0"),
    # devices torch knows but rayspec does not decode on: they failed mid-decode, with a traceback
    ({"target": {"device": "meta"}}, "target.device must be auto, cpu, cuda or cuda:N, got 'meta'"),
    ({"drafters": [{"device": "mps"}]}, "drafters[0].device must be auto, cpu, cuda or cuda:N, got 'mps'"),
    ({"drafters": [{"dtype": "float64"}]}, "drafters[0]: dtype must be one of auto, float32"),
    ({"target": {"dtype": ["float32"]}}, "target.dtype must be auto or a dtype's name such as bfloat16"),
    ({"target": {"path": 5}}, "target.path must be a checkpoint directory or hub id, or null for the demo pair"),
    ({"target": {"prefix_cache_mb": float("nan")}}, "prefix_cache_mb must be a finite number of megabytes, 0 or more"),
    ({"drafters": [{"prefix_cache_mb": float("inf")}]}, "prefix_cache_mb must be a finite number of megabytes"),
    ({"model_id": 5}, "model_id must be a non-empty string (the name clients pass as `model`), got 5"),
    ({"model_id": " "}, "model_id must be a non-empty string"),
    ({"acceptance_dir": ["a"]}, "acceptance_dir must be a directory's path, or null for the demo pair's, got ['a']"),
    ({"placement": {"target_resources": ["gpu"]}}, "placement.target_resources must map Ray resource names to "
                                                   "amounts, 0 or more, e.g. {rayspec_target: 1}; got ['gpu']"),
    ({"placement": {"drafter_resources": {"rayspec_drafter": -1}}}, "placement.drafter_resources must map Ray"),
    ({"placement": {"drafter_resources": {"rayspec_drafter": "one"}}}, "placement.drafter_resources must map Ray"),
    ({"placement": {"target_resources": {1: 1}}}, "placement.target_resources must map Ray"),
])
def test_settings_of_the_wrong_type_are_refused_with_a_message(config, message):
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict(config)
    assert message in str(raised.value)


def test_placement_resources_and_names_ray_takes_are_accepted():
    config = ServiceConfig.from_dict({"model_id": "qwen", "acceptance_dir": "vectors",
                                      "placement": {"target_resources": {"rayspec_target": 1},
                                                    "drafter_resources": {"rayspec_drafter": 0.5}}})
    assert config.placement.drafter_resources == {"rayspec_drafter": 0.5} and config.model_id == "qwen"


def test_model_settings_the_loader_takes_are_accepted():
    config = ServiceConfig.from_dict({"target": {"device": "cuda:1", "dtype": "bfloat16", "num_gpus": 0.5,
                                                 "threads": 4, "path": "/models/target"},
                                      "drafters": [{"device": "cpu", "num_gpus": 0, "prefix_cache_mb": 0}]})
    assert (config.target.device, config.target.num_gpus, config.drafters[0].num_gpus) == ("cuda:1", 0.5, 0)


def test_relative_paths_that_exist_here_are_made_absolute_for_workers_started_elsewhere(tmp_path, monkeypatch):
    (tmp_path / "models" / "target").mkdir(parents=True)
    (tmp_path / "vectors").mkdir()
    (tmp_path / "tree.json").write_text('{"parents": [-1, 0, 0], "child_rank": [0, 1, 2]}')
    (tmp_path / "service.yaml").write_text(
        "target: {path: models/target}\n"
        "drafters: [{path: Qwen/Qwen2.5-0.5B-Instruct}, {path: null}]\n"  # a hub id; the demo drafter
        "acceptance_dir: vectors\n"
        "tree: file:tree.json\n")  # was checked here and kept relative
    monkeypatch.chdir(tmp_path)
    config = ServiceConfig.from_yaml("service.yaml")
    assert config.target.path == str(tmp_path / "models" / "target")
    assert [d.path for d in config.drafters] == ["Qwen/Qwen2.5-0.5B-Instruct", None]
    assert config.acceptance_dir == str(tmp_path / "vectors")
    assert config.tree == f"file:{tmp_path / 'tree.json'}"


def test_the_shipped_cluster_service_file_names_its_models_wherever_a_worker_starts(monkeypatch):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # where the cluster files run `rayspec serve clusters/service.yaml`
    config = ServiceConfig.from_yaml("clusters/service.yaml")
    for model in (config.target, *config.drafters):
        assert Path(model.path).is_absolute() and (Path(model.path) / "config.json").is_file(), model.path


@pytest.mark.parametrize("key, problem", [
    ("secret\n", "holds '\\n': a key is printable ASCII, as HTTP headers and gRPC metadata carry it"),
    ("ключ", "holds 'к': a key is printable ASCII, as HTTP headers and gRPC metadata carry it"),
    (" secret ", "begins or ends with a space, which HTTP and gRPC strip from what a client sends"),
])
def test_an_api_key_no_client_can_send_is_refused_from_the_file_and_the_environment(key, problem, monkeypatch):
    """They were accepted, and then no request matched them."""
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict({"api_key": key})
    assert str(raised.value) == f"api_key {problem}"
    monkeypatch.setenv(API_KEY_VARIABLE, key)
    config = ServiceConfig.from_dict({})
    with pytest.raises(ValueError) as raised:
        config.resolved_api_key
    assert str(raised.value) == f"$RAYSPEC_API_KEY {problem}"
    assert ServiceConfig.from_dict({"api_key": "sk-a b~!"}).resolved_api_key == "sk-a b~!"  # the file's wins


def test_an_empty_api_key_variable_is_none_and_a_blank_one_is_refused(monkeypatch):
    monkeypatch.setenv(API_KEY_VARIABLE, "")
    assert ServiceConfig().resolved_api_key is None
    monkeypatch.setenv(API_KEY_VARIABLE, "   ")
    with pytest.raises(ValueError) as raised:
        ServiceConfig().resolved_api_key
    assert str(raised.value) == "$RAYSPEC_API_KEY must be a non-empty string, or unset for none"


@pytest.mark.parametrize("config, message", [
    # the checks a model runs itself named only the setting, not the model
    ({"drafters": [{}, {"prefix_cache_mb": -1}]},
     "drafters[1].prefix_cache_mb must be a finite number of megabytes, 0 or more, got -1"),
    ({"drafters": [{}, {"draft_timeout": 0}]}, "drafters[1].draft_timeout must be a positive number of seconds, got 0"),
    ({"target": {"max_batch_sequences": 0}}, "target.max_batch_sequences must be a whole number, 1 or more, got 0"),
    ({"target": {"resume_timeout": -1}}, "target.resume_timeout must be a number of seconds, 0 or more, got -1"),
    # a section that is not a mapping was quietly the defaults
    ({"target": []}, "config.target must be a mapping, got list"),
    ({"http": 0}, "config.http must be a mapping, got int"),
    ({"drafters": [False]}, "config.drafters[0] must be a mapping, got bool"),
])
def test_a_models_errors_name_the_model_and_only_null_is_a_sections_defaults(config, message):
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict(config)
    assert str(raised.value) == message
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict({"drafters": [{}, {"cpus": "x"}]})
    assert str(raised.value).startswith("drafters[1].cpus")
    config = ServiceConfig.from_dict({"target": None, "drafters": [None], "http": None})  # YAML's bare `target:`
    assert (config.target, config.drafters, config.http.port) == (ServiceConfig().target, [ServiceConfig().drafters[0]],
                                                                  8000)


def test_a_config_that_is_not_utf8_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"model_id: caf\xe9\n")  # an ISO-8859-1 editor's
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_yaml(path)
    assert str(raised.value) == (f"cannot read the service config {path}: 'utf-8' codec can't decode byte 0xe9 in "
                                 f"position 13: invalid continuation byte")


def test_a_key_given_twice_is_refused_naming_it_but_a_merge_keys_keys_are_not_twice(tmp_path):
    """PyYAML keeps a repeated key's last value: a second `target:` section (its device, added
    below) silently dropped the first one's path, and the demo pair was served."""
    path = tmp_path / "service.yaml"
    path.write_text("target: {path: /models/llama}\nverifier: gumbel\ntarget: {device: cpu}\n")
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_yaml(path)
    assert str(raised.value).startswith(f"cannot read the service config {path}: the key 'target' is given twice\n"
                                        f'  in "<unicode string>", line 3, column 1:')
    path.write_text("drafters: [{path: /models/a, draft_top_k: 8, path: /models/b}]\n")
    with pytest.raises(ValueError, match="the key 'path' is given twice"):
        ServiceConfig.from_yaml(path)
    # A YAML merge key's keys are defaults for the mapping's own, not duplicates of them.
    path.write_text("drafters:\n  - &small {path: /models/a, device: cpu, draft_top_k: 8}\n"
                    "  - {<<: *small, path: /models/b}\n")
    config = ServiceConfig.from_yaml(path)
    assert [(d.path, d.device, d.draft_top_k) for d in config.drafters] == [("/models/a", "cpu", 8),
                                                                          ("/models/b", "cpu", 8)]


def test_a_leading_tilde_is_the_home_directory_as_a_shell_reads_it(tmp_path, monkeypatch):
    """No shell reads the YAML: `~/models/t` went to the loader as a hub id (refused on the
    model's node, after Ray had started), `~/vectors` was a missing directory (trees planned
    from the prior, with a log line), and `file:~/tree.json` a tree file not found."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "vectors").mkdir()
    (tmp_path / "tree.json").write_text('{"parents": [-1, 0, 0], "child_rank": [0, 1, 2]}')
    (tmp_path / "service.yaml").write_text("target: {path: ~/models/target}\ndrafters: [{path: ~/models/drafter}]\n"
                                           "acceptance_dir: ~/vectors\ntree: file:~/tree.json\n")
    config = ServiceConfig.from_yaml(tmp_path / "service.yaml")
    # Expanded whether or not the checkpoint is here: it may be on the GPU nodes only.
    assert (config.target.path, config.drafters[0].path) == (str(tmp_path / "models" / "target"),
                                                             str(tmp_path / "models" / "drafter"))
    assert (config.acceptance_dir, config.tree) == (str(tmp_path / "vectors"), f"file:{tmp_path / 'tree.json'}")
