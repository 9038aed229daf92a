"""Victim steering with the real kube-scheduler: the least-progressed unprotected SJ is preempted,
protected ones keep running, and protection drops at each checkpoint-period boundary."""
from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from kubernetes import client

from tests.e2e.kube import dedicated_node, wait_for, workload_pod
from tests.e2e.sj import create_sj, event_messages, protected, run_pods, sj_spec, status, wait_phase

pytestmark = pytest.mark.kwok_only

OPERATOR_CONFIG = {"protect_level": 1}


def _budget_synced(api, namespace: str, name: str, pods: int) -> bool:
    """The disruption controller has worked the SJ's budget out: every one of its ``pods`` protected pods
    counted, none of them allowed to go. A budget it cannot work out (``maxUnavailable`` over pods a Job owns:
    no scale subresource) keeps its first generation unobserved and shows ``SyncFailed``."""
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(f"{name}-protect", namespace)
    st = pdb.status
    return (st is not None and st.observed_generation == pdb.metadata.generation and st.expected_pods == pods
            and st.disruptions_allowed == 0
            and not any(c.reason == "SyncFailed" for c in st.conditions or []))


def _started(api, namespace: str, name: str) -> datetime:
    st = wait_phase(api, namespace, name, "Running")
    return datetime.fromisoformat(st["runningTimestamps"][-1].replace("Z", "+00:00"))


def _owner(core: client.CoreV1Api, namespace: str, pinned: dict, cpu: str = "2") -> None:
    core.create_namespaced_pod(namespace, workload_pod("owner", pinned, cpu=cpu))


def _interrupted(api, namespace: str, names: list[str]) -> list[str]:
    return [n for n in names if status(api, namespace, n).get("interruptedCount", 0) > 0
            or status(api, namespace, n).get("message", "").startswith("interrupting")]


def test_protection_steers_the_preemption_away_from_the_youngest_pod(api, namespace, operator):
    """The youngest pod is protected (its short period is past level 1); two older SJs with long periods
    are still at level 0. Without budgets the scheduler would take the youngest pod; with them it takes
    the youngest unprotected one."""
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        steady = dict(run_for=None, cpu="1", duration="10m", priorityLevels=3, **pinned)
        for name in ("steady-a", "steady-b"):
            create_sj(api, namespace, name, sj_spec(**steady))
            _started(api, namespace, name)
            time.sleep(1.1)  # distinct pod start times (one-second resolution)
        create_sj(api, namespace, "urgent", sj_spec(run_for=None, cpu="1", duration="40s", priorityLevels=2,
                                                    **pinned))
        _started(api, namespace, "urgent")
        # 20 s into its 40 s period "urgent" reaches level 1 and is protected; the others stay at level 0.
        wait_for("urgent protected", lambda: protected(api, namespace, "urgent") is True, timeout=30)
        assert protected(api, namespace, "steady-a") is False and protected(api, namespace, "steady-b") is False
        wait_for("urgent's budget worked out by the disruption controller",
                 lambda: _budget_synced(api, namespace, "urgent", pods=1), timeout=30)

        _owner(core, namespace, pinned)  # needs 2 CPU; 1 is free: one SJ must go
        names = ["steady-a", "steady-b", "urgent"]
        victims = wait_for("a victim", lambda: _interrupted(api, namespace, names), timeout=15)
        assert victims == ["steady-b"]
        for name in ("steady-a", "urgent"):
            assert status(api, namespace, name)["phase"] == "Running"
        assert event_messages(api, namespace, "urgent", "Protected")


def test_after_a_period_boundary_the_formerly_protected_sj_is_the_victim(api, namespace, operator):
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        spec = dict(run_for=None, cpu="1", duration="60s", priorityLevels=3, **pinned)
        create_sj(api, namespace, "first", sj_spec(**spec))
        t0 = _started(api, namespace, "first")
        time.sleep(max(0.0, (t0 + timedelta(seconds=25) - datetime.now(t0.tzinfo)).total_seconds()))
        for name in ("second", "third"):
            create_sj(api, namespace, name, sj_spec(**spec))
            _started(api, namespace, name)
            time.sleep(2)
        wait_for("first protected beside level-0 runs", lambda: protected(api, namespace, "first") is True,
                 timeout=20)
        # 60 s after it started, "first" has checkpointed: level 0, unprotected; the others are at level 1
        # until 80 s, which leaves the preemption below a 20 s window even on a busy 2-core machine.
        wait_for("first unprotected after its period", lambda: protected(api, namespace, "first") is False,
                 timeout=60)
        wait_for("second and third protected", lambda: protected(api, namespace, "second") is True
                 and protected(api, namespace, "third") is True, timeout=20)
        # The label is the protection; the level and period start are a record written after the toggle, by a
        # later pass, so they are waited for rather than read at once.
        st = wait_for("first's level written back to 0",
                      lambda: (s := status(api, namespace, "first")).get("runningPriority") == 0 and s, timeout=20)
        assert st["priorityStartOverTimestamp"] > st["runningTimestamps"][-1]
        assert event_messages(api, namespace, "first", "Unprotected")

        _owner(core, namespace, pinned)
        names = ["first", "second", "third"]
        victims = wait_for("a victim", lambda: _interrupted(api, namespace, names), timeout=60)
        # Without protection the scheduler would take the youngest pod ("third").
        assert victims == ["first"]
        for name in ("second", "third"):
            assert status(api, namespace, name)["phase"] == "Running"


