"""The service config: where drafters run, and the errors for settings that cannot work."""

from __future__ import annotations

import pytest

from rayspec.cluster.actors import bundles
from rayspec.serve.config import ServiceConfig


def test_drafters_in_the_coordinator_get_no_bundle():
    config = ServiceConfig.from_dict({"drafters": [{"where": "coordinator"}, {"num_gpus": 1}, {}]})
    assert [d.where for d in config.coordinator_drafters] == ["coordinator"]
    assert len(config.worker_drafters) == 2
    assert bundles(config, cluster_gpus=2) == [{"CPU": 0.5, "GPU": 1.0}, {"CPU": 0.5, "GPU": 1.0}, {"CPU": 0.5, "GPU": 1.0}]
    assert bundles(ServiceConfig.from_dict({"drafters": [{"where": "coordinator"}]}), cluster_gpus=0) == [{"CPU": 0.5}]


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
])
def test_bad_limits_are_refused_with_a_message(limits, message):
    with pytest.raises(ValueError) as raised:
        ServiceConfig.from_dict({"limits": limits})
    assert message in str(raised.value)


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
