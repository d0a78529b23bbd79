"""A standard value's read and write check availability and compute the location once, pinned or not.

No model: the request to nnsight (``Mediator.value`` / ``Mediator.swap``) and the
pin are replaced by recorders, so what is counted is the descriptor's own work.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

import envoys.core.passes
import envoys.core.pinning
import envoys.core.values
from envoys.core.pinning import PinnedEProperty
from envoys.core.values import EProperty, First

LOCATION = "model.model.source.self__deepstack_process_0.input"


class Served:
    """Stands in for nnsight's Mediator: serves one value, records the requests and swaps."""

    value = torch.arange(6.0).reshape(2, 3)
    requests: list[str] = []
    swaps: list[tuple[str, object]] = []

    @classmethod
    def reset(cls) -> None:
        cls.requests, cls.swaps = [], []

    @classmethod
    def value_at(cls, location: str):
        cls.requests.append(location)
        return (cls.value, "second item")

    @classmethod
    def swap(cls, location: str, value) -> None:
        cls.swaps.append((location, value))


@pytest.fixture
def counted(monkeypatch):
    """Calls of the reason, the location and the pin, per read or write."""
    counts = {"reason": 0, "location": 0, "pinned": []}
    Served.reset()

    class Worker:
        """The running worker's state a read consults: which occurrence it wants, and no view waiting to go back."""

        transform = None

        @staticmethod
        def wanted(location):
            return 0

    class FakeMediator:
        value = staticmethod(Served.value_at)
        swap = staticmethod(Served.swap)
        current = staticmethod(lambda location: Worker)

    @contextmanager
    def pinned(location, call, per_forward=1, passes_before=0):
        counts["pinned"].append((location, call, per_forward))
        yield

    monkeypatch.setattr(envoys.core.values, "Mediator", FakeMediator)
    monkeypatch.setattr(envoys.core.passes, "Mediator", FakeMediator)  # which tower pass the worker reads (none)
    monkeypatch.setattr(envoys.core.pinning, "pinned", pinned)
    monkeypatch.setattr(envoys.core.values, "_label", lambda envoy, name: name)  # no envoy tree here

    def reason(envoy):
        counts["reason"] += 1
        return None

    def locate(envoy):
        counts["location"] += 1
        return LOCATION

    class Envoy:
        @EProperty(key=locate, unavailable=reason, select=First())
        def plain(self, value: torch.Tensor) -> torch.Tensor:
            return value

        @PinnedEProperty(key=locate, unavailable=reason, select=First(), occurrence=lambda e: 1, per_forward=lambda e: 3)
        def pinned_value(self, value: torch.Tensor) -> torch.Tensor:
            return value

    return Envoy(), counts


@pytest.mark.parametrize("name", ["plain", "pinned_value"])
def test_a_read_checks_and_locates_once(counted, name):
    envoy, counts = counted
    assert torch.equal(getattr(envoy, name), Served.value)
    assert counts["reason"] == 1 and counts["location"] == 1
    assert Served.requests == [LOCATION]
    assert counts["pinned"] == ([(LOCATION, 1, 3)] if name == "pinned_value" else [])


@pytest.mark.parametrize("name", ["plain", "pinned_value"])
def test_a_write_checks_and_locates_once(counted, name):
    envoy, counts = counted
    written = torch.ones(2, 3)
    setattr(envoy, name, written)
    assert counts["reason"] == 1 and counts["location"] == 1
    assert Served.requests == [LOCATION]
    [(location, swapped)] = Served.swaps
    assert location == LOCATION and swapped[0] is written and swapped[1] == "second item"
    assert counts["pinned"] == ([(LOCATION, 1, 3)] if name == "pinned_value" else [])
