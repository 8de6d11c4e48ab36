"""`WorkerWatch` follows worker actors that Ray restarted elsewhere, without piling questions on
one that cannot be placed.  Its actors and Ray's wait are stand-ins here: the watch's logic
alone (tests/cluster/test_launch.py moves real workers)."""

from __future__ import annotations

import pytest

from rayspec.cluster import actors


class _Question:
    def __init__(self):
        self.answer = None  # None: not answered yet


class _Actor:
    """An actor whose `ready.remote()` questions are answered when the test says."""

    def __init__(self):
        self.asked: list[_Question] = []
        self.ready = self

    def remote(self) -> _Question:
        self.asked.append(_Question())
        return self.asked[-1]


class _Service:
    def __init__(self):
        self.moves = []

    def move_worker(self, old: str, new: str) -> None:
        self.moves.append((old, new))


@pytest.fixture
def watch(monkeypatch):
    monkeypatch.setattr(actors.WorkerWatch, "PERIOD", 3600.0)  # its own thread stays out of the way
    monkeypatch.setattr(actors.ray, "wait", lambda refs, timeout: ([r for r in refs if r.answer is not None], []))
    monkeypatch.setattr(actors.ray, "get", lambda ref: ref.answer)
    actor, service = _Actor(), _Service()
    watching = actors.WorkerWatch(service, {"10.0.0.1:5000": actor})
    yield watching, actor, service
    watching.stop()


def test_an_actor_that_cannot_be_placed_is_asked_once_until_it_answers(watch):
    watching, actor, service = watch
    for _ in range(5):  # five periods of an actor restarting, unplaceable
        watching.check()
    assert len(actor.asked) == 1 and service.moves == []
    actor.asked[0].answer = "10.0.0.7:6000"  # placed on another node, listening there
    watching.check()
    assert service.moves == [("10.0.0.1:5000", "10.0.0.7:6000")] and list(watching.actors) == ["10.0.0.7:6000"]
    watching.check()  # answered: the next check asks again, once
    assert len(actor.asked) == 2


def test_an_actor_that_answers_where_it_was_is_left_alone(watch):
    watching, actor, service = watch
    for _ in range(3):
        watching.check()
        actor.asked[-1].answer = "10.0.0.1:5000"  # the question of this period, answered by the next
    watching.check()
    assert service.moves == [] and len(actor.asked) == 2 and list(watching.actors) == ["10.0.0.1:5000"]