def test_gang_member_preempted_cancels_the_whole_gang(api, namespace, operator):
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        create_sj(api, namespace, "team", sj_spec(run_for=None, cpu="1500m", parallelism=2, **pinned))
        wait_phase(api, namespace, "team", "Running")
        first_run = status(api, namespace, "team")["jobName"]
        _owner(core, namespace, pinned, cpu="2")
        wait_for("interruption recorded", lambda: (s := status(api, namespace, "team")).get(
            "interruptedCount") == 1 and s, timeout=60)
        wait_for("every member of the preempted run gone", lambda: not run_pods(api, namespace, first_run),
                 timeout=30)
        reasons = event_messages(api, namespace, "team", "Interrupted")
        assert reasons and "PreemptionByScheduler" in reasons[0]


def test_priority_band_is_ensured_without_clobbering_existing_classes(api, crd):
    from tests.e2e.sj import InProcessOperator, test_config

    sched = client.SchedulingV1Api(api)
    # Start from a cluster without the band, so the operator has to create it.
    for pc in sched.list_priority_class().items:
        if pc.metadata.name.startswith("scavenger-band-"):
            sched.delete_priority_class(pc.metadata.name)
    wait_for("band removed", lambda: not [pc for pc in sched.list_priority_class().items
                                          if pc.metadata.name.startswith("scavenger-band-")])
    op = InProcessOperator(test_config())
    op.start()
    op.stop()
    band = {pc.metadata.name: pc for pc in sched.list_priority_class().items
            if pc.metadata.name.startswith("scavenger-band-")}
    assert sorted(band) == [f"scavenger-band-{i}" for i in range(4)]
    assert [band[f"scavenger-band-{i}"].value for i in range(4)] == [-1000, -999, -998, -997]
    assert all(pc.preemption_policy == "Never" and not pc.global_default for pc in band.values())
    # Somebody changed one of them: the operator never writes over it.
    sched.patch_priority_class("scavenger-band-1", {"description": "tuned by the cluster admin"})
    op = InProcessOperator(test_config())
    op.start()
    op.stop()
    assert sched.read_priority_class("scavenger-band-1").description == "tuned by the cluster admin"


def test_when_every_run_would_be_protected_the_least_unsaved_one_is_left_unprotected(api, namespace, operator):
    """All three SJs past level 1: protection alone would leave the scheduler evicting the youngest
    pod; steering leaves the run with the least unsaved work unprotected instead, and it is taken."""
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        spec = dict(run_for=None, cpu="1", duration="24s", priorityLevels=3, **pinned)
        for name in ("p", "q", "r"):
            create_sj(api, namespace, name, sj_spec(**spec))
            _started(api, namespace, name)
            time.sleep(3)
        # p started first: at about 25 s it crosses its period boundary (saved), while q and r are
        # past 8 s into theirs (level >= 1). Then p is the only unprotected run.
        first = _started(api, namespace, "p")
        time.sleep(max(0.0, (first + timedelta(seconds=25) - datetime.now(first.tzinfo)).total_seconds()))
        wait_for("p unprotected, q and r protected", lambda: protected(api, namespace, "p") is False
                 and protected(api, namespace, "q") is True and protected(api, namespace, "r") is True, timeout=15)
        # Now wait until p is itself past level 1 again: every run's level asks for protection.
        wait_for("all at level >= 1", lambda: all(status(api, namespace, n).get("runningPriority", 0) >= 1
                                                  for n in ("p", "q", "r")), timeout=30)
        unsaved = {}
        for name in ("p", "q", "r"):
            st = status(api, namespace, name)
            unsaved[name] = datetime.now(first.tzinfo) - datetime.fromisoformat(
                st["priorityStartOverTimestamp"].replace("Z", "+00:00"))
        least = min(unsaved, key=unsaved.get)
        wait_for(f"{least} exempted", lambda: [n for n in ("p", "q", "r") if protected(api, namespace, n) is False]
                 == [least], timeout=10)
        _owner(core, namespace, pinned)
        victims = wait_for("a victim", lambda: _interrupted(api, namespace, ["p", "q", "r"]), timeout=60)
        assert victims == [least]
