"""Settings shared by every test suite.

Property tests are derandomized: the same examples run on every machine, so a failure found in CI is
found again locally, and CI never passes or fails by luck. Every test has a timeout that fails it
fast (a loop that never ends shows up in seconds, not at the suite's limit).
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("deterministic", derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
# `make fuzz`: new random examples each run (the seeded ones run in `make test`), failures kept in .hypothesis/.
settings.register_profile("fuzz", derandomize=False, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("SJ_HYPOTHESIS_PROFILE", "deterministic"))

TIMEOUTS = {"unit": 60, "demo": 120, "e2e": 300}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    long_fuzz = os.environ.get("SJ_HYPOTHESIS_PROFILE") == "fuzz"  # `make fuzz`: as long as it takes
    for item in items:
        if long_fuzz:
            item.add_marker(pytest.mark.timeout(0), append=False)
            continue
        if item.get_closest_marker("timeout") is not None:
            continue
        suite = next((name for name in TIMEOUTS if f"tests/{name}/" in str(item.fspath)), None)
        if suite is not None:
            item.add_marker(pytest.mark.timeout(TIMEOUTS[suite]))
