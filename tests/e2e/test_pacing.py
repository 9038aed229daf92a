"""Launches paced by the control plane (`write.launcher`, ``--launch-backlog``): a launch waits while the runs made
are not taken up yet, goes once they are, and a queued launch whose SJ was edited meanwhile is dropped, not made."""
from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kubernetes import client

from sj_operator.write import launcher
from tests.e2e.kube import dedicated_node, free_port, scheduler_paused, wait_for
from tests.e2e.sj import InProcessOperator, create_sj, jobs_of, patch_sj, scrape, sj_spec, status, wait_phase
from tests.e2e.sj import test_config as operator_config

pytestmark = pytest.mark.kwok_only  # on a node of its own

DROPPED = ("scavenger_launches_dropped_total", ())
PACED = ("scavenger_launch_paced_seconds_total", ())


@pytest.fixture
def paced_operator(namespace: str, crd: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """An operator of this namespace alone whose launches wait while one run made is behind (its counters count
    only this test's SJs); its metrics port. A launch waits for the control plane as long as the test takes (not
    `LAUNCH_WAIT_MOST`'s minute): only the scheduler going on lets it go, and only the pass that saw the SJ edited
    drops it (not a worker taking it once the minute is up)."""
    monkeypatch.setattr(launcher, "LAUNCH_WAIT_MOST", 600.0)
    port = free_port()
    op = InProcessOperator(operator_config(namespaces=(namespace,), metrics_port=port, launch_backlog=1))
    op.start()
    yield port
    op.stop()


def test_a_launch_waits_for_a_scheduler_behind_and_one_whose_sj_was_suspended_meanwhile_is_dropped(
        api: client.ApiClient, namespace: str, paced_operator: int, caplog: pytest.LogCaptureFixture) -> None:
    port = paced_operator
    caplog.set_level(logging.INFO, logger="sj_operator.write.launcher")
    with dedicated_node(cpu="4") as node:
        placed = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        with scheduler_paused():
            create_sj(api, namespace, "first", sj_spec(run_for=None, **placed))
            wait_for("first's Job made", lambda: jobs_of(api, namespace, "first"), timeout=30)
            create_sj(api, namespace, "second", sj_spec(run_for=None, **placed))
            create_sj(api, namespace, "third", sj_spec(run_for=None, **placed))
            wait_for("the launches waiting for the control plane",
                     lambda: any("launches wait for the control plane" in r.getMessage() for r in caplog.records),
                     timeout=30)
            assert (jobs_of(api, namespace, "second"), jobs_of(api, namespace, "third")) == ([], []), \
                "admitted, and waiting while first's pod is not looked at by the scheduler"
            patch_sj(api, namespace, "second", {"suspend": True})
            wait_phase(api, namespace, "second", "Suspended", timeout=30)
            assert scrape(port)[DROPPED] == 1, "second's queued launch dropped by the pass that saw it edited"
            assert jobs_of(api, namespace, "second") == []
            assert jobs_of(api, namespace, "third") == [], "still waiting: the scheduler is still stopped"
        # The scheduler goes on: first's pod is looked at, and third's launch goes (long before the 600 s).
        wait_for("third's Job made", lambda: jobs_of(api, namespace, "third"), timeout=30)
        wait_phase(api, namespace, "first", "Running", timeout=60)
        wait_phase(api, namespace, "third", "Running", timeout=60)
        m = scrape(port)
        assert m[PACED] > 0, "third's launch waited for the control plane"
        assert m[DROPPED] == 1
        assert jobs_of(api, namespace, "second") == [], "nothing was made of the suspended SJ's dropped launch"
        assert status(api, namespace, "second")["phase"] == "Suspended"
