"""The parallel suite's schedule (conftest.order_for_workers) reads each slow test's cost from its own
`slow(seconds=N)` marker: the long tests start first, spread over the workers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import OTHER_SLOW_S, order_for_workers


def item(name: str, seconds: float | None = None, slow: bool = True) -> SimpleNamespace:
    marker = None
    if slow:
        marker = pytest.mark.slow(seconds=seconds).mark if seconds is not None else pytest.mark.slow.mark
    return SimpleNamespace(originalname=name, name=name, get_closest_marker=lambda _name, m=marker: m)


def test_long_tests_lead_their_workers_runs_and_are_spread_over_them():
    items = [item(f"quick{i}", slow=False) for i in range(6)]
    items += [item("long60", 60), item("long50", 50), item("long10", 10), item("plain_slow")]
    ordered = order_for_workers(items, workers=2)
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)  # each test once
    first, second = ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]
    assert first[0].name == "long60" and second[0].name == "long50"  # one long test per worker, first
    assert {i.name for i in first} >= {"long60"} and "long10" in {i.name for i in second}
    assert OTHER_SLOW_S < 10  # an unmarked slow test counts as short


def test_without_costs_the_order_is_the_collection_order():
    items = [item(f"quick{i}", slow=False) for i in range(5)]
    assert order_for_workers(items, workers=2) == items
