"""The admission policy's tunables (`policy.queue.PolicyConfig`) refuse what has no meaning, naming the tunable,
and take every value at the edge of what has one (no wait before starving, no aging at all)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sj_operator.policy.queue import PolicyConfig


@pytest.mark.parametrize("tunables", [
    {"threshold": 0.0}, {"threshold": 1.0},
    {"starvation_after": timedelta(0)},
    {"aging_step": timedelta(microseconds=1)},
    {"aging_cap": 0},
], ids=repr)
def test_the_edges_of_each_tunable_are_taken(tunables: dict[str, Any]) -> None:
    config = PolicyConfig(**tunables)
    assert {name: getattr(config, name) for name in tunables} == tunables


@pytest.mark.parametrize(("tunables", "error"), [
    ({"threshold": 1.5}, "^threshold "),
    ({"threshold": -0.1}, "^threshold "),
    ({"starvation_after": timedelta(seconds=-1)}, "^starvation_after must not be negative$"),
    ({"aging_step": timedelta(0)}, "^aging_step must be positive and aging_cap not negative$"),
    ({"aging_cap": -1}, "^aging_step must be positive and aging_cap not negative$"),
], ids=repr)
def test_a_tunable_without_meaning_is_refused_by_name(tunables: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        PolicyConfig(**tunables)
