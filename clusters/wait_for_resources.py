"""Wait until a Ray cluster has the nodes a service config places its actors on.

    python clusters/wait_for_resources.py clusters/service.yaml [--timeout 3600]

`ray up` starts the service on the head node right after Ray, while the autoscaler is still
booting the GPU nodes (often longer than the service's own start timeout).  This waits until
the cluster advertises every custom resource of `placement` (`rayspec_target`,
`rayspec_drafter`, ...) in the amount the target and all drafters need, then exits 0; it
exits 1 at the timeout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable

import yaml

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
    with open(args.config) as f:
        need = required_resources(yaml.safe_load(f) or {})

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
