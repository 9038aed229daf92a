"""The launch window on the local cluster: launches wait while the cluster has not caught up with the runs made."""
from __future__ import annotations

import time

import pytest

from tests.e2e.kube import scheduler_paused, wait_for
from tests.e2e.sj import create_sj, jobs_of, run_pods, sj_spec, status, wait_phase

pytestmark = pytest.mark.kwok_only  # the local cluster's scheduler, stopped

OPERATOR_CONFIG = {"launch_window": 1}


def test_launches_wait_until_the_cluster_has_reached_the_runs_made(api, namespace, operator):
    """A window of one pod, the scheduler stopped: the first SJ's run is made, and two SJs admitted after it wait for
    it (no Job of theirs), however many passes go by; once the scheduler goes on, each run is made as the
    one before it is reached, and all three run, each from its first run."""
    names = ("first", "second", "third")
    with scheduler_paused():
        create_sj(api, namespace, "first", sj_spec(run_for=None))
        wait_for("the first run's pod made", lambda: run_pods(api, namespace, "first-r1"), timeout=30)
        for name in names[1:]:
            create_sj(api, namespace, name, sj_spec(run_for=None))
        time.sleep(5)  # many passes (one at least every tick, and on every change)
        assert [[j.metadata.name for j in jobs_of(api, namespace, name)] for name in names] == [["first-r1"], [], []]
    for name in names:
        wait_phase(api, namespace, name, "Running", timeout=60)
    assert [[j.metadata.name for j in jobs_of(api, namespace, name)] for name in names] == [
        [f"{name}-r1"] for name in names]
    assert [status(api, namespace, name).get("startTimeouts", 0) for name in names] == [0, 0, 0]
