"""Wait until a Ray cluster has the nodes a service config places its actors on.

    python clusters/wait_for_resources.py clusters/service.yaml [--timeout 3600]

`ray up` starts the service on the head node right after Ray, while the autoscaler is still
booting the GPU nodes (often longer than the service's own start timeout).  This waits until
the cluster advertises every custom resource of `placement` (`rayspec_target`,
`rayspec_drafter`, ...) in the amount the target and all drafters need, then exits 0; it
exits 1 at the timeout, and 2 at once for a config that `rayspec serve` would refuse.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable

BUILTIN = {"CPU", "GPU", "memory", "object_store_memory"}


def required_resources(config: dict) -> dict[str, float]:
    """Custom resources the placement asks for: the target's once, the drafters' per drafter
    worker (a `where: coordinator` drafter runs in the coordinator and places nothing)."""
    placement = config.get("placement") or {}
    drafters = config.get("drafters", [{}])  # absent: the one default drafter; []: none
    workers = sum((d or {}).get("where", "worker") == "worker" for d in drafters)
    need: Counter = Counter()
    for key, copies in (("target_resources", 1), ("drafter_resources", workers)):
        for name, amount in (placement.get(key) or {}).items():
            if name not in BUILTIN:
                need[name] += amount * copies
    return {name: amount for name, amount in need.items() if amount}


def missing(need: dict[str, float], have: dict[str, float]) -> dict[str, float]:
    return {name: amount for name, amount in need.items() if have.get(name, 0) < amount}


def wait(need: dict[str, float], cluster_resources: Callable[[], dict], timeout: float,
         poll: float = 10.0, clock=time.monotonic, sleep=time.sleep) -> bool:
    deadline = clock() + timeout
    while lacking := missing(need, cluster_resources()):
        if clock() >= deadline:
            print(f"gave up after {timeout:.0f} s: the cluster still lacks {lacking}", flush=True)
            return False
        print(f"waiting for the autoscaler: the cluster lacks {lacking}", flush=True)
        sleep(poll)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="the service YAML that `rayspec serve` will start")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds (default 3600)")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    args = parser.parse_args(argv)
    # Read as `rayspec serve` reads it: a mistake in the file (a misspelt key, a bad value) was
    # told only once the GPU nodes had booted, or was a traceback here (`drafters:` left empty).
    from rayspec.serve.config import ServiceConfig

    try:
        need = required_resources(ServiceConfig.from_yaml(args.config).to_dict())
    except ValueError as error:
        print(f"wait_for_resources: error: {error}", file=sys.stderr, flush=True)
        return 2

    import ray

    ray.init(address=args.address, log_to_driver=False)
    try:
        ready = wait(need, ray.cluster_resources, args.timeout)
    finally:
        ray.shutdown()
    if ready:
        print(f"the cluster has {need}", flush=True)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
