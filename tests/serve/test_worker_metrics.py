"""The workers' state in /metrics (`Metrics.watch_workers` over `Service.worker_infos`): a
coordinator of real gRPC workers in this process, over tiny random models, asks each at a
scrape; one that no longer answers is down in the next scrape, not a failed or hung one."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rayspec.engine import LocalDrafter, LocalTarget
from rayspec.models import load_causal_lm
from rayspec.rpc.worker import serve_drafter, serve_target
from rayspec.serve.config import ServiceConfig
from rayspec.serve.service import WORKER_INFO_TIMEOUT, Service
from tests.rpc.processes import save_tiny_pair
from tests.tiny_models import noisy_copy, tiny_llama

VOCAB = 64
PROMPT = list(range(3, 40))  # past the prefix cache's 16-token minimum


@pytest.fixture
def workers():
    target_model = tiny_llama(vocab=VOCAB, seed=0)
    target, drafter = LocalTarget(target_model), LocalDrafter(noisy_copy(target_model, noise=0.3))
    servers = [serve_target(target, "127.0.0.1:0"), serve_drafter(drafter, "127.0.0.1:0")]
    yield target, drafter, servers
    for server, _ in servers:
        server.stop(0).wait()


def worker_samples(service) -> dict:
    """(name, worker label) -> value of the worker families in the service's exposition."""
    text = service.metrics.exposition().decode()
    return {(sample.name, sample.labels["worker"]): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if "worker" in sample.labels}


def test_a_scrape_tells_each_workers_sessions_and_prefix_cache(workers):
    target, drafter, [(_, target_port), (_, drafter_port)] = workers
    config = ServiceConfig.from_dict({"tree": "kary:2x2", "verifier": "rrsw"})
    service = Service.from_config(config, f"127.0.0.1:{target_port}", [f"127.0.0.1:{drafter_port}"])
    service.metrics.watch_workers(service.worker_infos)
    try:
        for seed in (1, 2):  # the second reuses the first's prompt from both caches
            service.engine.run(PROMPT, max_new_tokens=8, temperature=1.0, seed=seed, ignore_eos=True)
        samples = worker_samples(service)
        for name, side in (("target", target), ("drafter 0", drafter)):
            cache = side.prefix_cache
            assert cache.hits >= 1
            assert samples[("rayspec_worker_up", name)] == 1
            assert samples[("rayspec_worker_open_sessions", name)] == 0  # both sequences released
            assert samples[("rayspec_prefix_cache_bytes", name)] == cache.nbytes > 0
            assert samples[("rayspec_prefix_cache_queried_tokens_total", name)] == cache.queried_tokens > 0
            assert samples[("rayspec_prefix_cache_hit_tokens_total", name)] == cache.reused_tokens > 0

        steps = service.engine.generate(PROMPT, max_new_tokens=64, temperature=1.0, seed=3, ignore_eos=True)
        next(steps)  # a sequence mid-generation holds a session on each worker
        held = worker_samples(service)
        steps.close()
        assert held[("rayspec_worker_open_sessions", "target")] == 1
        assert held[("rayspec_worker_open_sessions", "drafter 0")] == 1
        assert worker_samples(service)[("rayspec_worker_open_sessions", "target")] == 0

        workers[2][1][0].stop(0).wait()  # the drafter's server goes
        started = time.monotonic()
        samples = worker_samples(service)
        assert time.monotonic() - started < 2 * WORKER_INFO_TIMEOUT + 1
        assert samples[("rayspec_worker_up", "drafter 0")] == 0 and samples[("rayspec_worker_up", "target")] == 1
        assert ("rayspec_worker_open_sessions", "drafter 0") not in samples
        assert ("rayspec_worker_open_sessions", "target") in samples
    finally:
        service.close()


def test_hung_workers_hold_a_scrape_one_timeout_not_one_each(workers, monkeypatch):
    """Three workers (the target, and one drafter worker given twice) whose `Info` hangs: a
    scrape asks them all at once, and has each down after one `WORKER_INFO_TIMEOUT`, not
    three one after another."""
    import rayspec.rpc.worker as worker_module

    _, _, [(_, target_port), (_, drafter_port)] = workers
    config = ServiceConfig.from_dict({"tree": "kary:2x2", "verifier": "rrsw", "drafters": [{}, {}]})
    service = Service.from_config(config, f"127.0.0.1:{target_port}", [f"127.0.0.1:{drafter_port}"] * 2)
    service.metrics.watch_workers(service.worker_infos)
    answered = worker_module._worker_info

    def hung(*args, **kwargs):
        time.sleep(3 * WORKER_INFO_TIMEOUT)
        return answered(*args, **kwargs)

    try:
        assert worker_samples(service)[("rayspec_worker_up", "drafter 1")] == 1
        monkeypatch.setattr(worker_module, "_worker_info", hung)
        started = time.monotonic()
        samples = worker_samples(service)
        seconds = time.monotonic() - started
        assert [samples[("rayspec_worker_up", name)] for name in ("target", "drafter 0", "drafter 1")] == [0, 0, 0]
        assert WORKER_INFO_TIMEOUT <= seconds < 2 * WORKER_INFO_TIMEOUT, seconds
    finally:
        service.close()


