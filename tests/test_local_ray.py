"""The tests' local Ray helper: a head that does not come up in time is killed with everything
it started, and `start_ray` starts another, warning with what the failed one printed."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from tests import local_ray


def ray_daemons(temp_dir: str) -> set[int]:
    """Pids of the GCS servers and raylets of the head whose temp dir is `temp_dir`.  Only that
    head's: tests on the other xdist worker start and stop Ray heads of their own meanwhile (in
    CI a test taking all new daemons for its head's saw another head's two and failed)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if command[0].endswith((b"gcs_server", b"raylet")) and any(temp_dir.encode() in arg for arg in command[1:]):
                pids.add(int(entry.name))
    return pids


def wait_for_no_daemons(temp_dir: str, seconds: float = 10.0) -> set[int]:
    deadline = time.monotonic() + seconds
    while ray_daemons(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray_daemons(temp_dir)


def test_a_head_that_does_not_start_in_time_is_killed_with_its_daemons():
    with pytest.raises(local_ray.HeadDidNotStart, match=r"did not start in 1 s; its logs are in (\S+); it printed:") as failed:
        local_ray.LocalRay(num_cpus=1, timeout=1.0)  # `ray start` needs 3 s and more here
    temp_dir = re.search(r"logs are in (\S+);", str(failed.value)).group(1)
    assert wait_for_no_daemons(temp_dir) == set()
    shutil.rmtree(temp_dir)


def test_stopping_a_running_head_kills_its_daemons_and_removes_its_directory():
    head = local_ray.LocalRay(num_cpus=1, timeout=60.0)
    assert head.process.poll() is None
    assert len(ray_daemons(head.temp_dir)) == 2, "a running head has a GCS server and a raylet"
    head.stop()
    assert wait_for_no_daemons(head.temp_dir) == set()
    assert not Path(head.temp_dir).exists()


def test_start_ray_starts_another_head_when_one_fails(monkeypatch):
    attempts = []

    class FlakyHead:
        address = "127.0.0.1:1"

        def __init__(self, num_cpus, timeout):
            attempts.append((num_cpus, timeout))
            if len(attempts) == 1:
                raise local_ray.HeadDidNotStart("the Ray head did not start in 60 s; it printed:\nnothing")

    connected = []
    monkeypatch.setattr(local_ray, "LocalRay", FlakyHead)
    monkeypatch.setattr("ray.init", lambda **options: connected.append(options))
    with pytest.warns(UserWarning, match=r"attempt 1 of 3: the Ray head did not start in 60 s"):
        head = local_ray.start_ray(num_cpus=2)
    assert isinstance(head, FlakyHead)
    assert attempts == [(2, 60.0), (2, 60.0)]
    assert connected == [{"address": "127.0.0.1:1", "log_to_driver": False}]


def test_start_ray_gives_up_after_its_attempts(monkeypatch):
    def never(num_cpus, timeout):
        raise local_ray.HeadDidNotStart("`ray start` exited with 1; it printed:\nboom")

    monkeypatch.setattr(local_ray, "LocalRay", never)
    with pytest.warns(UserWarning), pytest.raises(local_ray.HeadDidNotStart, match="exited with 1; it printed:\nboom"):
        local_ray.start_ray(attempts=2)
