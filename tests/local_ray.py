"""A local Ray for the end-to-end tests."""

from __future__ import annotations


def start_ray(**options) -> None:
    """`ray.init(**options)`, tried twice.  On this 2-core machine a local raylet once failed
    to come up at all (no raylet log; `ray.init` gives up after its fixed 30 s with "timed out
    during startup"), so that one failure is retried after shutting the half-started node down."""
    import ray

    try:
        ray.init(**options)
    except Exception as error:  # noqa: BLE001 — Ray raises a bare Exception for it
        if "timed out during startup" not in str(error):
            raise
        ray.shutdown()
        ray.init(**options)