def test_a_worker_too_busy_to_answer_is_up_with_no_state(workers, monkeypatch):
    """A worker whose every thread is busy answers `Info` RESOURCE_EXHAUSTED (as gRPC answers
    a call past a server's `maximum_concurrent_rpcs`): up, with no other sample in that scrape
    (a load peak is not a worker lost, and no counter reads as reset), and whole again at
    the next scrape once it answers."""
    import rayspec.rpc.worker as worker_module
    from rayspec.rpc.server import SessionLimitError

    _, _, [(_, target_port), (_, drafter_port)] = workers
    config = ServiceConfig.from_dict({"tree": "kary:2x2", "verifier": "rrsw"})
    service = Service.from_config(config, f"127.0.0.1:{target_port}", [f"127.0.0.1:{drafter_port}"])
    service.metrics.watch_workers(service.worker_infos)
    answered = worker_module._worker_info

    def busy(servicer, *args, **kwargs):
        if isinstance(servicer, worker_module.DrafterServicer):
            raise SessionLimitError("no thread free for the call")
        return answered(servicer, *args, **kwargs)

    try:
        service.engine.run(PROMPT, max_new_tokens=8, temperature=1.0, seed=1, ignore_eos=True)
        monkeypatch.setattr(worker_module, "_worker_info", busy)
        samples = worker_samples(service)
        assert samples[("rayspec_worker_up", "drafter 0")] == 1 and samples[("rayspec_worker_up", "target")] == 1
        assert [family for family, name in samples if name == "drafter 0"] == ["rayspec_worker_up"]
        assert samples[("rayspec_prefix_cache_queried_tokens_total", "target")] > 0
        monkeypatch.setattr(worker_module, "_worker_info", answered)
        assert worker_samples(service)[("rayspec_prefix_cache_queried_tokens_total", "drafter 0")] > 0
    finally:
        service.close()


def test_models_in_the_coordinators_process_have_their_lines_too(tmp_path):
    """A target and a drafter `where: coordinator` beside a drafter worker: the scrape names
    them as the workers are named ("target", then the drafters in the pool's order, the
    worker's first), always up, with their own sessions and prefix caches."""
    target_path, drafter_path = save_tiny_pair(tmp_path)
    server, port = serve_drafter(LocalDrafter(load_causal_lm(drafter_path, "cpu", "float32")[0]), "127.0.0.1:0")
    config = ServiceConfig.from_dict({
        "tree": "kary:2x2", "verifier": "rrsw", "target": {"path": str(target_path), "where": "coordinator"},
        "drafters": [{"path": str(drafter_path)}, {"path": str(drafter_path), "where": "coordinator"}]})
    target = config.target.local(None)
    service = Service.from_config(config, target, [f"127.0.0.1:{port}"])
    service.metrics.watch_workers(service.worker_infos)
    in_process_drafter = service.engine.drafter.drafters[1]
    try:
        for seed in (1, 2, 3):  # the pool takes the drafter its seed names: here, the worker, here
            service.engine.run(PROMPT, max_new_tokens=8, temperature=1.0, seed=seed, ignore_eos=True)
        samples = worker_samples(service)
        assert [name for (family, name) in samples if family == "rayspec_worker_up"] == \
            ["target", "drafter 0", "drafter 1"]
        for name, model in (("target", target), ("drafter 1", in_process_drafter)):
            cache = model.prefix_cache
            assert samples[("rayspec_worker_up", name)] == 1
            assert samples[("rayspec_worker_open_sessions", name)] == 0
            assert samples[("rayspec_prefix_cache_bytes", name)] == cache.nbytes > 0
            assert samples[("rayspec_prefix_cache_queried_tokens_total", name)] == cache.queried_tokens > 0
            assert samples[("rayspec_prefix_cache_hit_tokens_total", name)] == cache.reused_tokens > 0

        steps = service.engine.generate(PROMPT, max_new_tokens=64, temperature=1.0, seed=5, ignore_eos=True)
        next(steps)  # on the drafter here again
        held = worker_samples(service)
        steps.close()
        assert held[("rayspec_worker_open_sessions", "target")] == 1
        assert held[("rayspec_worker_open_sessions", "drafter 1")] == 1
        assert held[("rayspec_worker_open_sessions", "drafter 0")] == 0
        after = worker_samples(service)
        assert after[("rayspec_worker_open_sessions", "target")] == after[("rayspec_worker_open_sessions", "drafter 1")] == 0
    finally:
        service.close()
        server.stop(0).wait()
