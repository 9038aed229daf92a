"""The operator as real processes: killed and restarted mid-run, and two at once."""
from __future__ import annotations

import pytest

from tests.e2e.kube import unique, wait_for
from tests.e2e.sj import OperatorProcess, create_sj, event_messages, events_for, jobs_of, sj_spec, status, wait_phase

pytestmark = pytest.mark.kwok_only

FAST = ("--tick", "1s", "--start-timeout", "30s", "--retry-backoff", "2s", "--thrash-backoff", "1s",
        "--max-thrash-backoff", "5s")


def test_kill_and_restart_mid_run_leaves_one_job_and_correct_status(api, namespace, crd, tmp_path):
    lease = unique("e2e-restart")
    log = tmp_path / "operator.log"
    first = OperatorProcess(*FAST, "--peering", lease, log=log).start()
    try:
        # Long enough to be seen running after a take-over (a killed leader's Lease lasts 15 s).
        create_sj(api, namespace, "durable", sj_spec(run_for="45s"))
        # Killed the moment its run exists (launch done, status maybe not yet written).
        wait_for("first run created", lambda: jobs_of(api, namespace, "durable"), timeout=60)
    finally:
        first.kill()
    second = OperatorProcess(*FAST, "--peering", lease, log=log).start()
    try:
        wait_phase(api, namespace, "durable", "Running", timeout=90)
    finally:
        second.kill()  # and killed again mid-run
    third = OperatorProcess(*FAST, "--peering", lease, log=log).start()
    try:
        st = wait_phase(api, namespace, "durable", "Succeeded", timeout=120)
        event_messages(api, namespace, "durable", "Succeeded")  # recorded just after the status
    finally:
        third.stop()
    assert [j.metadata.name for j in jobs_of(api, namespace, "durable")] == ["durable-r1"], log.read_text()[-3000:]
    assert st["attempt"] == 1 and st["jobName"] == "durable-r1"
    assert st["interruptedCount"] == 0
    assert len(st["runningTimestamps"]) == 1
    assert events_for(api, namespace, "durable").count("Succeeded") == 1


@pytest.mark.parametrize("shared_lease", [True, False], ids=["one-lease", "two-active-deciders"])
def test_two_operators_launch_each_sj_exactly_once(api, namespace, crd, tmp_path, shared_lease):
    """With one Lease only one decides; even two active deciders (separate Leases) never double-launch:
    run names are deterministic and status writes are resourceVersion-checked."""
    lease = unique("e2e-pair")
    ops = [OperatorProcess(*FAST, "--peering", lease if shared_lease else f"{lease}-{i}",
                           log=tmp_path / f"op{i}.log").start() for i in range(2)]
    try:
        names = [f"sj-{i}" for i in range(8)]
        for name in names:
            create_sj(api, namespace, name, sj_spec(run_for="4s", cpu="250m"))
        for name in names:
            wait_phase(api, namespace, name, "Succeeded", timeout=120)
    finally:
        for op in ops:
            op.stop()
    for name in names:
        assert [j.metadata.name for j in jobs_of(api, namespace, name)] == [f"{name}-r1"]
        st = status(api, namespace, name)
        assert st["attempt"] == 1 and len(st["runningTimestamps"]) == 1
        assert events_for(api, namespace, name).count("Launched") == 1
